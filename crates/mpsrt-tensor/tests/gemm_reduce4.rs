//! The vec4 split-K reduction (`MPSRT_GEMM_REDUCE4`, default on): split products with N a
//! multiple of 4 — C as a bias row, a full matrix and a column with alpha/beta, activations,
//! bias + residual + GELU as BERT's layers run them, 2–4 slices — and one with N = 30 (the
//! scalar reduction) against the CPU. The knob is read once per process: this binary sets it
//! before its only test touches a GPU.

mod common;
use common::*;
use mpsrt_tensor::{self as mt, Activation, DType, Place, Result, Tensor};

fn t(shape: &[usize], seed: u64) -> Tensor {
    tensor(&values(shape.iter().product(), seed, false), shape, DType::F32)
}

fn check(what: &str, cpu: &Tensor, f: impl Fn(Place) -> Result<Tensor>) {
    let want = cpu.to_f64_vec().unwrap();
    for p in gpus() {
        let got = f(p).unwrap_or_else(|e| panic!("{what} on {p}: {e}"));
        assert_eq!(got.shape(), cpu.shape(), "{what}: shape");
        assert_close(&format!("{what} on {p}"), &got.to_f64_vec().unwrap(), &want, 1e-4, 1e-2);
    }
}

/// Generation 2's K slices for `[m, n, k]` over `batch` at the launcher's target.
fn slices(mnk: [usize; 3], batch: usize) -> usize {
    mt::plan_gemm_tuned(mnk, batch, 264).1
}

#[test]
fn vec4_split_reduction_matches_cpu() {
    std::env::set_var("MPSRT_GEMM_REDUCE4", "1");
    let (a, bt) = (t(&[64, 1024], 1), t(&[96, 1024], 2));
    assert!(slices([64, 96, 1024], 1) > 1);
    for (ci, cshape) in [&[96usize][..], &[64, 96], &[64, 1]].into_iter().enumerate() {
        let c = t(cshape, 3 + ci as u64);
        for act in [None, Some(Activation::Relu), Some(Activation::Clip(-20.0, 15.0))] {
            let f = |a: &Tensor, b: &Tensor, c: &Tensor| {
                mt::gemm_act(a, b, Some(c), 0.5, 2.0, false, true, act)
            };
            let cpu = f(&a, &bt, &c).unwrap();
            check(&format!("gemm C {cshape:?} {act:?}"), &cpu, |p| {
                f(&a.to(p)?, &bt.to(p)?, &c.to(p)?)
            });
        }
    }
    // BERT's attention output at batch 2 (three slices of 256) with bias + residual, and the
    // FFN-up epilogue (bias + GELU) on a split product.
    assert_eq!(slices([128, 768, 768], 2), 3);
    let (x, w, b, r) =
        (t(&[2, 128, 768], 4), t(&[768, 768], 5), t(&[768], 6), t(&[2, 128, 768], 7));
    let cpu = mt::matmul_fused(&x, &w, Some(&b), Some(&r), None).unwrap();
    check("bias + residual", &cpu, |p| {
        mt::matmul_fused(&x.to(p)?, &w.to(p)?, Some(&b.to(p)?), Some(&r.to(p)?), None)
    });
    let (x, w, b) = (t(&[2, 32, 1024], 8), t(&[1024, 64], 9), t(&[64], 10));
    assert!(slices([32, 64, 1024], 2) > 1);
    let gelu = Some(Activation::Gelu);
    let cpu = mt::matmul_fused(&x, &w, Some(&b), None, gelu).unwrap();
    check("bias + gelu", &cpu, |p| {
        mt::matmul_fused(&x.to(p)?, &w.to(p)?, Some(&b.to(p)?), None, gelu)
    });
    // N = 30: not a multiple of 4, the scalar reduction.
    let (a, b) = (t(&[64, 512], 11), t(&[512, 30], 12));
    assert!(slices([64, 30, 512], 1) > 1);
    let cpu = mt::matmul(&a, &b).unwrap();
    check("n = 30", &cpu, |p| mt::matmul(&a.to(p)?, &b.to(p)?));
}
