//! GPU launches for shape ops (`mpsrt-kernels/src/shape.wgsl`): strided copies into windows of
//! one output buffer, and gather. Kernels move 32-bit words; narrower dtypes are widened by the
//! caller (`shape.rs`) so no two threads share a word.

use super::conv::{buffer, meta_bytes};
use super::{alloc_out, grid};
use crate::Tensor;
use mpsrt_core::{numel, DType, Error, Layout, Result};
use mpsrt_kernels::coalesce;
use mpsrt_runtime::{Binding, Kernel, Storage};
use std::sync::Arc;

const SOURCE: &str = include_str!("../../../mpsrt-kernels/src/shape.wgsl");
const MAX_DIMS: usize = 8;

/// `canvas` (a fresh, contiguous, 4-byte tensor nobody else holds) with each `(dst, src)` part
/// copied into the window `dst`.
pub(crate) fn assemble(op: &str, canvas: Tensor, parts: &[(Layout, &Tensor)]) -> Result<Tensor> {
    let out = buffer(op, &canvas)?.clone();
    let dev = out.device().clone();
    for (dst, src) in parts {
        let n = src.numel();
        if n == 0 {
            continue;
        }
        let (shape, strides) =
            coalesce(src.shape(), &[src.strides().to_vec(), dst.strides.clone()]);
        if shape.len() > MAX_DIMS {
            return Err(Error::unsupported(
                op,
                format!("a strided copy of {} dims (max {MAX_DIMS}) on the GPU", shape.len()),
            ));
        }
        let wg =
            grid((n as u64).div_ceil(256), dev.properties().max_compute_workgroups_per_dimension);
        let mut words = vec![0u32; 32];
        words[0] = shape.len() as u32;
        words[1] = n as u32;
        words[2] = src.layout().offset as u32;
        words[3] = dst.offset as u32;
        words[4] = wg[0] * 256;
        for (d, &s) in shape.iter().enumerate() {
            words[8 + d] = s as u32;
            words[16 + d] = strides[0][d] as i32 as u32;
            words[24 + d] = strides[1][d] as i32 as u32;
        }
        let pipeline = dev.pipeline(Kernel { source: SOURCE, entry: "copy_strided" })?;
        let bindings = [Binding::from(&**buffer(op, src)?), Binding::from(&*out)];
        dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, 8), wg)?;
    }
    Ok(canvas)
}

/// A fresh, uninitialised contiguous GPU tensor (only for canvases every element of which is
/// then written).
pub(crate) fn empty(op: &str, device: usize, shape: &[usize], dtype: DType) -> Result<Tensor> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    let buf = alloc_out(&dev, op, numel(shape), dtype.size())?;
    Ok(Tensor::from_parts(Storage::Gpu(Arc::new(buf)), Layout::contiguous(shape), dtype))
}

/// `x` (4-byte dtype) viewed as (outer, axis_len, inner) gathered at `idx` (normalised, in
/// bounds) into the final `shape`.
pub(crate) fn gather(
    op: &str,
    device: usize,
    x: &Tensor,
    dims: [usize; 3],
    idx: &[i64],
    shape: &[usize],
) -> Result<Tensor> {
    let x = x.contiguous()?;
    let y = empty(op, device, shape, x.dtype())?;
    let total = numel(shape);
    if total == 0 {
        return Ok(y);
    }
    let dev = mpsrt_runtime::gpu_device(device)?;
    let idx32: Vec<i32> = idx.iter().map(|&i| i as i32).collect();
    let ibuf = dev.upload(op, bytemuck::cast_slice(&idx32))?;
    let wg =
        grid((total as u64).div_ceil(256), dev.properties().max_compute_workgroups_per_dimension);
    let words = [
        dims[1] as u32,
        dims[2] as u32,
        idx.len() as u32,
        x.layout().offset as u32,
        total as u32,
        wg[0] * 256,
    ];
    let pipeline = dev.pipeline(Kernel { source: SOURCE, entry: "gather" })?;
    let bindings = [
        Binding::from(&**buffer(op, &x)?),
        Binding::from(&ibuf),
        Binding::from(&**buffer(op, &y)?),
    ];
    dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, 2), wg)?;
    Ok(y)
}
