//! Importers for elementwise ops: unary math/activations, broadcast binary ops (variadic
//! Sum/Max/Min become chains), Where, Cast, Clip and parametrized activations.

use super::Importer;
use crate::ctx::Ctx;
use crate::tensor::map_dtype;
use mpsrt_core::Result;
use mpsrt_graph::{BinaryOp, Op, UnaryOp};

pub const OPS: &[(&str, Importer)] = &[
    ("Abs", unary),
    ("Neg", unary),
    ("Exp", unary),
    ("Log", unary),
    ("Sqrt", unary),
    ("Reciprocal", unary),
    ("Relu", unary),
    ("Sigmoid", unary),
    ("Tanh", unary),
    ("Erf", unary),
    ("Floor", unary),
    ("Ceil", unary),
    ("Round", unary),
    ("Sin", unary),
    ("Cos", unary),
    ("Tan", unary),
    ("Sign", unary),
    ("Not", unary),
    ("HardSwish", unary),
    ("Softplus", unary),
    ("Softsign", unary),
    ("IsNaN", unary),
    ("Acos", unary),
    ("Asin", unary),
    ("Atan", unary),
    ("Sinh", unary),
    ("Cosh", unary),
    ("Asinh", unary),
    ("Acosh", unary),
    ("Atanh", unary),
    ("Mish", unary),
    ("BitwiseNot", unary),
    ("BitwiseAnd", binary),
    ("BitwiseOr", binary),
    ("BitwiseXor", binary),
    ("BitShift", bit_shift),
    ("Swish", swish),
    ("Shrink", shrink),
    ("IsInf", is_inf),
    ("Add", binary),
    ("Sub", binary),
    ("Mul", binary),
    ("Div", binary),
    ("Pow", binary),
    ("Mod", binary),
    ("Equal", binary),
    ("Less", binary),
    ("Greater", binary),
    ("LessOrEqual", binary),
    ("GreaterOrEqual", binary),
    ("And", binary),
    ("Or", binary),
    ("Xor", binary),
    ("PRelu", binary),
    ("Sum", variadic),
    ("Mean", mean),
    ("Max", variadic),
    ("Min", variadic),
    ("Where", where_),
    ("Cast", cast),
    ("CastLike", cast_like),
    ("Identity", identity),
    ("Dropout", dropout),
    ("LeakyRelu", leaky_relu),
    ("Elu", elu),
    ("Selu", selu),
    ("Celu", celu),
    ("HardSigmoid", hard_sigmoid),
    ("ThresholdedRelu", thresholded_relu),
    ("Gelu", gelu),
    ("Clip", clip),
];

const UNARY: &[(&str, UnaryOp)] = &[
    ("Abs", UnaryOp::Abs),
    ("Neg", UnaryOp::Neg),
    ("Exp", UnaryOp::Exp),
    ("Log", UnaryOp::Log),
    ("Sqrt", UnaryOp::Sqrt),
    ("Reciprocal", UnaryOp::Reciprocal),
    ("Relu", UnaryOp::Relu),
    ("Sigmoid", UnaryOp::Sigmoid),
    ("Tanh", UnaryOp::Tanh),
    ("Erf", UnaryOp::Erf),
    ("Floor", UnaryOp::Floor),
    ("Ceil", UnaryOp::Ceil),
    ("Round", UnaryOp::Round),
    ("Sin", UnaryOp::Sin),
    ("Cos", UnaryOp::Cos),
    ("Tan", UnaryOp::Tan),
    ("Sign", UnaryOp::Sign),
    ("Not", UnaryOp::Not),
    ("HardSwish", UnaryOp::HardSwish),
    ("Softplus", UnaryOp::Softplus),
    ("Softsign", UnaryOp::Softsign),
    ("IsNaN", UnaryOp::IsNaN),
    ("Acos", UnaryOp::Acos),
    ("Asin", UnaryOp::Asin),
    ("Atan", UnaryOp::Atan),
    ("Sinh", UnaryOp::Sinh),
    ("Cosh", UnaryOp::Cosh),
    ("Asinh", UnaryOp::Asinh),
    ("Acosh", UnaryOp::Acosh),
    ("Atanh", UnaryOp::Atanh),
    ("Mish", UnaryOp::Mish),
    ("BitwiseNot", UnaryOp::BitwiseNot),
];

const BINARY: &[(&str, BinaryOp)] = &[
    ("Add", BinaryOp::Add),
    ("Sub", BinaryOp::Sub),
    ("Mul", BinaryOp::Mul),
    ("Div", BinaryOp::Div),
    ("Pow", BinaryOp::Pow),
    ("Mod", BinaryOp::Mod),
    ("Equal", BinaryOp::Equal),
    ("Less", BinaryOp::Less),
    ("Greater", BinaryOp::Greater),
    ("LessOrEqual", BinaryOp::LessOrEqual),
    ("GreaterOrEqual", BinaryOp::GreaterOrEqual),
    ("And", BinaryOp::And),
    ("Or", BinaryOp::Or),
    ("Xor", BinaryOp::Xor),
    ("PRelu", BinaryOp::PRelu),
    ("BitwiseAnd", BinaryOp::BitwiseAnd),
    ("BitwiseOr", BinaryOp::BitwiseOr),
    ("BitwiseXor", BinaryOp::BitwiseXor),
    ("Sum", BinaryOp::Add),
    ("Max", BinaryOp::Max),
    ("Min", BinaryOp::Min),
];

fn find<T: Copy>(table: &[(&str, T)], key: &str) -> Option<T> {
    table.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

fn unary(cx: &mut Ctx) -> Result<()> {
    let op = find(UNARY, cx.op_type()).ok_or_else(|| cx.invalid("not a unary op"))?;
    let x = cx.input(0)?;
    cx.emit(Op::Unary(op), vec![x])
}

fn binary(cx: &mut Ctx) -> Result<()> {
    let mut op = find(BINARY, cx.op_type()).ok_or_else(|| cx.invalid("not a binary op"))?;
    // Mod with fmod=1 is C fmod (sign of the dividend); plain Mod is Python-style modulo.
    if op == BinaryOp::Mod && cx.int("fmod", 0)? != 0 {
        op = BinaryOp::Fmod;
    }
    let (a, b) = (cx.input(0)?, cx.input(1)?);
    cx.emit(Op::Binary(op), vec![a, b])
}

/// Sum/Max/Min take any number of inputs: fold left into a chain of binary nodes.
fn variadic(cx: &mut Ctx) -> Result<()> {
    let op = find(BINARY, cx.op_type()).ok_or_else(|| cx.invalid("not a variadic op"))?;
    let n = cx.node.input.len();
    let ins: Vec<_> = (0..n).map(|i| cx.input(i)).collect::<Result<_>>()?;
    match ins.len() {
        0 => Err(cx.invalid("needs at least one input")),
        1 => cx.emit(Op::Identity, ins),
        _ => {
            let mut acc = ins[0];
            for &x in &ins[1..ins.len() - 1] {
                acc = cx.emit_tmp(Op::Binary(op), vec![acc, x]);
            }
            cx.emit(Op::Binary(op), vec![acc, ins[ins.len() - 1]])
        }
    }
}

/// Mean of any number of inputs: their sum (as `Sum`) divided by the count.
fn mean(cx: &mut Ctx) -> Result<()> {
    let n = cx.node.input.len();
    let ins: Vec<_> = (0..n).map(|i| cx.input(i)).collect::<Result<_>>()?;
    let Some((&first, rest)) = ins.split_first() else {
        return Err(cx.invalid("needs at least one input"));
    };
    let mut acc = first;
    for &x in rest {
        acc = cx.emit_tmp(Op::Binary(BinaryOp::Add), vec![acc, x]);
    }
    let count = cx.constant(mpsrt_graph::HostTensor::from_f32(vec![], &[n as f32]));
    cx.emit(Op::Binary(BinaryOp::Div), vec![acc, count])
}

fn bit_shift(cx: &mut Ctx) -> Result<()> {
    let op = match cx.string("direction", "")?.as_str() {
        "LEFT" => BinaryOp::BitShiftLeft,
        "RIGHT" => BinaryOp::BitShiftRight,
        other => return Err(cx.invalid(format!("direction must be LEFT or RIGHT, got {other:?}"))),
    };
    let (a, b) = (cx.input(0)?, cx.input(1)?);
    cx.emit(Op::Binary(op), vec![a, b])
}

fn swish(cx: &mut Ctx) -> Result<()> {
    let alpha = cx.float("alpha", 1.0)?;
    let x = cx.input(0)?;
    cx.emit(Op::Swish { alpha }, vec![x])
}

fn shrink(cx: &mut Ctx) -> Result<()> {
    let (lambd, bias) = (cx.float("lambd", 0.5)?, cx.float("bias", 0.0)?);
    let x = cx.input(0)?;
    cx.emit(Op::Shrink { lambd, bias }, vec![x])
}

fn is_inf(cx: &mut Ctx) -> Result<()> {
    let op = Op::IsInf {
        detect_negative: cx.int("detect_negative", 1)? != 0,
        detect_positive: cx.int("detect_positive", 1)? != 0,
    };
    let x = cx.input(0)?;
    cx.emit(op, vec![x])
}

fn where_(cx: &mut Ctx) -> Result<()> {
    let ins = vec![cx.input(0)?, cx.input(1)?, cx.input(2)?];
    cx.emit(Op::Where, ins)
}

fn cast(cx: &mut Ctx) -> Result<()> {
    let to = map_dtype(cx.req_int("to")? as i32, &format!("Cast target of {}", cx.name()))?;
    let x = cx.input(0)?;
    cx.emit(Op::Cast { to }, vec![x])
}

/// The target dtype is that of the second input, resolved by graph inference.
fn cast_like(cx: &mut Ctx) -> Result<()> {
    let ins = vec![cx.input(0)?, cx.input(1)?];
    cx.emit(Op::CastLike, ins)
}

fn identity(cx: &mut Ctx) -> Result<()> {
    let x = cx.input(0)?;
    cx.emit(Op::Identity, vec![x])
}

/// Inference-mode dropout (ratio and training_mode inputs are ignored: mpsrt only infers).
fn dropout(cx: &mut Ctx) -> Result<()> {
    match cx.const_input(2)? {
        Some(t) if t.to_i64_vec().first().is_some_and(|&v| v != 0) => {
            return Err(cx.unsupported("training_mode=true is not supported (inference only)"));
        }
        // A training_mode fed at run time could switch training on: refuse rather than guess.
        None if cx.has_input(2) => {
            return Err(cx.unsupported("a run-time training_mode input is not supported"));
        }
        _ => {}
    }
    let x = cx.input(0)?;
    cx.emit(Op::Dropout, vec![x])
}

fn leaky_relu(cx: &mut Ctx) -> Result<()> {
    let alpha = cx.float("alpha", 0.01)?;
    let x = cx.input(0)?;
    cx.emit(Op::LeakyRelu { alpha }, vec![x])
}

fn elu(cx: &mut Ctx) -> Result<()> {
    let alpha = cx.float("alpha", 1.0)?;
    let x = cx.input(0)?;
    cx.emit(Op::Elu { alpha }, vec![x])
}

fn selu(cx: &mut Ctx) -> Result<()> {
    let alpha = cx.float("alpha", 1.673_263_2)?;
    let gamma = cx.float("gamma", 1.050_701)?;
    let x = cx.input(0)?;
    cx.emit(Op::Selu { alpha, gamma }, vec![x])
}

fn celu(cx: &mut Ctx) -> Result<()> {
    let alpha = cx.float("alpha", 1.0)?;
    let x = cx.input(0)?;
    cx.emit(Op::Celu { alpha }, vec![x])
}

fn hard_sigmoid(cx: &mut Ctx) -> Result<()> {
    let (alpha, beta) = (cx.float("alpha", 0.2)?, cx.float("beta", 0.5)?);
    let x = cx.input(0)?;
    cx.emit(Op::HardSigmoid { alpha, beta }, vec![x])
}

fn thresholded_relu(cx: &mut Ctx) -> Result<()> {
    let alpha = cx.float("alpha", 1.0)?;
    let x = cx.input(0)?;
    cx.emit(Op::ThresholdedRelu { alpha }, vec![x])
}

fn gelu(cx: &mut Ctx) -> Result<()> {
    let approximate_tanh = match cx.string("approximate", "none")?.as_str() {
        "none" => false,
        "tanh" => true,
        other => {
            return Err(
                cx.invalid(format!("approximate must be \"none\" or \"tanh\", got {other:?}"))
            )
        }
    };
    let x = cx.input(0)?;
    cx.emit(Op::Gelu { approximate_tanh }, vec![x])
}

/// Clip bounds are attributes before opset 11 and optional constant inputs from 11 on.
fn clip(cx: &mut Ctx) -> Result<()> {
    let runtime = |cx: &Ctx, i: usize| -> Result<bool> {
        Ok(cx.has_input(i) && cx.const_input(i)?.is_none())
    };
    if cx.opset >= 11 && (runtime(cx, 1)? || runtime(cx, 2)?) {
        // Runtime bounds: `(x, min, max?)`, canonicalized by the graph once bound. A skipped
        // min becomes the lowest f32 (no bound) so the inputs stay positional.
        let x = cx.input(0)?;
        let min = match cx.opt_input(1)? {
            Some(v) => v,
            None => cx.constant(mpsrt_graph::HostTensor::from_f32(vec![], &[f32::MIN])),
        };
        let mut ins = vec![x, min];
        ins.extend(cx.opt_input(2)?);
        return cx.emit(Op::Clip { min: None, max: None }, ins);
    }
    let (min, max) = if cx.opset < 11 {
        (Some(cx.float("min", f32::MIN)?), Some(cx.float("max", f32::MAX)?))
    } else {
        let bound = |cx: &Ctx, i: usize, what: &str| -> Result<Option<f32>> {
            if !cx.has_input(i) {
                return Ok(None);
            }
            let t = cx.req_const_input(i, what)?;
            Ok(t.to_f64_vec().first().map(|&v| v as f32))
        };
        (bound(cx, 1, "min")?, bound(cx, 2, "max")?)
    };
    let x = cx.input(0)?;
    cx.emit(Op::Clip { min, max }, vec![x])
}
