//! The cooperative-matrix (matrix-unit) side of the GPU matmul (issue 23): whether an f16
//! product takes it ([`plan_f16_gemm`], pure), which generation-3 tune and options it runs
//! (`coop_spec`: `MPSRT_COOP_VARIANT`, the planner's default per shape, workgroup-memory
//! fallbacks, f16 output `MPSRT_COOP_F16_OUT`, the epilogue `MPSRT_COOP_EPILOGUE`), split-K
//! for small grids ([`plan_coop_splitk`], `MPSRT_COOP_SPLITK`), and its pipeline cache (an
//! unchecked module for `uc` tunes). `matmul.rs` dispatches.

use super::matmul::{cached, cached_unchecked, SpecCache};
use mpsrt_core::{DType, Result};
use mpsrt_kernels::matmul_coop_tune::coop_override;
use mpsrt_kernels::{
    coop_variant_from_env, default_coop_variant, large_coop_variant, plan_coop_matmul, CoopConfig,
    CoopDecline, CoopMatmulSpec, CoopTune,
};
use mpsrt_runtime::{DeviceProperties, GpuDevice, Pipeline};
use std::sync::{Arc, OnceLock};

/// The cooperative GEMM's pipeline: [`cached`], except that a generation-3 tune with `uc`
/// compiles without wgpu's runtime checks (naga's index clamping and loop bounding).
pub(crate) fn cached_coop(
    dev: &GpuDevice,
    op: &str,
    spec: CoopMatmulSpec,
) -> Result<Arc<Pipeline>> {
    if !(spec.variant == 3 && spec.tune.uc) {
        return cached(&COOP, dev, op, spec, CoopMatmulSpec::render);
    }
    // SAFETY: every access of a generation-3 kernel is in bounds by construction: global
    // loads are guarded against M, N, K (or run only in whole blocks), slab and scratch
    // indices stay inside their fixed-size arrays, output stores are guarded or whole tiles
    // of whole blocks (`matmul_coop_family.rs`).
    unsafe { cached_unchecked(&COOP, dev, op, spec, CoopMatmulSpec::render) }
}

static COOP: SpecCache<CoopMatmulSpec> = OnceLock::new();

/// Whether an f16 product `[m, n, k]` (with `batch_dims` coalesced batch dims, `epilogue` when
/// it carries C, a residual or an activation: generation 3 applies them while storing, so they
/// need its 16×16 tiles) runs on the matrix units of a device with `props`,
/// and with which configuration; else why not (the tiled GEMM then runs). Pure, so the choice is
/// tested on lavapipe with fake configuration lists; `enabled` is `MPSRT_COOP_MATMUL != 0`.
pub fn plan_f16_gemm(
    props: &DeviceProperties,
    mnk: [usize; 3],
    batch_dims: usize,
    epilogue: bool,
    enabled: bool,
) -> std::result::Result<CoopMatmulSpec, CoopDecline> {
    if !enabled {
        return Err(CoopDecline::Disabled);
    }
    let configs: Vec<CoopConfig> = props
        .coop_matrix
        .iter()
        .map(|c| CoopConfig { m: c.m, n: c.n, k: c.k, ab: c.ab, cr: c.cr })
        .collect();
    let spec = plan_coop_matmul(
        &configs,
        (props.subgroup_min_size, props.subgroup_max_size),
        mnk,
        batch_dims,
    )?;
    if !props.shader_f16 {
        return Err(CoopDecline::Unsupported("the device lacks shader-f16"));
    }
    if !props.subgroups {
        return Err(CoopDecline::Unsupported("the device lacks subgroups"));
    }
    // Epilogues are rendered by generation 3 only, whose tunes are 16×16 (NVIDIA).
    if epilogue && spec.size != 16 {
        return Err(CoopDecline::Unsupported(
            "C/residual/activation epilogues need 16×16 tiles (generation 3)",
        ));
    }
    Ok(spec)
}

/// Whether generation-3 kernels write the f16 product themselves instead of an f32 product
/// that the caller casts in a second pass: `MPSRT_COOP_F16_OUT=1` always, `0` never, unset
/// ([`f16_out_auto`]) always. Checked correct on the H200 (session 13 call 2: every
/// `matmul_f16_check` and sweep check); timed there, the f16 store through the scratch won on
/// BERT-base's 64×64-block products (attention output 0.0276 vs 0.0320–0.0347 ms, FFN down
/// 0.0692 vs 0.0772–0.0829) and lost on 128×128 blocks (4096³ 103.6 vs 186–187 TFLOP/s): its
/// 4-tile scratch (34.5 KB) left one workgroup per SM. With the scratch cut to one tile for
/// 4×4 tiles (`COOP_SHARED_BUDGET`, 23040 B) it wins there too (8th session call 2, H100,
/// alternated fresh processes: 4096³ 198.0 / 195.9 vs 187.7–187.9 TFLOP/s; 2048×3072×768
/// 106.0 / 101.8 vs 82.0–82.9; 1024×3072×768 95.5 / 93.0 vs 74.5–81.5).
pub(crate) fn coop_f16_out() -> Option<bool> {
    if let Some(f) = coop_override().f16_out {
        return Some(f);
    }
    static E: OnceLock<Option<bool>> = OnceLock::new();
    *E.get_or_init(|| match std::env::var("MPSRT_COOP_F16_OUT").ok()?.trim() {
        "" => None,
        v => Some(v != "0"),
    })
}

/// The unset `MPSRT_COOP_F16_OUT`'s choice for a tune: f16 output for every tune since its
/// scratch stays within the two-workgroup budget (see [`coop_f16_out`]).
pub(crate) fn f16_out_auto(_tune: &CoopTune) -> bool {
    true
}

/// `MPSRT_COOP_SB=1` / `MPSRT_COOP_EL=1` / `MPSRT_COOP_AD=1`: the planner's generation-3
/// kernels store through subgroup barriers (`CoopTune::sb`) / issue the next slab's loads
/// before the publishing barrier (`CoopTune::el`) / address their staging units affinely
/// (`CoopTune::ad`), each where the tune takes it. Model-level A/B of the 12th session's
/// candidates; all default off.
fn coop_candidate_knobs() -> [bool; 3] {
    static E: OnceLock<[bool; 3]> = OnceLock::new();
    *E.get_or_init(|| {
        ["MPSRT_COOP_SB", "MPSRT_COOP_EL", "MPSRT_COOP_AD"].map(|k| super::env_knob(k, 0) != 0)
    })
}

/// `MPSRT_COOP_RS` (default on): the planner's generation-3 kernels with an f32 output
/// (split-K partials, `MPSRT_COOP_F16_OUT=0`) store it through the row scratch, four floats
/// per store on whole blocks (`CoopTune::rs`), instead of `coopStoreT` straight from the
/// accumulators: on the H100 (14th session, in one process,
/// `bench/results/2026-11-27-h100/session20/g16za`) 4096³ 244.7 vs 235.3 TFLOP/s, the 64×64
/// K-64 tune's 1024³ 104.3 vs 91.4 and 2048×3072×768 104.8 vs 99.7, split-K slices of
/// 1024×768×3072 / 128×768×3072 / 128×2304×768 95.2 / 27.7 / 23.0 vs 87.4 / 25.2 / 20.2; no
/// shape slower. `0` restores the straight store; a variant forced by `MPSRT_COOP_VARIANT` or
/// a benchmark's override is left as given.
fn coop_f32_rows() -> bool {
    static E: OnceLock<bool> = OnceLock::new();
    *E.get_or_init(|| super::env_knob("MPSRT_COOP_RS", 1) != 0)
}

/// `rs1` for a generation-3 kernel with an f32 output where `on` ([`coop_f32_rows`]).
fn f32_rows(mut spec: CoopMatmulSpec, on: bool) -> CoopMatmulSpec {
    spec.tune.rs |= on && spec.variant == 3 && !spec.out_f16;
    spec
}

/// Whether f16 products with C, a residual or an activation take the cooperative kernel's
/// epilogue (default; checked against the f32 CPU on the H200, session 13 call 2:
/// `gemm_f16_epilogue_check`) or the tiled GEMM (`MPSRT_COOP_EPILOGUE=0`).
pub(crate) fn coop_epilogue() -> bool {
    static E: OnceLock<bool> = OnceLock::new();
    *E.get_or_init(|| super::env_knob("MPSRT_COOP_EPILOGUE", 1) != 0)
}

/// Workgroups a split-K cooperative launch aims for (`MPSRT_COOP_SPLITK_WGS`, default 192;
/// 0 turns it off; `MPSRT_COOP_SPLITK=1` turns it on, default off until measured).
pub(crate) fn coop_splitk_target() -> usize {
    if let Some(t) = coop_override().splitk {
        return t;
    }
    static T: OnceLock<usize> = OnceLock::new();
    *T.get_or_init(|| {
        if super::env_knob("MPSRT_COOP_SPLITK", 0) == 0 {
            0
        } else {
            super::env_knob("MPSRT_COOP_SPLITK_WGS", 192)
        }
    })
}

/// K slices for a cooperative f16 product `[m, n, k]` over `batch` matrices (1: none). Fewer
/// than 128 blocks of 128×128 (the default tune's threshold: below it, 64×64 blocks run) —
/// BERT-base's `[1024, 3072]·[3072, 768]` at batch 8 has 48 — and K cut into `S` slices of
/// at least 256 (a multiple of 32, the K step, so every slice stays whole-block) until the
/// 128×128 grid reaches about `target` workgroups, at most 8 slices, with the partials' bytes
/// (`2·S·M·N` f32) no more than twice the operands' (`M·K + K·N` f16). The slices then run the
/// 128×128 tune as an extra batch dim and `gemm_splitk_reduce_kernel` sums them. Pure.
pub fn plan_coop_splitk(mnk: [usize; 3], batch: usize, target: usize) -> usize {
    let [m, n, k] = mnk;
    let blocks = m.div_ceil(128) * n.div_ceil(128) * batch;
    if target == 0 || blocks == 0 || blocks >= 128 || blocks >= target {
        return 1;
    }
    // Partials `2·S·M·N` f32 against twice the operands' `M·K + K·N` f16, in bytes.
    let traffic = (m * k + k * n) / (2 * m * n).max(1);
    let mut s = target.div_ceil(blocks).min(k / 256).min(traffic).min(8);
    while s >= 2 && !(k.is_multiple_of(s) && (k / s).is_multiple_of(32)) {
        s -= 1;
    }
    s.max(1)
}

/// Whether an f16 product `[m, n, k]` over `batch` matrices with few rows skips the
/// cooperative kernel (whose grid of `block` = (rows, columns) blocks it would run on, without
/// split-K) for the tiled GEMM's split-K (`tiled_slices` K slices, from `plan_gemm`): at most
/// 64 rows, fewer than 32 cooperative workgroups, and a tiled plan that splits. ResNet-50
/// b32's classifier `[32, 1000, 2048]` (Gemm with B transposed, so the cooperative split-K's
/// row-major vector staging does not apply) ran as 16 workgroups of 64×64 walking all 2048 K
/// in 0.18 ms on the H200; the tiled plan runs 8 slices × 16 workgroups of K 256.
/// `MPSRT_COOP_SMALL_M=0` keeps the cooperative kernel (A/B). Pure.
pub fn small_m_prefers_tiled(
    mnk: [usize; 3],
    batch: usize,
    block: (usize, usize),
    tiled_slices: usize,
) -> bool {
    let [m, n, _] = mnk;
    let wgs = batch * m.div_ceil(block.0.max(1)) * n.div_ceil(block.1.max(1));
    m <= 64 && wgs < 32 && tiled_slices >= 2
}

/// `MPSRT_COOP_SMALL_M` (default on): [`small_m_prefers_tiled`] applies.
pub(crate) fn coop_small_m() -> bool {
    static E: OnceLock<bool> = OnceLock::new();
    *E.get_or_init(|| super::env_knob("MPSRT_COOP_SMALL_M", 1) != 0)
}

/// `MPSRT_COOP_PLANNER`: `8`, `9`, `10` or `11` take that session's default tunes per shape
/// (`default_coop_variant_8th` / `_9th` / `_10th` / `_11th`: `10` is the rule without register
/// prefetch on the 128×128 tune, `11` without the 12th session's two register sets and affine
/// addresses) instead of this one's (`default_coop_variant`), `12` the 11th session's rule with
/// register prefetch on the 64×64 K-64 tune too (`default_coop_variant_rp`), for model-level
/// A/B; unset or anything else: the current rule.
fn coop_planner() -> usize {
    static E: OnceLock<usize> = OnceLock::new();
    *E.get_or_init(|| super::env_knob("MPSRT_COOP_PLANNER", 0))
}

pub(crate) fn coop_enabled() -> bool {
    static E: OnceLock<bool> = OnceLock::new();
    *E.get_or_init(|| super::env_knob("MPSRT_COOP_MATMUL", 1) != 0)
}

/// The kernel a plain (no epilogue) `[m, n, k]` product of `dtype` takes on GPU `device`, in
/// words: `"coop 16x16 float32 accumulation"`, or `"tiled (<why not coop>)"`; for benchmarks
/// and reports.
pub fn matmul_kernel_name(device: usize, dtype: DType, mnk: [usize; 3]) -> Result<String> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    if dtype != DType::F16 {
        return Ok(format!("tiled ({dtype})"));
    }
    let props = dev.properties();
    Ok(match plan_f16_gemm(props, mnk, 0, false, coop_enabled()) {
        Ok(s) => {
            // Contiguous row-major operands, as benchmarks time them.
            let s = coop_spec(s, mnk, props, mnk[2].is_multiple_of(8), mnk[1].is_multiple_of(8));
            format!("coop {0}x{0} {1} accumulation {2}", s.size, s.acc, s.variant_name())
        }
        Err(why) => format!("tiled ({why})"),
    })
}

/// The cooperative kernel for a planned product: the variant `MPSRT_COOP_VARIANT` asks for
/// (else the planner's default for the shape), as far as workgroup memory allows, with the
/// 8-wide staging paths `vec_a` / `vec_b` (direct tile loads need both). A variant past the
/// device's workgroup memory or invocation limit, or a tune not verified on hardware (unless
/// `MPSRT_COOP_EXPERIMENTAL=1`), runs as generation 1.
pub(crate) fn coop_spec(
    spec: CoopMatmulSpec,
    mnk: [usize; 3],
    props: &DeviceProperties,
    vec_a: bool,
    vec_b: bool,
) -> CoopMatmulSpec {
    coop_spec_sliced(spec, mnk, 1, props, vec_a, vec_b)
}

/// [`coop_spec`] for one of `slices` K slices (split-K): the slices run the 128×128 tune
/// (`large_coop_variant`) unless `MPSRT_COOP_VARIANT` says otherwise, and write f32 partials.
pub(crate) fn coop_spec_sliced(
    spec: CoopMatmulSpec,
    mnk: [usize; 3],
    slices: usize,
    props: &DeviceProperties,
    vec_a: bool,
    vec_b: bool,
) -> CoopMatmulSpec {
    let [m, n, k] = mnk;
    let forced = coop_override().variant.or_else(coop_variant_from_env);
    let variant_is_planned = forced.is_none();
    let variant = forced.unwrap_or_else(|| {
        if slices > 1 {
            large_coop_variant(spec.size)
        } else {
            use mpsrt_kernels::matmul_coop_tune as t;
            match coop_planner() {
                8 => t::default_coop_variant_8th(spec.size, [m, n, k]),
                9 => t::default_coop_variant_9th(spec.size, [m, n, k]),
                10 => t::default_coop_variant_10th(spec.size, [m, n, k]),
                11 => t::default_coop_variant_11th(spec.size, [m, n, k]),
                12 => t::default_coop_variant_rp(spec.size, [m, n, k], true),
                _ => default_coop_variant(spec.size, [m, n, k]),
            }
        }
    });
    static EXP: OnceLock<bool> = OnceLock::new();
    let experimental = *EXP.get_or_init(|| super::env_knob("MPSRT_COOP_EXPERIMENTAL", 0) != 0);
    let limit = props.max_compute_workgroup_storage_size;
    let knob = coop_f16_out();
    // Split-K slices write f32 partials for the reduction to sum.
    let spec = CoopMatmulSpec { out_f16: slices == 1 && knob != Some(false), ..spec };
    let mut spec = spec.with_variant_opts(variant, limit, experimental);
    if knob.is_none() && !f16_out_auto(&spec.tune) {
        spec.out_f16 = false;
    }
    if spec.threads() > props.max_compute_invocations_per_workgroup {
        spec = spec.with_variant(mpsrt_kernels::CoopVariant::Gen1, u32::MAX);
    }
    (spec.vec_a, spec.vec_b) = (vec_a, vec_b);
    if !(vec_a && vec_b) {
        // Direct loads need both operands row-major and aligned: the kernel ignores the knob,
        // so clear it too (one pipeline, and the reported name says what runs).
        spec.tune.dg = false;
    }
    // Whole blocks only: the interior path without its branch (only where a knob uses it, so
    // other tunes keep one pipeline for every shape); elsewhere those knobs are dropped.
    let t = spec.tune;
    let [m, n, k] = mnk;
    spec.aligned = spec.variant == 3
        && (t.fi || t.dg)
        && m.is_multiple_of(spec.block_m() as usize)
        && n.is_multiple_of(spec.block_n() as usize)
        && k.is_multiple_of(t.aligned_k() as usize);
    if spec.variant == 3 && !spec.aligned {
        // The branched interior path measured wrong on the H100: shapes with edge blocks take
        // the checked loop everywhere.
        (spec.tune.fi, spec.tune.dg) = (false, false);
    }
    if variant_is_planned && spec.variant == 3 {
        // 12th-session candidates on the planner's choice, each only where the tune's own
        // check accepts it (`el1` needs the one-register-set `su` loop, `ad1` `su` staging).
        let [sb, el, ad] = coop_candidate_knobs();
        let (t, ok) = (spec.tune, |c: CoopTune| c.check(spec.size).is_ok());
        spec.tune.sb |= sb && ok(CoopTune { sb: true, ..t });
        spec.tune.el |= el && ok(CoopTune { el: true, ..t });
        spec.tune.ad |= ad && ok(CoopTune { ad: true, ..t });
        spec = f32_rows(spec, coop_f32_rows());
    }
    if !props.subgroup_barrier {
        // `sb1` synchronizes with `subgroupBarrier`, a device feature.
        spec.tune.sb = false;
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use mpsrt_kernels::{plan_coop_matmul, CoopConfig, CoopVariant};

    #[test]
    fn f32_rows_only_for_planned_generation_3_f32_outputs() {
        let nv = [CoopConfig { m: 16, n: 16, k: 16, ab: DType::F16, cr: DType::F32 }];
        let base = plan_coop_matmul(&nv, (32, 32), [4096; 3], 0).unwrap();
        let g3 = base.with_variant(mpsrt_kernels::large_coop_variant(16), 49152);
        assert_eq!(g3.variant, 3);
        let f32_out = CoopMatmulSpec { out_f16: false, ..g3 };
        assert!(f32_rows(f32_out, true).tune.rs);
        assert!(!f32_rows(f32_out, false).tune.rs, "off (MPSRT_COOP_RS=0 or a forced variant)");
        assert!(!f32_rows(CoopMatmulSpec { out_f16: true, ..g3 }, true).tune.rs);
        let g1 = CoopMatmulSpec { out_f16: false, ..base.with_variant(CoopVariant::Gen1, 49152) };
        assert!(!f32_rows(g1, true).tune.rs, "generations 1 and 2 have no row store");
    }

    /// Split-K slices come out of the planner as f32 partials with the row store; a whole
    /// product keeps its f16 output. Needs a GPU's properties (lavapipe in CI) with NVIDIA's
    /// configuration list; skipped without one or with the knobs set in the environment.
    #[test]
    fn split_k_slices_plan_f32_partials_with_the_row_store() {
        let knobs = ["MPSRT_COOP_RS", "MPSRT_COOP_F16_OUT", "MPSRT_COOP_VARIANT"];
        if knobs.iter().any(|k| std::env::var_os(k).is_some()) {
            return;
        }
        let Ok(dev) = mpsrt_runtime::gpu_device(0) else { return };
        let mut props = dev.properties().clone();
        props.coop_matrix = vec![mpsrt_runtime::CoopMatrixConfig {
            m: 16,
            n: 16,
            k: 16,
            ab: DType::F16,
            cr: DType::F32,
        }];
        (props.subgroup_min_size, props.subgroup_max_size) = (32, 32);
        (props.shader_f16, props.subgroups) = (true, true);
        props.max_compute_workgroup_storage_size =
            props.max_compute_workgroup_storage_size.max(49152);
        let mnk = [1024, 768, 3072];
        let spec = plan_f16_gemm(&props, mnk, 0, false, true).unwrap();
        let sliced = coop_spec_sliced(spec, [1024, 768, 768], 4, &props, true, true);
        assert_eq!((sliced.variant, sliced.out_f16, sliced.tune.rs), (3, false, true));
        let whole = coop_spec(spec, mnk, &props, true, true);
        assert_eq!((whole.variant, whole.out_f16, whole.tune.rs), (3, true, false));
    }
}
