//! Unary op family: math functions and activations. Parameterised activations (leaky_relu,
//! elu, hardsigmoid, softplus, clip, gelu...) are compositions of primitives, so the CPU
//! reference and the GPU kernel share one definition of the formula but not of the primitives.

use crate::elementwise::map;
use crate::{Scalar, Tensor};
use mpsrt_core::{DType, Error, Result};
use mpsrt_kernels::{BinaryFn as B, Expr, UnaryFn as U, VType};

fn x() -> Expr {
    Expr::input(0)
}
fn s(k: usize) -> Expr {
    Expr::Scalar(k, VType::Float)
}
fn un(f: U, e: Expr) -> Expr {
    Expr::unary(f, e)
}
fn bin(f: B, a: Expr, b: Expr) -> Expr {
    Expr::binary(f, a, b)
}

/// Float-valued unary op: integer inputs are converted to float32 first (like `torch.exp`).
fn float_op(
    op: &str,
    t: &Tensor,
    body: impl FnOnce(Expr) -> Expr,
    scalars: &[Scalar],
) -> Result<Tensor> {
    let out = t.dtype().to_float();
    map(op, &[t], out, body(Expr::cast(VType::Float, x())), scalars)
}

/// Type-preserving unary op on numbers (neg, abs, relu, sign).
fn same_type_op(op: &str, t: &Tensor, f: U) -> Result<Tensor> {
    if t.dtype() == DType::Bool {
        return Err(Error::dtype(
            op,
            "bool tensors are not supported; cast to int32 or float32 first",
        ));
    }
    map(op, &[t], t.dtype(), un(f, x()), &[])
}

macro_rules! float_unary {
    ($($name:ident, $f:ident, $doc:literal;)*) => {$(
        #[doc = $doc]
        pub fn $name(t: &Tensor) -> Result<Tensor> {
            float_op(stringify!($name), t, |e| un(U::$f, e), &[])
        }
    )*};
}

float_unary! {
    exp, Exp, "e^x.";
    log, Log, "Natural log; NaN for negative inputs, -inf at 0.";
    sqrt, Sqrt, "Square root; NaN for negative inputs.";
    sigmoid, Sigmoid, "Logistic function, computed without overflow for large |x|.";
    tanh, Tanh, "Hyperbolic tangent.";
    erf, Erf, "Error function.";
    sin, Sin, "Sine.";
    cos, Cos, "Cosine.";
    reciprocal, Recip, "1 / x.";
}

/// -x.
pub fn neg(t: &Tensor) -> Result<Tensor> {
    same_type_op("neg", t, U::Neg)
}
/// |x|.
pub fn abs(t: &Tensor) -> Result<Tensor> {
    same_type_op("abs", t, U::Abs)
}
/// -1, 0 or 1 (NaN stays NaN).
pub fn sign(t: &Tensor) -> Result<Tensor> {
    same_type_op("sign", t, U::Sign)
}
/// max(x, 0); NaN stays NaN.
pub fn relu(t: &Tensor) -> Result<Tensor> {
    same_type_op("relu", t, U::Relu)
}

/// Rounding ops keep integer tensors unchanged (as PyTorch does).
fn rounding(op: &str, t: &Tensor, f: U) -> Result<Tensor> {
    if !t.dtype().is_float() {
        return t.contiguous();
    }
    map(op, &[t], t.dtype(), un(f, x()), &[])
}
/// Round down.
pub fn floor(t: &Tensor) -> Result<Tensor> {
    rounding("floor", t, U::Floor)
}
/// Round up.
pub fn ceil(t: &Tensor) -> Result<Tensor> {
    rounding("ceil", t, U::Ceil)
}
/// Round half to even (NumPy's `round`).
pub fn round(t: &Tensor) -> Result<Tensor> {
    rounding("round", t, U::Round)
}

/// Logical not of a bool tensor.
pub fn logical_not(t: &Tensor) -> Result<Tensor> {
    if t.dtype() != DType::Bool {
        return Err(Error::dtype(
            "logical_not",
            format!("expected a bool tensor, got {}", t.dtype()),
        ));
    }
    map("logical_not", &[t], DType::Bool, un(U::Not, x()), &[])
}

/// True where x is NaN.
pub fn isnan(t: &Tensor) -> Result<Tensor> {
    if !t.dtype().is_float() {
        return crate::full(t.shape(), Scalar::B(false), DType::Bool, t.place());
    }
    map("isnan", &[t], DType::Bool, un(U::IsNan, Expr::cast(VType::Float, x())), &[])
}

/// x * sigmoid(x).
pub fn silu(t: &Tensor) -> Result<Tensor> {
    float_op("silu", t, |e| bin(B::Mul, e.clone(), un(U::Sigmoid, e)), &[])
}

/// GELU: exact (`0.5 x (1 + erf(x / √2))`) or the tanh approximation.
pub fn gelu(t: &Tensor, approximate_tanh: bool) -> Result<Tensor> {
    if approximate_tanh {
        // 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))
        float_op(
            "gelu",
            t,
            |e| {
                let cube = bin(B::Mul, bin(B::Mul, e.clone(), e.clone()), e.clone());
                let inner = bin(B::Mul, s(1), bin(B::Add, e.clone(), bin(B::Mul, s(2), cube)));
                bin(B::Mul, bin(B::Mul, s(0), e), bin(B::Add, s(3), un(U::Tanh, inner)))
            },
            &[
                Scalar::F(0.5),
                Scalar::F(0.797_884_560_802_865_4),
                Scalar::F(0.044715),
                Scalar::F(1.0),
            ],
        )
    } else {
        float_op(
            "gelu",
            t,
            |e| {
                bin(
                    B::Mul,
                    bin(B::Mul, s(0), e.clone()),
                    bin(B::Add, s(2), un(U::Erf, bin(B::Mul, e, s(1)))),
                )
            },
            &[Scalar::F(0.5), Scalar::F(std::f64::consts::FRAC_1_SQRT_2), Scalar::F(1.0)],
        )
    }
}

/// x if x >= 0 else slope * x.
pub fn leaky_relu(t: &Tensor, slope: f64) -> Result<Tensor> {
    float_op(
        "leaky_relu",
        t,
        |e| Expr::select(bin(B::Lt, e.clone(), s(1)), bin(B::Mul, e.clone(), s(0)), e),
        &[Scalar::F(slope), Scalar::F(0.0)],
    )
}

/// x if x > 0 else alpha * (e^x - 1).
pub fn elu(t: &Tensor, alpha: f64) -> Result<Tensor> {
    float_op(
        "elu",
        t,
        |e| {
            Expr::select(
                bin(B::Gt, e.clone(), s(1)),
                e.clone(),
                bin(B::Mul, s(0), bin(B::Sub, un(U::Exp, e), s(2))),
            )
        },
        &[Scalar::F(alpha), Scalar::F(0.0), Scalar::F(1.0)],
    )
}

/// clip(alpha * x + beta, 0, 1) (ONNX HardSigmoid; PyTorch uses alpha = 1/6, beta = 0.5).
pub fn hardsigmoid(t: &Tensor, alpha: f64, beta: f64) -> Result<Tensor> {
    float_op(
        "hardsigmoid",
        t,
        |e| bin(B::Min, bin(B::Max, bin(B::Add, bin(B::Mul, s(0), e), s(1)), s(2)), s(3)),
        &[Scalar::F(alpha), Scalar::F(beta), Scalar::F(0.0), Scalar::F(1.0)],
    )
}

/// x * hardsigmoid(x) with PyTorch's constants.
pub fn hardswish(t: &Tensor) -> Result<Tensor> {
    float_op(
        "hardswish",
        t,
        |e| {
            bin(
                B::Mul,
                e.clone(),
                bin(B::Min, bin(B::Max, bin(B::Add, bin(B::Mul, s(0), e), s(1)), s(2)), s(3)),
            )
        },
        &[Scalar::F(1.0 / 6.0), Scalar::F(0.5), Scalar::F(0.0), Scalar::F(1.0)],
    )
}

/// log(1 + e^(beta x)) / beta, linear above `threshold` (PyTorch's softplus), evaluated as
/// max(x, 0) + log(1 + e^-|x|) so it neither overflows nor underflows.
pub fn softplus(t: &Tensor, beta: f64, threshold: f64) -> Result<Tensor> {
    float_op(
        "softplus",
        t,
        |e| {
            let bx = bin(B::Mul, e.clone(), s(0));
            let stable = bin(
                B::Add,
                bin(B::Max, bx.clone(), s(2)),
                un(U::Log, bin(B::Add, s(3), un(U::Exp, un(U::Neg, un(U::Abs, bx.clone()))))),
            );
            Expr::select(bin(B::Gt, bx, s(1)), e, bin(B::Div, stable, s(0)))
        },
        &[Scalar::F(beta), Scalar::F(threshold), Scalar::F(0.0), Scalar::F(1.0)],
    )
}

/// Clamp into [min, max] (either bound optional); NaN stays NaN. Keeps the dtype.
pub fn clip(t: &Tensor, min: Option<f64>, max: Option<f64>) -> Result<Tensor> {
    let d = t.dtype();
    if d == DType::Bool {
        return Err(Error::dtype("clip", "bool tensors are not supported"));
    }
    if let (Some(lo), Some(hi)) = (min, max) {
        if lo > hi {
            return Err(Error::invalid("clip", format!("min {lo} is greater than max {hi}")));
        }
    }
    let vt = VType::of(d);
    let sc = |v: f64| if d.is_float() { Scalar::F(v) } else { Scalar::I(v as i64) };
    let mut e = x();
    let mut scalars = vec![];
    if let Some(lo) = min {
        e = bin(B::Max, e, Expr::Scalar(scalars.len(), vt));
        scalars.push(sc(lo));
    }
    if let Some(hi) = max {
        e = bin(B::Min, e, Expr::Scalar(scalars.len(), vt));
        scalars.push(sc(hi));
    }
    map("clip", &[t], d, e, &scalars)
}
