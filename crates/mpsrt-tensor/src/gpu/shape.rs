//! GPU launches for shape ops (`mpsrt-kernels/src/shape.wgsl`): strided copies into windows of
//! one output buffer, and gather. Kernels move 32-bit words; narrower dtypes are widened by the
//! caller (`shape.rs`) so no two threads share a word.

use super::conv::{buffer, meta_bytes};
use super::{alloc_out, grid};
use crate::Tensor;
use mpsrt_core::{numel, DType, Error, Layout, Result};
use mpsrt_kernels::{coalesce, concat_kernel, concat_meta_words, MAX_CONCAT_INPUTS};
use mpsrt_runtime::{Binding, GpuDevice, Kernel, Pipeline, Storage};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

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
        let pipeline = dev.static_pipeline(SOURCE, "copy_strided")?;
        let bindings = [Binding::from(&**buffer(op, src)?), Binding::from(&*out)];
        dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, 8), wg)?;
    }
    Ok(canvas)
}

/// The concat pipeline for `inputs` parts on `dev` (rendered once per count).
fn concat_pipeline(dev: &GpuDevice, op: &str, inputs: usize) -> Result<Arc<Pipeline>> {
    type Cache = Mutex<HashMap<(usize, usize), Arc<Pipeline>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    if let Some(p) = cache.lock().get(&(dev.index(), inputs)) {
        return Ok(p.clone());
    }
    let src = concat_kernel(inputs).map_err(|e| Error::invalid(op, e))?;
    // SAFETY: every read is inside its input's `[outer, width]` block and every write inside
    // the `[outer, W]` output: the host sizes both from the same shapes (`concat` below).
    let p = unsafe { dev.pipeline_unchecked(Kernel { source: &src, entry: "main" })? };
    cache.lock().insert((dev.index(), inputs), p.clone());
    Ok(p)
}

/// `parts` (contiguous, 4-byte `dtype`, every dim but `ax` equal to `shape`'s, none empty)
/// joined along `ax` into a fresh tensor of `shape`: one dispatch per
/// [`MAX_CONCAT_INPUTS`] inputs (or fewer, where the adapter binds fewer storage buffers).
pub(crate) fn concat(
    op: &str,
    device: usize,
    shape: &[usize],
    ax: usize,
    dtype: DType,
    parts: &[Tensor],
) -> Result<Tensor> {
    let canvas = empty(op, device, shape, dtype)?;
    let total = numel(shape);
    if total == 0 {
        return Ok(canvas);
    }
    let dev = mpsrt_runtime::gpu_device(device)?;
    let props = dev.properties();
    let per = MAX_CONCAT_INPUTS.min(props.max_storage_buffers_per_shader_stage as usize - 1).max(1);
    let outer: usize = shape[..ax].iter().product();
    let inner: usize = shape[ax + 1..].iter().product();
    let row = shape[ax] * inner;
    let out = buffer(op, &canvas)?.clone();
    let mut start = 0usize;
    for chunk in parts.chunks(per) {
        let c0 = start;
        let mut words = vec![0u32; 5];
        for t in chunk {
            let width = t.shape()[ax] * inner;
            words.extend([t.layout().offset as u32, width as u32, start as u32]);
            start += width;
        }
        let threads = outer * (start - c0);
        if threads > u32::MAX as usize {
            return Err(Error::unsupported(
                op,
                format!("a concat of {threads} elements on the GPU"),
            ));
        }
        let wg = grid((threads as u64).div_ceil(256), props.max_compute_workgroups_per_dimension);
        words[..5].copy_from_slice(&[
            threads as u32,
            wg[0] * 256,
            row as u32,
            (start - c0) as u32,
            c0 as u32,
        ]);
        let mut bindings = chunk
            .iter()
            .map(|t| Ok(Binding::from(&**buffer(op, t)?)))
            .collect::<Result<Vec<_>>>()?;
        bindings.push(Binding::from(&*out));
        let pipeline = concat_pipeline(&dev, op, chunk.len())?;
        let vec4s = concat_meta_words(chunk.len()).div_ceil(4);
        dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, vec4s), wg)?;
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
    let pipeline = dev.static_pipeline(SOURCE, "gather")?;
    let bindings = [
        Binding::from(&**buffer(op, &x)?),
        Binding::from(&ibuf),
        Binding::from(&**buffer(op, &y)?),
    ];
    dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, 2), wg)?;
    Ok(y)
}
