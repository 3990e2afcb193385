//! Issue 23, 11th session: the in-process A/B candidates `CoopTune::occupancy` — the timing
//! probes (`pr1..pr3`), register prefetch with `su` staging (`su3_rp1`), two K-16 slabs with
//! unpadded A rows (`pa0`, inside the two-workgroups-per-SM budget) and the 8-subgroup blocks
//! with `su3` — render, validate with naga, translate to MSL and SPIR-V on every operand path
//! and both aligned forms, with the f16 and the f32 store; and each has the structure its
//! knob promises.

use mpsrt_core::DType;
use mpsrt_kernels::matmul_coop_family::COOP_SHARED_BUDGET;
use mpsrt_kernels::validate::{wgsl_to_msl, wgsl_to_spv};
use mpsrt_kernels::{
    default_coop_variant, plan_coop_matmul, CoopConfig, CoopMatmulSpec, CoopTune, CoopVariant,
};

fn base() -> CoopMatmulSpec {
    let nv = [CoopConfig { m: 16, n: 16, k: 16, ab: DType::F16, cr: DType::F32 }];
    plan_coop_matmul(&nv, (32, 32), [4096; 3], 0).unwrap()
}

/// The whole-block f16-output kernel of `text` (what 4096³ runs).
fn aligned_f16(text: &str) -> (CoopMatmulSpec, String) {
    let t = CoopTune::parse(text).unwrap();
    let spec =
        CoopMatmulSpec { out_f16: true, ..base() }.with_variant(CoopVariant::Family(t), 49152);
    let spec = CoopMatmulSpec { aligned: true, vec_a: true, vec_b: true, ..spec };
    let src = spec.render().unwrap_or_else(|e| panic!("{text}: {e}"));
    (spec, src)
}

/// The K loop's body (from its head to the end of the loop at the kernel's top level).
fn k_loop(src: &str) -> &str {
    let body = src.split("for (var k").nth(1).unwrap();
    body.split("\n    }\n  }\n").next().unwrap()
}

#[test]
fn occupancy_candidates_validate_translate_and_fit() {
    let tunes = CoopTune::occupancy();
    assert!(tunes.len() >= 8, "{}", tunes.len());
    let paths = [(true, true), (false, false), (true, false), (false, true)];
    for (i, tune) in tunes.into_iter().enumerate() {
        assert!(tune.unverified().is_none(), "{}", tune.name());
        assert_eq!(CoopVariant::parse(&tune.name()), Ok(CoopVariant::Family(tune)));
        for out_f16 in [true, false] {
            let plain = CoopMatmulSpec { out_f16, ..base() };
            let spec = plain.with_variant(CoopVariant::Family(tune), 49152);
            assert_eq!((spec.variant, spec.out_f16), (3, out_f16), "{}", tune.name());
            for (p, (vec_a, vec_b)) in paths.into_iter().enumerate() {
                let aligned = p == 0 || (i + p) % 2 == 0;
                let spec =
                    CoopMatmulSpec { vec_a, vec_b, batch_dims: (i + p) % 3, aligned, ..spec };
                let src = spec.render().unwrap_or_else(|e| panic!("{}: {e}", tune.name()));
                wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
            }
        }
    }
}

#[test]
fn unpadded_a_puts_two_k16_slabs_within_the_budget() {
    for text in ["k16_db1_fi1_cl1_vs4_uc1_un1_ov1_pa0", "k16_db1_fi1_cl1_vs4_uc1_rq1_ov1_pa0"] {
        let (spec, src) = aligned_f16(text);
        // Two stages of A (128 × 16) and B (16 × 136) halves, one f32 tile per subgroup.
        assert_eq!(spec.shared_bytes(), 2 * 2 * (128 * 16 + 16 * 136) + 4 * 1024, "{text}");
        assert!(spec.shared_bytes() <= COOP_SHARED_BUDGET, "{text}");
        // A's fragments read rows 16 halves apart (4 vectors), B's 136 (34).
        assert!(src.contains("u) >> 2u], 4u);") && src.contains("u) >> 2u], 34u);"), "{src}");
        // With A's pad 8 the same tune is the 25088 bytes that ran at one workgroup per SM.
        let (padded, _) = aligned_f16(&text.replace("_pa0", ""));
        assert_eq!(padded.shared_bytes(), 25088);
    }
    let t = CoopTune::parse("pa0").unwrap();
    assert_eq!((t.pa, t.a_pad(), t.pad), (Some(0), 0, 8));
    assert!(t.name().ends_with("_pa0"), "{}", t.name());
    assert_eq!(CoopTune::parse("p16").unwrap().a_pad(), 16);
    assert!(CoopTune::parse("pa4").unwrap().check(16).is_err());
}

#[test]
fn register_prefetch_with_unit_staging_loads_the_next_slab_under_the_products() {
    let (_, src) = aligned_f16("fi1_cl1_vs4_uc1_ov1_su3_rp1");
    let lp = k_loop(&src);
    // Top: barrier, the units held in registers into the slab, barrier; then the next
    // slab's units (clamped to the last) are loaded before the products.
    let (b1, st, b2) = (
        lp.find("workgroupBarrier()").unwrap(),
        lp.find("As[(ta0 * 40u").unwrap(),
        lp.rfind("workgroupBarrier()").unwrap(),
    );
    let (ld, mma) = (lp.find("ua0 = a[").unwrap(), lp.find("coopMultiplyAdd").unwrap());
    assert!(b1 < st && st < b2 && b2 < ld && ld < mma, "{lp}");
    assert!(lp.contains("let nxt = min(k0 + 32u, K - 32u);"), "{lp}");
    assert_eq!(lp.matches("workgroupBarrier()").count(), 2);
    assert!(src.contains("var ua0 = vec4<f16>();") && src.contains("var ub7 = vec4<f16>();"));
    assert!(!src.contains("if (nxt < K)") && !src.contains("workgroupUniformLoad"));
    // The default (no rp) is the single-scope staging of the 10th session, unchanged.
    let (_, d) = aligned_f16("fi1_cl1_vs4_uc1_ov1_su3");
    assert!(d.contains("let ua0 = a[") && !d.contains("ta0") && !d.contains("var ua0"));
}

#[test]
fn timing_probes_remove_one_part_each() {
    let (_, d) = aligned_f16("fi1_cl1_vs4_uc1_ov1_su3");
    // pr1: the same loop, the store behind a condition no product meets.
    let (_, p1) = aligned_f16("fi1_cl1_vs4_uc1_ov1_su3_pr1");
    assert_eq!(k_loop(&p1), k_loop(&d));
    let store = p1.split("if (K == 0xffffffffu) {").nth(1).unwrap();
    assert!(store.contains("coopStoreT(c3_3") && store.contains("out[(obase"), "{p1}");
    assert!(!d.contains("0xffffffffu"));
    // pr2: slab 0's units loaded once, before the loop; none inside it.
    let (_, p2) = aligned_f16("fi1_cl1_vs4_uc1_ov1_su3_pr2");
    let (pre, lp) = p2.split_once("for (var k1").unwrap();
    assert!(pre.contains("let ua0 = a[") && pre.contains("let ub7 = b["), "{p2}");
    assert!(!lp.split("\n    }\n  }\n").next().unwrap().contains("= a["), "{p2}");
    assert_eq!(k_loop(&p2).matches("coopMultiplyAdd").count(), 2 * 16);
    // pr3: every slab loaded and stored, the products once after the loop.
    let (_, p3) = aligned_f16("fi1_cl1_vs4_uc1_ov1_su3_pr3");
    let tail = "workgroupBarrier();\n    workgroupBarrier();\n    }\n";
    let lp3 = p3.split("for (var k0").nth(1).unwrap().split(tail).next().unwrap();
    assert!(lp3.contains("ua0 = a[") && lp3.contains("As[(ta0 * 40u"), "{lp3}");
    assert!(!lp3.contains("coopMultiplyAdd"), "{lp3}");
    assert_eq!(p3.matches("coopMultiplyAdd").count(), 2 * 16);
    // Probes need the su loop and are never a default.
    assert!(CoopTune::parse("pr1").unwrap().check(16).is_err());
    assert!(CoopTune::parse("su3_vs4_rp1_pr2").unwrap().check(16).is_err());
    for mnk in [[4096; 3], [1024, 3072, 768], [128, 128, 64], [8192, 8192, 1024]] {
        match default_coop_variant(16, mnk) {
            CoopVariant::Family(t) => assert_eq!((t.pr, t.pa), (0, None), "{mnk:?}"),
            v => panic!("{v:?}"),
        }
    }
}

#[test]
fn eight_subgroup_blocks_without_scratch_fit_two_workgroups() {
    // With the f32 store and no scratch (`ns1`), 8 subgroups on the 128×128 block take the
    // slab alone, 18944 bytes (the f16 store's 8 scratch tiles would make 27136: one per SM).
    for text in [
        "w2x4_t4x2_k32_fi1_cl1_vs4_uc1_ns1_su3",
        "w4x2_t2x4_k32_fi1_cl1_vs4_uc1_ns1_su3",
        "fi1_cl1_vs4_uc1_ns1_su3",
    ] {
        let t = CoopTune::parse(text).unwrap();
        let spec = base().with_variant(CoopVariant::Family(t), 49152);
        let spec = CoopMatmulSpec { aligned: true, vec_a: true, vec_b: true, ..spec };
        assert_eq!(spec.shared_bytes(), 2 * (128 * 40 + 32 * 136), "{text}");
        let src = spec.render().unwrap();
        assert!(!src.contains("var<workgroup> Cs") && src.contains("let ua0 = a["), "{text}");
        wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{text}: {e}\n{src}"));
        wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{text}: {e}"));
        let (_, f16) = aligned_f16(text);
        assert!(f16.contains("var<workgroup> Cs"), "{text}");
    }
}

#[test]
fn two_slabs_with_unit_staging_and_half_prefetch_keep_their_structure() {
    // un1 + su1: two constant stages; half-step 0 multiplies stage 0 and stores the next
    // slab's units into stage 1 (A at 128·16 halves, B at 16·136), one barrier each.
    let (spec, src) = aligned_f16("k16_db1_fi1_cl1_vs4_uc1_un1_ov1_pa0_su1");
    assert_eq!(spec.shared_bytes(), 20992);
    let lp = src.split("k0 = k0 + 32u) {").nth(1).unwrap().split("\n    }\n  }\n").next().unwrap();
    assert_eq!(lp.matches("workgroupBarrier()").count(), 2, "{lp}");
    assert_eq!(lp.matches("coopMultiplyAdd").count(), 2 * 16);
    let (h0, h1) = lp.split_at(lp.find("let ab = 2048u").unwrap());
    assert!(h0.contains("As[(2048u + ta0 * 16u") && h0.contains("Bs[(2176u + ((tid"), "{h0}");
    assert!(h1.contains("As[(ta0 * 16u") && !h1.contains("As[(2048u"), "{h1}");
    assert!(src.contains("var ua3 = vec4<f16>();") && !src.contains("var ra0l"));
    // rp1 + ph1: only B's units in registers across the products, A's loaded between the
    // barriers; ph2 the other way round.
    for (text, held, direct) in [("ph1", "ub", "ua"), ("ph2", "ua", "ub")] {
        let (_, src) = aligned_f16(&format!("fi1_cl1_vs4_uc1_ov1_su3_rp1_{text}"));
        assert!(src.contains(&format!("var {held}0 = vec4<f16>();")), "{text}");
        assert!(!src.contains(&format!("var {direct}0")), "{text}");
        let lp = k_loop(&src);
        let (top, rest) = lp.split_at(lp.rfind("workgroupBarrier()").unwrap());
        assert!(top.contains(&format!("let {direct}0 = ")), "{text}: {top}");
        assert!(rest.contains(&format!("{held}0 = ")), "{text}: {rest}");
    }
    for bad in ["k16_db1_vs4_su1_rq1", "k16_db1_vs4_su1", "k16_db1_vs4_un1_su1_lp1"] {
        assert!(CoopTune::parse(bad).unwrap().check(16).is_err(), "{bad}");
    }
}
