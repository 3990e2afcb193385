//! The fused attention kernel's WGSL, for every I/O and mask type and a spread of head sizes and
//! key tiles, validates with naga and translates to MSL and SPIR-V; the tile planner respects the
//! workgroup-memory limit and declines what the kernel does not do.

use mpsrt_core::DType;
use mpsrt_kernels::validate::{wgsl_to_msl, wgsl_to_spv};
use mpsrt_kernels::AttnSpec;

/// naga's SPIR-V translation (what wgpu hands Vulkan): its writer can fail, even panic, on
/// modules that validate and translate to MSL.

#[test]
fn every_attention_kernel_validates_and_translates_to_msl() {
    for io in [DType::F32, DType::F16] {
        for mask in [None, Some(DType::F32), Some(DType::F16)] {
            for (d, dv) in [(64, 64), (7, 5), (128, 128), (80, 96), (256, 256)] {
                let spec = AttnSpec::plan(io, d, dv, mask, 32768).expect("plan");
                let src = spec.render().unwrap();
                wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
            }
        }
    }
}

#[test]
fn tile_plan_fits_workgroup_memory() {
    // 16 KiB (WebGPU's default): head 64 gets 32-key tiles, head 128 8-key tiles.
    let p = AttnSpec::plan(DType::F32, 64, 64, None, 16384).unwrap();
    assert_eq!(p.bc, 32);
    assert!(AttnSpec::shared_bytes(64, 64, 32) <= 16384);
    assert_eq!(AttnSpec::plan(DType::F32, 128, 128, None, 16384).unwrap().bc, 8);
    // NVIDIA's 48 KiB: the largest tile.
    assert_eq!(AttnSpec::plan(DType::F16, 64, 64, None, 49152).unwrap().bc, 64);
    // Declined: integer I/O, bool masks (the caller converts them), heads past 256, too little
    // memory, zero-size heads.
    assert!(AttnSpec::plan(DType::I32, 64, 64, None, 49152).is_none());
    assert!(AttnSpec::plan(DType::F32, 64, 64, Some(DType::Bool), 49152).is_none());
    assert!(AttnSpec::plan(DType::F32, 512, 64, None, 1 << 20).is_none());
    assert!(AttnSpec::plan(DType::F32, 256, 256, None, 8192).is_none());
    assert!(AttnSpec::plan(DType::F32, 0, 64, None, 49152).is_none());
    let bad = AttnSpec { io: DType::F32, d: 64, dv: 64, bc: 24, mask: None };
    assert!(bad.render().is_err());
}

#[test]
fn every_cooperative_attention_kernel_validates_and_translates() {
    use mpsrt_kernels::AttnCoopSpec;
    for mask in [None, Some(DType::F32), Some(DType::F16)] {
        for (d, dv, skv) in [(64, 64, 128), (64, 64, 384), (32, 48, 16), (128, 128, 272)] {
            for (subgroup, sgs) in [(32, 2), (32, 4), (16, 1), (64, 2)] {
                let spec = AttnCoopSpec::plan(d, dv, skv, mask, subgroup, (sgs, 128), 49152)
                    .expect("plan");
                let src = spec.render().unwrap();
                wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
            }
        }
    }
}

#[test]
fn cooperative_attention_plan() {
    use mpsrt_kernels::AttnCoopSpec;
    // BERT-base: one chunk of 128 keys; a subgroup needs 16·(4·132 + 2·136 + 4) = 12.9 KB, so
    // 48 KiB takes 2 of the 4 asked for, 16 KiB one.
    let p = AttnCoopSpec::plan(64, 64, 128, Some(DType::F16), 32, (4, 128), 49152).unwrap();
    assert_eq!((p.ch, p.sgs, p.threads(), p.rows()), (128, 2, 64, 32));
    assert_eq!(p.shared_bytes(), 2 * 16 * (4 * 132 + 2 * 136 + 4));
    let small = AttnCoopSpec::plan(64, 64, 128, None, 32, (4, 128), 16384).unwrap();
    assert_eq!(small.sgs, 1);
    // Keys in whole chunks: 384 → 3 × 128, 80 → one of 80, 272 → 17 × 16.
    assert_eq!(AttnCoopSpec::plan(64, 64, 384, None, 32, (2, 128), 49152).unwrap().ch, 128);
    assert_eq!(AttnCoopSpec::plan(64, 64, 80, None, 32, (2, 128), 49152).unwrap().ch, 80);
    assert_eq!(AttnCoopSpec::plan(64, 64, 272, None, 32, (2, 128), 49152).unwrap().ch, 16);
    // A smaller chunk cap: BERT's 128 keys as two chunks of 64 (two passes).
    let two = AttnCoopSpec::plan(64, 64, 128, None, 32, (1, 64), 49152).unwrap();
    assert_eq!((two.ch, two.one_chunk), (64, false));
    // Declined: keys or heads not multiples of 16, heads past 128, bool masks, odd subgroups.
    assert!(AttnCoopSpec::plan(64, 64, 120, None, 32, (2, 128), 49152).is_none());
    assert!(AttnCoopSpec::plan(72, 64, 128, None, 32, (2, 128), 49152).is_none());
    assert!(AttnCoopSpec::plan(256, 256, 128, None, 32, (2, 128), 49152).is_none());
    assert!(AttnCoopSpec::plan(64, 64, 128, Some(DType::Bool), 32, (2, 128), 49152).is_none());
    assert!(AttnCoopSpec::plan(64, 64, 128, None, 24, (2, 128), 49152).is_none());
    assert!(AttnCoopSpec::plan(64, 64, 128, None, 32, (1, 128), 1024).is_none());
}

#[test]
fn every_tiled_attention_kernel_validates_and_translates() {
    use mpsrt_kernels::AttnTiledSpec;
    for io in [DType::F32, DType::F16] {
        for mask in [None, Some(DType::F32), Some(DType::F16)] {
            for (d, dv) in [(64, 64), (4, 8), (32, 64), (64, 12)] {
                let spec = AttnTiledSpec::plan(io, d, dv, mask, 49152).expect("plan");
                let src = spec.render().unwrap();
                wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
            }
        }
    }
    // Declined: heads past 64 or not multiples of 4, WebGPU's default 16 KiB.
    assert!(AttnTiledSpec::plan(DType::F32, 128, 64, None, 49152).is_none());
    assert!(AttnTiledSpec::plan(DType::F32, 62, 64, None, 49152).is_none());
    assert!(AttnTiledSpec::plan(DType::F32, 64, 64, None, 16384).is_none());
}
