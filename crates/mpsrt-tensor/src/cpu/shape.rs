//! CPU reference for shape ops: byte-level, dtype-agnostic copies through layouts, so every
//! dtype (i64 and f64 included) moves bit-exactly.

use crate::Tensor;
use mpsrt_core::{DType, Error, Layout, Result};
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
    let n: usize = shape.iter().product();
    let mut buf = match fill {
        Some(f) if f.iter().all(|&b| b == 0) => CpuBuffer::zeroed(n * size),
        _ => CpuBuffer::for_overwrite(n * size),
    };
    let out = &mut buf.bytes_mut()[..n * size];
    if let Some(f) = fill.filter(|f| f.iter().any(|&b| b != 0)) {
        out.chunks_exact_mut(size).for_each(|e| e.copy_from_slice(f));
    }
    for (dst, src) in parts {
        copy_runs(out, dst, host_bytes(op, src)?, src.layout(), size);
    }
    Ok(Tensor::from_parts(Storage::Cpu(Arc::new(buf)), Layout::contiguous(shape), dtype))
}

/// Copies the elements of `src` (a layout over `src_bytes`) into the same-shaped window `dst` of
/// `out`, a whole innermost run per `copy_from_slice` when both are unit-stride there (concat,
/// pad and slice-assign are), element by element otherwise.
fn copy_runs(out: &mut [u8], dst: &Layout, src_bytes: &[u8], src: &Layout, size: usize) {
    let n: usize = dst.shape.iter().product();
    if n == 0 {
        return;
    }
    let nd = dst.shape.len();
    if nd == 0 {
        let (d, s) = (dst.offset * size, src.offset * size);
        out[d..d + size].copy_from_slice(&src_bytes[s..s + size]);
        return;
    }
    let last = dst.shape[nd - 1];
    let (dl, sl) = (dst.strides[nd - 1], src.strides[nd - 1]);
    for (db, sb) in dst.row_starts().offsets().zip(src.row_starts().offsets()) {
        if dl == 1 && sl == 1 {
            let (d, s) = (db * size, sb * size);
            out[d..d + last * size].copy_from_slice(&src_bytes[s..s + last * size]);
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
    let mut out = Vec::with_capacity(outer * idx.len() * inner * size);
    for o in 0..outer {
        for &j in idx {
            let start = (base + (o * len + j as usize) * inner) * size;
            out.extend_from_slice(&bytes[start..start + inner * size]);
        }
    }
    Ok(Tensor::from_parts(
        Storage::Cpu(Arc::new(CpuBuffer::from_bytes(&out))),
        Layout::contiguous(shape),
        x.dtype(),
    ))
}
