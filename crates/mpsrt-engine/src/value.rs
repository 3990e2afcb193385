//! Moving values between the graph's host tensors, caller tensors and device tensors.
//!
//! The GPU has no 64-bit types, so on a GPU place int64 values (shape and index tensors) are
//! narrowed to int32 with a range check and float64 values are computed in float32; outputs are
//! widened back to the dtype the graph declares. On the CPU every dtype is kept as is.

use mpsrt_core::{DType, Error, Place, Result};
use mpsrt_graph::HostTensor;
use mpsrt_tensor::Tensor;

/// The dtype a value of logical dtype `d` has while it lives on `place`.
pub fn device_dtype(d: DType, place: Place) -> DType {
    if place.is_gpu() && !d.gpu_supported() {
        d.gpu_fallback()
    } else {
        d
    }
}

/// Narrows little-endian int64 bytes to int32, failing on values outside the int32 range.
pub fn narrow_i64(op: &str, bytes: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes.len() / 2);
    for c in bytes.chunks_exact(8) {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        let v = i64::from_le_bytes(b);
        let n = i32::try_from(v).map_err(|_| {
            Error::dtype(
                op,
                format!("int64 value {v} does not fit in int32, which the GPU computes int64 values in; run on the CPU"),
            )
        })?;
        out.extend(n.to_le_bytes());
    }
    Ok(out)
}

/// Narrows little-endian float64 bytes to float32.
fn narrow_f64(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() / 2);
    for c in bytes.chunks_exact(8) {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        out.extend((f64::from_le_bytes(b) as f32).to_le_bytes());
    }
    out
}

/// Raw bytes of logical dtype `dtype` → a tensor on `place` (narrowed on the GPU).
pub fn bytes_to_tensor(
    op: &str,
    bytes: &[u8],
    dtype: DType,
    shape: &[usize],
    place: Place,
) -> Result<Tensor> {
    let dd = device_dtype(dtype, place);
    if dd == dtype {
        return Tensor::from_bytes(bytes, dtype, shape, place);
    }
    let narrowed = match dtype {
        DType::I64 => narrow_i64(op, bytes)?,
        DType::F64 => narrow_f64(bytes),
        other => {
            return Err(Error::dtype(op, format!("{other} cannot be placed on {place}")));
        }
    };
    Tensor::from_bytes(&narrowed, dd, shape, place)
}

/// A graph constant → a tensor on `place`.
pub fn host_to_tensor(op: &str, h: &HostTensor, place: Place) -> Result<Tensor> {
    bytes_to_tensor(op, &h.bytes, h.dtype, &h.shape, place)
}

/// Any tensor → the same values with logical dtype `dtype` on `place` (narrowing on the GPU).
pub fn to_device(op: &str, t: &Tensor, dtype: DType, place: Place) -> Result<Tensor> {
    let dd = device_dtype(dtype, place);
    if t.place() == place && t.dtype() == dd {
        return Ok(t.clone());
    }
    if t.dtype() == dtype && dd != dtype {
        let bytes = t.to_bytes()?;
        return bytes_to_tensor(op, &bytes, dtype, t.shape(), place);
    }
    let moved = if t.dtype().gpu_supported() || !place.is_gpu() {
        t.to(place)?
    } else {
        t.to(Place::Cpu)?.astype(dd)?.to(place)?
    };
    moved.astype(dd)
}

/// A device value → a contiguous tensor of the graph's logical dtype: on `place` when that dtype
/// can live there, otherwise on the CPU.
pub fn to_logical(t: &Tensor, dtype: DType) -> Result<Tensor> {
    if t.dtype() == dtype {
        return t.contiguous();
    }
    let t = if dtype.gpu_supported() { t.clone() } else { t.to(Place::Cpu)? };
    t.astype(dtype)?.contiguous()
}

/// The values of a small (shape/index) tensor as i64.
pub fn host_i64(t: &Tensor) -> Result<Vec<i64>> {
    Ok(t.to_f64_vec()?.into_iter().map(|v| v as i64).collect())
}

/// The values of a small tensor as f64.
pub fn host_f64(t: &Tensor) -> Result<Vec<f64>> {
    t.to_f64_vec()
}
