//! The CPU reference backend: the executable definition of every op's semantics, plus a fast
//! f32 SGEMM path for matmul and convolution (`gemm`) checked against those definitions.

pub(crate) mod conv;
pub(crate) mod elementwise;
pub(crate) mod gemm;
mod math;
pub(crate) mod matmul;
pub(crate) mod pool;
pub(crate) mod reduce;
pub(crate) mod shape;
pub(crate) mod softmax;

use mpsrt_core::DType;

/// Decode little-endian element bytes of `dtype` into f64s.
pub(crate) fn decode_f64(bytes: &[u8], dtype: DType) -> Vec<f64> {
    use half::f16;
    let n = bytes.len() / dtype.size().max(1);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let b = &bytes[i * dtype.size()..(i + 1) * dtype.size()];
        out.push(match dtype {
            DType::Bool | DType::U8 => b[0] as f64,
            DType::I8 => b[0] as i8 as f64,
            DType::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            DType::I64 => {
                i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f64
            }
            DType::F16 => f16::from_le_bytes([b[0], b[1]]).to_f64(),
            DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            DType::F64 => f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        });
    }
    out
}
