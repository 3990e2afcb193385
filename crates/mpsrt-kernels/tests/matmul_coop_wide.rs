//! Issue 23, 11th session, call B: the `CoopTune::wide` candidates — 256×128 / 128×256 blocks
//! of eight 64×64 subgroups (a quarter less global traffic per product than 128×128) with the
//! next slab in registers under the products (`su3_rp1`, or two K-16 slabs with `su1` units),
//! and `rp1` on the 64×64 K-64 tune — render, validate with naga, translate to MSL and SPIR-V
//! on every operand path with both stores, fit a workgroup's memory, and on the whole-block
//! path load the next slab after the last barrier and before the products.

use mpsrt_core::DType;
use mpsrt_kernels::validate::{wgsl_to_msl, wgsl_to_spv};
use mpsrt_kernels::{plan_coop_matmul, CoopConfig, CoopMatmulSpec, CoopTune, CoopVariant};

fn base() -> CoopMatmulSpec {
    let nv = [CoopConfig { m: 16, n: 16, k: 16, ab: DType::F16, cr: DType::F32 }];
    plan_coop_matmul(&nv, (32, 32), [4096; 3], 0).unwrap()
}

#[test]
fn wide_candidates_validate_translate_and_fit() {
    let tunes = CoopTune::wide();
    assert_eq!(tunes.len(), 6);
    let paths = [(true, true), (false, false), (true, false), (false, true)];
    for (i, tune) in tunes.into_iter().enumerate() {
        assert!(tune.unverified().is_none(), "{}", tune.name());
        assert_eq!(CoopVariant::parse(&tune.name()), Ok(CoopVariant::Family(tune)));
        for out_f16 in [true, false] {
            let spec =
                CoopMatmulSpec { out_f16, ..base() }.with_variant(CoopVariant::Family(tune), 49152);
            assert_eq!((spec.variant, spec.out_f16), (3, out_f16), "{}", tune.name());
            for (p, (vec_a, vec_b)) in paths.into_iter().enumerate() {
                let aligned = p == 0 || (i + p) % 2 == 0;
                let spec =
                    CoopMatmulSpec { vec_a, vec_b, batch_dims: (i + p) % 3, aligned, ..spec };
                // Vulkan's guaranteed-on-NVIDIA 48 KiB per workgroup.
                assert!(spec.shared_bytes() <= 49152, "{spec:?}");
                let src = spec.render().unwrap_or_else(|e| panic!("{}: {e}", tune.name()));
                wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
            }
        }
    }
}

#[test]
fn wide_blocks_hold_the_next_slab_in_registers_under_the_products() {
    for (text, ua, ub) in [
        ("w4x2_t4x4_k32_fi1_cl1_vs4_uc1_ov1_su3_rp1", 8, 4),
        ("w4x2_t4x4_k32_fi1_cl1_vs4_uc1_ov1_su3_rp1_ph1", 0, 4),
        ("w2x4_t4x4_k32_fi1_cl1_vs4_uc1_ov1_su3_rp1", 4, 8),
        ("w4x2_t4x4_k16_db1_fi1_cl1_vs4_uc1_un1_ov1_pa0_su1", 4, 2),
        ("w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1_rp1", 8, 8),
    ] {
        let t = CoopTune::parse(text).unwrap();
        let spec =
            CoopMatmulSpec { out_f16: true, ..base() }.with_variant(CoopVariant::Family(t), 49152);
        let spec = CoopMatmulSpec { aligned: true, vec_a: true, vec_b: true, ..spec };
        let src = spec.render().unwrap();
        // 8-byte staging registers per thread: a block's slab / threads, per operand.
        assert_eq!(src.matches("var ua").count(), ua, "{text}");
        assert_eq!(src.matches("var ub").count(), ub, "{text}");
        // In every K step, the last barrier before the first product precedes the loads
        // of the next slab's B units (held by every one of these).
        let lp = src.split("for (var k0").nth(1).unwrap();
        let mma = lp.find("coopMultiplyAdd").unwrap();
        let bar = lp[..mma].rfind("workgroupBarrier()").unwrap_or(0);
        let ld = lp[..mma].rfind("ub0 = b[").expect(text);
        assert!(bar < ld, "{text}: {lp}");
    }
}

#[test]
fn wide_block_timing_probes_render() {
    // Call B's test of the traffic reading: does the load path's ceiling (`pr3`) rise with
    // the 256×128 block, and where is its math ceiling (`pr2`)?
    for pr in ["pr2", "pr3"] {
        let text = format!("w4x2_t4x4_k32_fi1_cl1_vs4_uc1_ov1_su3_{pr}");
        let t = CoopTune::parse(&text).unwrap();
        let spec =
            CoopMatmulSpec { out_f16: true, ..base() }.with_variant(CoopVariant::Family(t), 49152);
        let spec = CoopMatmulSpec { aligned: true, vec_a: true, vec_b: true, ..spec };
        let src = spec.render().unwrap_or_else(|e| panic!("{text}: {e}"));
        // 32 tiles per subgroup-step pair: 16 tiles × 2 K-16 steps, once in the source.
        assert_eq!(src.matches("coopMultiplyAdd").count(), 2 * 16, "{text}");
        wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{text}: {e}"));
    }
}

#[test]
fn register_prefetch_planner_candidates_are_the_current_rule_plus_rp1() {
    use mpsrt_kernels::default_coop_variant;
    use mpsrt_kernels::matmul_coop_tune::default_coop_variant_rp;
    let big = CoopVariant::parse("fi1_cl1_vs4_uc1_ov1_su3_rp1").unwrap();
    let small = "w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1";
    let small_rp = CoopVariant::parse(&format!("{small}_rp1")).unwrap();
    for small_too in [false, true] {
        let rule = |mnk| default_coop_variant_rp(16, mnk, small_too);
        // From 128 blocks of 128×128: 4096³, BERT b8's QKV (144) and FFN-up (192) products.
        for mnk in [[4096; 3], [2048, 3072, 768], [1024, 2304, 768], [1024, 3072, 768]] {
            assert_eq!(rule(mnk), big, "{mnk:?}");
        }
        // Below: the 64×64 K-64 tune, with rp1 only when asked.
        for mnk in [[1024, 768, 768], [1024, 768, 3072]] {
            let want = if small_too { small_rp } else { CoopVariant::parse(small).unwrap() };
            assert_eq!(rule(mnk), want, "{mnk:?}");
            let current = CoopVariant::parse(&format!("{small}_ad1")).unwrap();
            assert_eq!(default_coop_variant(16, mnk), current);
        }
        assert_eq!(default_coop_variant_rp(8, [4096; 3], small_too), CoopVariant::Gen1);
    }
}
