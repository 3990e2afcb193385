//! Small-M f16 products (issue 23: ResNet-50 b32's classifier `[32, 1000, 2048]`, a Gemm with
//! B transposed): the pure rule that sends them from a too-small cooperative grid to the tiled
//! GEMM's split-K, and the tiled f16 split-K's numerics (f32 partials, bias in the reduction)
//! against the f32 CPU Gemm of the same f16 values, on a shape scaled down to take the same
//! branch (`plan_gemm` splits it) on any GPU.

mod common;
use common::*;
use mpsrt_tensor::{self as mt, DType};

#[test]
fn small_m_rule() {
    // The classifier: 64×64 cooperative blocks → 16 workgroups; the tiled plan splits K by 8.
    let tiled = mt::plan_gemm([32, 1000, 2048], 1, 264, 264);
    assert_eq!(tiled.slices, 8);
    assert!(mt::small_m_prefers_tiled([32, 1000, 2048], 1, (64, 64), tiled.slices));
    // Not: more rows (BERT's M = 128 products stay cooperative), a large grid, or no split.
    assert!(!mt::small_m_prefers_tiled([128, 768, 768], 1, (64, 64), 3));
    assert!(!mt::small_m_prefers_tiled([32, 8192, 2048], 1, (64, 64), 8));
    assert!(!mt::small_m_prefers_tiled([32, 1000, 2048], 4, (64, 64), 8));
    assert!(!mt::small_m_prefers_tiled([32, 1000, 2048], 1, (64, 64), 1));
}

#[test]
fn f16_gemm_split_k_matches_the_f32_cpu() {
    // [24, 200, 2048] with B as [N, K] (transB) and a bias: 4 tiles of 64 → 8 slices of 256.
    let (m, n, k) = (24, 200, 2048);
    assert_eq!(mt::plan_gemm([m, n, k], 1, 264, 264).slices, 8);
    let a = rnd(&[m, k], 1, DType::F16);
    let b = rnd(&[n, k], 2, DType::F16);
    let c = rnd(&[n], 3, DType::F16);
    let f = |t: &mt::Tensor| t.astype(DType::F32).unwrap();
    let want = mt::gemm(&f(&a), &f(&b), Some(&f(&c)), 1.0, 1.0, false, true).unwrap();
    for p in gpus() {
        let g = |t: &mt::Tensor| t.to(p).unwrap();
        let got = mt::gemm(&g(&a), &g(&b), Some(&g(&c)), 1.0, 1.0, false, true).unwrap();
        assert_eq!(got.dtype(), DType::F16);
        // f32 accumulation of 2048 products of values in [-4, 4), one f16 rounding: the
        // result's magnitude is ~100, so 2e-3 relative plus 0.05 absolute.
        let (gv, wv) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
        assert_close("f16 gemm split-K", &gv, &wv, 2e-3, 5e-2);
    }
}
