//! Which kernel an f16 matmul takes (issue 23): the matrix-unit (cooperative-matrix) GEMM where
//! the device reports a usable configuration, else the tiled GEMM. Lavapipe has no matrix
//! units, so the choice is tested with the real device's properties and fake configuration
//! lists; the GPU numerics of the cooperative kernel are checked by `bench_ops_a` on a GPU that
//! has them (the existing f16 matmul tests cover the fallback here).

mod common;

use mpsrt_kernels::CoopDecline;
use mpsrt_runtime::{CoopMatrixConfig, DeviceProperties};
use mpsrt_tensor::{self as mt, plan_f16_gemm, DType};

fn cfg(s: u32, ab: DType, cr: DType) -> CoopMatrixConfig {
    CoopMatrixConfig { m: s, n: s, k: s, ab, cr }
}

/// The first GPU's properties, or `None` when there is none (then `devices()` enforces
/// `MPSRT_REQUIRE_GPU`).
fn gpu_props() -> Option<DeviceProperties> {
    common::gpus().first()?;
    Some(mpsrt_runtime::gpu_device(0).unwrap().properties().clone())
}

/// A device like this one, but with matrix units `coop`, a fixed subgroup of 32, and f16 shaders.
fn with_units(props: &DeviceProperties, coop: Vec<CoopMatrixConfig>) -> DeviceProperties {
    let mut p = props.clone();
    p.coop_matrix = coop;
    (p.subgroup_min_size, p.subgroup_max_size) = (32, 32);
    (p.shader_f16, p.subgroups) = (true, true);
    p
}

#[test]
fn this_device_without_matrix_units_keeps_the_tiled_gemm() {
    let Some(props) = gpu_props() else { return };
    if !props.coop_matrix.is_empty() {
        return; // a GPU with matrix units: bench_ops_a checks the cooperative kernel there
    }
    let big = [4096, 4096, 4096];
    assert_eq!(plan_f16_gemm(&props, big, 0, false, true), Err(CoopDecline::NoConfig));
    let name = mt::matmul_kernel_name(0, DType::F16, big).unwrap();
    assert!(name.starts_with("tiled ("), "{name}");
    assert_eq!(mt::matmul_kernel_name(0, DType::F32, big).unwrap(), "tiled (float32)");
}

#[test]
fn fake_configuration_lists_choose_the_tile() {
    let Some(props) = gpu_props() else { return };
    let big = [4096, 4096, 4096];
    // NVIDIA (Vulkan): 16×16×16 f16→f32 and f16→f16.
    let nv =
        with_units(&props, vec![cfg(16, DType::F16, DType::F16), cfg(16, DType::F16, DType::F32)]);
    let s = plan_f16_gemm(&nv, big, 2, false, true).unwrap();
    assert_eq!((s.size, s.acc, s.subgroup, s.batch_dims), (16, DType::F32, 32, 2));
    // Apple (Metal simdgroup matrices): 8×8 only.
    let apple = with_units(
        &props,
        vec![
            cfg(8, DType::F32, DType::F32),
            cfg(8, DType::F16, DType::F16),
            cfg(8, DType::F16, DType::F32),
        ],
    );
    let s = plan_f16_gemm(&apple, big, 0, false, true).unwrap();
    assert_eq!((s.size, s.acc), (8, DType::F32));
    // wgpu's Vulkan minimum (8×8 f32 only): no f16 kernel.
    let f32_only = with_units(&props, vec![cfg(8, DType::F32, DType::F32)]);
    assert_eq!(plan_f16_gemm(&f32_only, big, 0, false, true), Err(CoopDecline::NoConfig));
}

#[test]
fn forced_and_structural_fallbacks() {
    let Some(props) = gpu_props() else { return };
    let nv = with_units(&props, vec![cfg(16, DType::F16, DType::F32)]);
    let big = [512, 512, 512];
    // MPSRT_COOP_MATMUL=0.
    assert_eq!(plan_f16_gemm(&nv, big, 0, false, false), Err(CoopDecline::Disabled));
    // Epilogues (C, residual, activation) need generation 3's 16×16 tiles: planned on
    // NVIDIA's configuration, declined on Apple's 8×8 (the tiled GEMM then runs).
    assert_eq!(plan_f16_gemm(&nv, big, 0, true, true).map(|s| s.size), Ok(16));
    let apple = with_units(&props, vec![cfg(8, DType::F16, DType::F32)]);
    assert!(plan_f16_gemm(&apple, big, 0, false, true).is_ok());
    assert!(matches!(plan_f16_gemm(&apple, big, 0, true, true), Err(CoopDecline::Unsupported(_))));
    // A device without f16 shaders or subgroups.
    let mut no_f16 = nv.clone();
    no_f16.shader_f16 = false;
    assert!(matches!(
        plan_f16_gemm(&no_f16, big, 0, false, true),
        Err(CoopDecline::Unsupported(_))
    ));
    let mut no_sg = nv.clone();
    no_sg.subgroups = false;
    assert!(matches!(plan_f16_gemm(&no_sg, big, 0, false, true), Err(CoopDecline::Unsupported(_))));
    // A variable subgroup size, and a product thinner than one tile (a GEMV-like row block).
    let mut var_sg = nv.clone();
    var_sg.subgroup_max_size = 64;
    assert_eq!(plan_f16_gemm(&var_sg, big, 0, false, true), Err(CoopDecline::SubgroupSize(32, 64)));
    assert_eq!(plan_f16_gemm(&nv, [4, 512, 512], 0, false, true), Err(CoopDecline::TooSmall));
}

/// Split-K for cooperative products with few 128×128 blocks (pure): BERT-base's FFN down at
/// batch 8 (48 blocks, K 3072) and batch 1, the attention output projection, and the shapes it
/// leaves alone (enough blocks, short K, off).
#[test]
fn cooperative_split_k_plan() {
    use mt::plan_coop_splitk as plan;
    // 48 blocks: 3 slices of 1024 (144 workgroups; 4 would write more partials than twice
    // the operands).
    assert_eq!(plan([1024, 768, 3072], 1, 192), 3);
    // Batch 1 (M = 128): 6 blocks, capped at 8 slices of 384.
    assert_eq!(plan([128, 768, 3072], 1, 192), 8);
    // The attention output projection (K 768): its partials would outweigh the operands.
    assert_eq!(plan([1024, 768, 768], 1, 192), 1);
    assert_eq!(plan([128, 768, 768], 1, 192), 3);
    // Every slice a multiple of 32 (the K step): K 800 has no such split into ≥ 256.
    assert_eq!(plan([1024, 768, 800], 1, 192), 1);
    // Enough blocks (4096³: 1024), a batch that fills the grid, split-K off.
    assert_eq!(plan([4096, 4096, 4096], 1, 192), 1);
    assert_eq!(plan([128, 128, 4096], 200, 192), 1);
    assert_eq!(plan([1024, 768, 3072], 1, 0), 1);
    // Slices divide K into multiples of 32 whenever it splits.
    for k in [512, 768, 1024, 1536, 2048, 3072, 4096, 5000] {
        let s = plan([256, 256, k], 1, 192);
        assert!(
            s == 1 || (k.is_multiple_of(s) && (k / s).is_multiple_of(32) && k / s >= 256),
            "{k}: {s}"
        );
    }
}
