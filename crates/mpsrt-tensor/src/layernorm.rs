//! Layer normalization over the last axis with an optional residual input, as one GPU kernel
//! (`mpsrt_kernels::layernorm`; issue 23): transformers run it twice per layer, after a
//! residual add (SkipLayerNormalization). Elsewhere — the CPU, other dtypes, views that are not
//! contiguous, tensors past one storage binding — it is composed from [`crate::add`] and
//! [`crate::layer_norm`], which is also the reference the GPU kernel is tested against.

use crate::{gpu, Tensor};
use mpsrt_core::{Error, Place, Result};

const OP: &str = "layer_norm";

/// `s = x + residual` (or `x`), `y = (s - mean) / sqrt(var + eps) * weight + bias` over the last
/// axis (`weight` and `bias` have its length), statistics in f32. Returns `y` in `x`'s float
/// dtype and, with `sum_out`, `s` (the residual stream a later layer reads).
pub fn layer_norm_last(
    x: &Tensor,
    residual: Option<&Tensor>,
    weight: &Tensor,
    bias: Option<&Tensor>,
    eps: f64,
    sum_out: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let n = *x.shape().last().ok_or_else(|| Error::shape(OP, "input must have an axis"))?;
    if let Some(r) = residual {
        if r.shape() != x.shape() {
            return Err(Error::shape(
                OP,
                format!("residual shape {:?} differs from the input's {:?}", r.shape(), x.shape()),
            ));
        }
    }
    for (what, t) in [("weight", Some(weight)), ("bias", bias)] {
        if let Some(t) = t.filter(|t| t.numel() != n) {
            return Err(Error::shape(
                OP,
                format!("{what} must have {n} elements (the last axis), got {:?}", t.shape()),
            ));
        }
    }
    if let Place::Gpu(d) = x.place() {
        let mut ops = vec![x, weight];
        ops.extend(residual);
        ops.extend(bias);
        if gpu::layernorm::fits(d, &ops, n) {
            return gpu::layernorm::layer_norm_rows(
                d, x, residual, weight, bias, eps as f32, sum_out,
            );
        }
    }
    let s = match residual {
        Some(r) => crate::add(x, r)?,
        None => x.clone(),
    };
    let y = crate::layer_norm(&s, &[n], Some(weight), bias, eps)?;
    Ok((y, sum_out.then_some(s)))
}
