//! Attention's masked softmax as one op (issue 23): `softmax(x · scale + mask)` over the last
//! axis, rows whose biased maximum is `-inf` (every key masked) giving zeros instead of NaN.
//! On a GPU, f32 scores run as one kernel (`mpsrt_kernels::softmax_masked`) where the unfused
//! chain took three passes (scale + mask add, softmax, NaN guard); elsewhere — the CPU, f16,
//! masks that do not coalesce to three row dims, rows longer than the kernel holds — it is
//! composed from [`crate::fused_elementwise`], [`crate::add`] and [`crate::softmax`], which is
//! also the reference the kernel is tested against.

use crate::{gpu, BinaryFn as B, Expr, Scalar, Tensor, VType};
use mpsrt_core::{DType, Error, Place, Result};

const OP: &str = "masked_softmax";

/// `softmax(x · scale + mask, axis = -1)`, zeros for rows whose biased maximum is `-inf`.
/// `mask` (optional) broadcasts to `x` — float (added) or bool (`true` keeps the score, `false`
/// is `-inf`). Float `x`; the result has `x`'s dtype (arithmetic in f32 at least).
pub fn masked_softmax(x: &Tensor, scale: f64, mask: Option<&Tensor>) -> Result<Tensor> {
    if x.ndim() == 0 || !x.dtype().is_float() {
        return Err(Error::invalid(
            OP,
            format!(
                "scores must be a float tensor with an axis, got {} {:?}",
                x.dtype(),
                x.shape()
            ),
        ));
    }
    let cf = if x.dtype() == DType::F64 { DType::F64 } else { DType::F32 };
    let mask = match mask {
        None => None,
        Some(m) => {
            let m = if m.dtype() == DType::Bool {
                crate::where_scalar(m, Scalar::F(0.0), Scalar::F(f64::NEG_INFINITY), cf)?
            } else {
                m.astype(cf)?
            };
            Some(m.expand(x.shape()).map_err(|_| {
                Error::shape(
                    OP,
                    format!(
                        "mask {:?} does not broadcast to the scores {:?}",
                        m.shape(),
                        x.shape()
                    ),
                )
            })?)
        }
    };
    if let Place::Gpu(d) = x.place() {
        if x.dtype() == DType::F32 && gpu_enabled() {
            if let Some(y) = gpu::softmax_masked::masked_softmax(d, x, scale, mask.as_ref())? {
                return Ok(y);
            }
        }
    }
    composed(x, scale, mask.as_ref(), cf)
}

/// `MPSRT_MASKED_SOFTMAX=0` (read once): the composition on GPUs too, to compare.
fn gpu_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MPSRT_MASKED_SOFTMAX").map_or(true, |v| v.trim() != "0"))
}

/// The reference: scale, add, softmax, then zero the rows whose biased maximum is `-inf`
/// (`select`, so their NaN does not leak).
fn composed(x: &Tensor, scale: f64, mask: Option<&Tensor>, cf: DType) -> Result<Tensor> {
    let e = Expr::binary(
        B::Mul,
        Expr::cast(VType::Float, Expr::input(0)),
        Expr::Scalar(0, VType::Float),
    );
    let s = crate::fused_elementwise(OP, &[x], cf, e, &[Scalar::F(scale)])?;
    let s = match mask {
        Some(m) => crate::add(&s, m)?,
        None => s,
    };
    let p = crate::softmax(&s, -1)?;
    let row_max = crate::max(&s, Some(&[-1]), true)?;
    let lowest = if cf == DType::F64 { f64::MIN } else { f32::MIN as f64 };
    let dead = crate::less_scalar(&row_max, Scalar::F(lowest))?;
    let e = Expr::select(Expr::input(0), Expr::Scalar(0, VType::Float), Expr::input(1));
    crate::fused_elementwise(OP, &[&dead, &p], x.dtype(), e, &[Scalar::F(0.0)])
}
