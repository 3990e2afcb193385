//! CPU reference for shape ops: byte-level, dtype-agnostic copies through layouts, so every
//! dtype (i64 and f64 included) moves bit-exactly.

use crate::Tensor;
use mpsrt_core::{DType, Error, Layout, Result};
use mpsrt_kernels::coalesce;
use mpsrt_runtime::{CpuBuffer, Storage};
use std::sync::Arc;

fn host_bytes<'a>(op: &str, t: &'a Tensor) -> Result<&'a [u8]> {
    match t.storage() {
        Storage::Cpu(b) => Ok(b.bytes()),
        Storage::Gpu(_) => Err(Error::device(op, "internal: GPU tensor reached the CPU backend")),
    }
}

/// A fresh tensor of `shape` filled with `fill` (one element's bytes), with each `(dst, src)`
/// part copied into the window `dst` (a view of the contiguous output). `fill: None` means the
/// parts cover every element (concat), so the output buffer is not cleared first.
pub(crate) fn assemble(
    op: &str,
    shape: &[usize],
    dtype: DType,
    fill: Option<&[u8]>,
    parts: &[(Layout, &Tensor)],
) -> Result<Tensor> {
    let size = dtype.size();
    let n = mpsrt_core::checked_nbytes(op, shape, size)? / size.max(1);
    let mut buf = match fill {
        Some(f) if f.iter().all(|&b| b == 0) => CpuBuffer::zeroed(op, n * size)?,
        _ => CpuBuffer::for_overwrite(op, n * size)?,
    };
    let out = &mut buf.bytes_mut()[..n * size];
    if let Some(f) = fill.filter(|f| f.iter().any(|&b| b != 0)) {
        out.chunks_exact_mut(size).for_each(|e| e.copy_from_slice(f));
    }
    // Contiguous runs (output byte offset, source bytes) of every part: a concat of NCHW maps
    // along channels is one run per part and image, however small its rows.
    let mut runs: Vec<(usize, &[u8])> = Vec::new();
    for (dst, src) in parts {
        copy_runs(out, dst, host_bytes(op, src)?, src.layout(), size, &mut runs);
    }
    copy_parallel(out, &runs);
    Ok(Tensor::from_parts(Storage::Cpu(Arc::new(buf)), Layout::contiguous(shape), dtype))
}

/// Bytes below which a copy stays on this thread (waking the workers costs more).
const PAR_COPY: usize = 1 << 19;

/// Copies each `(offset, bytes)` run into `out`, split into pieces over the worker pool when
/// there is enough to copy (DenseNet's concats move ~70 MB per inference).
fn copy_parallel(out: &mut [u8], runs: &[(usize, &[u8])]) {
    let total: usize = runs.iter().map(|r| r.1.len()).sum();
    let t = super::threads();
    if t == 1 || total < PAR_COPY {
        for (d, src) in runs {
            out[*d..*d + src.len()].copy_from_slice(src);
        }
        return;
    }
    for (d, src) in runs {
        assert!(*d + src.len() <= out.len(), "assemble: run out of bounds");
    }
    // Pieces of about total / t bytes (runs split where needed), one task each.
    let piece = total.div_ceil(t);
    let mut pieces: Vec<(usize, &[u8])> = Vec::new();
    for &(d, src) in runs {
        for (k, chunk) in src.chunks(piece).enumerate() {
            pieces.push((d + k * piece, chunk));
        }
    }
    let ptr = super::SendPtr(out.as_mut_ptr());
    super::par_for(pieces.len(), move |i| {
        let ptr = ptr; // the whole `Send + Sync` wrapper, not its field
        let (d, src) = pieces[i];
        // SAFETY: runs are disjoint windows of `out` (the parts of an assemble never overlap)
        // and checked in bounds above; `out` stays borrowed until `par_for` returns.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), ptr.0.add(d), src.len()) };
    });
}

/// Adds the runs that copy the elements of `src` (a layout over `src_bytes`) into the
/// same-shaped window `dst` of `out` to `runs` (dims that are contiguous in both merged first,
/// so a whole contiguous block is one run); element-strided windows are copied here directly.
fn copy_runs<'a>(
    out: &mut [u8],
    dst: &Layout,
    src_bytes: &'a [u8],
    src: &Layout,
    size: usize,
    runs: &mut Vec<(usize, &'a [u8])>,
) {
    let n: usize = dst.shape.iter().product();
    if n == 0 {
        return;
    }
    let (shape, strides) = coalesce(&dst.shape, &[dst.strides.clone(), src.strides.clone()]);
    let dst = Layout { shape: shape.clone(), strides: strides[0].clone(), offset: dst.offset };
    let src = Layout { shape, strides: strides[1].clone(), offset: src.offset };
    let nd = dst.shape.len();
    if nd == 0 {
        let (d, s) = (dst.offset * size, src.offset * size);
        runs.push((d, &src_bytes[s..s + size]));
        return;
    }
    let last = dst.shape[nd - 1];
    let (dl, sl) = (dst.strides[nd - 1], src.strides[nd - 1]);
    for (db, sb) in dst.row_starts().offsets().zip(src.row_starts().offsets()) {
        if dl == 1 && sl == 1 {
            let (d, s) = (db * size, sb * size);
            runs.push((d, &src_bytes[s..s + last * size]));
        } else {
            for j in 0..last as isize {
                let d = (db as isize + j * dl) as usize * size;
                let s = (sb as isize + j * sl) as usize * size;
                out[d..d + size].copy_from_slice(&src_bytes[s..s + size]);
            }
        }
    }
}

/// `x` viewed as (outer, axis_len, inner) gathered at `idx` (already normalised and in bounds)
/// into (outer, idx.len(), inner) with the final `shape`.
pub(crate) fn gather(
    op: &str,
    x: &Tensor,
    dims: [usize; 3],
    idx: &[i64],
    shape: &[usize],
) -> Result<Tensor> {
    let size = x.dtype().size();
    let x = x.contiguous()?;
    let bytes = host_bytes(op, &x)?;
    let base = x.layout().offset;
    let [outer, len, inner] = dims;
    let total = [outer, idx.len(), inner];
    let mut out = mpsrt_runtime::host_vec(op, mpsrt_core::checked_nbytes(op, &total, size)?, 0u8)?;
    out.clear();
    for o in 0..outer {
        for &j in idx {
            let start = (base + (o * len + j as usize) * inner) * size;
            out.extend_from_slice(&bytes[start..start + inner * size]);
        }
    }
    Ok(Tensor::from_parts(
        Storage::Cpu(Arc::new(CpuBuffer::from_bytes(op, &out)?)),
        Layout::contiguous(shape),
        x.dtype(),
    ))
}
