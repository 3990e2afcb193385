//! The conv planner: which GPU algorithm runs an ungrouped conv, with which output tile and how
//! many K slices. Pure (geometry + adapter limits + the forced choice in, a plan out), so every
//! rule is unit-tested without a GPU.
//!
//! Algorithms: the implicit-GEMM kernel (`conv_gemm`) with a `bm × bn` tile and optionally
//! split-K inside the kernel (each workgroup `z` sums a K slice into an `[S, N, OC, P]` buffer,
//! one reduce pass applies bias, residual and activation); Winograd F(2×2, 3×3) or F(4×4, 3×3)
//! for 3×3 stride-1 convs (`gpu/winograd.rs`); or the older lowering (`gpu/conv.rs`: im2col or the
//! input itself + the tiled matmul, merged batches, split-K over strided views).
//!
//! `MPSRT_CONV_ALGO` (read per call) forces a choice: `gemm` (implicit GEMM, whole K), `splitk`
//! (implicit GEMM with ≥ 2 K slices where K allows), `winograd` (where eligible, the cheaper
//! of F(2,3) and F(4,3)), `winograd2` / `winograd4` (that tile size), `lowered`
//! (im2col + matmul), `legacy` (the route before this planner: implicit GEMM only with ≥ 256
//! 64×64 tiles, else lowered) or `auto` (default). A forced algorithm that cannot run a conv
//! (Winograd on a 1×1, anything past the binding limit) falls back to `auto`'s choice.
//!
//! `auto` (= `model`): every conv, batch 1 included, takes the cheapest of Winograd and
//! every (tile, slices) of the implicit GEMM (Winograd only when ≥ 10% cheaper) under a cost
//! model of an NVIDIA-class GPU ([`CostModel`]): workgroups run in (fractional) waves of
//! `sms × resident(tile)`; a wave costs the tile's FMAs at the tile's efficiency; split-K adds
//! its partial buffer's traffic and one launch; Winograd costs its transforms' traffic (V and M
//! are 4× the input and output for F(2,3), 2.25× for F(4,3), plus the partial tiles at the
//! map's edges), three launches, and a batched GEMM of α² products with 2.25× (F(2,3)) or 4×
//! (F(4,3)) fewer FMAs per output. The GEMM constants are fitted to the first H100 timings of
//! every algorithm on ResNet-50's and DenseNet-121's batch-32 shapes (10% log-RMS error; see
//! [`tile_traits`]); the Winograd F(2,3) costs then fall within ~15% of its measured times;
//! F(4,3) and the 32×128 tile are not measured yet. `bench/gpu.sh convs` (`bench_ops_b` under
//! each `MPSRT_CONV_ALGO`) gives the data to refit them. Batch 1 used the `legacy` route until
//! the H200 measured the model ahead on all four batch-1 CNNs with plan replay (session 11 call
//! C, `bench/results/2026-11-26-h200/session11/callC`: resnet50 1.82–1.94 → 1.61–1.65 ms,
//! densenet121 4.08–4.10 → 3.34–3.42, mobilenet_v3_small 0.78 → 0.69, efficientnet_b0
//! 1.63–1.81 → 1.62); `legacy` still forces the old route.

use crate::conv::ConvGeom;

/// The algorithm `MPSRT_CONV_ALGO` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConvAlgo {
    Auto,
    Legacy,
    Gemm,
    SplitK,
    /// Winograd with the cheaper tile, or only F(m, 3) when `Some(m)`.
    Winograd(Option<u32>),
    Lowered,
    /// The cost model at every batch size, batch 1 included — what `auto` now does (issue 22:
    /// with plan replay the host no longer bounds batch-1 latency, and the implicit GEMM with
    /// in-kernel split-K is one or two dispatches where the legacy route's im2col + GEMM +
    /// reduce is three).
    Model,
}

impl ConvAlgo {
    pub(crate) fn parse(s: &str) -> Option<ConvAlgo> {
        Some(match s.trim() {
            "" | "auto" => ConvAlgo::Auto,
            "legacy" => ConvAlgo::Legacy,
            "gemm" | "implicit" => ConvAlgo::Gemm,
            "splitk" | "split-k" => ConvAlgo::SplitK,
            "winograd" => ConvAlgo::Winograd(None),
            "winograd2" => ConvAlgo::Winograd(Some(2)),
            "winograd4" => ConvAlgo::Winograd(Some(4)),
            "lowered" | "im2col" => ConvAlgo::Lowered,
            "model" => ConvAlgo::Model,
            _ => return None,
        })
    }

    /// `MPSRT_CONV_ALGO`, read per call (a few hundred ns against a conv) so one test process
    /// can cover every path; unknown values mean `auto`.
    pub(crate) fn from_env() -> ConvAlgo {
        std::env::var("MPSRT_CONV_ALGO")
            .ok()
            .and_then(|v| ConvAlgo::parse(&v))
            .unwrap_or(ConvAlgo::Auto)
    }
}

/// What runs the conv.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConvPlan {
    /// The implicit-GEMM kernel; `kslice` 0 = whole K, else split-K with slices of `kslice`.
    Gemm { bm: u32, bn: u32, kslice: u32 },
    /// Winograd F(m×m, 3×3), m = 2 or 4.
    Winograd { m: u32 },
    /// `gpu/conv.rs`'s im2col / direct lowering onto the tiled matmul.
    Lowered,
}

/// The adapter and the knobs the planner reads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlanLimits {
    pub max_binding: u64,
    pub max_wg_dim: u32,
    /// `MPSRT_CONV_GEMM`: `Some(true)` takes the implicit GEMM for every conv it can run
    /// (tests), `Some(false)` never, `None` leaves it to the algorithm choice.
    pub gemm_route: Option<bool>,
    /// `MPSRT_CONV_GEMM_MIN_TILES` (the legacy route's threshold, 64×64 tiles).
    pub gemm_min_tiles: usize,
    /// `MPSRT_CONV_GEMM_TILE` when set.
    pub tile_override: Option<(u32, u32)>,
    pub model: CostModel,
}

/// Throughput constants of the cost model (see the module doc).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CostModel {
    /// Streaming multiprocessors (`MPSRT_CONV_SMS`, default 132: an H100 SXM).
    pub sms: usize,
    /// FMAs per ns one SM sustains on a 128×128 tile (fitted: ~24 TFLOP/s on 132 SMs).
    pub fma_per_ns_sm: f64,
    /// Device-memory bytes per ns.
    pub bytes_per_ns: f64,
    /// Cost of one more dispatch, ns.
    pub launch_ns: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel { sms: 132, fma_per_ns_sm: 90.0, bytes_per_ns: 2500.0, launch_ns: 4000.0 }
    }
}

/// Workgroups of a tile shape resident per SM and the tile's FMA efficiency relative to
/// 128×128, fitted (with the wave rule and `fma_per_ns_sm`) to the H100 timings of every
/// ResNet-50/DenseNet-121 batch-32 shape under `gemm` and `splitk` (bench/results/2026-11-25-
/// h100/session10/call2: 54 points, log-RMS error 10% after a fixed 70 µs per synchronized
/// call): 128×64 tiles are as efficient as 128×128 with one more resident, 64×64 reach 80%.
fn tile_traits(bm: u32, bn: u32) -> (usize, f64) {
    match (bm, bn) {
        (128, 128) => (2, 1.0),
        // 4×4 outputs per thread, as 64×64 (the narrow tile for ≤ 32-channel layers; not
        // measured yet: 64×64's values).
        (64, 64) | (32, 128) => (2, 0.8),
        _ => (3, 1.0),
    }
}

impl CostModel {
    /// ns for the implicit GEMM of `[oc, k] · [k, cols]` with a `bm × bn` tile in `slices`
    /// K slices of `kslice`, the split-K reduce included.
    fn gemm_ns(
        &self,
        [oc, k, cols]: [usize; 3],
        (bm, bn): (u32, u32),
        slices: usize,
        kslice: usize,
    ) -> f64 {
        let (resident, eff) = tile_traits(bm, bn);
        let wg = oc.div_ceil(bm as usize) * cols.div_ceil(bn as usize) * slices;
        // Fractional waves (the fit preferred them to whole ones: workgroups finish unevenly),
        // but never less than one workgroup's time.
        let waves = (wg as f64 / (self.sms * resident) as f64).max(1.0);
        let klen = if slices == 1 { k } else { kslice };
        let wave_ns =
            (resident * bm as usize * bn as usize * klen) as f64 / (self.fma_per_ns_sm * eff);
        let mut ns = waves * wave_ns;
        if slices > 1 {
            ns += ((slices + 1) * oc * cols * 4) as f64 / self.bytes_per_ns + self.launch_ns;
        }
        ns
    }
}

fn u32_ok(v: usize) -> bool {
    v <= u32::MAX as usize / 2
}

/// Whether the implicit-GEMM kernel can run `g` with `bn`-wide column tiles and `slices`
/// slices: every operand (and the partial buffer) within one binding, indices within u32/i32.
fn gemm_fits(g: &ConvGeom, lim: &PlanLimits, bn: u32, slices: usize) -> bool {
    let fits = |elems: usize| (elems as u64).saturating_mul(4) <= lim.max_binding && u32_ok(elems);
    let cols = g.n * g.oh * g.ow;
    let total = g.oc * cols;
    let k = g.c * g.kh * g.kw;
    fits(g.n * g.c * g.h * g.w)
        && fits(total.saturating_mul(slices))
        && fits(g.oc * k)
        && cols.div_ceil(bn as usize) <= lim.max_wg_dim as usize
        && g.oc.div_ceil(64) <= lim.max_wg_dim as usize
        && slices <= lim.max_wg_dim as usize
}

/// Winograd F(m,3) eligibility: 3×3, stride 1, undilated, ungrouped, and the transformed
/// input V (`α²·C·T`), product M (`α²·OC·T`) and weights U (`α²·OC·C`) each within a binding.
fn winograd_fits(g: &ConvGeom, lim: &PlanLimits, m: usize) -> bool {
    let shape_ok = g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1;
    let a2 = (m + 2) * (m + 2);
    let t = g.n * g.oh.div_ceil(m) * g.ow.div_ceil(m);
    let fits = |elems: usize| (elems as u64).saturating_mul(4) <= lim.max_binding && u32_ok(elems);
    shape_ok
        && g.groups == 1
        && t > 0
        && fits(a2 * g.c * t)
        && fits(a2 * g.oc * t)
        && fits(a2 * g.oc * g.c)
        && fits(g.n * g.c * g.h * g.w)
        && fits(g.n * g.oc * g.oh * g.ow)
}

/// Winograd F(`mt`,3)'s modelled cost: transforms (V and M written and read once, input and
/// output once, U written and read), three extra launches, and the α² batched products run by
/// the tiled matmul (costed as one GEMM with α²× the columns, best 128- or 64-wide tile).
fn winograd_ns(g: &ConvGeom, m: &CostModel, mt: usize) -> f64 {
    let a2 = (mt + 2) * (mt + 2);
    let t = g.n * g.oh.div_ceil(mt) * g.ow.div_ceil(mt);
    let bytes = 4
        * (2 * a2 * (g.c + g.oc) * t
            + 2 * a2 * g.oc * g.c
            + g.n * g.c * g.h * g.w
            + g.n * g.oc * g.oh * g.ow);
    let gemm = [(128, 128), (64, 64)]
        .into_iter()
        .map(|tile| m.gemm_ns([g.oc, g.c, a2 * t], tile, 1, 0))
        .fold(f64::INFINITY, f64::min);
    bytes as f64 / m.bytes_per_ns + 3.0 * m.launch_ns + gemm
}

/// The cheaper Winograd tile that fits (only `only` when given), with its modelled cost.
fn best_winograd(g: &ConvGeom, lim: &PlanLimits, only: Option<u32>) -> Option<(ConvPlan, f64)> {
    [2u32, 4]
        .into_iter()
        .filter(|&m| only.is_none_or(|o| o == m) && winograd_fits(g, lim, m as usize))
        .map(|m| (ConvPlan::Winograd { m }, winograd_ns(g, &lim.model, m as usize)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// The slice length for `slices` slices of `k`: a multiple of 8 (the kernel's K step).
fn kslice_for(k: usize, slices: usize) -> usize {
    k.div_ceil(slices).next_multiple_of(8)
}

/// The cheapest (tile, slices) of the implicit GEMM for `g` under `lim`'s model, with at
/// least `min_slices` slices when K allows (1 = whole K allowed), `max_slices` at most, and
/// slices of at least 64 K rows unless forced; `None` when nothing fits.
fn best_gemm(
    g: &ConvGeom,
    lim: &PlanLimits,
    min_slices: usize,
    max_slices: usize,
) -> Option<(ConvPlan, f64)> {
    let cols = g.n * g.oh * g.ow;
    let k = g.c * g.kh * g.kw;
    let tiles: Vec<(u32, u32)> = match lim.tile_override {
        Some(t) => vec![t],
        // 128-channel tiles only where there are that many channels (a 64-channel layer would
        // compute a half-empty tile).
        None if g.oc >= 128 => vec![(128, 128), (128, 64), (64, 128), (64, 64)],
        // 32×128 where a 64-row tile would be a third or more empty (DenseNet's 32-channel
        // growth convs).
        None if g.oc <= 32 || (g.oc > 64 && g.oc <= 96) => vec![(64, 128), (64, 64), (32, 128)],
        None => vec![(64, 128), (64, 64)],
    };
    let min_klen = if min_slices > 1 { 8 } else { 64 };
    let mut best: Option<(ConvPlan, f64)> = None;
    for &(bm, bn) in &tiles {
        let mut seen = 0;
        for want in 1..=max_slices {
            let ks = kslice_for(k, want);
            let slices = k.div_ceil(ks);
            if slices == seen || (slices > 1 && ks < min_klen) {
                continue;
            }
            seen = slices;
            // Split partials are reduced with vec4 loads: N·OC·P must be a multiple of 4.
            let split_ok = slices == 1 || (g.oc * cols).is_multiple_of(4);
            if (slices < min_slices && k >= 16) || !split_ok || !gemm_fits(g, lim, bn, slices) {
                continue;
            }
            let ns = lim.model.gemm_ns([g.oc, k, cols], (bm, bn), slices, ks);
            let kslice = if slices == 1 { 0 } else { ks as u32 };
            if best.is_none_or(|(_, b)| ns < b) {
                best = Some((ConvPlan::Gemm { bm, bn, kslice }, ns));
            }
        }
    }
    best
}

/// Winograd is chosen only when modelled at least 10% cheaper than the implicit GEMM.
const WINOGRAD_MARGIN: f64 = 0.9;

/// The legacy route: the implicit GEMM (whole K, the old tile rule) with ≥ `gemm_min_tiles`
/// 64×64 tiles, else the lowering.
fn legacy(g: &ConvGeom, lim: &PlanLimits) -> ConvPlan {
    let cols = g.n * g.oh * g.ow;
    let tiles64 = g.oc.div_ceil(64) * cols.div_ceil(64);
    let always = lim.gemm_route == Some(true);
    if lim.gemm_route == Some(false) || (!always && tiles64 < lim.gemm_min_tiles) {
        return ConvPlan::Lowered;
    }
    let (bm, bn) = lim.tile_override.unwrap_or_else(|| {
        let bm = if g.oc >= 128 { 128 } else { 64 };
        let bn = if g.oc.div_ceil(bm) * cols.div_ceil(128) >= 264 { 128 } else { 64 };
        (bm as u32, bn as u32)
    });
    if gemm_fits(g, lim, bn, 1) {
        ConvPlan::Gemm { bm, bn, kslice: 0 }
    } else {
        ConvPlan::Lowered
    }
}

/// The plan for an ungrouped or grouped (non-depthwise, non-transposed) conv `g`.
pub(crate) fn plan_conv(g: &ConvGeom, lim: &PlanLimits, algo: ConvAlgo) -> ConvPlan {
    if g.groups != 1 || g.n * g.oc * g.oh * g.ow == 0 {
        return ConvPlan::Lowered;
    }
    let model = || -> ConvPlan {
        if lim.gemm_route.is_some() {
            return legacy(g, lim);
        }
        let gemm = best_gemm(g, lim, 1, 32);
        let wino = best_winograd(g, lim, None);
        match (gemm, wino) {
            // Winograd must win by a margin: its transform traffic is the least certain term.
            (Some(a), Some(b)) => {
                if b.1 < WINOGRAD_MARGIN * a.1 {
                    b.0
                } else {
                    a.0
                }
            }
            (Some(a), None) => a.0,
            (None, Some(b)) => b.0,
            (None, None) => ConvPlan::Lowered,
        }
    };
    let auto = model;
    match algo {
        ConvAlgo::Auto => auto(),
        ConvAlgo::Model => model(),
        ConvAlgo::Legacy => legacy(g, lim),
        ConvAlgo::Lowered => ConvPlan::Lowered,
        ConvAlgo::Winograd(m) => best_winograd(g, lim, m).map_or_else(auto, |p| p.0),
        ConvAlgo::Gemm => best_gemm(g, lim, 1, 1).map_or_else(auto, |p| p.0),
        ConvAlgo::SplitK => {
            best_gemm(g, lim, 2, 32).or_else(|| best_gemm(g, lim, 1, 1)).map_or_else(auto, |p| p.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geom(n: usize, c: usize, hw: usize, oc: usize, k: usize, stride: usize) -> ConvGeom {
        let pad = k / 2;
        let o = (hw + 2 * pad - k) / stride + 1;
        ConvGeom {
            n,
            c,
            h: hw,
            w: hw,
            oc,
            oh: o,
            ow: o,
            kh: k,
            kw: k,
            sh: stride,
            sw: stride,
            pt: pad,
            pl: pad,
            dh: 1,
            dw: 1,
            groups: 1,
        }
    }

    fn h100() -> PlanLimits {
        PlanLimits {
            max_binding: 2 << 30,
            max_wg_dim: 65535,
            gemm_route: None,
            gemm_min_tiles: 256,
            tile_override: None,
            model: CostModel::default(),
        }
    }

    #[test]
    #[ignore]
    fn print_resnet_plans() {
        for n in [1, 32] {
            for (c, hw, oc, k, s) in [
                (3, 224, 64, 7, 2),
                (64, 56, 64, 1, 1),
                (64, 56, 64, 3, 1),
                (64, 56, 256, 1, 1),
                (256, 56, 64, 1, 1),
                (256, 56, 128, 1, 1),
                (128, 56, 128, 3, 2),
                (128, 28, 512, 1, 1),
                (256, 56, 512, 1, 2),
                (512, 28, 128, 1, 1),
                (128, 28, 128, 3, 1),
                (512, 28, 256, 1, 1),
                (256, 28, 256, 3, 2),
                (256, 14, 1024, 1, 1),
                (512, 28, 1024, 1, 2),
                (1024, 14, 256, 1, 1),
                (256, 14, 256, 3, 1),
                (1024, 14, 512, 1, 1),
                (512, 14, 512, 3, 2),
                (512, 7, 2048, 1, 1),
                (1024, 14, 2048, 1, 2),
                (2048, 7, 512, 1, 1),
                (512, 7, 512, 3, 1),
                (128, 56, 32, 3, 1),
                (128, 28, 32, 3, 1),
                (128, 14, 32, 3, 1),
                (128, 7, 32, 3, 1),
            ] {
                let g = geom(n, c, hw, oc, k, s);
                let lim = h100();
                let w = best_winograd(&g, &lim, None).map(|(p, ns)| (p, ns / 1e3));
                let b = best_gemm(&g, &lim, 1, 32).map(|(p, ns)| (p, ns / 1e3));
                println!(
                    "n{n} {c}->{oc} {hw} k{k}s{s}: {:?} gemm {b:?} wino {w:?}",
                    plan_conv(&g, &lim, ConvAlgo::Auto)
                );
            }
        }
    }

    #[test]
    fn algo_names_parse() {
        assert_eq!(ConvAlgo::parse("winograd"), Some(ConvAlgo::Winograd(None)));
        assert_eq!(ConvAlgo::parse("winograd4"), Some(ConvAlgo::Winograd(Some(4))));
        assert_eq!(ConvAlgo::parse(" splitk"), Some(ConvAlgo::SplitK));
        assert_eq!(ConvAlgo::parse("gemm"), Some(ConvAlgo::Gemm));
        assert_eq!(ConvAlgo::parse("im2col"), Some(ConvAlgo::Lowered));
        assert_eq!(ConvAlgo::parse("legacy"), Some(ConvAlgo::Legacy));
        assert_eq!(ConvAlgo::parse("model"), Some(ConvAlgo::Model));
        assert_eq!(ConvAlgo::parse(""), Some(ConvAlgo::Auto));
        assert_eq!(ConvAlgo::parse("fft"), None);
    }

    #[test]
    fn batch_32_small_maps_take_winograd_or_split_k() {
        let lim = h100();
        // ResNet-50's 3×3 stride-1 layers on 28×28, 14×14 and 7×7 maps: Winograd, F(4,3)
        // (4× fewer multiplies, V only 2.25× the input) wherever its edge tiles waste little.
        for (c, hw) in [(128, 28), (256, 14), (512, 7)] {
            let p = plan_conv(&geom(32, c, hw, c, 3, 1), &lim, ConvAlgo::Auto);
            assert!(matches!(p, ConvPlan::Winograd { .. }), "{c}@{hw}: {p:?}");
        }
        assert_eq!(
            plan_conv(&geom(32, 256, 14, 256, 3, 1), &lim, ConvAlgo::Auto),
            ConvPlan::Winograd { m: 4 }
        );
        // Its 7×7 2048→512 1×1 layer (52 128×128 tiles, K = 2048): split-K in the kernel;
        // 512→2048 has 208 such tiles, one wave: whole K.
        match plan_conv(&geom(32, 2048, 7, 512, 1, 1), &lim, ConvAlgo::Auto) {
            ConvPlan::Gemm { kslice, .. } => assert!(kslice > 0, "{kslice}"),
            p => panic!("{p:?}"),
        }
        match plan_conv(&geom(32, 512, 7, 2048, 1, 1), &lim, ConvAlgo::Auto) {
            ConvPlan::Gemm { kslice: 0, .. } => {}
            p => panic!("{p:?}"),
        }
        // A 56×56 1×1 layer fills the GPU without splitting.
        match plan_conv(&geom(32, 64, 56, 256, 1, 1), &lim, ConvAlgo::Auto) {
            ConvPlan::Gemm { kslice: 0, .. } => {}
            p => panic!("{p:?}"),
        }
        // DenseNet's 128→32 3×3 on a 56×56 map, forced onto the implicit GEMM: the 32×128 tile.
        let dense = geom(32, 128, 56, 32, 3, 1);
        match plan_conv(&dense, &lim, ConvAlgo::Gemm) {
            ConvPlan::Gemm { bm: 32, bn: 128, kslice: 0 } => {}
            p => panic!("{p:?}"),
        }
        // Strided 3×3 and the 7×7 stem are not Winograd's.
        assert!(matches!(
            plan_conv(&geom(32, 128, 56, 128, 3, 2), &lim, ConvAlgo::Auto),
            ConvPlan::Gemm { .. }
        ));
        assert!(matches!(
            plan_conv(&geom(32, 3, 224, 64, 7, 2), &lim, ConvAlgo::Auto),
            ConvPlan::Gemm { .. }
        ));
    }

    #[test]
    fn batch_one_takes_the_cost_model_and_legacy_stays_selectable() {
        let lim = h100();
        for g in [geom(1, 512, 7, 512, 3, 1), geom(1, 64, 56, 64, 1, 1), geom(1, 3, 224, 64, 7, 2)]
        {
            assert_eq!(plan_conv(&g, &lim, ConvAlgo::Auto), plan_conv(&g, &lim, ConvAlgo::Model));
        }
        // DenseNet's 7×7 growth conv (K = 1152, 32 channels): the legacy route lowers it
        // (im2col + GEMM + reduce), the model runs it as one implicit GEMM (or Winograd).
        let g = geom(1, 128, 7, 32, 3, 1);
        assert_eq!(plan_conv(&g, &lim, ConvAlgo::Legacy), ConvPlan::Lowered);
        let m = plan_conv(&g, &lim, ConvAlgo::Auto);
        assert!(matches!(m, ConvPlan::Gemm { .. } | ConvPlan::Winograd { .. }), "{m:?}");
    }

    #[test]
    fn forced_choices_and_their_fallbacks() {
        let lim = h100();
        let g3 = geom(2, 32, 9, 40, 3, 1);
        assert!(matches!(
            plan_conv(&g3, &lim, ConvAlgo::Winograd(None)),
            ConvPlan::Winograd { .. }
        ));
        for m in [2, 4] {
            let p = plan_conv(&g3, &lim, ConvAlgo::Winograd(Some(m)));
            assert_eq!(p, ConvPlan::Winograd { m });
        }
        assert_eq!(plan_conv(&g3, &lim, ConvAlgo::Lowered), ConvPlan::Lowered);
        assert!(matches!(plan_conv(&g3, &lim, ConvAlgo::Gemm), ConvPlan::Gemm { kslice: 0, .. }));
        // K = 288 → at least two slices, each a multiple of 8.
        match plan_conv(&g3, &lim, ConvAlgo::SplitK) {
            ConvPlan::Gemm { kslice, .. } => assert!(kslice > 0 && kslice % 8 == 0 && kslice < 288),
            p => panic!("{p:?}"),
        }
        // Winograd cannot run a 1×1 or a strided conv: the auto plan instead.
        let g1 = geom(2, 32, 9, 40, 1, 1);
        let auto = plan_conv(&g1, &lim, ConvAlgo::Auto);
        assert_eq!(plan_conv(&g1, &lim, ConvAlgo::Winograd(None)), auto);
        // K = 3 cannot split: whole K.
        let tiny = geom(2, 3, 9, 4, 1, 1);
        assert!(matches!(
            plan_conv(&tiny, &lim, ConvAlgo::SplitK),
            ConvPlan::Gemm { kslice: 0, .. }
        ));
        // Grouped convs always lower.
        let grouped = ConvGeom { groups: 2, ..g3 };
        assert_eq!(plan_conv(&grouped, &lim, ConvAlgo::Winograd(None)), ConvPlan::Lowered);
    }

    #[test]
    fn workspaces_past_the_binding_limit_are_never_planned() {
        let lim = PlanLimits { max_binding: 65536, ..h100() };
        // Output 2·40·81 floats fits; V = 16·32·50 = 25600 floats (100 KiB) does not, nor
        // F(4,3)'s 36·32·18.
        let g = geom(2, 32, 9, 40, 3, 1);
        let p = plan_conv(&g, &lim, ConvAlgo::Winograd(None));
        assert!(!matches!(p, ConvPlan::Winograd { .. }), "{p:?}");
        // 16 slices of a 6480-float output would need 405 KiB of partials: fewer slices.
        if let ConvPlan::Gemm { kslice, .. } = plan_conv(&g, &lim, ConvAlgo::SplitK) {
            let slices = if kslice == 0 { 1 } else { 288usize.div_ceil(kslice as usize) };
            assert!(slices * 2 * 40 * 81 * 4 <= 65536, "{slices}");
        }
        // An input past the limit is not the implicit GEMM's.
        let big = geom(4, 64, 32, 8, 3, 1);
        assert_eq!(plan_conv(&big, &lim, ConvAlgo::Gemm), ConvPlan::Lowered);
    }

    #[test]
    fn legacy_rules_and_knobs_are_kept() {
        let mut lim = h100();
        lim.gemm_route = Some(true);
        assert_eq!(
            plan_conv(&geom(1, 8, 5, 8, 3, 1), &lim, ConvAlgo::Auto),
            ConvPlan::Gemm { bm: 64, bn: 64, kslice: 0 }
        );
        lim.tile_override = Some((128, 64));
        assert_eq!(
            plan_conv(&geom(1, 8, 5, 8, 3, 1), &lim, ConvAlgo::Auto),
            ConvPlan::Gemm { bm: 128, bn: 64, kslice: 0 }
        );
        lim.gemm_route = Some(false);
        assert_eq!(
            plan_conv(&geom(32, 256, 14, 256, 1, 1), &lim, ConvAlgo::Legacy),
            ConvPlan::Lowered
        );
    }
}
