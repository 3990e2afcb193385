//! GPU launch for the one-pass masked softmax (`mpsrt_kernels::softmax_masked`): f32 scores
//! (made contiguous when they are not), an f32 mask view broadcast to them whose row dims
//! coalesce to at most three (stride 0 on broadcast dims, non-negative strides), every operand
//! within one storage binding. `None` when the problem does not fit: the caller composes.

use super::matmul::{cached, SpecCache};
use super::reduce::gpu_buffer;
use crate::Tensor;
use mpsrt_core::{DType, Layout, Result};
use mpsrt_kernels::MaskedSoftmaxSpec;
use mpsrt_runtime::{Binding, Storage};
use std::sync::{Arc, OnceLock};

const OP: &str = "masked_softmax";
static SPECS: SpecCache<MaskedSoftmaxSpec> = OnceLock::new();

/// `MPSRT_MASKED_SOFTMAX_SEG` (read once): threads per row, a power of two (tuning); unset:
/// the fewest that keep each thread at ≤ 8 units.
fn forced_seg() -> Option<u32> {
    static SEG: OnceLock<Option<u32>> = OnceLock::new();
    *SEG.get_or_init(|| {
        std::env::var("MPSRT_MASKED_SOFTMAX_SEG").ok().and_then(|v| v.trim().parse().ok())
    })
}

/// The mask's row dims `[d0, d1, d2]` with their strides, merged where the mask is row-major
/// across them and with size-1 dims dropped; `None` past three dims or with negative strides.
fn mask_rows(l: &Layout) -> Option<([u32; 3], [u32; 3])> {
    let n = l.shape.len();
    let mut dims: Vec<(usize, isize)> = Vec::new();
    for (&d, &s) in l.shape[..n - 1].iter().zip(&l.strides[..n - 1]) {
        if d == 1 {
            continue;
        }
        match dims.last_mut() {
            Some((pd, ps)) if *ps == s * d as isize => {
                *pd *= d;
                *ps = s;
            }
            _ => dims.push((d, s)),
        }
    }
    if dims.len() > 3 || dims.iter().any(|&(_, s)| s < 0) {
        return None;
    }
    while dims.len() < 3 {
        dims.insert(0, (1, 0));
    }
    let u = |v: usize| u32::try_from(v).ok();
    Some((
        [u(dims[0].0)?, u(dims[1].0)?, u(dims[2].0)?],
        [u(dims[0].1 as usize)?, u(dims[1].1 as usize)?, u(dims[2].1 as usize)?],
    ))
}

/// `softmax(x · scale + mask)` rows on device `index`, or `None` (not this kernel's problem).
/// `mask` is already f32 and broadcast to `x`'s shape.
pub(crate) fn masked_softmax(
    index: usize,
    x: &Tensor,
    scale: f64,
    mask: Option<&Tensor>,
) -> Result<Option<Tensor>> {
    let dev = mpsrt_runtime::gpu_device(index)?;
    let max = dev.properties().max_storage_buffer_binding_size;
    let l = *x.shape().last().unwrap_or(&0);
    let rows = x.numel().checked_div(l).unwrap_or(0);
    let mrows = match mask {
        Some(m) => {
            let ml = m.layout();
            let ks = *ml.strides.last().unwrap_or(&0);
            match (mask_rows(ml), m.dtype() == DType::F32 && ks >= 0) {
                (Some(r), true) => Some((r, ks as u32, ml.offset as u32)),
                _ => return Ok(None),
            }
        }
        None => None,
    };
    let xc = if x.is_contiguous() { x.clone() } else { x.contiguous()? };
    let fits = |t: &Tensor| gpu_buffer(OP, t).is_ok_and(|b| b.size() <= max);
    if !fits(&xc) || mask.is_some_and(|m| !fits(m)) || rows > u32::MAX as usize / 2 {
        return Ok(None);
    }
    let vec4 = l.is_multiple_of(4) && xc.layout().offset.is_multiple_of(4);
    let unit = if vec4 { 4 } else { 1 };
    let units = (l / unit) as u32;
    let Some((seg, chunks)) = MaskedSoftmaxSpec::plan(units, forced_seg())
        .or_else(|| MaskedSoftmaxSpec::plan(units, None))
    else {
        return Ok(None);
    };
    let spec = MaskedSoftmaxSpec { vec4, mask: mask.is_some(), seg, chunks };
    let layout = Layout::contiguous(x.shape());
    let y = Arc::new(super::alloc_out(&dev, OP, x.numel(), 4)?);
    let y = Tensor::from_parts(Storage::Gpu(y), layout, DType::F32);
    if rows == 0 || l == 0 {
        return Ok(Some(y));
    }
    let mut meta = [0u32; 12];
    meta[0] = rows as u32;
    meta[1] = units;
    meta[2] = (scale as f32).to_bits();
    meta[3] = (xc.layout().offset / unit) as u32;
    if let Some(((dims, strides), ks, off)) = mrows {
        meta[4] = off;
        meta[5] = ks;
        meta[6] = dims[1];
        meta[7] = dims[2];
        meta[8..11].copy_from_slice(&strides);
    } else {
        meta[6] = 1;
        meta[7] = 1;
    }
    let pl = cached(&SPECS, &dev, OP, spec, |s| Ok(s.render()))?;
    let mut binds: Vec<Binding> = Vec::with_capacity(3);
    for t in [Some(&xc), mask, Some(&y)].into_iter().flatten() {
        binds.push(Binding::from(&**gpu_buffer(OP, t)?));
    }
    let wgs = rows.div_ceil(spec.rows_per_workgroup() as usize);
    let g = super::grid(wgs as u64, dev.properties().max_compute_workgroups_per_dimension);
    dev.dispatch(OP, &pl, &binds, bytemuck::cast_slice(&meta), g)?;
    Ok(Some(y))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_rows_coalesce_broadcast_dims() {
        // BERT's padding mask [B, 1, 1, S] broadcast to [B, H, S, S]: batch stride S only.
        let l = Layout { shape: vec![8, 12, 128, 128], strides: vec![128, 0, 0, 1], offset: 0 };
        assert_eq!(mask_rows(&l), Some(([1, 8, 1536], [0, 128, 0])));
        // A dense mask collapses to one dim.
        let l = Layout::contiguous(&[2, 3, 4, 5]);
        assert_eq!(mask_rows(&l), Some(([1, 1, 24], [0, 0, 5])));
        // Four separate strides do not fit.
        let l = Layout { shape: vec![2, 3, 4, 5, 6], strides: vec![1000, 0, 7, 0, 1], offset: 0 };
        assert_eq!(mask_rows(&l), None);
    }
}
