//! The tiled GEMM's generation-2 tunes (`GemmTune`: 64/128 × 64/128 blocks, double-buffered
//! slabs, the 8×4 warp layout, unchecked shader modules) against the CPU product on shapes
//! that exercise every edge: partial blocks on both axes, K not a multiple of the 8-deep slab,
//! broadcast batches, transposed operands (each operand's three load paths), split-K, C with
//! alpha/beta, residual + GELU epilogues and f16 operands; stream-K (`_sk`) with workgroup
//! counts that split tiles between workgroups (the fix-up pass) or give each one step, and the
//! wave-model rule (`MPSRT_GEMM_SK=2`) on BERT b8's Q/K/V. Each case runs under a forced tune
//! (`set_gemm_override`, process-wide: one test function) and under the tuned planner.

mod common;
use common::*;
use mpsrt_tensor::{self as mt, Activation, DType, GemmOverride, GemmTune, Place, Result, Tensor};

fn t(shape: &[usize], seed: u64) -> Tensor {
    tensor(&values(shape.iter().product(), seed, false), shape, DType::F32)
}

fn check(what: &str, cpu: &Tensor, got: Result<Tensor>) {
    let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(got.shape(), cpu.shape(), "{what}: shape");
    let want = cpu.to_f64_vec().unwrap();
    assert_close(what, &got.to_f64_vec().unwrap(), &want, 1e-4, 1e-2);
}

type Case = (&'static [usize], &'static [usize], bool, bool);

/// (A shape, B shape, transpose A, transpose B)
const CASES: [Case; 4] = [
    // Partial blocks on M and N, K = 37 (not a multiple of 8 or 4: scalar loads).
    (&[130, 37], &[37, 70], false, false),
    // vec4 loads along K for A, along N for B; K = 36 ends mid-slab.
    (&[67, 36], &[36, 132], false, false),
    // Transposed operands: A along M, B along K (vec4), partial blocks.
    (&[36, 132], &[68, 36], true, true),
    // Broadcast batch (B shared), 3 matrices.
    (&[3, 65, 24], &[24, 129], false, false),
];

/// One product of [`CASES`] on `p` against the CPU.
fn product(p: Place, tag: &str, i: usize) {
    let (sa, sb, ta, tb) = CASES[i];
    let (a, b) = (t(sa, 30 + i as u64), t(sb, 40 + i as u64));
    let f = |a: &Tensor, b: &Tensor| {
        let a = if ta { a.transpose(-2, -1)? } else { a.clone() };
        let b = if tb { b.transpose(-2, -1)? } else { b.clone() };
        mt::matmul(&a, &b)
    };
    let cpu = f(&a, &b).unwrap();
    let what = format!("{tag}: matmul {sa:?}x{sb:?} ta={ta} tb={tb}");
    check(&what, &cpu, (|| f(&a.to(p)?, &b.to(p)?))());
}

/// A linear layer with bias, residual and GELU (BERT's FFN epilogue), `m = 2·33` rows, K `k`
/// (512 splits in two under a forced `slices: 2`: the reduction applies the epilogue).
fn fused(p: Place, tag: &str, k: usize) {
    let (x, w, bias, r) = (t(&[2, 33, k], 1), t(&[k, 72], 2), t(&[72], 3), t(&[2, 33, 72], 4));
    let gelu = Some(Activation::Gelu);
    let cpu = mt::matmul_fused(&x, &w, Some(&bias), Some(&r), gelu).unwrap();
    let got =
        (|| mt::matmul_fused(&x.to(p)?, &w.to(p)?, Some(&bias.to(p)?), Some(&r.to(p)?), gelu))();
    check(&format!("{tag}: bias + residual + gelu, k {k}"), &cpu, got);
}

/// Gemm with a C column, alpha/beta, B transposed and Relu.
fn gemm_c(p: Place, tag: &str) {
    let (a, bt, c) = (t(&[70, 44], 5), t(&[66, 44], 6), t(&[70, 1], 7));
    let f = |a: &Tensor, b: &Tensor, c: &Tensor| {
        mt::gemm_act(a, b, Some(c), 0.5, 2.0, false, true, Some(Activation::Relu))
    };
    let cpu = f(&a, &bt, &c).unwrap();
    check(&format!("{tag}: gemm C relu"), &cpu, (|| f(&a.to(p)?, &bt.to(p)?, &c.to(p)?))());
}

/// f16 operands (scalar loads, f32 accumulation), odd shape, vs the f32 CPU product of the
/// rounded operands.
fn half(p: Place, tag: &str) {
    let (a, b) = (t(&[69, 20], 8), t(&[20, 67], 9));
    let (a16, b16) = (a.astype(DType::F16).unwrap(), b.astype(DType::F16).unwrap());
    let cpu =
        mt::matmul(&a16.astype(DType::F32).unwrap(), &b16.astype(DType::F32).unwrap()).unwrap();
    let got = (|| mt::matmul(&a16.to(p)?, &b16.to(p)?)?.astype(DType::F32))();
    let got = got.unwrap_or_else(|e| panic!("{tag}: f16: {e}"));
    let (g, w) = (got.to_f64_vec().unwrap(), cpu.to_f64_vec().unwrap());
    assert_close(&format!("{tag}: f16"), &g, &w, 1e-2, 2e-2);
}

/// BERT-base b8's Q/K/V projection as the engine runs it (`[8, 128, 768]` times a broadcast
/// `[768, 2304]` weight, + bias): the product `MPSRT_GEMM_SK=2`'s wave model sends to stream-K
/// (128×64 blocks, 264 workgroups: most tiles split between two workgroups).
fn qkv_b8(p: Place, tag: &str) {
    let (x, w, bias) = (t(&[8, 128, 768], 11), t(&[768, 2304], 12), t(&[2304], 13));
    let cpu = mt::matmul_fused(&x, &w, Some(&bias), None, None).unwrap();
    let got = (|| mt::matmul_fused(&x.to(p)?, &w.to(p)?, Some(&bias.to(p)?), None, None))();
    check(&format!("{tag}: BERT b8 Q/K/V"), &cpu, got);
}

/// The cases one forced tune runs.
type Run = dyn Fn(Place, &str);

#[test]
fn tuned_gemm_kernels_match_cpu_reference() {
    let Some(p) = gpus().into_iter().next() else { return };
    let tune = |s: &str| Some(GemmTune::parse(s).unwrap());
    let forced = |s: &str| GemmOverride { tune: tune(s), ..Default::default() };
    // Each tune runs a few of the cases (a pipeline compile costs ~1 s on lavapipe), so that
    // every block shape, both layouts, both stagings and every load/epilogue path is covered.
    let sk = |t: &str, w: usize, checked: Option<bool>| GemmOverride {
        tune: tune(t),
        sk_wgs: Some(w),
        checked,
        ..Default::default()
    };
    let runs: Vec<(&str, GemmOverride, &Run)> = vec![
        ("128x128_db1_wl1", forced("128x128_db1_wl1"), &|p, s| {
            product(p, s, 0);
            fused(p, s, 40);
        }),
        ("128x64_db1_wl1", forced("128x64_db1_wl1"), &|p, s| {
            product(p, s, 1);
            product(p, s, 3);
        }),
        ("64x128_db1_wl0_k16", forced("64x128_db1_wl0_k16"), &|p, s| {
            product(p, s, 2);
            product(p, s, 0);
            gemm_c(p, s);
        }),
        ("64x64_db1_wl1", forced("64x64_db1_wl1"), &|p, s| {
            product(p, s, 0);
            half(p, s);
        }),
        ("128x64_db0_wl1", forced("128x64_db0_wl1"), &|p, s| product(p, s, 2)),
        ("128x64_db0_wl1_k16", forced("128x64_db0_wl1_k16"), &|p, s| {
            product(p, s, 3);
            half(p, s);
        }),
        (
            "128x128 split-K 2",
            GemmOverride {
                tune: tune("128x128_db1_wl1_k16"),
                slices: Some(2),
                ..Default::default()
            },
            &|p, s| fused(p, s, 512),
        ),
        // Stream-K with few workgroups: segments that start and end inside tiles (fix-up),
        // whole tiles in the middle of a range, broadcast batches, every epilogue.
        ("64x64 stream-K W=5", sk("64x64_db1_wl1_k16_sk", 5, None), &|p, s| {
            product(p, s, 0);
            fused(p, s, 40);
            gemm_c(p, s);
        }),
        ("128x128 stream-K W=7 checked", sk("128x128_db0_wl1_sk", 7, Some(true)), &|p, s| {
            product(p, s, 3);
            product(p, s, 2);
            fused(p, s, 512);
        }),
        ("128x64 stream-K W=1", sk("128x64_db1_wl1_sk", 1, None), &|p, s| {
            product(p, s, 1);
            half(p, s);
        }),
        (
            "64x128 stream-K W=1000 (one step each)",
            sk("64x128_db0_wl1_k16_sk", 1000, None),
            &|p, s| {
                product(p, s, 0);
                fused(p, s, 40);
            },
        ),
        // The model rule's block (128x64_db0_wl1_k16_sk) and the rule itself on the product
        // it picks stream-K for.
        ("128x64 k16 stream-K W=264", sk("128x64_db0_wl1_k16_sk", 264, None), &|p, s| {
            product(p, s, 3);
            fused(p, s, 512);
        }),
        (
            "generation 2 + the stream-K wave model",
            GemmOverride { generation: Some(2), stream_k: Some(2), ..Default::default() },
            &|p, s| qkv_b8(p, s),
        ),
        (
            "generation 2 checked",
            GemmOverride { generation: Some(2), checked: Some(true), ..Default::default() },
            &|p, s| product(p, s, 1),
        ),
    ];
    for (tag, o, f) in runs {
        mt::set_gemm_override(o);
        f(p, tag);
    }
    mt::set_gemm_override(GemmOverride::default());
}
