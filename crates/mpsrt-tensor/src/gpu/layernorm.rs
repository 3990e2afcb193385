//! GPU launch for the one-kernel layer norm (`mpsrt_kernels::layernorm`): contiguous f32 (or
//! f16, 4-aligned) rows, one workgroup per row — or, for vec4 rows of at most 512 vec4s, the
//! segmented form (several rows per workgroup, rows held in registers; opt-in
//! `MPSRT_LAYERNORM_SEG=1`); offsets of views passed in the metadata.

use super::matmul::{cached, SpecCache};
use super::reduce::gpu_buffer;
use crate::Tensor;
use mpsrt_core::{DType, Layout, Result};
use mpsrt_kernels::LayerNormSpec;
use mpsrt_runtime::{Binding, Storage};
use std::sync::{Arc, OnceLock};

const OP: &str = "layer_norm";
static LN: SpecCache<LayerNormSpec> = OnceLock::new();

/// `MPSRT_LAYERNORM_SEG=1` (opt-in, read per launch): the segmented form. Off by default: on
/// the H100 (ninth session) it measured no better than the row form for BERT-base (b8 f16
/// 4.61/4.69 vs 4.64/4.57 ms, f32 10.43 vs 10.44) and slightly worse for small cases (GPT-2 f32
/// decode 304 vs 311 tokens/s, prefill 6.3 vs 5.9 ms; BERT f32 b1 3.21 vs 2.98 ms, one noisy run).
///
/// `MPSRT_LAYERNORM_SEG=2`: the flat form (one row per workgroup of 32–256 threads, rows of
/// ≤ 1024 vec4s in registers, one barrier per reduction): slower on the H100 (eleventh session
/// call A, BERT-base f32 b8: 9.9 us per norm against 7.6, p50 7.42/7.42/7.32 ms against
/// 7.27/7.24/7.29 with the row form, alternated fresh processes), so it stays opt-in.
fn seg_form() -> u8 {
    match std::env::var("MPSRT_LAYERNORM_SEG").as_deref().map(str::trim) {
        Ok("1") => 1,
        Ok("2") => 2,
        _ => 0,
    }
}

/// Whether the kernel takes these operands: contiguous tensors of one dtype on one GPU — f32,
/// or f16 with rows (`n`) and offsets a multiple of 4 (its packed vec4 path) — each within one
/// storage binding (else the caller composes the op from reductions).
pub(crate) fn fits(index: usize, ts: &[&Tensor], n: usize) -> bool {
    let Ok(dev) = mpsrt_runtime::gpu_device(index) else { return false };
    let max = dev.properties().max_storage_buffer_binding_size;
    let dt = ts.first().map_or(DType::F32, |t| t.dtype());
    let f16_ok = n.is_multiple_of(4) && ts.iter().all(|t| t.layout().offset.is_multiple_of(4));
    (dt == DType::F32 || (dt == DType::F16 && f16_ok))
        && ts.iter().all(|t| {
            t.dtype() == dt
                && t.is_contiguous()
                && t.place() == mpsrt_core::Place::Gpu(index)
                && gpu_buffer(OP, t).is_ok_and(|b| b.size() <= max)
        })
}

/// `y = (s - mean(s)) / sqrt(var(s) + eps) * gamma + beta` over the last `n` elements of each
/// row, `s = x (+ r)`; returns `y` and, with `sum_out`, `s`. Operands checked by [`fits`].
pub(crate) fn layer_norm_rows(
    index: usize,
    x: &Tensor,
    r: Option<&Tensor>,
    gamma: &Tensor,
    beta: Option<&Tensor>,
    eps: f32,
    sum_out: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let dev = mpsrt_runtime::gpu_device(index)?;
    let n = gamma.numel();
    let rows = x.numel().checked_div(n).unwrap_or(0);
    let offs = [
        Some(x.layout().offset),
        r.map(|t| t.layout().offset),
        Some(gamma.layout().offset),
        beta.map(|t| t.layout().offset),
    ];
    let vec4 = n.is_multiple_of(4) && offs.iter().flatten().all(|o| o.is_multiple_of(4));
    let unit = if vec4 { 4 } else { 1 };
    let f16 = x.dtype() == DType::F16;
    let spec = LayerNormSpec {
        vec4,
        residual: r.is_some(),
        sum_out,
        bias: beta.is_some(),
        f16: f16 && vec4,
        seg: 0,
        nv: 0,
        flat: false,
    };
    let form = if vec4 { seg_form() } else { 0 };
    let n4 = u32::try_from(n / 4).ok();
    let (seg, nv) = match form {
        1 => n4.and_then(LayerNormSpec::plan_seg).unwrap_or((0, 0)),
        2 => n4.and_then(LayerNormSpec::plan_flat).unwrap_or((0, 0)),
        _ => (0, 0),
    };
    let spec = LayerNormSpec { seg, nv, flat: form == 2 && seg > 0, ..spec };
    let layout = Layout::contiguous(x.shape());
    let dt = x.dtype();
    let out = |_| -> Result<Tensor> {
        let b = Arc::new(super::alloc_out(&dev, OP, x.numel(), dt.size())?);
        Ok(Tensor::from_parts(Storage::Gpu(b), layout.clone(), dt))
    };
    let y = out(())?;
    let s = if sum_out { Some(out(())?) } else { None };
    if rows == 0 || n == 0 {
        return Ok((y, s));
    }
    let mut meta = [0u32; 8];
    meta[0] = rows as u32;
    meta[1] = (n / unit) as u32;
    meta[2] = eps.to_bits();
    meta[3] = n as u32;
    for (m, o) in meta[4..].iter_mut().zip(offs) {
        *m = (o.unwrap_or(0) / unit) as u32;
    }
    let pl = cached(&LN, &dev, OP, spec, |s| Ok(s.render()))?;
    let mut binds: Vec<Binding> = Vec::with_capacity(6);
    for t in [Some(x), r, Some(gamma), beta].into_iter().flatten() {
        binds.push(Binding::from(&**gpu_buffer(OP, t)?));
    }
    for t in [Some(&y), s.as_ref()].into_iter().flatten() {
        binds.push(Binding::from(&**gpu_buffer(OP, t)?));
    }
    let wgs = rows.div_ceil(spec.rows_per_workgroup() as usize);
    let g = super::grid(wgs as u64, dev.properties().max_compute_workgroups_per_dimension);
    dev.dispatch(OP, &pl, &binds, bytemuck::cast_slice(&meta), g)?;
    Ok((y, s))
}
