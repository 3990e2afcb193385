//! Shared test helpers: the devices every test body runs on (candle's `test_device!` idea),
//! random inputs salted with edge values, and NaN-aware comparison.

#![allow(dead_code)]

pub mod conv_cases;

use mpsrt_tensor::{DType, Place, Tensor};

/// CPU plus every GPU. With `MPSRT_REQUIRE_GPU=1` (set by CI) a missing GPU fails the test
/// instead of silently testing the CPU only.
pub fn devices() -> Vec<Place> {
    let mut v = vec![Place::Cpu];
    if mpsrt_runtime::gpu_available() {
        v.push(Place::Gpu(0));
    } else if std::env::var("MPSRT_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!("MPSRT_REQUIRE_GPU=1 but no GPU adapter is available (install mesa-vulkan-drivers)");
    }
    v
}

pub fn gpus() -> Vec<Place> {
    devices().into_iter().filter(|p| p.is_gpu()).collect()
}

/// Deterministic pseudo-random values (xorshift), with edge values mixed in when `edges`.
pub fn values(n: usize, seed: u64, edges: bool) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let special =
        [0.0, -0.0, 1.0, -1.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 0.5, -2.5, 3.0];
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            if edges && i % 7 == 3 {
                special[(s % special.len() as u64) as usize]
            } else {
                ((s >> 11) as f64 / (1u64 << 53) as f64) * 8.0 - 4.0
            }
        })
        .collect()
}

/// A CPU tensor of `dtype` from f64 values (ints truncated, bools = non-zero).
pub fn tensor(vals: &[f64], shape: &[usize], dtype: DType) -> Tensor {
    let t = Tensor::from_slice(vals, shape, Place::Cpu).unwrap();
    t.astype(dtype).unwrap()
}

/// NaN-aware closeness: both NaN, equal (incl. same-signed infinities), or within tolerance.
pub fn assert_close(what: &str, got: &[f64], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= atol + rtol * w.abs();
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

/// Tolerance for comparing a GPU result with the CPU reference in `dtype`.
pub fn tol(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F16 => (2e-3, 1e-3),
        DType::F32 | DType::F64 => (2e-5, 1e-6),
        _ => (0.0, 0.0),
    }
}

/// Random values of `shape` (no edge values) as `dtype`.
pub fn rnd(shape: &[usize], seed: u64, dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    tensor(&values(n, seed, false), shape, dtype)
}

/// `f32_atol`: sums of ~1000 products of values in ±4 (the split-K cases) reach a few hundred,
/// so results near zero carry absolute rounding errors of ~1e-4..1e-3 in any summation order.
pub fn check_tol(what: &str, cpu: &Tensor, got: &Tensor, dtype: DType, f32_atol: f64) {
    let (rtol, atol) = match dtype {
        DType::F16 => (4e-3, 2e-2),
        _ => (1e-4, f32_atol),
    };
    assert_eq!(got.shape(), cpu.shape(), "{what}: shape");
    assert_eq!(got.dtype(), cpu.dtype(), "{what}: dtype");
    assert_close(what, &got.to_f64_vec().unwrap(), &cpu.to_f64_vec().unwrap(), rtol, atol);
}
