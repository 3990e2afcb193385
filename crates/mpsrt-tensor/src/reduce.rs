//! Reduction family: sum, mean, prod, max, min, argmax, argmin, var/std, logsumexp and the
//! L2 norm over any set of axes (negative allowed, `None` = all) with `keepdim`, following
//! NumPy for empty reductions (sum = 0, prod = 1, mean = NaN, max/argmax refuse).

use crate::{cpu, elementwise::same_place, gpu, Tensor};
use mpsrt_core::{normalize_axis, DType, Error, Place, Result};
use mpsrt_kernels::ReduceOp;

/// Sorted, de-duplicated axes (all when `None`); duplicates are an error.
pub(crate) fn norm_axes(op: &str, axes: Option<&[isize]>, ndim: usize) -> Result<Vec<usize>> {
    let Some(axes) = axes else { return Ok((0..ndim).collect()) };
    let mut v = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = normalize_axis(op, a, ndim)?;
        if v.contains(&n) {
            return Err(Error::invalid(op, format!("axis {a} repeated in {axes:?}")));
        }
        v.push(n);
    }
    v.sort_unstable();
    Ok(v)
}

/// Output shape of reducing `axes` of `shape`.
pub(crate) fn reduced_shape(shape: &[usize], axes: &[usize], keepdim: bool) -> Vec<usize> {
    let mut out = Vec::with_capacity(shape.len());
    for (d, &n) in shape.iter().enumerate() {
        if !axes.contains(&d) {
            out.push(n);
        } else if keepdim {
            out.push(1);
        }
    }
    out
}

fn name(op: ReduceOp) -> &'static str {
    use ReduceOp::*;
    match op {
        Sum => "sum",
        Mean => "mean",
        Prod => "prod",
        Max => "max",
        Min => "min",
        ArgMax => "argmax",
        ArgMin => "argmin",
        Var => "var",
        Std => "std",
        LogSumExp => "logsumexp",
        Norm2 => "norm",
        Moments => "moments",
        Softmax => "softmax",
        LogSoftmax => "log_softmax",
    }
}

/// The shared driver: validates, picks compute/output dtypes, dispatches on the place.
pub(crate) fn reduce(
    x: &Tensor,
    op: ReduceOp,
    axes: Option<&[isize]>,
    keepdim: bool,
    param: f64,
) -> Result<Tensor> {
    let opn = name(op);
    let place = same_place(opn, &[x])?;
    let ax = norm_axes(opn, axes, x.ndim())?;
    let r: usize = ax.iter().map(|&a| x.shape()[a]).product();
    let out_shape = reduced_shape(x.shape(), &ax, keepdim);
    let n_out: usize = out_shape.iter().product();
    if r == 0
        && n_out > 0
        && matches!(op, ReduceOp::Max | ReduceOp::Min | ReduceOp::ArgMax | ReduceOp::ArgMin)
    {
        return Err(Error::invalid(
            opn,
            format!(
                "cannot reduce a zero-size dimension (shape {:?}, axes {ax:?}): {opn} has no identity",
                x.shape()
            ),
        ));
    }
    let d = x.dtype();
    // Compute dtype: float ops on ints go through float32; narrow ints/bools widen to int32.
    let (compute, out_dtype) = if !op.int_ok() {
        (d.to_float(), d.to_float())
    } else if d.is_float() {
        (d, if op.is_arg() { DType::I32 } else { d })
    } else {
        let wide = if d == DType::I64 { DType::I64 } else { DType::I32 };
        let out = match op {
            ReduceOp::ArgMax | ReduceOp::ArgMin => DType::I32,
            ReduceOp::Max | ReduceOp::Min => d,
            _ => wide,
        };
        (wide, out)
    };
    let xc = x.astype(compute)?;
    let res = match place {
        Place::Cpu => cpu::reduce::reduce(&xc, op, &ax, param)?,
        Place::Gpu(i) => gpu::reduce::reduce(opn, i, &xc, op, &ax, param as f32)?,
    };
    let res = res.reshape(&out_shape.iter().map(|&v| v as isize).collect::<Vec<_>>())?;
    res.astype(out_dtype)
}

macro_rules! axis_reductions {
    ($($fname:ident, $op:ident, $doc:literal;)*) => {$(
        #[doc = $doc]
        pub fn $fname(x: &Tensor, axes: Option<&[isize]>, keepdim: bool) -> Result<Tensor> {
            reduce(x, ReduceOp::$op, axes, keepdim, 0.0)
        }
    )*};
}

axis_reductions! {
    sum, Sum, "Sum over `axes` (all when `None`); ints/bools sum as int32, empty → 0.";
    mean, Mean, "Arithmetic mean (float result); empty → NaN.";
    prod, Prod, "Product; empty → 1.";
    max, Max, "Maximum; NaN propagates; empty is an error.";
    min, Min, "Minimum; NaN propagates; empty is an error.";
    logsumexp, LogSumExp, "log(sum(exp(x))) computed stably (max-shifted); empty → -inf.";
    norm, Norm2, "L2 norm sqrt(sum(x²)).";
}

/// Index (int32) of the maximum along `axis` (flattened when `None`); first index on ties,
/// NaN counts as the maximum (NumPy).
pub fn argmax(x: &Tensor, axis: Option<isize>, keepdim: bool) -> Result<Tensor> {
    arg(x, ReduceOp::ArgMax, axis, keepdim)
}

/// Index (int32) of the minimum along `axis` (flattened when `None`); first index on ties,
/// NaN counts as the minimum.
pub fn argmin(x: &Tensor, axis: Option<isize>, keepdim: bool) -> Result<Tensor> {
    arg(x, ReduceOp::ArgMin, axis, keepdim)
}

fn arg(x: &Tensor, op: ReduceOp, axis: Option<isize>, keepdim: bool) -> Result<Tensor> {
    match axis {
        Some(a) => reduce(x, op, Some(&[a]), keepdim, 0.0),
        None if keepdim => reduce(x, op, None, true, 0.0),
        None => reduce(&x.reshape(&[-1])?, op, Some(&[0]), false, 0.0),
    }
}

/// Variance with `correction` (ddof): `sum((x - mean)²) / max(n - correction, 0)`.
pub fn var(x: &Tensor, axes: Option<&[isize]>, correction: f64, keepdim: bool) -> Result<Tensor> {
    reduce(x, ReduceOp::Var, axes, keepdim, correction)
}

/// Standard deviation: `sqrt(var(x, axes, correction))`.
pub fn std(x: &Tensor, axes: Option<&[isize]>, correction: f64, keepdim: bool) -> Result<Tensor> {
    reduce(x, ReduceOp::Std, axes, keepdim, correction)
}

/// Mean and biased variance over `axes` in one pass (f32, keepdim shape), for normalization.
pub(crate) fn moments(x: &Tensor, axes: &[usize]) -> Result<(Tensor, Tensor)> {
    let place = same_place("moments", &[x])?;
    let xc = x.astype(x.dtype().to_float())?;
    let res = match place {
        Place::Cpu => cpu::reduce::reduce(&xc, ReduceOp::Moments, axes, 0.0)?,
        Place::Gpu(i) => gpu::reduce::reduce("moments", i, &xc, ReduceOp::Moments, axes, 0.0)?,
    };
    let shape: Vec<isize> =
        reduced_shape(x.shape(), axes, true).iter().map(|&v| v as isize).collect();
    let d = if xc.dtype() == DType::F64 { DType::F64 } else { DType::F32 };
    let mean = res.select(0, 0)?.reshape(&shape)?.astype(d)?;
    let var = res.select(0, 1)?.reshape(&shape)?.astype(d)?;
    Ok((mean, var))
}
