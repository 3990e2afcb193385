//! Binary op family: arithmetic, pow, maximum/minimum, comparisons, logic and `where`, with
//! NumPy broadcasting and the promotion rule documented on `DType::promote`.

use crate::elementwise::map;
use crate::{Scalar, Tensor};
use mpsrt_core::{DType, Error, Result};
use mpsrt_kernels::{BinaryFn, Expr, VType};

/// How a binary op chooses its compute and output types.
fn arith_types(op: &str, f: BinaryFn, d: DType) -> Result<(VType, DType, BinaryFn)> {
    use BinaryFn::*;
    Ok(match (f, d) {
        // True division always produces floats (NumPy/PyTorch `/`).
        (Div, _) => (VType::Float, d.to_float(), Div),
        // NumPy's bool arithmetic: + and maximum are `or`, * and minimum are `and`.
        (Add | Max, DType::Bool) => (VType::Bool, DType::Bool, Or),
        (Mul | Min, DType::Bool) => (VType::Bool, DType::Bool, And),
        (Sub | Pow, DType::Bool) => {
            return Err(Error::dtype(
                op,
                "bool tensors do not support this op; cast to int32 or float32 first",
            ))
        }
        (And | Or, DType::Bool) => (VType::Bool, DType::Bool, f),
        (And | Or, _) => {
            return Err(Error::dtype(op, format!("logical ops need bool tensors, got {d}")))
        }
        _ => (VType::of(d), d, f),
    })
}

fn binary(op: &str, f: BinaryFn, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let d = a.dtype().promote(b.dtype());
    let (vt, out, f) = arith_types(op, f, d)?;
    let expr = Expr::binary(f, Expr::cast(vt, Expr::input(0)), Expr::cast(vt, Expr::input(1)));
    map(op, &[a, b], out, expr, &[])
}

/// `a <op> s` (or `s <op> a` when `reverse`), with PyTorch's scalar promotion.
fn binary_scalar(op: &str, f: BinaryFn, a: &Tensor, s: Scalar, reverse: bool) -> Result<Tensor> {
    let d = s.result_dtype(a.dtype());
    let (vt, out, f) = arith_types(op, f, d)?;
    let (x, y) = (Expr::cast(vt, Expr::input(0)), Expr::Scalar(0, vt));
    let expr = if reverse { Expr::binary(f, y, x) } else { Expr::binary(f, x, y) };
    map(op, &[a], out, expr, &[s])
}

fn compare(op: &str, f: BinaryFn, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let vt = VType::of(a.dtype().promote(b.dtype()));
    let expr = Expr::binary(f, Expr::cast(vt, Expr::input(0)), Expr::cast(vt, Expr::input(1)));
    map(op, &[a, b], DType::Bool, expr, &[])
}

fn compare_scalar(op: &str, f: BinaryFn, a: &Tensor, s: Scalar) -> Result<Tensor> {
    let vt = VType::of(s.result_dtype(a.dtype()));
    let expr = Expr::binary(f, Expr::cast(vt, Expr::input(0)), Expr::Scalar(0, vt));
    map(op, &[a], DType::Bool, expr, &[s])
}

macro_rules! binary_ops {
    ($($name:ident, $sname:ident, $rname:ident, $f:ident, $doc:literal;)*) => {$(
        #[doc = $doc]
        pub fn $name(a: &Tensor, b: &Tensor) -> Result<Tensor> {
            binary(stringify!($name), BinaryFn::$f, a, b)
        }
        #[doc = concat!("`", stringify!($name), "` with a host scalar on the right.")]
        pub fn $sname(a: &Tensor, s: impl Into<Scalar>) -> Result<Tensor> {
            binary_scalar(stringify!($name), BinaryFn::$f, a, s.into(), false)
        }
        #[doc = concat!("`", stringify!($name), "` with a host scalar on the left.")]
        pub fn $rname(s: impl Into<Scalar>, a: &Tensor) -> Result<Tensor> {
            binary_scalar(stringify!($name), BinaryFn::$f, a, s.into(), true)
        }
    )*};
}

binary_ops! {
    add, add_scalar, radd_scalar, Add, "Elementwise `a + b` with broadcasting.";
    subtract, subtract_scalar, rsubtract_scalar, Sub, "Elementwise `a - b` with broadcasting.";
    multiply, multiply_scalar, rmultiply_scalar, Mul, "Elementwise `a * b` with broadcasting.";
    divide, divide_scalar, rdivide_scalar, Div, "True division `a / b` (integers divide as float32).";
    pow, pow_scalar, rpow_scalar, Pow, "Elementwise power with NumPy's edge cases (`(-8) ** (1/3)` is NaN).";
    maximum, maximum_scalar, rmaximum_scalar, Max, "Elementwise maximum; NaN propagates.";
    minimum, minimum_scalar, rminimum_scalar, Min, "Elementwise minimum; NaN propagates.";
    logical_and, logical_and_scalar, rlogical_and_scalar, And, "Elementwise logical and of bool tensors.";
    logical_or, logical_or_scalar, rlogical_or_scalar, Or, "Elementwise logical or of bool tensors.";
}

macro_rules! compare_ops {
    ($($name:ident, $sname:ident, $f:ident;)*) => {$(
        #[doc = concat!("Elementwise comparison `", stringify!($name), "` → bool tensor.")]
        pub fn $name(a: &Tensor, b: &Tensor) -> Result<Tensor> {
            compare(stringify!($name), BinaryFn::$f, a, b)
        }
        #[doc = concat!("`", stringify!($name), "` against a host scalar.")]
        pub fn $sname(a: &Tensor, s: impl Into<Scalar>) -> Result<Tensor> {
            compare_scalar(stringify!($name), BinaryFn::$f, a, s.into())
        }
    )*};
}

compare_ops! {
    equal, equal_scalar, Eq;
    not_equal, not_equal_scalar, Ne;
    less, less_scalar, Lt;
    less_equal, less_equal_scalar, Le;
    greater, greater_scalar, Gt;
    greater_equal, greater_equal_scalar, Ge;
}

/// `where(cond, a, b)`: elements of `a` where `cond` is true, else of `b` (all broadcast).
pub fn where_(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if cond.dtype() != DType::Bool {
        return Err(Error::dtype("where", format!("condition must be bool, got {}", cond.dtype())));
    }
    let d = a.dtype().promote(b.dtype());
    let vt = VType::of(d);
    let expr = Expr::select(
        Expr::input(0),
        Expr::cast(vt, Expr::input(1)),
        Expr::cast(vt, Expr::input(2)),
    );
    map("where", &[cond, a, b], d, expr, &[])
}

/// `where` with host scalars for both branches (`where(x > 0, 1.0, 0.0)`).
pub fn where_scalar(cond: &Tensor, a: Scalar, b: Scalar, dtype: DType) -> Result<Tensor> {
    if cond.dtype() != DType::Bool {
        return Err(Error::dtype("where", format!("condition must be bool, got {}", cond.dtype())));
    }
    let vt = VType::of(dtype);
    let expr = Expr::select(Expr::input(0), Expr::Scalar(0, vt), Expr::Scalar(1, vt));
    map("where", &[cond], dtype, expr, &[a, b])
}
