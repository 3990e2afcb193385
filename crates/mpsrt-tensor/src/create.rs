//! Tensor creation: constants, ranges and seeded random numbers. Random numbers are drawn on the
//! host from one global generator, so a seed reproduces the same values on every device.

use crate::{Scalar, Tensor};
use mpsrt_core::{checked_nbytes, DType, Error, Place, Result};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use std::sync::OnceLock;

/// PyTorch's default seed, so an unseeded program is still reproducible run to run.
const DEFAULT_SEED: u64 = 67_280_421_310_721;

fn rng() -> &'static Mutex<rand::rngs::StdRng> {
    static RNG: OnceLock<Mutex<rand::rngs::StdRng>> = OnceLock::new();
    RNG.get_or_init(|| Mutex::new(rand::rngs::StdRng::seed_from_u64(DEFAULT_SEED)))
}

/// Reseed the global generator used by `rand` and `randn`.
pub fn manual_seed(seed: u64) {
    *rng().lock() = rand::rngs::StdRng::seed_from_u64(seed);
}

/// Encode f64 values as `dtype` bytes (wrapping for ints, as `astype` does). Callers check the
/// host allocation first (`check_host_alloc`): the count comes from user arguments.
fn encode(values: impl Iterator<Item = f64>, dtype: DType) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.size_hint().0 * dtype.size());
    for v in values {
        match dtype {
            DType::Bool => out.push((v != 0.0) as u8),
            DType::U8 | DType::I8 => out.push(v as i64 as u8),
            DType::I32 => out.extend_from_slice(&(v as i64 as i32).to_le_bytes()),
            DType::I64 => out.extend_from_slice(&(v as i64).to_le_bytes()),
            DType::F16 => out.extend_from_slice(&half::f16::from_f64(v).to_le_bytes()),
            DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
            DType::F64 => out.extend_from_slice(&v.to_le_bytes()),
        }
    }
    out
}

/// A tensor filled with `value`. On the GPU one element is uploaded and broadcast by a kernel.
pub fn full(
    shape: &[usize],
    value: impl Into<Scalar>,
    dtype: DType,
    place: Place,
) -> Result<Tensor> {
    // Checked before anything is built: `[2**32, 2**32]` must not wrap to zero elements.
    let bytes = checked_nbytes("full", shape, dtype.size())?;
    if place == Place::Cpu {
        mpsrt_runtime::check_host_alloc("full", bytes)?;
    }
    let v = value.into();
    let x = match v {
        Scalar::B(b) => b as u8 as f64,
        Scalar::I(i) if !dtype.is_float() => i as f64,
        s => s.as_f64(),
    };
    let one = Tensor::from_bytes(&encode(std::iter::once(x), dtype), dtype, &[], place)?;
    one.expand(shape)?.contiguous_copy()
}

/// An uninitialised tensor (PyTorch's `empty`, for outputs a kernel overwrites): on the GPU a
/// buffer from the caching allocator with unspecified contents (a recycled buffer of this
/// process, or a fresh one wgpu zero-filled), so no fill pass runs; on the CPU zeros.
pub fn empty(shape: &[usize], dtype: DType, place: Place) -> Result<Tensor> {
    checked_nbytes("empty", shape, dtype.size())?;
    match place {
        Place::Gpu(d) if dtype.gpu_supported() => {
            crate::gpu::shape::empty("empty", d, shape, dtype)
        }
        // The CPU, and dtypes the GPU cannot hold (whose error `zeros` reports).
        _ => zeros(shape, dtype, place),
    }
}

pub fn zeros(shape: &[usize], dtype: DType, place: Place) -> Result<Tensor> {
    full(shape, Scalar::I(0), dtype, place)
}

pub fn ones(shape: &[usize], dtype: DType, place: Place) -> Result<Tensor> {
    full(shape, Scalar::I(1), dtype, place)
}

/// `[start, start + step, ...)` up to `end` (exclusive), like `numpy.arange`.
pub fn arange(start: f64, end: f64, step: f64, dtype: DType, place: Place) -> Result<Tensor> {
    if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
        return Err(Error::invalid(
            "arange",
            format!("need finite start/end and a non-zero step, got ({start}, {end}, {step})"),
        ));
    }
    let count = ((end - start) / step).ceil().max(0.0);
    // `as usize` saturates; the checks below refuse what cannot be held.
    let n = count as usize;
    let bytes = checked_nbytes("arange", &[n], dtype.size())?;
    if count > mpsrt_core::MAX_SIZE as f64 {
        return Err(Error::shape(
            "arange",
            format!("({start}, {end}, {step}) has {count} elements, more than can be addressed"),
        ));
    }
    // The encoded values, then the tensor's copy of them.
    mpsrt_runtime::check_host_alloc("arange", bytes.saturating_mul(2))?;
    let bytes = encode((0..n).map(|i| start + i as f64 * step), dtype);
    Tensor::from_bytes(&bytes, dtype, &[n], place)
}

fn random(op: &str, shape: &[usize], dtype: DType, place: Place, normal: bool) -> Result<Tensor> {
    if !dtype.is_float() {
        return Err(Error::dtype(op, format!("random values need a float dtype, got {dtype}")));
    }
    let bytes = checked_nbytes(op, shape, dtype.size())?;
    let n = bytes / dtype.size();
    // f64 samples, their encoding and the tensor's copy are all host memory.
    mpsrt_runtime::check_host_alloc(op, n.saturating_mul(8).saturating_add(bytes * 2))?;
    let mut g = rng().lock();
    let values: Vec<f64> = if normal {
        (0..n).map(|_| StandardNormal.sample(&mut *g)).collect()
    } else {
        (0..n).map(|_| g.random::<f64>()).collect()
    };
    drop(g);
    Tensor::from_bytes(&encode(values.into_iter(), dtype), dtype, shape, place)
}

/// Uniform samples in [0, 1).
pub fn rand(shape: &[usize], dtype: DType, place: Place) -> Result<Tensor> {
    random("rand", shape, dtype, place, false)
}

/// Standard normal samples.
pub fn randn(shape: &[usize], dtype: DType, place: Place) -> Result<Tensor> {
    random("randn", shape, dtype, place, true)
}

impl Tensor {
    /// Always materialise a dense copy (unlike `contiguous`, which may return `self`).
    pub(crate) fn contiguous_copy(&self) -> Result<Tensor> {
        crate::elementwise::map("copy", &[self], self.dtype(), mpsrt_kernels::Expr::input(0), &[])
    }
}
