//! Elementwise ops: every ONNX elementwise node becomes an `Expr` tree, so a single node and a
//! whole fusion group run the same way — one `fused_elementwise` call (one generated kernel on
//! the GPU). Parameterised activations are compositions of the renderer's primitives.

use crate::ops::{Ctx, OpEntry};
use mpsrt_core::{Error, Result};
use mpsrt_graph::{BinaryOp, FusedElementwise, Node, Op, UnaryOp, ValueId};
use mpsrt_tensor::{fused_elementwise, BinaryFn as B, Expr, Scalar, Tensor, UnaryFn as U, VType};
use std::collections::HashMap;

/// Names (as `Op::name` gives them) of the elementwise ops this module maps.
const NAMES: &[&str] = &[
    "Abs",
    "Neg",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Relu",
    "Sigmoid",
    "Tanh",
    "Erf",
    "Floor",
    "Ceil",
    "Round",
    "Sin",
    "Cos",
    "Tan",
    "Sign",
    "Not",
    "HardSwish",
    "Softplus",
    "Softsign",
    "IsNaN",
    "Sinh",
    "Cosh",
    "Asinh",
    "Acosh",
    "Atanh",
    "Mish",
    "Asin",
    "Acos",
    "Atan",
    "BitwiseNot",
    "BitShiftLeft",
    "BitShiftRight",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Max",
    "Min",
    "Mod",
    "Fmod",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "PRelu",
    "Where",
    "Cast",
    "Identity",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "HardSigmoid",
    "ThresholdedRelu",
    "Gelu",
    "Clip",
    "Swish",
    "Shrink",
    "IsInf",
];

/// The op table entries of this family (all inputs are device data).
pub(crate) fn entries() -> Vec<OpEntry> {
    NAMES.iter().map(|&n| OpEntry { name: n, run: run_node, host_from: usize::MAX }).collect()
}

/// Scalar slots collected while building an expression.
#[derive(Default)]
struct Scalars(Vec<Scalar>);

impl Scalars {
    fn typed(&mut self, v: f64, t: VType) -> Expr {
        let s = match t {
            VType::Float => Scalar::F(v),
            VType::Int => Scalar::I(v as i64),
            VType::Bool => Scalar::B(v != 0.0),
        };
        self.0.push(s);
        Expr::Scalar(self.0.len() - 1, t)
    }
    fn f(&mut self, v: f64) -> Expr {
        self.typed(v, VType::Float)
    }
}

fn un(f: U, e: Expr) -> Expr {
    Expr::unary(f, e)
}
fn bin(f: B, a: Expr, b: Expr) -> Expr {
    Expr::binary(f, a, b)
}
fn cast_to(e: Expr, from: VType, to: VType) -> Expr {
    if from == to {
        e
    } else {
        Expr::cast(to, e)
    }
}
fn trunc(e: Expr, sc: &mut Scalars) -> Expr {
    let neg = bin(B::Lt, e.clone(), sc.f(0.0));
    Expr::select(neg, un(U::Ceil, e.clone()), un(U::Floor, e))
}

/// The expression of one node given its inputs' expressions and types; `out` is the node
/// output's device value type.
fn node_expr(op: &Op, a: &[(Expr, VType)], out: VType, sc: &mut Scalars) -> Result<Expr> {
    let arg = |i: usize| -> Result<(Expr, VType)> {
        a.get(i).cloned().ok_or_else(|| {
            Error::invalid(op.name(), format!("expects at least {} inputs, got {}", i + 1, a.len()))
        })
    };
    // Float view of input i.
    let fl = |i: usize| -> Result<Expr> {
        let (e, t) = arg(i)?;
        Ok(cast_to(e, t, VType::Float))
    };
    let e = match op {
        Op::Unary(u) => {
            let (x, t) = arg(0)?;
            let xf = cast_to(x.clone(), t, VType::Float);
            match u {
                UnaryOp::Abs => un(U::Abs, x),
                UnaryOp::Neg => un(U::Neg, x),
                UnaryOp::Sign => un(U::Sign, x),
                UnaryOp::Relu => un(U::Relu, x),
                UnaryOp::Not => un(U::Not, x),
                UnaryOp::Exp => un(U::Exp, xf),
                UnaryOp::Log => un(U::Log, xf),
                UnaryOp::Sqrt => un(U::Sqrt, xf),
                UnaryOp::Reciprocal => un(U::Recip, xf),
                UnaryOp::Sigmoid => un(U::Sigmoid, xf),
                UnaryOp::Tanh => un(U::Tanh, xf),
                UnaryOp::Erf => un(U::Erf, xf),
                UnaryOp::Floor => un(U::Floor, xf),
                UnaryOp::Ceil => un(U::Ceil, xf),
                UnaryOp::Round => un(U::Round, xf),
                UnaryOp::Sin => un(U::Sin, xf),
                UnaryOp::Cos => un(U::Cos, xf),
                UnaryOp::IsNaN => un(U::IsNan, xf),
                UnaryOp::Asin => un(U::Asin, xf),
                UnaryOp::Acos => un(U::Acos, xf),
                UnaryOp::Atan => un(U::Atan, xf),
                UnaryOp::BitwiseNot => un(U::BitNot, x),
                UnaryOp::Tan => bin(B::Div, un(U::Sin, xf.clone()), un(U::Cos, xf)),
                UnaryOp::HardSwish => {
                    let hs = clamp01(
                        bin(B::Add, bin(B::Mul, xf.clone(), sc.f(1.0 / 6.0)), sc.f(0.5)),
                        sc,
                    );
                    bin(B::Mul, xf, hs)
                }
                UnaryOp::Softplus => softplus(xf, sc),
                UnaryOp::Softsign => {
                    bin(B::Div, xf.clone(), bin(B::Add, sc.f(1.0), un(U::Abs, xf)))
                }
                UnaryOp::Mish => {
                    let sp = softplus(xf.clone(), sc);
                    bin(B::Mul, xf, un(U::Tanh, sp))
                }
                UnaryOp::Sinh | UnaryOp::Cosh => {
                    let p = un(U::Exp, xf.clone());
                    let m = un(U::Exp, un(U::Neg, xf));
                    let f = if *u == UnaryOp::Sinh { B::Sub } else { B::Add };
                    bin(B::Mul, bin(f, p, m), sc.f(0.5))
                }
                UnaryOp::Asinh | UnaryOp::Acosh => {
                    let s = if *u == UnaryOp::Asinh { 1.0 } else { -1.0 };
                    let r = un(U::Sqrt, bin(B::Add, bin(B::Mul, xf.clone(), xf.clone()), sc.f(s)));
                    un(U::Log, bin(B::Add, xf, r))
                }
                UnaryOp::Atanh => {
                    let q =
                        bin(B::Div, bin(B::Add, sc.f(1.0), xf.clone()), bin(B::Sub, sc.f(1.0), xf));
                    bin(B::Mul, sc.f(0.5), un(U::Log, q))
                }
            }
        }
        Op::Binary(b) => binary(*b, arg(0)?, arg(1)?, out, sc),
        Op::Where => {
            let (c, tc) = arg(0)?;
            let c = cast_to(c, tc, VType::Bool);
            let (x, tx) = arg(1)?;
            let (y, ty) = arg(2)?;
            Expr::select(c, cast_to(x, tx, out), cast_to(y, ty, out))
        }
        Op::Cast { .. } | Op::Identity => arg(0)?.0,
        Op::LeakyRelu { alpha } => {
            let x = fl(0)?;
            let neg = bin(B::Lt, x.clone(), sc.f(0.0));
            Expr::select(neg, bin(B::Mul, x.clone(), sc.f(*alpha as f64)), x)
        }
        Op::Elu { alpha } => {
            let x = fl(0)?;
            let neg = bin(B::Lt, x.clone(), sc.f(0.0));
            let em1 = bin(B::Sub, un(U::Exp, x.clone()), sc.f(1.0));
            Expr::select(neg, bin(B::Mul, em1, sc.f(*alpha as f64)), x)
        }
        Op::Selu { alpha, gamma } => {
            let x = fl(0)?;
            let neg = bin(B::Le, x.clone(), sc.f(0.0));
            let em1 = bin(B::Sub, un(U::Exp, x.clone()), sc.f(1.0));
            let v = Expr::select(neg, bin(B::Mul, em1, sc.f(*alpha as f64)), x);
            bin(B::Mul, v, sc.f(*gamma as f64))
        }
        Op::Celu { alpha } => {
            let x = fl(0)?;
            let a = *alpha as f64;
            let em1 = bin(B::Sub, un(U::Exp, bin(B::Div, x.clone(), sc.f(a))), sc.f(1.0));
            let negpart = bin(B::Min, sc.f(0.0), bin(B::Mul, em1, sc.f(a)));
            bin(B::Add, bin(B::Max, sc.f(0.0), x), negpart)
        }
        Op::HardSigmoid { alpha, beta } => {
            let x = fl(0)?;
            let l = bin(B::Add, bin(B::Mul, x, sc.f(*alpha as f64)), sc.f(*beta as f64));
            clamp01(l, sc)
        }
        Op::ThresholdedRelu { alpha } => {
            let x = fl(0)?;
            let gt = bin(B::Gt, x.clone(), sc.f(*alpha as f64));
            Expr::select(gt, x, sc.f(0.0))
        }
        Op::Gelu { approximate_tanh } => {
            let x = fl(0)?;
            let inner = if *approximate_tanh {
                let x3 = bin(B::Mul, bin(B::Mul, x.clone(), x.clone()), x.clone());
                let p = bin(B::Add, x.clone(), bin(B::Mul, x3, sc.f(0.044715)));
                un(U::Tanh, bin(B::Mul, p, sc.f((2.0 / std::f64::consts::PI).sqrt())))
            } else {
                un(U::Erf, bin(B::Mul, x.clone(), sc.f(std::f64::consts::FRAC_1_SQRT_2)))
            };
            bin(B::Mul, bin(B::Mul, x, sc.f(0.5)), bin(B::Add, inner, sc.f(1.0)))
        }
        Op::Clip { min, max } => {
            let (mut x, t) = arg(0)?;
            if let Some(lo) = min {
                x = bin(B::Max, x, sc.typed(*lo as f64, t));
            }
            if let Some(hi) = max {
                x = bin(B::Min, x, sc.typed(*hi as f64, t));
            }
            x
        }
        Op::Swish { alpha } => {
            let x = fl(0)?;
            bin(B::Mul, x.clone(), un(U::Sigmoid, bin(B::Mul, x, sc.f(*alpha as f64))))
        }
        Op::Shrink { lambd, bias } => {
            let (x0, t) = arg(0)?;
            let x = cast_to(x0, t, VType::Float);
            let (l, b) = (*lambd as f64, *bias as f64);
            let lo = bin(B::Lt, x.clone(), sc.f(-l));
            let hi = bin(B::Gt, x.clone(), sc.f(l));
            let inner = Expr::select(hi, bin(B::Sub, x.clone(), sc.f(b)), sc.f(0.0));
            Expr::select(lo, bin(B::Add, x, sc.f(b)), inner)
        }
        Op::IsInf { detect_negative, detect_positive } => {
            let x = fl(0)?;
            let big = f32::MAX as f64;
            let pos = bin(B::Gt, x.clone(), sc.f(big));
            let neg = bin(B::Lt, x, sc.f(-big));
            match (detect_positive, detect_negative) {
                (true, true) => bin(B::Or, pos, neg),
                (true, false) => pos,
                (false, true) => neg,
                (false, false) => bin(B::And, pos, neg),
            }
        }
        other => {
            return Err(Error::unsupported(
                other.name(),
                "not an elementwise op the engine can lower",
            ))
        }
    };
    Ok(e)
}

fn clamp01(e: Expr, sc: &mut Scalars) -> Expr {
    bin(B::Max, sc.f(0.0), bin(B::Min, sc.f(1.0), e))
}

/// `log(1 + exp(x))` computed without overflow.
fn softplus(x: Expr, sc: &mut Scalars) -> Expr {
    let t = un(U::Log, bin(B::Add, sc.f(1.0), un(U::Exp, un(U::Neg, un(U::Abs, x.clone())))));
    bin(B::Add, bin(B::Max, x, sc.f(0.0)), t)
}

fn binary(
    b: BinaryOp,
    (x, tx): (Expr, VType),
    (y, ty): (Expr, VType),
    out: VType,
    sc: &mut Scalars,
) -> Expr {
    use BinaryOp as O;
    let common = if tx == VType::Float || ty == VType::Float {
        VType::Float
    } else if tx == VType::Int || ty == VType::Int {
        VType::Int
    } else {
        VType::Bool
    };
    let (xc, yc) = (cast_to(x.clone(), tx, common), cast_to(y.clone(), ty, common));
    let (xf, yf) = (cast_to(x, tx, VType::Float), cast_to(y, ty, VType::Float));
    let back = |e: Expr| cast_to(e, VType::Float, out);
    match b {
        O::Add | O::Sub | O::Mul | O::Max | O::Min if common == VType::Bool => {
            let f = if matches!(b, O::Add | O::Max) { B::Or } else { B::And };
            bin(f, xc, yc)
        }
        O::Add => bin(B::Add, xc, yc),
        O::Sub => bin(B::Sub, xc, yc),
        O::Mul => bin(B::Mul, xc, yc),
        O::Max => bin(B::Max, xc, yc),
        O::Min => bin(B::Min, xc, yc),
        O::Div if common == VType::Float => bin(B::Div, xc, yc),
        O::Div => back(trunc(bin(B::Div, xf, yf), sc)),
        O::Pow => back(bin(B::Pow, xf, yf)),
        O::Mod => {
            let q = un(U::Floor, bin(B::Div, xf.clone(), yf.clone()));
            back(bin(B::Sub, xf, bin(B::Mul, q, yf)))
        }
        O::Fmod => {
            let q = trunc(bin(B::Div, xf.clone(), yf.clone()), sc);
            back(bin(B::Sub, xf, bin(B::Mul, q, yf)))
        }
        O::Equal => bin(B::Eq, xc, yc),
        O::Less => bin(B::Lt, xc, yc),
        O::Greater => bin(B::Gt, xc, yc),
        O::LessOrEqual => bin(B::Le, xc, yc),
        O::GreaterOrEqual => bin(B::Ge, xc, yc),
        O::And => bin(B::And, xc, yc),
        O::Or => bin(B::Or, xc, yc),
        O::Xor => bin(B::Ne, xc, yc),
        O::BitwiseAnd => bin(B::BitAnd, xc, yc),
        O::BitwiseOr => bin(B::BitOr, xc, yc),
        O::BitwiseXor => bin(B::BitXor, xc, yc),
        O::BitShiftLeft => bin(B::Shl, xc, yc),
        O::BitShiftRight => bin(B::Shr, xc, yc),
        O::PRelu => {
            let neg = bin(B::Lt, xc.clone(), sc.typed(0.0, common));
            Expr::select(neg, bin(B::Mul, xc.clone(), yc), xc)
        }
    }
}

/// Casts the finished expression to the output's value type when needed.
fn finish(e: Expr, input_types: &[VType], out: VType, what: &str) -> Result<Expr> {
    let t = e.ty(input_types).map_err(|m| Error::dtype(what, m))?;
    Ok(cast_to(e, t, out))
}

/// Runs one elementwise node.
fn run_node(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let types: Vec<VType> = inputs.iter().map(|t| VType::of(t.dtype())).collect();
    let args: Vec<(Expr, VType)> =
        types.iter().enumerate().map(|(i, &t)| (Expr::input(i), t)).collect();
    let out_id = node.outputs.first().copied().ok_or_else(|| ctx.err(node, "has no output"))?;
    let out_dtype = ctx.device_dtype(out_id);
    let out = VType::of(out_dtype);
    let mut sc = Scalars::default();
    let e = node_expr(&node.op, &args, out, &mut sc).map_err(|e| ctx.wrap(node, e))?;
    let e = finish(e, &types, out, &ctx.label(node))?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let r = fused_elementwise(&ctx.label(node), &refs, out_dtype, e, &sc.0)
        .map_err(|e| ctx.wrap(node, e))?;
    Ok(vec![r])
}

/// Runs a fusion group as one kernel; `inputs` are the device tensors of `group.inputs`.
pub(crate) fn run_fused(
    ctx: &Ctx<'_>,
    group: &FusedElementwise,
    inputs: &[Tensor],
) -> Result<Tensor> {
    let types: Vec<VType> = inputs.iter().map(|t| VType::of(t.dtype())).collect();
    let mut env: HashMap<ValueId, (Expr, VType)> = HashMap::new();
    for (i, (&v, &t)) in group.inputs.iter().zip(&types).enumerate() {
        env.insert(v, (Expr::input(i), t));
    }
    let mut sc = Scalars::default();
    let mut names = Vec::new();
    for &n in &group.nodes {
        let node = ctx.node(n)?;
        names.push(node.op.name());
        let args: Vec<(Expr, VType)> = node
            .inputs
            .iter()
            .map(|v| env.get(v).cloned().ok_or_else(|| ctx.err(node, "fused input not computed")))
            .collect::<Result<_>>()?;
        let out_id = node.outputs.first().copied().ok_or_else(|| ctx.err(node, "no output"))?;
        let out = VType::of(ctx.device_dtype(out_id));
        let e = node_expr(&node.op, &args, out, &mut sc).map_err(|e| ctx.wrap(node, e))?;
        let e = finish(e, &types, out, &ctx.label(node))?;
        env.insert(out_id, (e, out));
    }
    let label = format!("fused[{}]", names.join("+"));
    let (e, _) = env
        .remove(&group.output)
        .ok_or_else(|| Error::invalid(&label, "group output is not produced by its nodes"))?;
    let out_dtype = ctx.device_dtype(group.output);
    let refs: Vec<&Tensor> = inputs.iter().collect();
    fused_elementwise(&label, &refs, out_dtype, e, &sc.0)
}
