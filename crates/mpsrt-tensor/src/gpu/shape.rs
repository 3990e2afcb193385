//! GPU launches for shape ops (`mpsrt-kernels/src/shape.wgsl`): strided copies into windows of
//! one output buffer, and gather. Kernels move 32-bit words; narrower dtypes are widened by the
//! caller (`shape.rs`) so no two threads share a word.

use super::conv::{buffer, meta_bytes};
use super::window::{self, Access};
use super::{alloc_out, grid};
use crate::Tensor;
use mpsrt_core::{numel, DType, Error, Layout, Result};
use mpsrt_kernels::{coalesce, concat_kernel, concat_meta_words, MAX_CONCAT_INPUTS};
use mpsrt_runtime::{Binding, GpuBuffer, GpuDevice, Kernel, Pipeline, Storage};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

const SOURCE: &str = include_str!("../../../mpsrt-kernels/src/shape.wgsl");
const MAX_DIMS: usize = 8;

/// How deep [`copy_part`] may split a part (each level shrinks one dim).
const MAX_SPLIT_DEPTH: usize = 8;

/// `canvas` (a fresh, contiguous, 4-byte tensor nobody else holds) with each `(dst, src)` part
/// copied into the window `dst`.
pub(crate) fn assemble(op: &str, canvas: Tensor, parts: &[(Layout, &Tensor)]) -> Result<Tensor> {
    let out = buffer(op, &canvas)?.clone();
    for (dst, src) in parts {
        copy_part(op, &out, dst, src, 0)?;
    }
    Ok(canvas)
}

/// One strided copy of `src` into the window `dst` of `out`. Points follow `src`'s dims, so
/// when `src` and `dst` step through memory in different orders (a transposed view padded or
/// stacked) neighbouring points may lie a binding apart in one of them and the windows would
/// shrink to a few elements each: such a part is copied in blocks along the dim whose steps
/// differ most between the two (its slices then step in one order), recursively.
fn copy_part(op: &str, out: &GpuBuffer, dst: &Layout, src: &Tensor, depth: usize) -> Result<()> {
    let dev = out.device().clone();
    let n = src.numel();
    if n == 0 {
        return Ok(());
    }
    let (shape, strides) = coalesce(src.shape(), &[src.strides().to_vec(), dst.strides.clone()]);
    if shape.len() > MAX_DIMS {
        return Err(Error::unsupported(
            op,
            format!("a strided copy of {} dims (max {MAX_DIMS}) on the GPU", shape.len()),
        ));
    }
    let pipeline = dev.static_pipeline(SOURCE, "copy_strided")?;
    let pdims = if shape.is_empty() { vec![1] } else { shape.clone() };
    let st = |k: usize| if shape.is_empty() { vec![0] } else { strides[k].clone() };
    let sbuf = buffer(op, src)?;
    let access = [
        Access {
            buffer: sbuf,
            elem_bytes: 4,
            offset: src.layout().offset as isize,
            strides: st(0),
            extent: (0, 0),
        },
        Access {
            buffer: out,
            elem_bytes: 4,
            offset: dst.offset as isize,
            strides: st(1),
            extent: (0, 0),
        },
    ];
    if depth < MAX_SPLIT_DEPTH && window::spans_far(&dev, &pdims, 1, 256, &access) {
        return split_part(op, out, dst, src, depth);
    }
    for w in window::plan(op, &dev, &pdims, 1, u32::MAX as usize / 2, &access)? {
        let wg = grid(
            (w.len as u64).div_ceil(256),
            dev.properties().max_compute_workgroups_per_dimension,
        );
        let mut words = vec![0u32; 32];
        words[0] = shape.len() as u32;
        words[1] = w.len as u32;
        words[2] = w.rel(0, src.layout().offset as isize) as i32 as u32;
        words[3] = w.rel(1, dst.offset as isize) as i32 as u32;
        words[4] = wg[0] * 256;
        words[5] = w.start as u32;
        for (d, &s) in shape.iter().enumerate() {
            words[8 + d] = s as u32;
            words[16 + d] = strides[0][d] as i32 as u32;
            words[24 + d] = strides[1][d] as i32 as u32;
        }
        let bindings = [w.binding(0, &access[0]), w.binding(1, &access[1])];
        dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, 8), wg)?;
    }
    Ok(())
}

/// [`copy_part`] in blocks along the dim where `src` and `dst` steps differ most (ratio of
/// the larger to the smaller), each block small enough that its steps along that dim stay
/// within a quarter binding, and at most half the dim (so recursion always shrinks the work).
fn split_part(op: &str, out: &GpuBuffer, dst: &Layout, src: &Tensor, depth: usize) -> Result<()> {
    let shape = src.shape();
    let (ss, ds) = (src.strides(), &dst.strides);
    let far = |d: usize| ss[d].unsigned_abs().max(ds[d].unsigned_abs()).max(1);
    let near = |d: usize| ss[d].unsigned_abs().min(ds[d].unsigned_abs()).max(1);
    let score = |d: usize| far(d) as f64 / near(d) as f64;
    let Some(d) =
        (0..shape.len()).filter(|&d| shape[d] > 1).max_by(|&a, &b| score(a).total_cmp(&score(b)))
    else {
        return copy_part(op, out, dst, src, MAX_SPLIT_DEPTH);
    };
    let (limit, _) = window::limits(out.device());
    let b = (1 + (limit / 16 / far(d) as u64) as usize).min(shape[d].div_ceil(2)).max(1);
    let mut i = 0;
    while i < shape[d] {
        let j = (i + b).min(shape[d]);
        let (lo, hi) = (Some(i as isize), Some(j as isize));
        let sl = src.layout().slice(op, d as isize, lo, hi, 1)?;
        let piece = Tensor::from_parts(src.storage().clone(), sl, src.dtype());
        copy_part(op, out, &dst.slice(op, d as isize, lo, hi, 1)?, &piece, depth + 1)?;
        i = j;
    }
    Ok(())
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
    let (limit, align) = window::limits(&dev);
    if !window::fits(&out, limit) && (4 * row as u64) + align > limit {
        // Output rows longer than one binding (a concat along the first axis of large parts):
        // the row kernel cannot split a row, the strided copy windows any element range.
        let mut at = 0isize;
        let mut windows = Vec::with_capacity(parts.len());
        for t in parts {
            let w = t.shape()[ax] as isize;
            windows.push((canvas.layout().slice(op, ax as isize, Some(at), Some(at + w), 1)?, t));
            at += w;
        }
        return assemble(op, canvas, &windows);
    }
    let mut start = 0usize;
    for chunk in parts.chunks(per) {
        let c0 = start;
        let mut heads = Vec::with_capacity(chunk.len());
        for t in chunk {
            let width = t.shape()[ax] * inner;
            heads.push((t.layout().offset, width, start));
            start += width;
        }
        let wc = start - c0;
        let pipeline = concat_pipeline(&dev, op, chunk.len())?;
        let vec4s = concat_meta_words(chunk.len()).div_ceil(4);
        // Points: this dispatch's [outer, Wc] output cells; part i reads its own [outer, width]
        // block, the output rows of width W from column c0.
        let pdims = [outer, wc];
        let mut access = chunk
            .iter()
            .zip(&heads)
            .map(|(t, &(off, width, _))| {
                // Rows are whole in every range: row o reads the part's whole row o.
                Ok(Access {
                    buffer: buffer(op, t)?,
                    elem_bytes: 4,
                    offset: off as isize,
                    strides: vec![width as isize, 0],
                    extent: (0, width as isize - 1),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        access.push(Access {
            buffer: &out,
            elem_bytes: 4,
            offset: c0 as isize,
            strides: vec![row as isize, 1],
            extent: (0, 0),
        });
        let max_points = (u32::MAX as usize / 2) / wc.max(1) * wc.max(1);
        for w in window::plan(op, &dev, &pdims, wc, max_points, &access)? {
            let o0 = w.start / wc;
            let wg = grid((w.len as u64).div_ceil(256), props.max_compute_workgroups_per_dimension);
            let mut words = vec![
                w.len as u32,
                wg[0] * 256,
                row as u32,
                wc as u32,
                c0 as u32,
                w.rel(chunk.len(), (o0 * row) as isize) as u32,
            ];
            for (i, &(off, width, s0)) in heads.iter().enumerate() {
                words.extend([
                    w.rel(i, (off + o0 * width) as isize) as u32,
                    width as u32,
                    s0 as u32,
                ]);
            }
            let bindings: Vec<Binding<'_>> =
                access.iter().enumerate().map(|(k, a)| w.binding(k, a)).collect();
            dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, vec4s), wg)?;
        }
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

/// `MPSRT_GATHER_VEC4` (default on), read once: 4-aligned rows gather as vec4s.
fn gather_vec4() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MPSRT_GATHER_VEC4").map_or(true, |v| v.trim() != "0"))
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
    let [outer, axis_len, inner] = dims;
    let (xb, yb) = (buffer(op, &x)?, buffer(op, &y)?);
    // Rows of a multiple of 4 words at a 4-word offset move as vec4s (`gather4`: a quarter of
    // the threads and 16-byte accesses; BERT's word embeddings, 768 floats a row):
    // `MPSRT_GATHER_VEC4=0` off. Below, `inner`, `x_off` and the points count these units.
    let v4 = inner % 4 == 0 && x.layout().offset % 4 == 0 && gather_vec4();
    let (unit, entry) = if v4 { (4, "gather4") } else { (1, "gather") };
    let pipeline = dev.static_pipeline(SOURCE, entry)?;
    let (inner_w, inner) = (inner, inner / unit);
    let x_off = x.layout().offset / unit;
    let eb = 4 * unit;
    let (limit, align) = window::limits(&dev);
    // Rows of x one pass binds: all of them when x fits, else as many as one binding holds
    // (an embedding table past the limit): each pass gathers only the indices in its rows.
    let rows_per = if window::fits(xb, limit) {
        axis_len
    } else {
        (limit.saturating_sub(align) / (4 * inner_w.max(1) as u64)) as usize
    };
    if rows_per == 0 {
        return Err(Error::oom(
            op,
            format!(
                "one gathered row of {} bytes exceeds the adapter's max_storage_buffer_binding_size of {limit} bytes",
                4 * inner_w
            ),
        ));
    }
    let pdims = [outer, idx.len(), inner];
    let mut lo = 0;
    while lo < axis_len {
        let hi = (lo + rows_per).min(axis_len);
        if rows_per < axis_len && !idx.iter().any(|&i| (lo as i64..hi as i64).contains(&i)) {
            lo = hi;
            continue;
        }
        let access = [
            Access {
                buffer: xb,
                elem_bytes: eb,
                offset: (x_off + lo * inner) as isize,
                strides: vec![(axis_len * inner) as isize, 0, 0],
                extent: (0, ((hi - lo) * inner) as isize - 1),
            },
            Access {
                buffer: &ibuf,
                elem_bytes: 4,
                offset: 0,
                strides: vec![0, 1, 0],
                extent: (0, 0),
            },
            Access::dense(yb, eb, 0, &pdims),
        ];
        for w in window::plan(op, &dev, &pdims, 1, u32::MAX as usize / 2, &access)? {
            let wg = grid(
                (w.len as u64).div_ceil(256),
                dev.properties().max_compute_workgroups_per_dimension,
            );
            let words = [
                axis_len as u32,
                inner as u32,
                idx.len() as u32,
                w.rel(0, x_off as isize) as i32 as u32,
                w.len as u32,
                wg[0] * 256,
                w.start as u32,
                w.base[2].map_or(0, |b| b.0) as u32,
                w.base[1].map_or(0, |b| b.0) as u32,
                lo as u32,
                hi as u32,
            ];
            let bindings =
                [w.binding(0, &access[0]), w.binding(1, &access[1]), w.binding(2, &access[2])];
            dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, 3), wg)?;
        }
        lo = hi;
    }
    Ok(y)
}
