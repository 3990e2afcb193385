//! Which tiled GEMM kernel a product runs: the output block and structure ([`GemmTune`]), the
//! K slices, and whether wgpu's bounds checks stay in the shader.
//!
//! Two planners. Generation 1 (`MPSRT_GEMM_GEN=1`, the default before the tenth session) is
//! [`plan_gemm`]: square 128×128 or 64×64 blocks, one workgroup-memory stage, checked shader
//! modules. Generation 2 (default; [`plan_gemm_tuned`]) also has 128×64 blocks — so a product
//! whose 128×128 grid is under two waves of an H100 still gets 8×4 outputs per thread instead
//! of 4×4 — with the 8×4-threads-per-warp layout, split-K for any block, and unchecked shader
//! modules (every access of the tiled kernel is in bounds by construction:
//! loads are guarded by the row/K bounds, stores by M/N, workgroup indices by the block shape;
//! `MPSRT_GEMM_CHECKED=1` keeps the checks). `MPSRT_GEMM_TUNE=<tune text>` forces one tune on
//! every tiled GEMM of the process; [`set_gemm_override`] does the same per call site, so a
//! benchmark compares kernels in one process (the GPU clock drifts between processes).

use super::matmul::plan_gemm;
use mpsrt_kernels::GemmTune;
use std::sync::{Mutex, OnceLock};

/// K per slice at least this long: shorter slices spend their time in the prologue/epilogue.
pub(crate) const SPLITK_MIN_SLICE: usize = 256;
/// At most this many slices (partials `[S, M, N]` are written and read back once each).
pub(crate) const SPLITK_MAX_SLICES: usize = 16;

/// K slices for a grid of `wgs` workgroups under `target` (1: none): enough to reach about
/// `target`, dividing K into slices of ≥ [`SPLITK_MIN_SLICE`] that are a multiple of 8 (the K
/// step), at most [`SPLITK_MAX_SLICES`], and the partials' extra traffic (`2·S·M·N` floats) no
/// more than the operands' (`M·K + K·N` per matrix).
pub(crate) fn splitk_slices([m, n, k]: [usize; 3], wgs: usize, target: usize) -> usize {
    if wgs == 0 || wgs >= target || m * n == 0 {
        return 1;
    }
    let traffic = (m * k + k * n) / (m * n);
    let mut s = target.div_ceil(wgs).min(k / SPLITK_MIN_SLICE).min(traffic).min(SPLITK_MAX_SLICES);
    while s >= 2 && !(k.is_multiple_of(s) && (k / s).is_multiple_of(8)) {
        s -= 1;
    }
    s.max(1)
}

/// K per slice at least this long in generation 2's 128×64 splits: BERT b8's attention output
/// `[1024, 768, 768]` ran 0.0526 ms in four slices of 192 on the H100 (call 2), 0.0568 as
/// 64×64 blocks in two of 384.
const TUNED_MIN_SLICE: usize = 128;

/// Generation 2's K slices for a grid of `wgs` workgroups aiming at `goal`: as
/// [`splitk_slices`] but with slices of ≥ `min_slice` and the partials' traffic bound at twice
/// the operands' (rounded up): on the H100 BERT's `[1024, 768]·[768, 768]` ran faster split
/// although its partials (2·S·M·N floats) exceed its operands (M·K + K·N).
fn tuned_slices([m, n, k]: [usize; 3], wgs: usize, goal: usize, min_slice: usize) -> usize {
    if wgs == 0 || wgs >= goal || m * n == 0 {
        return 1;
    }
    let traffic = (2 * (m * k + k * n)).div_ceil(m * n);
    let mut s = goal.div_ceil(wgs).min(k / min_slice).min(traffic).min(SPLITK_MAX_SLICES);
    while s >= 2 && !(k.is_multiple_of(s) && (k / s).is_multiple_of(8)) {
        s -= 1;
    }
    s.max(1)
}

/// Generation 2's launch for `[m, n, k]` over `batch` matrices (`target`: workgroups for two
/// waves, 264 on an H100), from the in-process A/B of the tenth session's GPU calls (H100,
/// every tune checked against the legacy kernel and the CPU; BERT b8's products as the engine
/// runs them, `[8, 128, K]` times a broadcast weight):
/// - **128×128** blocks, single stage, 8×4 warps, 16-deep K slabs when they make ≥ `target`
///   workgroups (4096³ 37.2 TFLOP/s; 36.3 with 8-deep slabs, 28.4 for the legacy kernel);
/// - else **128×64** (double-buffered, 8×4 warps, 8-deep) split toward ~3 workgroups per SM
///   (`target · 16/11`, 384) in slices of ≥ 128, when that grid reaches `target` and the
///   unsplit one a quarter of it: FFN up `[1024, 3072, 768]` (384 blocks) 0.157 ms unsplit
///   (legacy 0.249), Q/K/V `[1024, 2304, 768]` (288) 0.148 in two slices (0.205), FFN down
///   `[1024, 768, 3072]` (96) 0.171 in four (0.250; 64×64 in two 0.203), attention output
///   `[1024, 768, 768]` (96) 0.054 in four (0.072);
/// - else **64×64** (double-buffered, 8×4 warps, 16-deep: better than 8-deep on every BERT
///   shape measured) split toward `target` in slices of ≥ 256, as generation 1 splits: BERT
///   b1 (M = 128), attention's per-head products.
///
/// Pure: shape in, choice out.
pub fn plan_gemm_tuned(mnk: [usize; 3], batch: usize, target: usize) -> (GemmTune, usize) {
    plan_gemm_tuned_big(mnk, batch, target, target)
}

/// [`plan_gemm_tuned`] with 128×128 blocks only from `big_min` of them (generation 2 takes
/// them from `target`; `MPSRT_GEMM_BIG_MIN`). Why a knob: H100 call B ran BERT b16's FFN up
/// `[2048, 3072, 768]` (384 blocks of 128×128; call A's stream-K ran them faster over 132
/// workgroups than 264, as if one were resident per SM) at 30.6 TFLOP/s against 37.2 at 4096³, while b8's 384 blocks of 128×64 ran 30.3–30.8
/// against that block's 32.0: at K = 768 the large block loses more; 768 blocks of 128×64
/// (`big_min` 528) is the alternative under test. Pure.
pub(crate) fn plan_gemm_tuned_big(
    mnk: [usize; 3],
    batch: usize,
    target: usize,
    big_min: usize,
) -> (GemmTune, usize) {
    let [m, n, _] = mnk;
    let tiles = |bm: usize, bn: usize| m.div_ceil(bm) * n.div_ceil(bn) * batch;
    let target = target.max(1);
    if tiles(128, 128) >= big_min.max(target) {
        return (GemmTune { bm: 128, bn: 128, db: false, wl: true, k16: true, sk: false }, 1);
    }
    let w = tiles(128, 64);
    if 4 * w >= target {
        let s = tuned_slices(mnk, w, target * 16 / 11, TUNED_MIN_SLICE);
        if w * s >= target {
            return (GemmTune { bm: 128, bn: 64, db: true, wl: true, k16: false, sk: false }, s);
        }
    }
    let s = tuned_slices(mnk, tiles(64, 64), target, SPLITK_MIN_SLICE);
    (GemmTune { bm: 64, bn: 64, db: true, wl: true, k16: true, sk: false }, s)
}

/// The stream-K block: 128×128, one stage, 8×4 warps, 16-deep slabs (generation 2's large
/// block, 37.2 TFLOP/s at 4096³ on the H100).
pub const SK_TUNE: GemmTune =
    GemmTune { bm: 128, bn: 128, db: false, wl: true, k16: true, sk: true };

/// Stream-K's workgroups for `[m, n, k]` over `batch` matrices with `wgs` workgroups (two per
/// SM) when the product should run it (`MPSRT_GEMM_SK=1`): its 128×128 blocks make less than
/// `wgs` workgroups (a partial wave), each workgroup gets at
/// least `min_steps` 16-deep K steps (a short K range spends its time in the prologue and the
/// partial block's store), and the step arithmetic fits 31 bits. `None`: the tiled planner's
/// choice stands. Pure.
pub fn plan_stream_k(mnk: [usize; 3], batch: usize, wgs: usize, min_steps: usize) -> Option<usize> {
    let [m, n, k] = mnk;
    let tiles = m.div_ceil(128) * n.div_ceil(128) * batch;
    let steps = tiles * k.div_ceil(16);
    let ok = wgs > 0
        && tiles < wgs
        && steps >= wgs * min_steps.max(1)
        && (wgs as u64) * (steps as u64) < 1 << 31;
    ok.then_some(wgs)
}

/// Stream-K's block in the wave-model rule ([`plan_stream_k_model`]): 128×64, one stage, 8×4
/// warps, 16-deep slabs (BERT b8's Q/K/V `[1024, 2304, 768]` 0.1283 ms at 264 workgroups
/// against generation 2's 0.1466 on the H100, call A of the eleventh session).
pub const SK_TUNE_64: GemmTune =
    GemmTune { bm: 128, bn: 64, db: false, wl: true, k16: true, sk: true };

/// FLOPs per byte of DRAM traffic at the tiled kernels' speed on the H100 (~32 TFLOP/s f32
/// over ~2.5 TB/s achieved): what one byte of partial sums costs in products not done.
const FLOP_PER_BYTE: f64 = 12.8;

/// TFLOP/s of a tune at full waves on the H100 (4096³, in-process A/B, tenth session calls 1–2
/// and eleventh call A): 128×128 16-deep 37.2, 128×64 double-buffered 32.0, 128×64 16-deep
/// single-stage (stream-K's block) 31.9, 64×64 29.0.
fn full_wave_tflops(t: GemmTune) -> f64 {
    match (t.bm, t.bn) {
        (128, 128) => 37.2,
        (128, 64) if t.k16 && !t.db => 31.9,
        (128, 64) | (64, 128) => 32.0,
        _ => 29.0,
    }
}

/// The wave model's predicted TFLOP/s of generation 2's launch (`tune`, `slices`) of
/// `[m, n, k]` over `batch` matrices on `sms` compute units (two workgroups each), and of
/// stream-K with [`SK_TUNE_64`] over `2 · sms` workgroups: `(generation 2, stream-K)`.
///
/// - Waves at SM granularity: a workgroup alone on its SM ran about as fast as two share it
///   (FFN up `[1024, 3072, 768]`: 384 blocks of 128×64 = 1.45 waves of 264 ran 30.8 TFLOP/s,
///   0.96 of the block's full-wave 32.0), so an SM's time is its count of workgroups, and the
///   grid's efficiency is `g / (sms · ⌈g / sms⌉)`.
/// - Split-K writes `S·M·N` partial floats and reads them back: `8·S·M·N` bytes against
///   `2·M·N·K` FLOPs, a relative cost `4·S·FLOP_PER_BYTE / K`.
/// - Stream-K balances every SM but each workgroup writes up to two partial blocks that the
///   fix-up reads back (`16·BM·BN` bytes against `32·BM·BN` FLOPs per 16-deep step): a relative
///   cost `FLOP_PER_BYTE / (2 · steps per workgroup)`.
///
/// Against call A's b8 products (TFLOP/s predicted / measured): Q/K/V generation 2 24.6 / 24.7,
/// stream-K 28.4 / 28.2; FFN up 31.0 / 30.8, 29.2 / 28.1; FFN down 29.1 / 28.7, 29.2 / 27.8;
/// attention output 24.4 / 22.8, 23.4 / 21.6. Pure.
pub fn gemm_rate_model(
    [m, n, k]: [usize; 3],
    batch: usize,
    (tune, slices): (GemmTune, usize),
    sms: usize,
) -> (f64, f64) {
    let sms = sms.max(1);
    let tiles = |bm: u32, bn: u32| m.div_ceil(bm as usize) * n.div_ceil(bn as usize) * batch;
    let g = tiles(tune.bm, tune.bn) * slices.max(1);
    let wave = g as f64 / (sms * g.div_ceil(sms)).max(1) as f64;
    let split =
        if slices > 1 { 4.0 * slices as f64 * FLOP_PER_BYTE / k.max(1) as f64 } else { 0.0 };
    let gen2 = full_wave_tflops(tune) * wave / (1.0 + split);
    let steps = tiles(SK_TUNE_64.bm, SK_TUNE_64.bn) * k.div_ceil(16);
    let per_wg = steps as f64 / (2 * sms) as f64;
    let sk = full_wave_tflops(SK_TUNE_64) / (1.0 + FLOP_PER_BYTE / (2.0 * per_wg.max(1e-9)));
    (gen2, sk)
}

/// Stream-K takes a product from generation 2 when the wave model predicts it this much faster
/// (the model's error on call A's eight b8 points is ≤ 8%, its ranking right on all four).
const SK_MODEL_MARGIN: f64 = 1.05;

/// `MPSRT_GEMM_SK=2`'s rule: stream-K with [`SK_TUNE_64`] over `target` workgroups (two per SM)
/// where [`gemm_rate_model`] predicts it ≥ 5% faster than generation 2's own launch
/// (`plan_gemm_tuned(mnk, batch, target)`) and the step arithmetic fits 31 bits. On BERT b8
/// only Q/K/V qualifies (generation 2's 576 split workgroups fill 4.4 of 5 SM rounds and pay
/// the partial sums; stream-K 52 steps per workgroup); FFN up/down and the attention output
/// keep generation 2 (as measured), and so do b1's products and large squares. Pure.
pub fn plan_stream_k_model(mnk: [usize; 3], batch: usize, target: usize) -> Option<usize> {
    let [m, n, k] = mnk;
    if target < 2 || m * n * k * batch == 0 {
        return None;
    }
    let plan = plan_gemm_tuned(mnk, batch, target);
    let (gen2, sk) = gemm_rate_model(mnk, batch, plan, target / 2);
    let steps = m.div_ceil(128) * n.div_ceil(64) * batch * k.div_ceil(16);
    let fits = (target as u64) * (steps as u64) < 1 << 31 && steps >= target;
    (fits && sk >= SK_MODEL_MARGIN * gen2).then_some(target)
}

/// A per-process replacement of the planner's choice for every tiled GEMM (benchmarks:
/// [`set_gemm_override`]); `None` fields keep the planner's / the environment's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GemmOverride {
    /// 1: [`plan_gemm`]; 2: [`plan_gemm_tuned`] (else `MPSRT_GEMM_GEN`).
    pub generation: Option<u8>,
    /// This tune for every product (the planner's slices unless `slices` is set).
    pub tune: Option<GemmTune>,
    /// This many K slices where they divide K (1: no split-K).
    pub slices: Option<usize>,
    /// Keep wgpu's bounds checks in the shader (else `MPSRT_GEMM_CHECKED`, or the generation's
    /// default: checked for 1, unchecked for 2).
    pub checked: Option<bool>,
    /// Stream-K workgroups for a forced `_sk` tune (else `MPSRT_GEMM_SK_WGS`, else the
    /// split-K target).
    pub sk_wgs: Option<usize>,
    /// Generation 2's stream-K rule (else `MPSRT_GEMM_SK`): 0 off, 1 [`plan_stream_k`]
    /// (128×128 blocks wherever they leave a partial wave), 2 [`plan_stream_k_model`].
    pub stream_k: Option<u8>,
    /// Split-K partials summed in vec4s with the slice count baked in (else
    /// `MPSRT_GEMM_REDUCE4`).
    pub reduce4: Option<bool>,
}

static OVERRIDE: Mutex<GemmOverride> = Mutex::new(GemmOverride {
    generation: None,
    tune: None,
    slices: None,
    checked: None,
    sk_wgs: None,
    stream_k: None,
    reduce4: None,
});

/// Set this process's [`GemmOverride`] (`GemmOverride::default()`: back to the planner).
pub fn set_gemm_override(o: GemmOverride) {
    *OVERRIDE.lock().unwrap_or_else(|e| e.into_inner()) = o;
}

fn gemm_override() -> GemmOverride {
    *OVERRIDE.lock().unwrap_or_else(|e| e.into_inner())
}

/// `MPSRT_GEMM_GEN` (default 2; 1 restores the legacy planner), `MPSRT_GEMM_TUNE` (a tune's text; invalid text is ignored
/// with a warning) and `MPSRT_GEMM_CHECKED`, read once.
fn env_choice() -> (u8, Option<GemmTune>, Option<bool>) {
    static E: OnceLock<(u8, Option<GemmTune>, Option<bool>)> = OnceLock::new();
    *E.get_or_init(|| {
        let gen = if super::env_knob("MPSRT_GEMM_GEN", 2) == 1 { 1 } else { 2 };
        let tune = std::env::var("MPSRT_GEMM_TUNE").ok().and_then(|t| {
            GemmTune::parse(&t).map_err(|e| tracing::warn!("MPSRT_GEMM_TUNE ignored: {e}")).ok()
        });
        let checked = std::env::var("MPSRT_GEMM_CHECKED").ok().map(|v| v.trim() == "1");
        (gen, tune, checked)
    })
}

/// `MPSRT_GEMM_K16_MIN` (default 0): generation 2's 64×64 blocks take 16-deep K slabs only for
/// products with at least this K (read once).
fn k16_min() -> usize {
    static K: OnceLock<usize> = OnceLock::new();
    *K.get_or_init(|| super::env_knob("MPSRT_GEMM_K16_MIN", 0))
}

/// The stream-K rule when `MPSRT_GEMM_SK` is unset: the wave model ([`plan_stream_k_model`]).
/// H100 call B of the eleventh session (in one process, ms): BERT b8's Q/K/V 0.1472 → 0.1293,
/// b16's 0.2933 → 0.2418, the other b8/b16 products unchanged (the rule does not fire); end to
/// end (p50, alternated fresh processes) BERT-base f32 b8 7.248 / 6.995 / 7.114 → 7.035 /
/// 6.991 / 6.935 ms, b16 13.61 → 12.63, b1 and ResNet-50 within noise.
pub(crate) const SK_DEFAULT_RULE: usize = 2;

/// `MPSRT_GEMM_REDUCE4` (default 1, `0` turns it off; read once): split-K partials of products
/// with N a multiple of 4 are summed four outputs per thread with the slice count baked into
/// the shader (`mpsrt_kernels::gemm_splitk_reduce4_kernel`). H100 call C (11th session):
/// BERT b8's split products 3–6% faster in one process, end to end not faster in every round
/// (opt-in then); 12th session, H200, alternated fresh processes, BERT-base f32 b8 p50:
/// 6.633 / 6.780 / 6.755 vs 6.907 / 6.838 / 6.863 ms (call 1) and 6.847 / 6.817 / 6.795 vs 6.990 /
/// 6.979 / 6.962 (call 2) — faster in all six pairs, now the default.
pub(crate) fn reduce4() -> bool {
    static R: OnceLock<bool> = OnceLock::new();
    gemm_override()
        .reduce4
        .unwrap_or_else(|| *R.get_or_init(|| super::env_knob("MPSRT_GEMM_REDUCE4", 1) != 0))
}

/// `MPSRT_GEMM_BIG_MIN` (default 0: generation 2's own threshold, its split-K target): 128×128
/// blocks only for products with at least this many (opt-in; see [`plan_gemm_tuned_big`]).
fn big_min() -> usize {
    static B: OnceLock<usize> = OnceLock::new();
    *B.get_or_init(|| super::env_knob("MPSRT_GEMM_BIG_MIN", 0))
}

/// `MPSRT_GEMM_SK` (default [`SK_DEFAULT_RULE`], 2: [`plan_stream_k_model`] where the wave
/// model predicts a gain, f32 only; 0: off; 1: [`plan_stream_k`] picks stream-K where it fits),
/// `MPSRT_GEMM_SK_WGS` (its workgroups; default the split-K target, 264) and
/// `MPSRT_GEMM_SK_MIN_STEPS` (16-deep K steps per workgroup at least; default 16), read once.
fn sk_env() -> (u8, Option<usize>, usize) {
    static E: OnceLock<(u8, Option<usize>, usize)> = OnceLock::new();
    *E.get_or_init(|| {
        let on = super::env_knob("MPSRT_GEMM_SK", SK_DEFAULT_RULE).min(2) as u8;
        let w = super::env_knob("MPSRT_GEMM_SK_WGS", 0);
        (on, (w > 0).then_some(w), super::env_knob("MPSRT_GEMM_SK_MIN_STEPS", 16))
    })
}

/// Stream-K rule `rule` (`MPSRT_GEMM_SK`: 0 none, 1 [`plan_stream_k`] with `wgs` workgroups
/// and `min_steps`, 2 [`plan_stream_k_model`] — f32 only, at `target`: its rates are f32
/// measurements at two workgroups per SM) for a product that generation 2 plans: the stream-K
/// tune and its workgroups, or `None` (generation 2's choice stands). Pure.
pub(crate) fn stream_k_pick(
    rule: u8,
    mnk: [usize; 3],
    batch: usize,
    f32x: bool,
    target: usize,
    wgs: usize,
    min_steps: usize,
) -> Option<(GemmTune, usize)> {
    match rule {
        1 => plan_stream_k(mnk, batch, wgs, min_steps).map(|w| (SK_TUNE, w)),
        2 if f32x && target > 0 => plan_stream_k_model(mnk, batch, target).map(|w| (SK_TUNE_64, w)),
        _ => None,
    }
}

/// What one tiled GEMM launch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TiledChoice {
    pub tune: GemmTune,
    /// K slices before the launcher's own limits (dispatch size, partials' binding size).
    pub slices: usize,
    pub checked: bool,
    /// Stream-K workgroups (`tune.sk`; the launcher falls back to the plain tune when the
    /// grid does not fit its limits).
    pub sk_wgs: usize,
}

/// The tiled GEMM's choice for `[m, n, k]` over `batch` matrices (`f32x`: f32 operands): the override, else the
/// environment, else the generation's planner (`tile128_min` / `target`: generation 1's
/// thresholds; generation 2 plans with `target`, or `tile128_min` unsplit when `target` is 0).
pub(crate) fn tiled_choice(
    mnk: [usize; 3],
    batch: usize,
    f32x: bool,
    tile128_min: usize,
    target: usize,
) -> TiledChoice {
    let o = gemm_override();
    let (env_gen, env_tune, env_checked) = env_choice();
    let gen = o.generation.unwrap_or(env_gen);
    let (mut tune, mut slices) = if gen == 2 {
        // Split-K off (`target` 0): the same blocks, unsplit.
        let t0 = if target == 0 { tile128_min } else { target };
        let (mut t, s) = plan_gemm_tuned_big(mnk, batch, t0, big_min());
        // `MPSRT_GEMM_K16_MIN`: 64×64 blocks keep 8-deep slabs below this K (model-level A/B).
        if (t.bm, t.bn) == (64, 64) && mnk[2] < k16_min() {
            t.k16 = false;
        }
        (t, if target == 0 { 1 } else { s })
    } else {
        let p = plan_gemm(mnk, batch, tile128_min, target);
        (GemmTune::legacy(p.tile), p.slices)
    };
    if let Some(t) = o.tune.or(env_tune) {
        // A forced block keeps split-K for its own grid.
        if (t.bm, t.bn) != (tune.bm, tune.bn) && target > 0 {
            let [m, n, _] = mnk;
            let wgs = m.div_ceil(t.bm as usize) * n.div_ceil(t.bn as usize) * batch;
            slices = splitk_slices(mnk, wgs, target);
        }
        tune = t;
    }
    if let Some(s) = o.slices {
        slices = if s >= 1 && mnk[2].is_multiple_of(s) { s } else { 1 };
    }
    let checked = o.checked.or(env_checked).unwrap_or(gen != 2);
    let (sk_env_rule, sk_w, sk_min) = sk_env();
    let sk_rule = o.stream_k.unwrap_or(sk_env_rule);
    let wgs = o.sk_wgs.or(sk_w).unwrap_or(if target == 0 { tile128_min } else { target });
    let mut sk_wgs = 0;
    if tune.sk {
        (slices, sk_wgs) = (1, wgs);
    } else if gen == 2 && o.tune.or(env_tune).is_none() && o.slices.is_none() {
        if let Some((t, w)) = stream_k_pick(sk_rule, mnk, batch, f32x, target, wgs, sk_min) {
            (tune, slices, sk_wgs) = (t, 1, w);
        }
    }
    TiledChoice { tune, slices, checked, sk_wgs }
}

/// 128×128 tiles (8×8 per thread) once the product has this many of them
/// (`MPSRT_GEMM_TILE128_MIN`, default 264 = 2 × an H100/H200's 132 SMs); fewer, and 64×64
/// tiles keep more workgroups busy. BERT-base b8 on the H200 (bert call 1, `BENCH_ONLY=bert`):
/// QKV 1024×2304×768 (144 tiles of 128) 0.2375 ms with 128×128 tiles, 0.191 with 64×64; FFN up
/// 1024×3072×768 (192 tiles) 0.237 vs 0.228 — under two waves of the large tile the last
/// wave's idle SMs cost more than the small tile's lower arithmetic intensity (the default was
/// 128 before).
pub(super) fn tile128_min() -> usize {
    static T: OnceLock<usize> = OnceLock::new();
    *T.get_or_init(|| super::env_knob("MPSRT_GEMM_TILE128_MIN", 2 * 132))
}

/// Workgroups a tiled GEMM launch aims for before it splits K (`MPSRT_GEMM_SPLITK_WGS`,
/// default 264): twice the compute units of the largest GPU tuned for (H100: 132 SMs). wgpu
/// reports no compute-unit count; on a smaller GPU the extra workgroups only queue, and the
/// slices' partial sums stay a small fraction of the operand traffic (see [`plan_gemm`]).
/// `MPSRT_GEMM_SPLITK=0` turns split-K off (A/B timing).
pub(super) fn splitk_target() -> usize {
    static T: OnceLock<usize> = OnceLock::new();
    *T.get_or_init(|| {
        if super::env_knob("MPSRT_GEMM_SPLITK", 1) == 0 {
            0
        } else {
            super::env_knob("MPSRT_GEMM_SPLITK_WGS", 2 * 132)
        }
    })
}

/// Whether f16 products on the tiled GEMM split K too (`MPSRT_GEMM_SPLITK_F16`, default on).
pub(super) fn splitk_f16() -> bool {
    static T: OnceLock<bool> = OnceLock::new();
    *T.get_or_init(|| super::env_knob("MPSRT_GEMM_SPLITK_F16", 1) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuned_planner_on_bert_and_square_shapes() {
        let t = |bm, bn, db, k16| GemmTune { bm, bn, db, wl: true, k16, sk: false };
        let (big, mid, small) =
            (t(128, 128, false, true), t(128, 64, true, false), t(64, 64, true, true));
        // BERT-base b8 (M = 1024 tokens) at the H100 target of 264 workgroups.
        assert_eq!(plan_gemm_tuned([1024, 3072, 768], 1, 264), (mid, 1));
        assert_eq!(plan_gemm_tuned([1024, 2304, 768], 1, 264), (mid, 2));
        assert_eq!(plan_gemm_tuned([1024, 768, 768], 1, 264), (mid, 4));
        assert_eq!(plan_gemm_tuned([1024, 768, 3072], 1, 264), (mid, 4));
        // As a batch of 8 sequences (B broadcast): the same grids.
        assert_eq!(plan_gemm_tuned([128, 2304, 768], 8, 264), (mid, 2));
        assert_eq!(plan_gemm_tuned([128, 768, 3072], 8, 264), (mid, 4));
        // Batch 1 (M = 128): 64×64 split as the legacy planner does.
        assert_eq!(plan_gemm_tuned([128, 2304, 768], 1, 264), (small, 3));
        assert_eq!(plan_gemm_tuned([128, 768, 3072], 1, 264), (small, 8));
        // Attention's per-head products at b8 (96 heads): K too short to split 128×64 blocks
        // to two waves, so 64×64.
        assert_eq!(plan_gemm_tuned([128, 128, 64], 96, 264), (small, 1));
        assert_eq!(plan_gemm_tuned([128, 64, 128], 96, 264), (small, 1));
        assert_eq!(plan_gemm_tuned([4096, 4096, 4096], 1, 264), (big, 1));
        // Stream-K: BERT b8's Q/K/V (144 blocks, 26 steps each), FFN up (192) and down (48
        // blocks of 192 steps); not the attention output (48 blocks of 48 steps: 8.7 each),
        // not b1 (18 blocks), not a full wave.
        assert_eq!(plan_stream_k([1024, 2304, 768], 1, 264, 16), Some(264));
        assert_eq!(plan_stream_k([128, 2304, 768], 8, 264, 16), Some(264));
        assert_eq!(plan_stream_k([1024, 3072, 768], 1, 264, 16), Some(264));
        assert_eq!(plan_stream_k([1024, 768, 3072], 1, 264, 16), Some(264));
        assert_eq!(plan_stream_k([1024, 768, 768], 1, 264, 16), None);
        assert_eq!(plan_stream_k([1024, 768, 768], 1, 264, 8), Some(264));
        assert_eq!(plan_stream_k([128, 2304, 768], 1, 264, 16), None);
        assert_eq!(plan_stream_k([4096, 4096, 4096], 1, 264, 16), None);
        assert_eq!(plan_stream_k([1 << 14, 128, 1 << 20], 1, 264, 16), None);
        // `MPSRT_GEMM_BIG_MIN` 528: b16's FFN up (384 blocks of 128×128) takes 768 of 128×64,
        // unsplit; 4096³ (1024) keeps 128×128; at or below the target nothing changes.
        let b16_up = [128, 3072, 768];
        assert_eq!(plan_gemm_tuned(b16_up, 16, 264), (big, 1));
        assert_eq!(plan_gemm_tuned_big(b16_up, 16, 264, 528), (mid, 1));
        assert_eq!(plan_gemm_tuned_big([4096, 4096, 4096], 1, 264, 528), (big, 1));
        for big_min in [0, 100, 264] {
            for (mnk, z) in [(b16_up, 16), ([128, 768, 3072], 16), ([4096, 4096, 768], 1)] {
                assert_eq!(plan_gemm_tuned_big(mnk, z, 264, big_min), plan_gemm_tuned(mnk, z, 264));
            }
        }
        // K = 64 is too short to split.
        assert_eq!(plan_gemm_tuned([128, 4096, 64], 1, 264), (small, 1));
        for m in [1, 7, 64, 128, 300, 1024] {
            for n in [1, 33, 768, 3072] {
                for k in [8, 256, 768, 1000, 3072, 65536] {
                    let (_, s) = plan_gemm_tuned([m, n, k], 1, 264);
                    assert!((1..=16).contains(&s), "{m} {n} {k}: {s}");
                    if s > 1 {
                        assert!(k.is_multiple_of(s) && (k / s) >= 128 && (k / s).is_multiple_of(8));
                    }
                }
            }
        }
    }
    /// The wave model against call A's in-process b8 A/B on the H100 (TFLOP/s, generation 2
    /// and 128x64_db0_wl1_k16_sk@w264): within 8%, and the rule picks stream-K exactly where
    /// it measured faster.
    #[test]
    fn stream_k_wave_model_matches_call_a_and_picks_only_qkv() {
        let measured = [
            ([128, 2304, 768], 24.72, 28.24),
            ([128, 768, 768], 22.78, 21.62),
            ([128, 3072, 768], 30.80, 28.13),
            ([128, 768, 3072], 28.67, 27.77),
        ];
        for (mnk, g, sk) in measured {
            let (pg, psk) = gemm_rate_model(mnk, 8, plan_gemm_tuned(mnk, 8, 264), 132);
            for (p, m) in [(pg, g), (psk, sk)] {
                assert!((p / m - 1.0).abs() < 0.08, "{mnk:?}: predicted {p:.2}, measured {m}");
            }
            let chose = plan_stream_k_model(mnk, 8, 264).is_some();
            assert_eq!(chose, sk > g * 1.05, "{mnk:?}");
        }
        // The same products as one [1024, K] matrix.
        assert_eq!(plan_stream_k_model([1024, 2304, 768], 1, 264), Some(264));
        assert_eq!(plan_stream_k_model([1024, 3072, 768], 1, 264), None);
        // b1 (M = 128): too few steps per workgroup; large squares: full waves.
        for n in [768, 2304, 3072] {
            assert_eq!(plan_stream_k_model([128, n, 768], 1, 264), None);
        }
        assert_eq!(plan_stream_k_model([128, 768, 3072], 1, 264), None);
        assert_eq!(plan_stream_k_model([4096, 4096, 4096], 1, 264), None);
        // Attention's per-head products (K 64 / 128) stay tiled.
        assert_eq!(plan_stream_k_model([128, 128, 64], 96, 264), None);
        assert_eq!(plan_stream_k_model([128, 64, 128], 96, 264), None);
        // b16's Q/K/V: 288 blocks of 128×128 are 2.2 SM rounds (the model predicts stream-K;
        // H100 call B measured 0.2418 ms against generation 2's 0.2933).
        assert_eq!(plan_stream_k_model([128, 2304, 768], 16, 264), Some(264));
        // Degenerate inputs, and a step count past 31 bits.
        assert_eq!(plan_stream_k_model([0, 768, 768], 1, 264), None);
        assert_eq!(plan_stream_k_model([1024, 2304, 768], 1, 0), None);
        // The knob's values: off, the 128×128 rule, the model (f32 only, not with split-K off).
        let qkv = [128, 2304, 768];
        assert_eq!(stream_k_pick(0, qkv, 8, true, 264, 264, 16), None);
        assert_eq!(stream_k_pick(1, qkv, 8, true, 264, 264, 16), Some((SK_TUNE, 264)));
        assert_eq!(stream_k_pick(2, qkv, 8, true, 264, 264, 16), Some((SK_TUNE_64, 264)));
        assert_eq!(stream_k_pick(2, qkv, 8, false, 264, 264, 16), None);
        assert_eq!(stream_k_pick(2, qkv, 8, true, 0, 264, 16), None);
        assert_eq!(stream_k_pick(2, [128, 3072, 768], 8, true, 264, 264, 16), None);
    }

    /// With `MPSRT_GEMM_SK` unset the wave-model rule is on (H100 call B: BERT b8/b16 faster
    /// end to end): BERT b8's Q/K/V runs 128×64 stream-K over 264 workgroups, FFN up keeps
    /// generation 2's tune, and an f16 product is never taken.
    #[test]
    fn stream_k_wave_model_is_the_default() {
        assert_eq!(SK_DEFAULT_RULE, 2);
        let knobs = [
            "MPSRT_GEMM_SK",
            "MPSRT_GEMM_SK_WGS",
            "MPSRT_GEMM_GEN",
            "MPSRT_GEMM_TUNE",
            "MPSRT_GEMM_BIG_MIN",
        ];
        if knobs.iter().any(|k| std::env::var_os(k).is_some()) {
            return; // the environment chose the planner for this process
        }
        let qkv = tiled_choice([128, 2304, 768], 8, true, 264, 264);
        assert_eq!((qkv.tune, qkv.slices, qkv.sk_wgs), (SK_TUNE_64, 1, 264));
        let up = tiled_choice([128, 3072, 768], 8, true, 264, 264);
        assert_eq!(
            (up.tune, up.slices, up.sk_wgs),
            (plan_gemm_tuned([128, 3072, 768], 8, 264).0, 1, 0)
        );
        let half = tiled_choice([128, 2304, 768], 8, false, 264, 264);
        assert!(!half.tune.sk && half.sk_wgs == 0);
    }
}
