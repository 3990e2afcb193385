//! Shape ops that move data: `concat`, `stack`, `split`, `gather` (ONNX semantics),
//! `index_select`, `pad` (constant / reflect / edge, negative pads crop) and `tile`. Pure views
//! (reshape, permute, slice, select, expand, squeeze, flatten) live on `Tensor`; `where_` and
//! `astype` (cast) are elementwise. CPU reference `cpu/shape.rs`, GPU `gpu/shape.rs`.

use crate::elementwise::same_place;
use crate::{cpu, gpu, Tensor};
use mpsrt_core::{normalize_axis, DType, Error, Layout, Place, Result};

/// The 32-bit dtype the GPU kernels move `d` as (narrow dtypes widen losslessly).
fn gpu_word(d: DType) -> DType {
    match d {
        DType::F16 => DType::F32,
        DType::U8 | DType::I8 | DType::Bool => DType::I32,
        d => d,
    }
}

/// A fresh `shape` tensor of `dtype` on `place` filled with `fill` (0 if `None`), with each
/// `(dst, src)` part copied into the window `dst` of the contiguous output.
fn assemble(
    op: &str,
    place: Place,
    shape: &[usize],
    dtype: DType,
    fill: Option<f64>,
    parts: &[(Layout, Tensor)],
) -> Result<Tensor> {
    match place {
        Place::Cpu => {
            let fill =
                fill.map(|v| cpu::conv::from_f64(&[v], &[1], dtype)?.to_bytes()).transpose()?;
            let parts: Vec<Result<(Layout, Tensor)>> =
                parts.iter().map(|(l, t)| Ok((l.clone(), t.astype(dtype)?))).collect();
            let parts = parts.into_iter().collect::<Result<Vec<_>>>()?;
            let refs: Vec<(Layout, &Tensor)> = parts.iter().map(|(l, t)| (l.clone(), t)).collect();
            cpu::shape::assemble(op, shape, dtype, fill.as_deref(), &refs)
        }
        Place::Gpu(d) => {
            let work = gpu_word(dtype);
            let canvas = match fill {
                Some(v) => crate::full(shape, v, work, place)?,
                None => gpu::shape::empty(op, d, shape, work)?,
            };
            let parts = parts
                .iter()
                .map(|(l, t)| Ok((l.clone(), t.astype(work)?)))
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<(Layout, &Tensor)> = parts.iter().map(|(l, t)| (l.clone(), t)).collect();
            gpu::shape::assemble(op, canvas, &refs)?.astype(dtype)
        }
    }
}

/// Join tensors along `axis`; dtypes promote, all other dims must match, zero-size parts are
/// allowed.
pub fn concat(tensors: &[&Tensor], axis: isize) -> Result<Tensor> {
    let op = "concat";
    let place = same_place(op, tensors)?;
    let first = tensors[0];
    if first.ndim() == 0 {
        return Err(Error::shape(op, "zero-dimensional tensors cannot be concatenated"));
    }
    let ax = normalize_axis(op, axis, first.ndim())?;
    let shapes: Vec<&[usize]> = tensors.iter().map(|t| t.shape()).collect();
    let mut shape = first.shape().to_vec();
    shape[ax] = 0;
    for t in tensors {
        let ok = t.ndim() == first.ndim()
            && (0..first.ndim()).all(|d| d == ax || t.shape()[d] == first.shape()[d]);
        if !ok {
            return Err(Error::shape(
                op,
                format!(
                    "shapes {shapes:?} must match in every dim except axis {ax} and have equal rank"
                ),
            ));
        }
        shape[ax] += t.shape()[ax];
    }
    let dtype = tensors.iter().skip(1).fold(first.dtype(), |d, t| d.promote(t.dtype()));
    if let Place::Gpu(d) = place {
        // One dispatch for up to 15 contiguous parts instead of one strided copy per part.
        let work = gpu_word(dtype);
        let parts = tensors
            .iter()
            .filter(|t| t.shape()[ax] > 0)
            .map(|t| t.astype(work)?.contiguous())
            .collect::<Result<Vec<_>>>()?;
        return gpu::shape::concat(op, d, &shape, ax, work, &parts)?.astype(dtype);
    }
    let full = Layout::contiguous(&shape);
    let mut parts = Vec::with_capacity(tensors.len());
    let mut start = 0isize;
    for t in tensors {
        let len = t.shape()[ax] as isize;
        if len > 0 {
            let dst = full.slice(op, ax as isize, Some(start), Some(start + len), 1)?;
            parts.push((dst, (*t).clone()));
        }
        start += len;
    }
    assemble(op, place, &shape, dtype, None, &parts)
}

/// Copy `src` into the memory of `dst`, a view (any strides and offset) of a GPU tensor of the
/// same shape and a 32-bit dtype (`src` is cast to it). Unlike every other op this writes into
/// existing storage, which other tensors may share: it is for planners that own a buffer and
/// place parts of it (the engine's concat written in place, issue 22). The caller guarantees
/// that no live value still needs the memory `dst` covers and that `src` does not overlap it.
pub fn write_into(dst: &Tensor, src: &Tensor) -> Result<()> {
    let op = "write_into";
    let Place::Gpu(_) = dst.place() else {
        return Err(Error::unsupported(op, "a destination on the CPU (its buffers are immutable)"));
    };
    if src.shape() != dst.shape() {
        return Err(Error::shape(
            op,
            format!("source shape {:?} differs from destination {:?}", src.shape(), dst.shape()),
        ));
    }
    if gpu_word(dst.dtype()) != dst.dtype() {
        return Err(Error::dtype(
            op,
            format!("a destination of {} (32-bit dtypes only)", dst.dtype()),
        ));
    }
    let src = src.astype(dst.dtype())?.to(dst.place())?;
    gpu::shape::assemble(op, dst.clone(), &[(dst.layout().clone(), &src)])?;
    Ok(())
}

/// Join equal-shaped tensors along a new `axis` (in `-(ndim+1)..=ndim`).
pub fn stack(tensors: &[&Tensor], axis: isize) -> Result<Tensor> {
    let op = "stack";
    let Some(first) = tensors.first() else {
        return Err(Error::invalid(op, "no input tensors"));
    };
    if let Some(t) = tensors.iter().find(|t| t.shape() != first.shape()) {
        return Err(Error::shape(
            op,
            format!("all tensors must have one shape, got {:?} and {:?}", first.shape(), t.shape()),
        ));
    }
    let n = first.ndim() as isize;
    if axis < -n - 1 || axis > n {
        return Err(Error::invalid(
            op,
            format!("axis {axis} out of range for rank {} (expected {} to {n})", n + 1, -n - 1),
        ));
    }
    let parts = tensors.iter().map(|t| t.unsqueeze(axis)).collect::<Result<Vec<_>>>()?;
    let refs: Vec<&Tensor> = parts.iter().collect();
    concat(&refs, axis).map_err(|e| Error::new(e.kind, op, e.message))
}

/// Split along `axis` into parts of the given `sizes` (which must sum to the dim); views.
pub fn split(x: &Tensor, sizes: &[usize], axis: isize) -> Result<Vec<Tensor>> {
    let op = "split";
    let ax = normalize_axis(op, axis, x.ndim())?;
    let len = x.shape()[ax];
    if sizes.iter().sum::<usize>() != len {
        return Err(Error::shape(
            op,
            format!("sizes {sizes:?} must sum to dim {ax} of {:?} ({len})", x.shape()),
        ));
    }
    let mut start = 0;
    let mut out = Vec::with_capacity(sizes.len());
    for &s in sizes {
        out.push(x.slice(ax as isize, Some(start as isize), Some((start + s) as isize), 1)?);
        start += s;
    }
    Ok(out)
}

/// Split along `axis` into `parts` pieces of `ceil(dim / parts)` (the last may be smaller, as
/// ONNX Split with `num_outputs`); views.
pub fn split_into(x: &Tensor, parts: usize, axis: isize) -> Result<Vec<Tensor>> {
    let op = "split";
    let ax = normalize_axis(op, axis, x.ndim())?;
    let len = x.shape()[ax];
    if parts == 0 {
        return Err(Error::invalid(op, "the number of parts must be positive"));
    }
    let chunk = len.div_ceil(parts);
    if chunk * (parts - 1) >= len && len > 0 && parts > 1 {
        return Err(Error::invalid(
            op,
            format!(
                "cannot split dim {ax} of {:?} ({len}) into {parts} non-empty parts",
                x.shape()
            ),
        ));
    }
    let mut sizes = vec![chunk; parts];
    sizes[parts - 1] = len - chunk * (parts - 1);
    split(x, &sizes, axis)
}

/// Index values of an i32/i64 tensor (on any place), normalised against `len` and bounds-checked.
fn read_indices(
    op: &str,
    indices: &Tensor,
    len: usize,
    ax: usize,
    x: &[usize],
) -> Result<Vec<i64>> {
    if !matches!(indices.dtype(), DType::I32 | DType::I64) {
        return Err(Error::dtype(
            op,
            format!("indices must be int32 or int64, got {}", indices.dtype()),
        ));
    }
    let bytes = indices.to_bytes()?;
    let raw: Vec<i64> = match indices.dtype() {
        DType::I32 => bytes
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64)
            .collect(),
        _ => bytes
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .collect(),
    };
    let n = len as i64;
    raw.into_iter()
        .map(|i| {
            let j = if i < 0 { i + n } else { i };
            if (0..n).contains(&j) {
                Ok(j)
            } else {
                Err(Error::invalid(
                    op,
                    format!(
                        "index {i} is out of bounds for axis {ax} with size {len} (input {x:?})"
                    ),
                ))
            }
        })
        .collect()
}

/// Gather along `ax` at normalised in-bounds `idx`, the axis replaced by `idx_shape`.
fn gather_at(op: &str, x: &Tensor, ax: usize, idx: &[i64], idx_shape: &[usize]) -> Result<Tensor> {
    let s = x.shape();
    let dims = [s[..ax].iter().product(), s[ax], s[ax + 1..].iter().product()];
    let mut shape = s[..ax].to_vec();
    shape.extend_from_slice(idx_shape);
    shape.extend_from_slice(&s[ax + 1..]);
    match x.place() {
        Place::Cpu => cpu::shape::gather(op, x, dims, idx, &shape),
        Place::Gpu(d) => {
            // f16 slices of even length move as u32 words (two halves each) instead of
            // widening the whole source to f32 first: BERT's f16 word embeddings (30522 × 768)
            // were converted on every run (55 µs of a 5 ms model on the H200).
            let off = x.layout().offset;
            if x.dtype() == DType::F16
                && f16_gather_words()
                && dims[2].is_multiple_of(2)
                && x.is_contiguous()
                && off.is_multiple_of(2)
            {
                let mut wl = Layout::contiguous(&[dims[0], dims[1], dims[2] / 2]);
                wl.offset = off / 2;
                let xw = Tensor::from_parts(x.storage().clone(), wl, DType::I32);
                let wdims = [dims[0], dims[1], dims[2] / 2];
                let words = shape.iter().product::<usize>() / 2;
                let y = gpu::shape::gather(op, d, &xw, wdims, idx, &[words])?;
                let mut yl = Layout::contiguous(&shape);
                yl.offset = y.layout().offset * 2;
                return Ok(Tensor::from_parts(y.storage().clone(), yl, DType::F16));
            }
            let xw = x.astype(gpu_word(x.dtype()))?;
            gpu::shape::gather(op, d, &xw, dims, idx, &shape)?.astype(x.dtype())
        }
    }
}

/// Whether f16 gathers move packed words (`MPSRT_F16_GATHER_WORDS=0`: widen to f32 first, the
/// A/B switch).
fn f16_gather_words() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MPSRT_F16_GATHER_WORDS").map_or(true, |v| v.trim() != "0"))
}

/// ONNX Gather: `out[i.., j.., k..] = x[i.., indices[j..], k..]` along `axis`; indices of any
/// rank (i32 or i64, on any place), negative values count from the end, out of range is an error.
pub fn gather(x: &Tensor, indices: &Tensor, axis: isize) -> Result<Tensor> {
    let op = "gather";
    if x.ndim() == 0 {
        return Err(Error::shape(op, "cannot gather from a zero-dimensional tensor"));
    }
    let ax = normalize_axis(op, axis, x.ndim())?;
    let idx = read_indices(op, indices, x.shape()[ax], ax, x.shape())?;
    gather_at(op, x, ax, &idx, indices.shape())
}

/// `x` at the entries of the 1-D `indices` along `axis` (PyTorch `index_select`).
pub fn index_select(x: &Tensor, axis: isize, indices: &Tensor) -> Result<Tensor> {
    let op = "index_select";
    if indices.ndim() > 1 {
        return Err(Error::shape(
            op,
            format!("indices must be 1-D, got shape {:?}", indices.shape()),
        ));
    }
    if x.ndim() == 0 {
        return Err(Error::shape(op, "cannot index a zero-dimensional tensor"));
    }
    let ax = normalize_axis(op, axis, x.ndim())?;
    let idx = read_indices(op, indices, x.shape()[ax], ax, x.shape())?;
    gather_at(op, x, ax, &idx, &[idx.len()])
}

/// How `pad` fills the new border.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PadMode {
    /// A constant value (cast to the tensor's dtype).
    Constant(f64),
    /// Mirror without repeating the edge (`[1 2 3]` → `3 2 | 1 2 3 | 2 1`); pads < dim.
    Reflect,
    /// Repeat the edge element.
    Edge,
}

/// Pad (or, with negative amounts, crop) every dim: `pads[d] = (before, after)`.
pub fn pad(x: &Tensor, pads: &[(isize, isize)], mode: PadMode) -> Result<Tensor> {
    let op = "pad";
    if pads.len() != x.ndim() {
        return Err(Error::invalid(
            op,
            format!("need one (before, after) pair per dim of {:?}, got {pads:?}", x.shape()),
        ));
    }
    // Crop first.
    let mut t = x.clone();
    for (d, &(b, a)) in pads.iter().enumerate() {
        let len = t.shape()[d] as isize;
        let (cb, ca) = ((-b).max(0), (-a).max(0));
        if cb + ca > len {
            return Err(Error::shape(
                op,
                format!("pads {pads:?} crop more than dim {d} of {:?} ({len})", x.shape()),
            ));
        }
        if cb + ca > 0 {
            t = t.slice(d as isize, Some(cb), Some(len - ca), 1)?;
        }
    }
    let grow: Vec<(usize, usize)> =
        pads.iter().map(|&(b, a)| (b.max(0) as usize, a.max(0) as usize)).collect();
    if grow.iter().all(|&(b, a)| b == 0 && a == 0) {
        return if t.numel() == x.numel() && pads.iter().all(|&(b, a)| b == 0 && a == 0) {
            Ok(x.clone())
        } else {
            t.contiguous()
        };
    }
    match mode {
        PadMode::Constant(v) => {
            let shape: Vec<usize> =
                t.shape().iter().zip(&grow).map(|(&s, &(b, a))| s + b + a).collect();
            let mut dst = Layout::contiguous(&shape);
            for (d, &(b, _)) in grow.iter().enumerate() {
                let len = t.shape()[d] as isize;
                dst = dst.slice(op, d as isize, Some(b as isize), Some(b as isize + len), 1)?;
            }
            assemble(op, t.place(), &shape, t.dtype(), Some(v), &[(dst, t)])
        }
        PadMode::Reflect | PadMode::Edge => {
            for (d, &(b, a)) in grow.iter().enumerate() {
                if b == 0 && a == 0 {
                    continue;
                }
                let len = t.shape()[d];
                let reflect = mode == PadMode::Reflect;
                if (reflect && (b >= len || a >= len)) || len == 0 {
                    return Err(Error::shape(
                        op,
                        format!(
                            "{} padding {pads:?} of dim {d} needs {} (input {:?})",
                            if reflect { "reflect" } else { "edge" },
                            if reflect {
                                format!("pads < {len}")
                            } else {
                                "a non-empty dim".into()
                            },
                            x.shape()
                        ),
                    ));
                }
                let n = len as i64;
                let idx: Vec<i64> = (-(b as i64)..n + a as i64)
                    .map(|i| match (reflect, i) {
                        (true, i) if i < 0 => -i,
                        (true, i) if i >= n => 2 * (n - 1) - i,
                        (false, i) => i.clamp(0, n - 1),
                        (_, i) => i,
                    })
                    .collect();
                t = gather_at(op, &t, d, &idx, &[idx.len()])?;
            }
            Ok(t)
        }
    }
}

/// Repeat `x` `reps[d]` times along each dim (NumPy `tile`: missing leading reps are 1,
/// extra reps add leading dims).
pub fn tile(x: &Tensor, reps: &[usize]) -> Result<Tensor> {
    let nd = reps.len().max(x.ndim());
    let mut shape = vec![1usize; nd - x.ndim()];
    shape.extend_from_slice(x.shape());
    let mut r = vec![1usize; nd - reps.len()];
    r.extend_from_slice(reps);
    let inter: Vec<isize> = shape.iter().flat_map(|&s| [1, s as isize]).collect();
    let big: Vec<usize> = shape.iter().zip(&r).flat_map(|(&s, &k)| [k, s]).collect();
    let out = shape
        .iter()
        .zip(&r)
        .map(|(&s, &k)| Ok(mpsrt_core::checked_mul("tile", "an output dim", s, k)? as isize))
        .collect::<Result<Vec<isize>>>()?;
    let v = x.reshape(&inter)?.expand(&big)?;
    v.contiguous()?.reshape(&out)
}
