//! Environment switches of the Triton backend's compiler options (`jit::triton_compile`), for
//! A/B timing on GPUs; each one is part of `triton_compiler_version`, Triton's cache key.

/// Whether compiled kernels may use subgroup operations where the adapter has them:
/// `MPSRT_JIT_SUBGROUPS=0` keeps the workgroup-memory reductions (for A/B timing).
pub(crate) fn subgroups_wanted() -> bool {
    std::env::var("MPSRT_JIT_SUBGROUPS").map_or(true, |v| v.trim() != "0")
}

/// Elements per invocation the Triton backend widens workgroups to: `MPSRT_TRITON_WIDEN_TO`
/// (1..=16, for A/B timing), else `mpsrt_jit::WIDEN_TO`.
pub(crate) fn widen_to() -> usize {
    std::env::var("MPSRT_TRITON_WIDEN_TO")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|v| (1..=16).contains(v))
        .unwrap_or(mpsrt_jit::WIDEN_TO)
}

/// Whether Triton's `tl.dot` on cooperative matrices stages its operands straight into padded
/// workgroup slabs (`mpsrt_jit::CompileOptions::stage_dot`): `MPSRT_TRITON_DOT_STAGE=0` keeps
/// session 11's register-staged path (for A/B timing).
pub(crate) fn dot_stage_wanted() -> bool {
    std::env::var("MPSRT_TRITON_DOT_STAGE").map_or(true, |v| v.trim() != "0")
}

/// `MPSRT_TRITON_VEC2_SLAB=1`: the staged dot's slabs hold `vec2<f16>` pairs
/// (`mpsrt_jit::CompileOptions::slab_vec2`, for A/B timing).
pub(crate) fn vec2_slab_wanted() -> bool {
    std::env::var("MPSRT_TRITON_VEC2_SLAB").is_ok_and(|v| v.trim() == "1")
}

/// Whether the staged dot's slabs are `vec4<f16>` (`mpsrt_jit::CompileOptions::slab_vec4`,
/// 16x16 tiles): `MPSRT_TRITON_VEC4_SLAB=0` keeps the `f16` (or `MPSRT_TRITON_VEC2_SLAB`) slabs.
pub(crate) fn vec4_slab_wanted() -> bool {
    std::env::var("MPSRT_TRITON_VEC4_SLAB").map_or(true, |v| v.trim() != "0")
}

/// `MPSRT_TRITON_CHECKED=1`: Triton kernels keep wgpu's runtime checks instead of clamping
/// their storage indices themselves (`mpsrt_jit::CompileOptions::self_bounded`, default on;
/// such modules are built without wgpu's checks, see `triton_load`).
pub(crate) fn triton_checked_wanted() -> bool {
    std::env::var("MPSRT_TRITON_CHECKED").is_ok_and(|v| v.trim() == "1")
}

/// `MPSRT_TRITON_PRUNE=0`: Triton kernels keep their write-only per-invocation arrays
/// (`mpsrt_jit::CompileOptions::prune_dead`, for A/B timing).
pub(crate) fn prune_wanted() -> bool {
    std::env::var("MPSRT_TRITON_PRUNE").map_or(true, |v| v.trim() != "0")
}

/// `MPSRT_TRITON_UNIFORM_FAST=0`: the staged dot's whole-run flag stays per invocation
/// (`mpsrt_jit::CompileOptions::uniform_fast`, for A/B timing).
pub(crate) fn uniform_fast_wanted() -> bool {
    std::env::var("MPSRT_TRITON_UNIFORM_FAST").map_or(true, |v| v.trim() != "0")
}

/// `MPSRT_TRITON_JOINT_STAGE=0`: each staged dot operand is copied where its load stands
/// (session 13) instead of all at the dot, global loads first
/// (`mpsrt_jit::CompileOptions::joint_stage`, for A/B timing).
pub(crate) fn joint_stage_wanted() -> bool {
    std::env::var("MPSRT_TRITON_JOINT_STAGE").map_or(true, |v| v.trim() != "0")
}

/// `MPSRT_TRITON_PREFETCH=0`: the staged dot does not load the next K step's whole runs into
/// registers before the products (`mpsrt_jit::CompileOptions::prefetch_stage`, for A/B).
pub(crate) fn prefetch_wanted() -> bool {
    std::env::var("MPSRT_TRITON_PREFETCH").map_or(true, |v| v.trim() != "0")
}

/// `MPSRT_TRITON_F16_STORE=0`: f16 blocks are stored as packed words (atomics, pair exchange)
/// instead of through `array<f16>` bindings on adapters with f16 matrix units
/// (`mpsrt_jit::CompileOptions::f16_store`, for A/B).
pub(crate) fn f16_store_wanted() -> bool {
    std::env::var("MPSRT_TRITON_F16_STORE").map_or(true, |v| v.trim() != "0")
}

/// `MPSRT_TRITON_UNCHECKED=1`: Triton kernels' pipelines skip wgpu's per-access bounds checks
/// (off by default: with them an out-of-bounds access of a kernel with a wrong mask reads zero
/// or is dropped; without them it is undefined, as on CUDA).
pub(crate) fn triton_unchecked_wanted() -> bool {
    std::env::var("MPSRT_TRITON_UNCHECKED").is_ok_and(|v| v.trim() == "1")
}

/// `MPSRT_TRITON_EMULATE_COOP=1` (testing): on adapters without matrix units but with
/// `shader-f16`, Triton's staged `tl.dot` runs its staging code with f32 register products
/// (`mpsrt_jit::CompileOptions::emulate_coop`), so lavapipe checks the staging.
pub(crate) fn emulate_coop_wanted() -> bool {
    std::env::var("MPSRT_TRITON_EMULATE_COOP").is_ok_and(|v| v.trim() == "1")
}

/// `MPSRT_TRITON_ONE_BARRIER=0`: multi-subgroup reductions publish their result through
/// `workgroupUniformLoad` (two barriers) even where no reduction steers control flow
/// (`mpsrt_jit::CompileOptions::one_barrier`, for A/B).
pub(crate) fn one_barrier_wanted() -> bool {
    std::env::var("MPSRT_TRITON_ONE_BARRIER").map_or(true, |v| v.trim() != "0")
}

/// Most elements per invocation at which a reduction kernel's largest block runs on one
/// subgroup: `MPSRT_TRITON_NARROW` (0 = off, up to 16), else 8
/// (`mpsrt_jit::CompileOptions::narrow_to`).
pub(crate) fn narrow_to() -> u32 {
    std::env::var("MPSRT_TRITON_NARROW")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|v| *v <= 16)
        .unwrap_or(8)
}
