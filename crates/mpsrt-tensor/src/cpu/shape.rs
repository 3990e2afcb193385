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
/// part copied into the window `dst` (a view of the contiguous output).
pub(crate) fn assemble(
    op: &str,
    shape: &[usize],
    dtype: DType,
    fill: &[u8],
    parts: &[(Layout, &Tensor)],
) -> Result<Tensor> {
    let size = dtype.size();
    let n: usize = shape.iter().product();
    let mut out = fill.repeat(n);
    for (dst, src) in parts {
        let bytes = host_bytes(op, src)?;
        for (d, s) in dst.offsets().zip(src.layout().offsets()) {
            out[d * size..(d + 1) * size].copy_from_slice(&bytes[s * size..(s + 1) * size]);
        }
    }
    Ok(Tensor::from_parts(
        Storage::Cpu(Arc::new(CpuBuffer::from_bytes(&out))),
        Layout::contiguous(shape),
        dtype,
    ))
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
