//! The cooperative-matrix GEMM's WGSL, for every configuration the planner can pick, parses and
//! validates with naga (cooperative-matrix capability) and translates to MSL (Apple's simdgroup
//! matrices); and the planner's choices against fake adapter configuration lists.

use mpsrt_core::DType;
use mpsrt_kernels::validate::wgsl_to_msl;
use mpsrt_kernels::{plan_coop_matmul, CoopConfig, CoopDecline, CoopMatmulSpec};

fn cfg(s: u32, ab: DType, cr: DType) -> CoopConfig {
    CoopConfig { m: s, n: s, k: s, ab, cr }
}

#[test]
fn every_coop_kernel_validates_and_translates_to_msl() {
    for size in [8, 16] {
        for acc in [DType::F32, DType::F16] {
            for subgroup in [32, 64] {
                for (batch_dims, vec_a, vec_b) in
                    [(0, false, false), (1, true, false), (2, false, true), (0, true, true)]
                {
                    let spec = CoopMatmulSpec { size, acc, subgroup, batch_dims, vec_a, vec_b };
                    let src = spec.render().unwrap();
                    let msl = wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                    assert!(msl.contains("simdgroup"), "{spec:?}: no simdgroup matrix in MSL");
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
        },
        CoopMatmulSpec {
            size: 16,
            acc: DType::I32,
            subgroup: 32,
            batch_dims: 0,
            vec_a: false,
            vec_b: false,
        },
        CoopMatmulSpec {
            size: 16,
            acc: DType::F32,
            subgroup: 24,
            batch_dims: 0,
            vec_a: false,
            vec_b: false,
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
    assert_eq!((p.size, p.acc, p.subgroup), (16, DType::F32, 32));
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
