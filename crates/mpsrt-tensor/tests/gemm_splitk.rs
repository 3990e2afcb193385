//! Split-K for the tiled GEMM (issue 23: BERT's small-M, long-K products leave most of a large
//! GPU idle): the pure launch planner `plan_gemm` on BERT-base's shapes at the H100 target,
//! and the split path's numerics against the CPU reference on shapes scaled down to take the
//! same branch on any GPU (plain, batched, broadcast, transposed operands; C with alpha/beta,
//! residual and activation epilogues, which the split-K reduction applies).

mod common;
use common::*;
use mpsrt_tensor::{self as mt, Activation, Conv2dOptions, DType, GemmPlan, Place, Result, Tensor};

/// The launcher's default target: twice an H100's 132 SMs.
const H100: usize = 264;

fn plan(mnk: [usize; 3], batch: usize) -> GemmPlan {
    mt::plan_gemm(mnk, batch, 128, H100)
}

#[test]
fn planner_splits_bert_products_and_leaves_large_ones() {
    let p = |tile, slices| GemmPlan { tile, slices };
    // FFN down-projection [128, 3072]·[3072, 768]: 24 tiles → 8 slices of 384 (192 WGs).
    assert_eq!(plan([128, 768, 3072], 1), p(64, 8));
    // Q/K/V/out [128, 768]·[768, 768]: 24 tiles, K allows 3 slices of 256.
    assert_eq!(plan([128, 768, 768], 1), p(64, 3));
    // FFN up-projection [128, 768]·[768, 3072]: 96 tiles → 3 slices (288 WGs).
    assert_eq!(plan([128, 3072, 768], 1), p(64, 3));
    // Batch 8 down-projection (M = 1024): 192 tiles → 2 slices.
    assert_eq!(plan([1024, 768, 3072], 1), p(64, 2));
    // Attention's per-head products: K = 64 / 128 is too short to split.
    assert_eq!(plan([128, 128, 64], 12), p(64, 1));
    assert_eq!(plan([128, 64, 128], 12), p(64, 1));
    // Enough workgroups already: 128×128 tiles, no split (the 4096³ GEMM).
    assert_eq!(plan([4096, 4096, 4096], 1), p(128, 1));
    assert_eq!(plan([2048, 2048, 4096], 1), p(128, 1));
    // The launcher's 128×128 threshold (264 tiles of 128, two waves on 132 SMs): BERT b8's
    // QKV (144 tiles) and FFN up (192) run 64×64 tiles, unsplit (576 / 768 workgroups).
    assert_eq!(mt::plan_gemm([1024, 2304, 768], 1, H100, H100), p(64, 1));
    assert_eq!(mt::plan_gemm([128, 3072, 768], 8, H100, H100), p(64, 1));
    assert_eq!(mt::plan_gemm([4096, 4096, 4096], 1, H100, H100), p(128, 1));
    // Turned off (`MPSRT_GEMM_SPLITK=0` passes target 0).
    assert_eq!(mt::plan_gemm([128, 768, 3072], 1, 128, 0), p(64, 1));
    // K = 1040: 4 or 3 slices would not be whole multiples of 8; 2 of 520 are.
    assert_eq!(plan([128, 768, 1040], 1), p(64, 2));
    assert_eq!(plan([128, 768, 1000], 1), p(64, 1));
    // 128 tiles want 3 slices; K = 512 allows 2 of 256.
    assert_eq!(plan([256, 2048, 512], 1).slices, 2);
    for m in [1, 7, 64, 128, 300, 1024] {
        for n in [1, 33, 768, 3072] {
            for k in [8, 256, 768, 1000, 3072, 65536] {
                let q = plan([m, n, k], 1);
                assert!(q.slices >= 1 && q.slices <= 16, "{m} {n} {k}: {q:?}");
                if q.slices > 1 {
                    let ks = k / q.slices;
                    assert!(
                        k.is_multiple_of(q.slices) && ks >= 256 && ks.is_multiple_of(8),
                        "{m} {n} {k}: {q:?}"
                    );
                    assert!(2 * q.slices * m * n <= 2 * (m * k + k * n), "{m} {n} {k}: {q:?}");
                }
            }
        }
    }
}

fn check(what: &str, cpu: &Tensor, f: impl Fn(Place) -> Result<Tensor>) {
    let want = cpu.to_f64_vec().unwrap();
    for p in gpus() {
        let got = f(p).unwrap_or_else(|e| panic!("{what} on {p}: {e}"));
        assert_eq!(got.shape(), cpu.shape(), "{what}: shape");
        // Sums of ≤ 1024 products of values in [-4, 4]: f32 summation order differs.
        assert_close(&format!("{what} on {p}"), &got.to_f64_vec().unwrap(), &want, 1e-4, 1e-2);
    }
}

fn t(shape: &[usize], seed: u64) -> Tensor {
    tensor(&values(shape.iter().product(), seed, false), shape, DType::F32)
}

/// A, B, whether each is given transposed, `[m, n, k]`, batch.
type Case = (&'static [usize], &'static [usize], bool, bool, [usize; 3], usize);

#[test]
fn split_products_match_cpu_reference() {
    // (A, B, whether A/B are given transposed, [m, n, k], batch) — each takes the split branch.
    let cases: &[Case] = &[
        (&[64, 1024], &[1024, 96], false, false, [64, 96, 1024], 1),
        (&[64, 512], &[512, 30], false, false, [64, 30, 512], 1),
        (&[3, 64, 512], &[3, 512, 64], false, false, [64, 64, 512], 3),
        (&[2, 64, 768], &[768, 80], false, false, [64, 80, 768], 2),
        (&[512, 64], &[80, 512], true, true, [64, 80, 512], 1),
        (&[4, 512, 64], &[4, 96, 512], true, true, [64, 96, 512], 4),
        (&[37, 528], &[528, 45], false, false, [37, 45, 528], 1),
    ];
    for (i, &(sa, sb, ta, tb, mnk, batch)) in cases.iter().enumerate() {
        assert!(plan(mnk, batch).slices > 1, "case {i} must take the split-K branch");
        let (a, b) = (t(sa, 10 + i as u64), t(sb, 20 + i as u64));
        let f = |a: &Tensor, b: &Tensor| {
            let a = if ta { a.transpose(-2, -1)? } else { a.clone() };
            let b = if tb { b.transpose(-2, -1)? } else { b.clone() };
            mt::matmul(&a, &b)
        };
        let cpu = f(&a, &b).unwrap();
        check(&format!("matmul {sa:?}x{sb:?} ta={ta} tb={tb}"), &cpu, |p| f(&a.to(p)?, &b.to(p)?));
    }
}

#[test]
fn split_epilogues_match_cpu_reference() {
    let (a, bt) = (t(&[64, 1024], 1), t(&[96, 1024], 2));
    assert!(plan([64, 96, 1024], 1).slices > 1);
    // C as a bias row, a full matrix and a column, with alpha/beta and activations.
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
    // linear: BERT's projection with bias, batch dims folded.
    let (x, w, bias) = (t(&[2, 32, 768], 4), t(&[80, 768], 5), t(&[80], 6));
    let cpu = mt::linear(&x, &w, Some(&bias)).unwrap();
    check("linear", &cpu, |p| mt::linear(&x.to(p)?, &w.to(p)?, Some(&bias.to(p)?)));
    // Residual + bias + Relu: a batched 1×1 conv on a 33×33 map, lowered, is one [8, 512]·[512,
    // 1089] GEMM per image with the residual in its epilogue (2 slices of 256).
    assert_eq!(plan([8, 1089, 512], 2).slices, 2);
    let (x, w, b, r) =
        (t(&[2, 512, 33, 33], 7), t(&[8, 512, 1, 1], 8), t(&[8], 9), t(&[2, 8, 33, 33], 10));
    let o = Conv2dOptions::default();
    let relu = Some(Activation::Relu);
    let cpu = mt::conv2d_fused(&x, &w, Some(&b), &o, Some(&r), relu).unwrap();
    // The im2col lowering (read per call; no other test in this file runs a conv).
    std::env::set_var("MPSRT_CONV_ALGO", "lowered");
    check("conv 1x1 + residual + relu", &cpu, |p| {
        mt::conv2d_fused(&x.to(p)?, &w.to(p)?, Some(&b.to(p)?), &o, Some(&r.to(p)?), relu)
    });
    std::env::remove_var("MPSRT_CONV_ALGO");
}
