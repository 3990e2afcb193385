//! The cooperative-matrix GEMM's WGSL, for every configuration the planner can pick, parses and
//! validates with naga (cooperative-matrix capability) and translates to MSL and SPIR-V (Apple's simdgroup
//! matrices); and the planner's choices against fake adapter configuration lists.

use mpsrt_core::DType;
use mpsrt_kernels::validate::{wgsl_to_msl, wgsl_to_spv};
use mpsrt_kernels::{
    default_coop_variant, plan_coop_matmul, CoopConfig, CoopDecline, CoopMatmulSpec, CoopTune,
    CoopVariant,
};

fn cfg(s: u32, ab: DType, cr: DType) -> CoopConfig {
    CoopConfig { m: s, n: s, k: s, ab, cr }
}

/// naga's SPIR-V translation (what wgpu hands Vulkan): its writer can fail, even panic, on
/// modules that validate and translate to MSL.

#[test]
fn every_coop_kernel_validates_and_translates_to_msl() {
    for size in [8, 16] {
        for acc in [DType::F32, DType::F16] {
            for subgroup in [32, 64] {
                for (batch_dims, vec_a, vec_b) in
                    [(0, false, false), (1, true, false), (2, false, true), (0, true, true)]
                {
                    for variant in [1, 2] {
                        let spec = CoopMatmulSpec {
                            size,
                            acc,
                            subgroup,
                            batch_dims,
                            vec_a,
                            vec_b,
                            variant,
                            tune: CoopTune::default(),
                            aligned: false,
                            out_f16: false,
                            epi: Default::default(),
                        };
                        let src = spec.render().unwrap();
                        let msl =
                            wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                        assert!(msl.contains("simdgroup"), "{spec:?}: no simdgroup matrix in MSL");
                        wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
                    }
                }
            }
        }
    }
}

#[test]
fn render_rejects_what_the_planner_never_asks_for() {
    let bad = [
        CoopMatmulSpec {
            size: 32,
            acc: DType::F32,
            subgroup: 32,
            batch_dims: 0,
            vec_a: false,
            vec_b: false,
            variant: 2,
            tune: CoopTune::default(),
            aligned: false,
            out_f16: false,
            epi: Default::default(),
        },
        CoopMatmulSpec {
            size: 16,
            acc: DType::I32,
            subgroup: 32,
            batch_dims: 0,
            vec_a: false,
            vec_b: false,
            variant: 2,
            tune: CoopTune::default(),
            aligned: false,
            out_f16: false,
            epi: Default::default(),
        },
        CoopMatmulSpec {
            size: 16,
            acc: DType::F32,
            subgroup: 24,
            batch_dims: 0,
            vec_a: false,
            vec_b: false,
            variant: 2,
            tune: CoopTune::default(),
            aligned: false,
            out_f16: false,
            epi: Default::default(),
        },
    ];
    for s in bad {
        assert!(s.render().is_err(), "{s:?}");
    }
}

#[test]
fn planner_picks_from_the_configuration_list() {
    let big = [4096, 4096, 4096];
    // NVIDIA-like: 16×16 f16→f32 (plus f16→f16 and an unusable int config).
    let nv = [
        cfg(16, DType::F16, DType::F16),
        cfg(16, DType::F16, DType::F32),
        CoopConfig { m: 16, n: 16, k: 32, ab: DType::I8, cr: DType::I32 },
    ];
    let p = plan_coop_matmul(&nv, (32, 32), big, 0).unwrap();
    assert_eq!((p.size, p.acc, p.subgroup, p.variant), (16, DType::F32, 32, 2));
    assert_eq!((p.block_m(), p.block_n(), p.threads()), (128, 128, 128));
    // Apple-like: 8×8 only, f32×f32 / f16×f16 / f16→f32.
    let apple = [
        cfg(8, DType::F32, DType::F32),
        cfg(8, DType::F16, DType::F16),
        cfg(8, DType::F16, DType::F32),
    ];
    let p = plan_coop_matmul(&apple, (32, 32), big, 1).unwrap();
    assert_eq!((p.size, p.acc, p.batch_dims), (8, DType::F32, 1));
    assert_eq!((p.block_m(), p.block_n()), (64, 64));
    // f16 accumulation only: taken (the caller's tolerance is the f16 GEMM's).
    let p = plan_coop_matmul(&[cfg(16, DType::F16, DType::F16)], (32, 32), big, 0).unwrap();
    assert_eq!(p.acc, DType::F16);
    // 8×8 preferred over 16×16 only when it is the one with f32 accumulation.
    let mixed = [cfg(16, DType::F16, DType::F16), cfg(8, DType::F16, DType::F32)];
    assert_eq!(plan_coop_matmul(&mixed, (32, 32), big, 0).unwrap().size, 8);
}

#[test]
fn planner_declines_and_says_why() {
    let nv = [cfg(16, DType::F16, DType::F32)];
    // lavapipe: no configurations at all.
    assert_eq!(plan_coop_matmul(&[], (8, 8), [64, 64, 64], 0), Err(CoopDecline::NoConfig));
    // f32-only (wgpu's Vulkan minimum): not an f16 kernel.
    let f32_only = [cfg(8, DType::F32, DType::F32)];
    assert_eq!(plan_coop_matmul(&f32_only, (32, 32), [64; 3], 0), Err(CoopDecline::NoConfig));
    // Non-square configurations are not used by this kernel.
    let rect = [CoopConfig { m: 16, n: 8, k: 16, ab: DType::F16, cr: DType::F32 }];
    assert_eq!(plan_coop_matmul(&rect, (32, 32), [64; 3], 0), Err(CoopDecline::NoConfig));
    assert_eq!(plan_coop_matmul(&nv, (32, 64), [64; 3], 0), Err(CoopDecline::SubgroupSize(32, 64)));
    assert_eq!(plan_coop_matmul(&nv, (32, 32), [64, 8, 64], 0), Err(CoopDecline::TooSmall));
}

#[test]
fn variant_choice_respects_workgroup_memory() {
    let nv = [cfg(16, DType::F16, DType::F32)];
    let p = plan_coop_matmul(&nv, (32, 32), [4096; 3], 0).unwrap();
    // Generation 2 at 16×16: two padded slabs of A (128×40) and B (32×136) halves + scratch.
    assert_eq!(p.shared_bytes(), 2 * 2 * (128 * 40 + 32 * 136) + 4 * 256 * 4);
    assert_eq!(p.with_variant(CoopVariant::Gen2, 49152).variant, 2, "fits NVIDIA's 48 KiB");
    assert_eq!(p.with_variant(CoopVariant::Gen2, 32768).variant, 1, "not 32 KiB: generation 1");
    assert_eq!(p.with_variant(CoopVariant::Gen1, 49152).variant, 1, "asked for generation 1");
    assert!(
        p.with_variant(CoopVariant::Gen1, 0).shared_bytes()
            == 2 * (128 * 32 + 32 * 128) + 4 * 256 * 4
    );
    // Apple's 8×8 tiles: 64×64 blocks fit Metal's 32 KiB with generation 2.
    let apple = [cfg(8, DType::F16, DType::F32)];
    let p = plan_coop_matmul(&apple, (32, 32), [4096; 3], 0).unwrap();
    assert_eq!(p.with_variant(CoopVariant::Gen2, 32768).variant, 2);
    let bad = CoopMatmulSpec { variant: 4, ..p };
    assert!(bad.render().is_err());
}

#[test]
fn every_family_kernel_the_sweep_times_validates_and_translates() {
    let base = CoopMatmulSpec {
        size: 16,
        acc: DType::F32,
        subgroup: 32,
        batch_dims: 0,
        vec_a: true,
        vec_b: true,
        variant: 3,
        tune: CoopTune::default(),
        aligned: false,
        out_f16: false,
        epi: Default::default(),
    };
    // The sweep's tunes, and the unverified knobs (kept rendered for investigation).
    let mut tunes = CoopTune::sweep();
    assert!(tunes.len() >= 25, "{}", tunes.len());
    for text in
        ["fi1", "fi1_db1", "dg1_k16", "dg1_db1_k32", "wl1", "wl1_db1", "dg1_wl1_db1", "pi1_db1"]
    {
        tunes.push(CoopTune::parse(text).unwrap());
    }
    tunes.extend(CoopTune::experimental());
    for (i, tune) in tunes.into_iter().enumerate() {
        // Alternate the operand paths and batch rank so every staging path is rendered.
        let (vec_a, vec_b) = [(true, true), (false, false), (true, false), (false, true)][i % 4];
        let spec = CoopMatmulSpec { tune, vec_a, vec_b, batch_dims: i % 3, ..base };
        let src = spec.render().unwrap_or_else(|e| panic!("{}: {e}", tune.name()));
        let msl = wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{}: {e}\n{src}", tune.name()));
        assert!(msl.contains("simdgroup"), "{}", tune.name());
        wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{}: {e}", tune.name()));
        // The text form round-trips (it is what MPSRT_COOP_VARIANT takes).
        assert_eq!(CoopVariant::parse(&tune.name()), Ok(CoopVariant::Family(tune)));
    }
    // Direct loads with both operands aligned, and the f16-accumulator / 8×8 / subgroup-64 cases.
    let direct = CoopTune::parse("dg1_db1_k16").unwrap();
    for spec in [
        CoopMatmulSpec { tune: direct, ..base },
        CoopMatmulSpec { tune: direct, aligned: true, ..base },
        CoopMatmulSpec { tune: CoopTune::parse("fi1").unwrap(), aligned: true, ..base },
        CoopMatmulSpec { tune: direct, acc: DType::F16, size: 8, subgroup: 64, ..base },
        CoopMatmulSpec { acc: DType::F16, vec_a: false, ..base },
    ] {
        let src = spec.render().unwrap();
        if spec.tune.dg && spec.vec_a && spec.vec_b {
            assert!(src.contains("(&a["), "direct loads read the storage buffer: {spec:?}");
        }
        // Aligned: no interior branch (and no checked loop) around the matrix operations.
        assert_eq!(src.contains("if (full)"), !spec.aligned && (spec.tune.fi || spec.tune.dg));
        wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
        wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
    }
}

#[test]
fn family_tunes_parse_check_and_fall_back() {
    assert_eq!(CoopVariant::parse("1"), Ok(CoopVariant::Gen1));
    assert_eq!(CoopVariant::parse(" 2 "), Ok(CoopVariant::Gen2));
    assert_eq!(CoopVariant::parse("3"), Ok(CoopVariant::Family(CoopTune::default())));
    let t = CoopTune::parse("3:w2x4_t4x2_k64_p0_db1_fi0_dg1".strip_prefix("3:").unwrap()).unwrap();
    assert_eq!(
        (t.wm, t.wn, t.tm, t.tn, t.bk, t.pad, t.db, t.fi, t.dg),
        (2, 4, 4, 2, 64, 0, true, false, true)
    );
    assert_eq!(
        CoopVariant::parse("3:k16,db1").unwrap(),
        CoopVariant::Family(CoopTune { bk: 16, db: true, ..CoopTune::default() })
    );
    for bad in ["t4", "k24x", "db2", "q1", "w2x2_zz"] {
        assert!(CoopVariant::parse(bad).is_err(), "{bad}");
    }
    // Tunes the renderer refuses: 16 subgroups, 64 tiles per subgroup, K step not a multiple
    // of the tile, odd padding (32 tiles, 4×8 / 8×4, are accepted).
    assert!(CoopTune::parse("t8x4").unwrap().check(16).is_ok());
    for bad in ["w3x2", "w4x4", "t8x8", "k8", "p4"] {
        assert!(CoopTune::parse(bad).unwrap().check(16).is_err(), "{bad}");
    }
    assert!(CoopTune::parse("k8").unwrap().check(8).is_ok());
    // Workgroup memory: 128×128 blocks, BK 64, two padded stages = 70 KiB + scratch: not
    // NVIDIA's 48 KiB, so the planner falls back to generation 1; one stage fits.
    let nv = [cfg(16, DType::F16, DType::F32)];
    let p = plan_coop_matmul(&nv, (32, 32), [4096; 3], 0).unwrap();
    let big = CoopTune::parse("k64_db1_p8").unwrap();
    assert_eq!(
        CoopMatmulSpec { variant: 3, tune: big, ..p }.shared_bytes(),
        2 * 2 * (128 * 72 + 64 * 136) + 4 * 256 * 4
    );
    assert_eq!(p.with_variant(CoopVariant::Family(big), 49152).variant, 1);
    let one = CoopTune { db: false, ..big };
    let q = p.with_variant(CoopVariant::Family(one), 49152);
    assert_eq!((q.variant, q.tune, q.block_m(), q.block_n(), q.threads()), (3, one, 128, 128, 128));
    let wide = CoopTune::parse("w2x4_t4x4").unwrap();
    let q = p.with_variant(CoopVariant::Family(wide), 65536);
    assert_eq!((q.block_m(), q.block_n(), q.threads()), (128, 256, 256));
    // An invalid tune never reaches the renderer: generation 1 instead.
    let invalid = CoopTune { tm: 3, ..CoopTune::default() };
    assert_eq!(p.with_variant(CoopVariant::Family(invalid), 1 << 20).variant, 1);
}

#[test]
fn unverified_tunes_fall_back_and_the_default_follows_the_measurements() {
    let nv = [cfg(16, DType::F16, DType::F32)];
    let p = plan_coop_matmul(&nv, (32, 32), [4096; 3], 0).unwrap();
    for text in ["wl1", "fi1_wl1", "vs0_wl1_db1"] {
        let t = CoopTune::parse(text).unwrap();
        assert!(t.unverified().is_some(), "{text}");
        assert_eq!(p.with_variant(CoopVariant::Family(t), 49152).variant, 1, "{text}");
        let q = p.with_variant_opts(CoopVariant::Family(t), 49152, true);
        assert_eq!((q.variant, q.tune), (3, t), "{text} with MPSRT_COOP_EXPERIMENTAL=1");
    }
    let pi = CoopTune::parse("pi1").unwrap();
    assert!(pi.unverified().is_none());
    assert!(p
        .with_variant(CoopVariant::Family(pi), 49152)
        .render()
        .unwrap()
        .contains("(full || ("));
    // 16×16 (NVIDIA): the measured best per shape class (H200, session12 call 2; the 64×64
    // tune's K 64 from the H100's 9th-session A/B, below 256 blocks); 8×8: generation 1.
    // Both defaults are trusted (no MPSRT_COOP_EXPERIMENTAL needed).
    let big = CoopVariant::parse("fi1_cl1_vs4_uc1_ov1_su3_rp1").unwrap();
    let deep = CoopVariant::parse("fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_ad1").unwrap();
    assert_eq!(mpsrt_kernels::large_coop_variant(16), big);
    assert_eq!(mpsrt_kernels::deep_coop_variant(16), deep);
    // Two register sets from K 1024 or 512 blocks (12th session, H100).
    for mnk in [[4096; 3], [8192; 3], [4096, 4096, 768], [2048, 2048, 4096], [1024, 3072, 3072]] {
        assert_eq!(default_coop_variant(16, mnk), deep, "{mnk:?}");
    }
    // Short K and few blocks: BERT-base b8's QKV (144 blocks) and FFN-up (192) products, and
    // 2048×3072×768 (384), keep one register set.
    for mnk in [[2048, 3072, 768], [1024, 2304, 768], [1024, 3072, 768], [2048, 1024, 768]] {
        assert_eq!(default_coop_variant(16, mnk), big, "{mnk:?}");
    }
    let small = CoopVariant::parse("w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1_ad1").unwrap();
    assert_eq!(default_coop_variant(16, [1024; 3]), small);
    assert_eq!(default_coop_variant(16, [1024, 768, 3072]), small);
    assert_eq!(default_coop_variant(16, [1920, 1024, 768]), small);
    // The 11th session's rule, kept for A/B (MPSRT_COOP_PLANNER=11).
    let eleventh = mpsrt_kernels::matmul_coop_tune::default_coop_variant_11th;
    let small11 = CoopVariant::parse("w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1").unwrap();
    for mnk in [[4096; 3], [2048, 3072, 768], [1024, 2304, 768]] {
        assert_eq!(eleventh(16, mnk), big, "{mnk:?}");
    }
    assert_eq!(eleventh(16, [1024, 768, 3072]), small11);
    assert_eq!(eleventh(8, [4096; 3]), CoopVariant::Gen1);
    // The 10th session's rule (no register prefetch), kept for A/B (MPSRT_COOP_PLANNER=10).
    let tenth = mpsrt_kernels::matmul_coop_tune::default_coop_variant_10th;
    let big10 = CoopVariant::parse("fi1_cl1_vs4_uc1_ov1_su3").unwrap();
    for mnk in [[4096; 3], [1024, 2304, 768], [2048, 3072, 768]] {
        assert_eq!(tenth(16, mnk), big10, "{mnk:?}");
    }
    assert_eq!(tenth(16, [1024, 768, 3072]), small11);
    assert_eq!(tenth(8, [4096; 3]), CoopVariant::Gen1);
    // The 9th session's rule, kept for A/B (MPSRT_COOP_PLANNER=9).
    let ninth = mpsrt_kernels::matmul_coop_tune::default_coop_variant_9th;
    let (big9, small9) = ("fi1_cl1_vs4_uc1_ov1", "w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1");
    assert_eq!(ninth(16, [4096; 3]), CoopVariant::parse(big9).unwrap());
    assert_eq!(ninth(16, [1024, 3072, 768]), CoopVariant::parse(small9).unwrap());
    assert_eq!(ninth(8, [4096; 3]), CoopVariant::Gen1);
    // The 8th session's rule, kept for A/B (MPSRT_COOP_PLANNER=8).
    let old = mpsrt_kernels::matmul_coop_tune::default_coop_variant_8th;
    assert_eq!(old(16, [1024, 2304, 768]), CoopVariant::parse("fi1_cl1_vs4_uc1").unwrap());
    let old_small = CoopVariant::parse("w2x2_t2x2_k32_cl1_vs4_uc1").unwrap();
    assert_eq!(old(16, [1024, 768, 768]), old_small);
    assert_eq!(old(8, [4096; 3]), CoopVariant::Gen1);
    assert_eq!(default_coop_variant(8, [4096; 3]), CoopVariant::Gen1);
    for v in [big, deep, small] {
        let CoopVariant::Family(t) = v else { unreachable!() };
        assert!(t.unverified().is_none(), "{}", t.name());
        assert_eq!(p.with_variant(v, 49152).tune, t, "{}", t.name());
    }
    for text in ["fi1", "dg1", "vs4_rp1_uc1_sw8", "cl1"] {
        assert!(CoopTune::parse(text).unwrap().unverified().is_none(), "{text}");
    }
}

#[test]
fn every_structure_candidate_validates_and_translates() {
    let base = CoopMatmulSpec {
        size: 16,
        acc: DType::F32,
        subgroup: 32,
        batch_dims: 0,
        vec_a: true,
        vec_b: true,
        variant: 3,
        tune: CoopTune::default(),
        aligned: false,
        out_f16: false,
        epi: Default::default(),
    };
    let tunes = CoopTune::structures();
    assert!(tunes.len() >= 20, "{}", tunes.len());
    let paths = [(true, true), (false, false), (true, false), (false, true)];
    for (i, tune) in tunes.into_iter().enumerate() {
        // Every operand path for each tune (and both `aligned` forms where fi/dg apply).
        for (p, (vec_a, vec_b)) in paths.into_iter().enumerate() {
            let aligned = (tune.fi || tune.dg) && p == 0 && i % 2 == 0;
            let spec =
                CoopMatmulSpec { tune, vec_a, vec_b, batch_dims: (i + p) % 3, aligned, ..base };
            let src = spec.render().unwrap_or_else(|e| panic!("{}: {e}", tune.name()));
            let msl = wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
            assert!(msl.contains("simdgroup"), "{}", tune.name());
            wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
            // Vector slabs only for the operands staged 8 wide.
            let vs = u32::from(tune.vs);
            let staged = !(tune.dg && vec_a && vec_b);
            for (slab, on) in [("As", vec_a), ("Bs", vec_b)] {
                let vec_slab = format!("var<workgroup> {slab}: array<vec{vs}<f16>");
                assert_eq!(src.contains(&vec_slab), vs != 0 && on && staged, "{spec:?}");
            }
            // Clamped loads: no branch around a checked global load.
            if tune.cl {
                assert!(!src.contains("if (m < Mr && k < K)"), "{spec:?}");
                assert!(!src.contains("if (n < N && k < K)"), "{spec:?}");
            }
            // Grouped workgroup order reads the grid size.
            assert_eq!(src.contains("num_workgroups"), tune.sw != 0, "{spec:?}");
            // Register prefetch: one slab, two barriers per step, loads of the next slab.
            if tune.rp && (vec_a || vec_b) && staged && !spec.aligned {
                assert!(src.contains("if (nxt < K)"), "{spec:?}");
            }
        }
        assert_eq!(CoopVariant::parse(&tune.name()), Ok(CoopVariant::Family(tune)));
        assert_eq!(tune.unverified().is_some(), tune.wl, "{}", tune.name());
    }
    // The new knobs' text form, checks and workgroup memory.
    let t = CoopTune::parse("w2x4_t4x4_k16_rp1_vs4_uc1").unwrap();
    assert_eq!((t.wm, t.wn, t.bk, t.rp, t.vs, t.uc, t.db), (2, 4, 16, true, 4, true, false));
    assert_eq!(t.name(), "w2x4_t4x4_k16_p8_db0_fi0_dg0_wl0_pi0_vs4_rp1_uc1");
    assert_eq!(CoopTune::default().name(), "w2x2_t4x4_k32_p8_db0_fi0_dg0_wl0_pi0");
    for bad in ["vs3", "vs4_wl1", "rp1_db1", "vs8", "sw3", "cl1_pi1", "cl1_wl1"] {
        assert!(CoopTune::parse(bad).map(|t| t.check(16)).is_ok_and(|r| r.is_err()), "{bad}");
    }
    assert!(CoopVariant::parse("rp2").is_err());
    assert!(CoopTune::parse("vs4_k16").unwrap().check(8).is_err(), "no vector slabs on 8×8");
    let nv = [cfg(16, DType::F16, DType::F32)];
    let p = plan_coop_matmul(&nv, (32, 32), [4096; 3], 0).unwrap();
    // 128×256 block, K 16, one padded slab + 8 subgroup scratch tiles.
    let q = p.with_variant_opts(CoopVariant::Family(t), 49152, true);
    assert_eq!((q.variant, q.block_m(), q.block_n(), q.threads()), (3, 128, 256, 256));
    assert_eq!(q.shared_bytes(), 2 * (128 * 24 + 16 * 264) + 8 * 256 * 4);
    // Measured correct on the H200: trusted; a `wl1` tune is not (generation 1 without
    // MPSRT_COOP_EXPERIMENTAL=1).
    assert_eq!(p.with_variant(CoopVariant::Family(t), 49152).variant, 3);
    let wl = CoopTune { wl: true, vs: 0, ..t };
    assert_eq!(p.with_variant(CoopVariant::Family(wl), 49152).variant, 1);
}

/// f16 output (`out_f16`): the default tunes and the structures with both aligned forms render
/// an `array<f16>` output stored through a row-of-tiles scratch (no direct f32 `coopStoreT` to
/// `out`), validate, and translate to MSL and SPIR-V; the scratch is counted in the workgroup
/// memory; a fallback to generation 1 (f32 only) clears the flag.
#[test]
fn f16_output_kernels_validate_and_translate() {
    let nv = [cfg(16, DType::F16, DType::F32)];
    let p = plan_coop_matmul(&nv, (32, 32), [4096; 3], 0).unwrap();
    let base = CoopMatmulSpec { vec_a: true, vec_b: true, out_f16: true, ..p };
    let mut tunes: Vec<CoopTune> = vec![
        match default_coop_variant(16, [4096; 3]) {
            CoopVariant::Family(t) => t,
            v => panic!("{v:?}"),
        },
        match default_coop_variant(16, [1024, 768, 768]) {
            CoopVariant::Family(t) => t,
            v => panic!("{v:?}"),
        },
    ];
    tunes.extend(CoopTune::structures().into_iter().filter(|t| !t.wl));
    for (i, tune) in tunes.into_iter().enumerate() {
        let aligned = (tune.fi || tune.dg) && i % 2 == 0;
        let spec = base.with_variant(CoopVariant::Family(tune), 49152);
        let want = CoopMatmulSpec { variant: 3, tune, ..base };
        if want.shared_bytes() > 49152 {
            // The row scratch pushes two-slab 128×128 tunes past 48 KiB: the f32 store where
            // that fits, else generation 1.
            let fits = CoopMatmulSpec { out_f16: false, ..want }.shared_bytes() <= 49152;
            let v = if fits { 3 } else { 1 };
            assert_eq!((spec.variant, spec.out_f16), (v, false), "{}", tune.name());
            continue;
        }
        assert_eq!((spec.variant, spec.out_f16), (3, true), "{}", tune.name());
        let spec = CoopMatmulSpec { aligned, batch_dims: i % 3, ..spec };
        let src = spec.render().unwrap_or_else(|e| panic!("{}: {e}", tune.name()));
        // f16 elements, or four at a time (`ov1` on whole blocks).
        let vector = tune.ov && spec.aligned;
        let ty = if vector { "vec4<f16>" } else { "f16" };
        let decl = format!("var<storage, read_write> out: array<{ty}>;");
        assert!(src.contains(&decl), "{spec:?}");
        assert!(!src.contains("&out["), "no cooperative store to the f16 output: {spec:?}");
        wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
        wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
        let f32_out = CoopMatmulSpec { out_f16: false, ..spec };
        // The scratch holds up to 4 tiles per subgroup, fewer past the two-workgroup budget.
        let tile = u32::from(tune.wm) * u32::from(tune.wn) * 256 * 4;
        let extra = spec.shared_bytes() - f32_out.shared_bytes();
        assert!(
            extra.is_multiple_of(tile) && extra / tile < u32::from(tune.tn.min(4)),
            "{}",
            tune.name()
        );
        let budget = mpsrt_kernels::matmul_coop_family::COOP_SHARED_BUDGET;
        assert!(extra == 0 || spec.shared_bytes() <= budget, "{}", tune.name());
    }
    // Generation 1 writes f32: asking for it (or falling back to it) clears the flag.
    assert!(!base.with_variant(CoopVariant::Gen1, 49152).out_f16);
    let huge = CoopTune::parse("w2x4_t4x4_k64_db1").unwrap();
    let q = base.with_variant(CoopVariant::Family(huge), 49152);
    assert_eq!((q.variant, q.out_f16), (1, false));
}

/// Epilogues on generation 3 (`alpha·AB + beta·C + res`, activation), f16 or f32 output:
/// bindings a, b, [C], [res], out, meta in that order; every combination validates and
/// translates; generations 1 and 2 refuse an epilogue or f16 output rather than drop it.
#[test]
fn epilogue_kernels_validate_translate_and_bind_in_order() {
    use mpsrt_kernels::matmul_coop::CoopEpilogue;
    use mpsrt_kernels::MatmulAct;
    let nv = [cfg(16, DType::F16, DType::F32)];
    let p = plan_coop_matmul(&nv, (32, 32), [1024, 768, 3072], 1).unwrap();
    let p = CoopMatmulSpec { vec_a: true, vec_b: true, ..p };
    let tunes = [default_coop_variant(16, [4096; 3]), default_coop_variant(16, [1024, 768, 768])];
    let acts = [MatmulAct::None, MatmulAct::Relu, MatmulAct::Clip, MatmulAct::Silu];
    let mut n = 0;
    for (ti, v) in tunes.into_iter().enumerate() {
        for c in [false, true] {
            for res in [false, true] {
                for (ai, act) in acts.into_iter().enumerate() {
                    let epi = CoopEpilogue { c, res, act };
                    let out_f16 = (ti + ai) % 2 == 0;
                    let spec = CoopMatmulSpec { epi, out_f16, ..p }.with_variant(v, 49152);
                    assert_eq!((spec.variant, spec.epi, spec.out_f16), (3, epi, out_f16));
                    let spec = CoopMatmulSpec { aligned: c, ..spec };
                    let src = spec.render().unwrap();
                    let mut want = vec!["a", "b"];
                    want.extend(c.then_some("cin"));
                    want.extend(res.then_some("res"));
                    want.push("out");
                    for (i, name) in want.iter().enumerate() {
                        let decl = format!("@binding({i}) var<storage, ");
                        let line = src.lines().find(|l| l.contains(&decl)).unwrap();
                        assert!(line.contains(&format!(" {name}: array<")), "{line}");
                    }
                    let meta = format!("@binding({}) var<uniform> M: Meta", want.len());
                    assert!(src.contains(&meta), "{spec:?}");
                    assert_eq!(src.contains("fn act("), act != MatmulAct::None);
                    // An epilogue or f16 output never stores the accumulators straight to
                    // the output.
                    assert_eq!(src.contains("&out["), !epi.any() && !out_f16, "{spec:?}");
                    wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                    wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
                    n += 1;
                }
            }
        }
    }
    assert_eq!(n, 32);
    let epi = CoopEpilogue { c: true, ..CoopEpilogue::default() };
    for gen in [CoopVariant::Gen1, CoopVariant::Gen2] {
        let spec = CoopMatmulSpec { epi, ..p }.with_variant(gen, 49152);
        assert!(spec.render().is_err(), "{gen:?} must not drop an epilogue");
        assert!(CoopMatmulSpec { epi: CoopEpilogue::default(), ..spec }.render().is_ok());
    }
}

/// The pipelined candidates (`CoopTune::pipelined`, issue 23): every operand path and both
/// aligned forms render, validate and translate; two slabs mean one barrier per K step in the
/// interior loop; split prefetch (`sp1`) stores A's registers before loading B's; each fits
/// 48 KiB of workgroup memory with the f32 store, so none falls back to generation 1.
#[test]
fn pipelined_candidates_validate_translate_and_fit() {
    let nv = [cfg(16, DType::F16, DType::F32)];
    let base = plan_coop_matmul(&nv, (32, 32), [4096; 3], 0).unwrap();
    let tunes = CoopTune::pipelined();
    assert!(tunes.len() >= 8, "{}", tunes.len());
    let paths = [(true, true), (false, false), (true, false), (false, true)];
    for (i, tune) in tunes.into_iter().enumerate() {
        // The register ring checked correct on the H100 once its odd-step tail was gone.
        assert!(tune.unverified().is_none(), "{}", tune.name());
        let spec = base.with_variant(CoopVariant::Family(tune), 49152);
        assert_eq!(spec.variant, 3, "{} falls back: {} bytes", tune.name(), spec.shared_bytes());
        for (p, (vec_a, vec_b)) in paths.into_iter().enumerate() {
            let aligned = p == 0 || i % 2 == 0;
            let spec = CoopMatmulSpec { vec_a, vec_b, batch_dims: (i + p) % 3, aligned, ..spec };
            let src = spec.render().unwrap_or_else(|e| panic!("{}: {e}", tune.name()));
            wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
            wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
            if tune.rq && aligned && vec_a && vec_b {
                // The ring: two steps per iteration, one barrier each, and no odd tail (K is a
                // multiple of two steps in its aligned kernels): no product inside an `if`.
                let head = format!("k0 = k0 + {}u) {{", 2 * tune.bk);
                let body = src.split(&head).nth(1).unwrap();
                let lp = body.split("\n  }\n").next().unwrap();
                assert_eq!(lp.matches("workgroupBarrier()").count(), 2, "{}", tune.name());
                assert_eq!(lp.matches("coopMultiplyAdd").count(), 2 * 16, "{}", tune.name());
                assert!(src.contains("qa0l") && src.contains("qb0h"), "two register sets");
                assert!(!src.contains("workgroupUniformLoad"), "{}", tune.name());
                assert_eq!(tune.aligned_k(), 2 * u32::from(tune.bk));
            } else if tune.db && aligned {
                // Prologue barrier + one per step (+ none in the direct f32 store of whole
                // blocks with alpha 1, two per tile in the scratch fallback after it).
                let body = src.split("for (var k0").nth(1).unwrap();
                let lp = body.split("st = ot;").next().unwrap();
                assert_eq!(lp.matches("workgroupBarrier()").count(), 1, "{}", tune.name());
            }
            if tune.gl {
                // 16-byte loads: the 8-wide staged operands are `vec4<u32>` arrays.
                let a16 = src.contains("var<storage, read> a: array<H8>");
                assert_eq!(a16, vec_a, "{spec:?}");
                assert_eq!(src.contains("= w.h;") || src.contains("w.h, ok)"), vec_a || vec_b);
            }
            if tune.fo {
                // Fragment order: the step's last A tile is loaded after its first products.
                let (mma, a3) =
                    (src.find("c0_0 = coopMultiplyAdd").unwrap(), src.find("let a3_0 =").unwrap());
                assert!(mma < a3, "{}", tune.name());
            }
            if tune.sp && vec_a && vec_b {
                let lp = src.split("for (var k0").nth(1).unwrap();
                let (store_a, load_b) = (lp.find("As[at]").unwrap(), lp.find("let b_at").unwrap());
                assert!(store_a < load_b, "{}: A stored before B is loaded", tune.name());
            }
        }
        assert_eq!(CoopVariant::parse(&tune.name()), Ok(CoopVariant::Family(tune)));
    }
    // The f16 store beside two slabs of 8 subgroups: its scratch shrinks to one tile per
    // subgroup (the f32 store's), so the tune keeps generation 3 and the f16 output.
    let t = CoopTune::parse("w2x4_t4x2_k32_db1_fi1_cl1_vs4_uc1").unwrap();
    let f16 = CoopMatmulSpec { out_f16: true, ..base };
    let q = f16.with_variant_opts(CoopVariant::Family(t), 49152, false);
    assert_eq!((q.variant, q.out_f16), (3, true));
    assert_eq!(q.shared_bytes(), CoopMatmulSpec { out_f16: false, ..q }.shared_bytes());
    // No scratch (`ns1`) on whole blocks: two K-16 slabs within the two-workgroup budget,
    // the output scaled in place when alpha != 1; edge blocks keep the scratch.
    let t = CoopTune::parse("k16_db1_fi1_cl1_vs4_uc1_ns1").unwrap();
    let q = base.with_variant_opts(CoopVariant::Family(t), 49152, false);
    let q = CoopMatmulSpec { aligned: true, vec_a: true, vec_b: true, ..q };
    assert_eq!(q.shared_bytes(), 2 * 2 * (128 * 24 + 16 * 136));
    assert!(q.shared_bytes() <= mpsrt_kernels::matmul_coop_family::COOP_SHARED_BUDGET);
    let src = q.render().unwrap();
    assert!(!src.contains("var<workgroup> Cs") && src.contains("storageBarrier()"), "{src}");
    wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    wgsl_to_spv(&src).unwrap();
    let edge = CoopMatmulSpec { aligned: false, ..q };
    assert!(edge.render().unwrap().contains("var<workgroup> Cs"));
    // The f16 store of 4×4 tiles: one tile per scratch group, the f32 store's 23040 bytes.
    let d = match default_coop_variant(16, [4096; 3]) {
        CoopVariant::Family(t) => t,
        v => panic!("{v:?}"),
    };
    let h = CoopMatmulSpec { out_f16: true, ..base }.with_variant(CoopVariant::Family(d), 49152);
    assert_eq!((h.variant, h.out_f16, h.shared_bytes()), (3, true, 23040));
    let t = CoopTune::parse("sp1_db1").unwrap();
    assert!(t.sp && t.db && t.name().ends_with("_sp1"), "{}", t.name());
    for bad in ["sp1", "sp1_db1_k16"] {
        assert!(CoopTune::parse(bad).map(|t| t.check(16)).is_ok_and(|r| r.is_err()), "{bad}");
    }
    assert!(CoopTune::parse("sp2").is_err());
    assert!(CoopTune::parse("gl1_wl1").unwrap().check(16).is_err());
    assert!(CoopTune::parse("gl1").unwrap().name().ends_with("_gl1"));
}
