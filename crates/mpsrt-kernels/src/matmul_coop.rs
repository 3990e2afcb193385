//! f16 GEMM on the GPU's matrix units (wgpu's `EXPERIMENTAL_COOPERATIVE_MATRIX`: NVIDIA tensor
//! cores through `VK_KHR_cooperative_matrix`, Apple simdgroup matrices), and the pure planner
//! that picks it from the adapter's configuration list.
//!
//! The kernel computes `out[z] = alpha * A[z] · B[z]` (f32 out, contiguous `[z, M, N]`) for f16
//! operands of any strides (so transposed operands and broadcast batches need no copy), with the
//! same metadata block as the tiled GEMM (`matmul_meta`). A workgroup of `WM × WN` subgroups
//! owns a `BM × BN` block of the output; each subgroup owns `TM × TN` cooperative tiles of
//! `S × S` (S = 8 or 16, the configuration's size). K is staged `BK` at a time through
//! workgroup memory with bounds checks (zero fill), which is what makes odd shapes and any
//! stride legal: cooperative loads read whole tiles and must never leave the data. The f16
//! operands are the packed-two-per-u32 buffers mpsrt stores, bound as `array<f16>` (same bytes).
//!
//! Subgroup-scoped operations need every lane of a subgroup and a known number of subgroups per
//! workgroup: the kernel is rendered for one subgroup size, and the planner declines adapters
//! whose subgroup size varies.

pub use crate::matmul_coop_family::CoopTune;
use mpsrt_core::DType;

/// Generations 1 and 2 and the f32 store epilogue, split off to keep this file readable.
#[path = "matmul_coop_gen12.rs"]
mod gen12;
pub(crate) use gen12::store_epilogue;

/// One cooperative-matrix configuration an adapter reports (`C[m×n] += A[m×k] · B[k×n]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopConfig {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    /// Element type of A and B.
    pub ab: DType,
    /// Element type of the accumulator C and the result.
    pub cr: DType,
}

/// A rendered cooperative-matrix GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopMatmulSpec {
    /// Tile size S of the square configuration used (8 or 16).
    pub size: u32,
    /// Accumulator type: F32 (preferred) or F16.
    pub acc: DType,
    /// Lanes per subgroup the kernel is rendered for.
    pub subgroup: u32,
    /// Rank of the (coalesced) broadcast batch dims.
    pub batch_dims: usize,
    /// A is contiguous along K with K, its row stride, offset and batch strides multiples of 8:
    /// staged 8 f16 (one `vec4<u32>`) per load instead of one.
    pub vec_a: bool,
    /// B is contiguous along N with N, its K stride, offset and batch strides multiples of 8.
    pub vec_b: bool,
    /// Kernel generation: 2 (default: double-buffered padded slabs, the next slab's global loads
    /// in flight during the current slab's products, direct stores of interior tiles) or 1 (the
    /// first kernel: one slab buffer, every tile stored through scratch), kept to compare
    /// (`MPSRT_COOP_VARIANT=1`), or 3: the parameterized family of `matmul_coop_family.rs`,
    /// shaped by `tune`.
    pub variant: u8,
    /// Generation 3's parameters (ignored by generations 1 and 2).
    pub tune: CoopTune,
    /// Every workgroup is interior (`M % BM == 0`, `N % BN == 0`, `K % BK == 0`): a generation
    /// 3 kernel with the `fi` or `dg` knob then renders only the interior path, with no branch
    /// around the matrix operations (the branched form measured wrong on the H100). Set by
    /// the launcher for the shape it dispatches.
    pub aligned: bool,
    /// Generation 3 only: the output is f16 (`array<f16>`), rounded from the f32 (or f16)
    /// accumulators on the way out — every tile goes through a per-subgroup scratch of one
    /// row of tiles (`coopStoreT` cannot convert) — so an f16 product needs no f32 buffer and
    /// no separate cast pass. Generations 1 and 2 write f32 ([`with_variant`](Self::with_variant)
    /// clears it when it falls back to them).
    pub out_f16: bool,
    /// Generation 3 only: `+ beta·C`, `+ residual`, activation, applied while storing.
    pub epi: CoopEpilogue,
}

/// The store epilogue of a generation-3 kernel, as the tiled GEMM applies it: `alpha·AB +
/// beta·C[m, n]` (f32 C bound after B, indexed `offC + m·scm + n·scn` from meta words 12–14,
/// the same for every batch matrix), `+ res[z, m, n]` (f32, contiguous like the output, bound
/// next), then the activation (parameters in meta words 3 and 15).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CoopEpilogue {
    pub c: bool,
    pub res: bool,
    pub act: crate::matmul::MatmulAct,
}

impl CoopEpilogue {
    /// Whether anything beyond `alpha·AB` is applied.
    pub fn any(&self) -> bool {
        self.c || self.res || self.act != crate::matmul::MatmulAct::None
    }
}

/// Which kernel the launcher asks for: a fixed generation or a member of generation 3's family
/// (`MPSRT_COOP_VARIANT=1 | 2 | 3 | <tune text>`, see [`CoopVariant::parse`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoopVariant {
    Gen1,
    Gen2,
    Family(CoopTune),
}

impl CoopVariant {
    /// `1`, `2`, `3` (generation 3 with the default tune) or a tune's text
    /// (`w2x2_t4x4_k32_p8_db0_fi1_dg0`, optionally prefixed `3:`).
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "1" => Ok(CoopVariant::Gen1),
            "2" => Ok(CoopVariant::Gen2),
            "3" => Ok(CoopVariant::Family(CoopTune::default())),
            t => CoopTune::parse(t.strip_prefix("3:").unwrap_or(t)).map(CoopVariant::Family),
        }
    }

    /// Text form (`1`, `2`, or the tune's).
    pub fn name(&self) -> String {
        match self {
            CoopVariant::Gen1 => "1".into(),
            CoopVariant::Gen2 => "2".into(),
            CoopVariant::Family(t) => t.name(),
        }
    }
}

/// Subgroups per workgroup along M and N, and cooperative tiles per subgroup along M and N:
/// 4×4 tiles per subgroup reuse each staged A and B fragment four times (128×128 outputs per
/// workgroup with 16×16 tiles, 64×64 with 8×8).
const WM: u32 = 2;
const WN: u32 = 2;
const TM: u32 = 4;
const TN: u32 = 4;
/// K staged per workgroup-memory slab.
const BK: u32 = 32;
/// Generation 2 pads every slab row by 8 f16 (16 bytes): rows stay 16-byte aligned for the
/// matrix loads while consecutive rows start in different banks.
const PAD: u32 = 8;

impl CoopMatmulSpec {
    /// Output rows per workgroup.
    pub fn block_m(&self) -> u32 {
        if self.variant == 3 {
            return crate::matmul_coop_family::block(self).0;
        }
        WM * TM * self.size
    }
    /// Output columns per workgroup.
    pub fn block_n(&self) -> u32 {
        if self.variant == 3 {
            return crate::matmul_coop_family::block(self).1;
        }
        WN * TN * self.size
    }
    /// Threads per workgroup.
    pub fn threads(&self) -> u32 {
        if self.variant == 3 {
            return crate::matmul_coop_family::block(self).2;
        }
        WM * WN * self.subgroup
    }

    /// Workgroup-memory bytes the kernel declares.
    pub fn shared_bytes(&self) -> u32 {
        if self.variant == 3 {
            return crate::matmul_coop_family::shared_bytes(self);
        }
        let (bm, bn, s) = (self.block_m(), self.block_n(), self.size);
        let acc = if self.acc == DType::F32 { 4 } else { 2 };
        let scratch = WM * WN * s * s * acc;
        if self.variant == 1 {
            2 * (bm * BK + BK * bn) + scratch
        } else {
            2 * 2 * (bm * (BK + PAD) + BK * (bn + PAD)) + scratch
        }
    }

    /// This spec as kernel `variant`, falling back to generation 1 when the asked-for kernel's
    /// workgroup memory does not fit `shared_limit` bytes (the device's
    /// `max_compute_workgroup_storage_size`), or a family tune is invalid for this tile size.
    /// Pure.
    pub fn with_variant(self, variant: CoopVariant, shared_limit: u32) -> Self {
        self.with_variant_opts(variant, shared_limit, false)
    }

    /// [`with_variant`](Self::with_variant), also taking tunes that are not verified on
    /// hardware ([`CoopTune::unverified`]) when `experimental` (`MPSRT_COOP_EXPERIMENTAL=1`).
    pub fn with_variant_opts(
        self,
        variant: CoopVariant,
        shared_limit: u32,
        experimental: bool,
    ) -> Self {
        let want = match variant {
            CoopVariant::Gen1 => CoopMatmulSpec { variant: 1, ..self },
            CoopVariant::Gen2 => CoopMatmulSpec { variant: 2, ..self },
            CoopVariant::Family(tune) => CoopMatmulSpec { variant: 3, tune, ..self },
        };
        let tune_ok = want.variant != 3
            || (want.tune.check(want.size).is_ok()
                && (experimental || want.tune.unverified().is_none()));
        let f32_store = CoopMatmulSpec { out_f16: false, ..want };
        if tune_ok && want.shared_bytes() <= shared_limit {
            CoopMatmulSpec { out_f16: want.out_f16 && want.variant == 3, ..want }
        } else if tune_ok && want.variant == 3 && f32_store.shared_bytes() <= shared_limit {
            // The f16 store's row-of-tiles scratch does not fit beside this tune's slabs (two
            // slabs of 8 subgroups): the f32 store, which the launcher casts.
            f32_store
        } else {
            // Generation 1 writes f32 and has no epilogue (`render` refuses one).
            CoopMatmulSpec { variant: 1, out_f16: false, ..self }
        }
    }

    /// The kernel in words, for reports: `v1`, `v2`, or `v3 <tune>`.
    pub fn variant_name(&self) -> String {
        match self.variant {
            3 => format!(
                "v3 {}{}{}{}",
                self.tune.name(),
                if self.aligned { " aligned" } else { "" },
                if self.out_f16 { " f16-out" } else { "" },
                if self.epi.any() { " epilogue" } else { "" }
            ),
            v => format!("v{v}"),
        }
    }

    /// Render the WGSL source; fails for parameters the planner never produces.
    pub fn render(&self) -> Result<String, String> {
        if self.variant != 3 && (self.epi.any() || self.out_f16) {
            return Err(format!(
                "cooperative matmul generation {} has no epilogue or f16 output (generation 3 only)",
                self.variant
            ));
        }
        match self.variant {
            1 => self.render_v1(),
            2 => self.render_v2(),
            3 => {
                self.check()?;
                crate::matmul_coop_family::render(self)
            }
            v => Err(format!("cooperative matmul variant must be 1, 2 or 3, got {v}")),
        }
    }

    fn check(&self) -> Result<(), String> {
        let s = self.size;
        if s != 8 && s != 16 {
            return Err(format!("cooperative tile size must be 8 or 16, got {s}"));
        }
        if !matches!(self.acc, DType::F32 | DType::F16) {
            return Err(format!("cooperative accumulator must be f32 or f16, got {}", self.acc));
        }
        if !self.subgroup.is_power_of_two() || !(4..=128).contains(&self.subgroup) {
            return Err(format!("unsupported subgroup size {}", self.subgroup));
        }
        Ok(())
    }
}

/// Why the cooperative kernel was not chosen (the launcher then uses the tiled GEMM).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoopDecline {
    /// The adapter reports no usable configuration (square 8 or 16, f16 A/B, f32 or f16 C).
    NoConfig,
    /// Subgroup size unknown or variable (`min != max`): the kernel needs a fixed count.
    SubgroupSize(u32, u32),
    /// Too small a product to pay for the matrix units (M, N or K below one tile).
    TooSmall,
    /// Turned off with `MPSRT_COOP_MATMUL=0`.
    Disabled,
    /// Something the kernel does not do yet or a device feature it needs (named).
    Unsupported(&'static str),
}

impl std::fmt::Display for CoopDecline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CoopDecline::NoConfig => {
                f.write_str("no cooperative-matrix configuration with f16 A/B (8x8 or 16x16)")
            }
            CoopDecline::SubgroupSize(lo, hi) => write!(f, "subgroup size varies ({lo}..{hi})"),
            CoopDecline::TooSmall => f.write_str("a dimension is smaller than one tile"),
            CoopDecline::Disabled => f.write_str("MPSRT_COOP_MATMUL=0"),
            CoopDecline::Unsupported(what) => f.write_str(what),
        }
    }
}

/// Pick the cooperative kernel for an f16 product of shape `[m, n, k]` from the adapter's
/// configurations and subgroup sizes, or say why not. Prefers f32 accumulation, then the larger
/// tile (16×16 on NVIDIA); 8×8 is what Apple GPUs offer.
pub fn plan_coop_matmul(
    configs: &[CoopConfig],
    subgroup: (u32, u32),
    mnk: [usize; 3],
    batch_dims: usize,
) -> Result<CoopMatmulSpec, CoopDecline> {
    let usable = |c: &&CoopConfig| {
        c.m == c.n
            && c.n == c.k
            && matches!(c.m, 8 | 16)
            && c.ab == DType::F16
            && matches!(c.cr, DType::F32 | DType::F16)
    };
    let best = configs
        .iter()
        .filter(usable)
        .max_by_key(|c| (c.cr == DType::F32, c.m))
        .ok_or(CoopDecline::NoConfig)?;
    let (lo, hi) = subgroup;
    if lo != hi || !lo.is_power_of_two() || !(4..=128).contains(&lo) {
        return Err(CoopDecline::SubgroupSize(lo, hi));
    }
    let s = best.m as usize;
    if mnk.iter().any(|&d| d < s) {
        return Err(CoopDecline::TooSmall);
    }
    // Scalar staging; the launcher turns on the vector paths its operands' layouts allow.
    Ok(CoopMatmulSpec {
        size: best.m,
        acc: best.cr,
        subgroup: lo,
        batch_dims,
        vec_a: false,
        vec_b: false,
        variant: 2,
        tune: CoopTune::default(),
        aligned: false,
        out_f16: false,
        epi: CoopEpilogue::default(),
    })
}

/// `MPSRT_COOP_VARIANT` (`1`, `2`, `3` or a generation-3 tune's text; see
/// [`CoopVariant::parse`]), read once, so every kernel can be timed in its own process
/// (`bench_coop_sweep`); `None` when unset (the planner's default). An unparsable value is
/// reported once on stderr and ignored.
pub fn coop_variant_from_env() -> Option<CoopVariant> {
    static V: std::sync::OnceLock<Option<CoopVariant>> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        let text = std::env::var("MPSRT_COOP_VARIANT").ok()?;
        match CoopVariant::parse(&text) {
            Ok(v) => Some(v),
            Err(e) => {
                eprintln!("mpsrt: MPSRT_COOP_VARIANT ignored: {e}");
                None
            }
        }
    })
}

/// The kernel the planner uses for an `[m, n, k]` product on `size × size` tiles when
/// `MPSRT_COOP_VARIANT` is unset. Measured on an H200 (Vulkan, 16×16 f16→f32, driver 580;
/// session12 calls 2 and 4, `bench/results/2026-11-26-h200/session12/call{2,4}/coop/`, every
/// child checked against the f32 GEMM; generation 3's former default, 2×2 subgroups × 4×4
/// tiles, K 32, padded slab, ran 74.3–74.7 / 49.4–51.7 / 21.8–23.5 TFLOP/s at 4096³ /
/// 2048×3072×768 / 1024³):
/// - with ≥ 128 output blocks of 128×128, the same grid with vector-typed slabs, an
///   unchecked module and the unguarded interior loop (`fi1_vs4_uc1`): 184.0–185.9 at 4096³
///   and 82.8–92.9 at 2048×3072×768 (both whole-block shapes); where blocks are partial the
///   launcher drops `fi` and the clamped loads of `cl1` keep the loop branch-free
///   (`cl1_vs4_uc1`: 157.3–159.5 at 4096³, 76.1–77.8 at 2048×3072×768);
/// - with fewer (1024³: 64 blocks for the H200's 132 SMs), 64×64 blocks of 2×2 subgroups ×
///   2×2 tiles with clamped loads (`w2x2_t2x2_k32_cl1_vs4_uc1`): 56.3 at 1024³ (the same with
///   register prefetch instead, `rp1`: 46.5–49.7).
///
/// Call 6 confirmed both in alternated processes: 186.6–187.8 at 4096³, 84.0–86.4 at
/// 2048×3072×768, 57.5–59.2 at 1024³ and 153.8–154.1 at 4000³ (partial blocks: clamped loads);
/// no alternative (64×64 or 64×128 unguarded, K 16, 128×64) was faster at any of them.
///
/// 8×8 tiles (Apple) are unmeasured and keep generation 1.
///
/// 9th session (H100, in-process A/B, `COOP_AB`): below 256 blocks of 128×128 the 64×64 tune
/// takes K 64 per step (`w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1`, 22528 bytes with the f16 store's
/// scratch, two workgroups per SM): half the steps of a product whose few blocks make every
/// step's latency count. BERT-base b8: 1024×768×3072 105.3 vs 80.4 TFLOP/s, 1024×768×768
/// 75.7 vs 61.2, 1024×2304×768 (144 blocks, the 128×128 tune before) 91.5 vs 86.8,
/// 1024×3072×768 (192 blocks) 115.9 vs 114.4; 4096³ keeps the 128×128 tune (125.8 with it).
/// Call 2: its f16 output stored four halves at a time (`ov1`, whole blocks) adds 3–17%:
/// 1024×3072×768 128.2 vs 109.9, 1024×768×3072 105.0 vs 101.7, 1024×768×768 79.9 vs 69.7,
/// 1024×2304×768 103.3 vs 88.2 (the previous defaults: 107.5, 77.8, 57.1, 84.9).
///
/// 10th session (H100, in-process A/B and alternated fresh processes, every variant checked):
/// both tunes stage in 8-byte units (`su1`: each warp's load instruction reads 256 contiguous
/// bytes, slab stores without B's bank conflicts; the 128×128 tune's K-32 A slab with `su3`,
/// see [`large_coop_variant`]), and the 128×128 tune takes over again from
/// [`COOP_LARGE_BLOCKS`] = 128 blocks. 4096³ 222.0 vs 208.5 TFLOP/s (fresh processes 214.8 /
/// 223.4 vs 204.9 / 211.3); BERT b8: 1024×2304×768 (144 blocks) 120.3 vs 103.0, 1024×3072×768
/// (192) 149.4 vs 130.0, and with the 64×64 tune 1024×768×3072 117.2 vs 104.8, 1024×768×768
/// 83.0 vs 77.9. `MPSRT_COOP_PLANNER=9` restores the 9th session's rule
/// (`matmul_coop_tune::default_coop_variant_9th`).
///
/// 11th session (H100, in-process A/B, 4 rounds per call, every variant checked): the
/// 128×128 tune holds the next slab in registers (`rp1`, see [`large_coop_variant`]); the
/// 64×64 K-64 tune does not (with `rp1` call B: 1024×768×768 76.8–82.1 vs 80.1–83.0 TFLOP/s,
/// 1024×768×3072 108.2–116.3 vs 96.1–114.6: no win). `MPSRT_COOP_PLANNER=10` restores the
/// rule without `rp1` (`matmul_coop_tune::default_coop_variant_10th`).
///
/// 12th session (H100, in-process A/B, 3–4 rounds, every variant checked;
/// `bench/results/2026-11-26-h100/session18/probe2`, `probe3`): addressing each thread's staging
/// units affinely (`ad1`: one per-thread offset and uniform row steps) takes the two register
/// sets of `rq1` from 255 registers with a spill (and 24576 B of workgroup memory: one
/// workgroup per SM) to 255 without one at 23040 B, so the 128×128 tune's loads run two K
/// steps ahead at two workgroups per SM: 4096³ 271.6 / 270.9 vs 237.9 / 238.1 TFLOP/s, 8192³
/// 283.9 vs 250.0, 4096²×1024 237.9 vs 220.9, 2048²×4096 258.0 vs 229.9, 4096²×768 230.6 vs
/// 210.2, 1024×3072×3072 192.6 vs 176.4 — but slower where K is short and the blocks few
/// (2048×3072×768, 384 blocks: 168.1 vs 179.4; BERT b8's 1024×3072×768 and 1024×2304×768:
/// 155.6 / 119.6 vs 165.9 / 127.6), so it runs from K ≥ [`COOP_DEEP_MIN_K`] or
/// [`COOP_DEEP_MIN_BLOCKS`] blocks ([`deep_coop_variant`]). The 64×64 tune takes `ad1` too:
/// 1024×768×3072 116.4 / 110.5 vs 113.3 / 108.9, 1024×768×768 86.3 / 78.9 vs 84.5 / 78.0 (calls
/// 2 / 3). `MPSRT_COOP_PLANNER=11` restores the 11th session's rule
/// (`matmul_coop_tune::default_coop_variant_11th`).
pub fn default_coop_variant(size: u32, mnk: [usize; 3]) -> CoopVariant {
    if size != 16 {
        return CoopVariant::Gen1;
    }
    let blocks = mnk[0].div_ceil(128) * mnk[1].div_ceil(128);
    if blocks >= COOP_LARGE_BLOCKS {
        if mnk[2] >= COOP_DEEP_MIN_K || blocks >= COOP_DEEP_MIN_BLOCKS {
            deep_coop_variant(size)
        } else {
            large_coop_variant(size)
        }
    } else {
        let d = CoopTune::default();
        let t = CoopTune { tm: 2, tn: 2, bk: 64, fi: true, cl: true, vs: 4, uc: true, ..d };
        CoopVariant::Family(CoopTune { ov: true, su: 1, ad: true, ..t })
    }
}

/// K from which [`default_coop_variant`] takes [`deep_coop_variant`] at any block count ≥
/// [`COOP_LARGE_BLOCKS`].
pub const COOP_DEEP_MIN_K: usize = 1024;
/// Output blocks of 128×128 from which [`default_coop_variant`] takes [`deep_coop_variant`] at
/// any K (about two waves of two workgroups per SM on the H100's 132 SMs).
pub const COOP_DEEP_MIN_BLOCKS: usize = 512;

/// The 128×128 tune with two register sets taking turns (`rq1`, each slab's global loads issued
/// two K steps ahead) on affine unit addresses (`ad1`): `fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_ad1`
/// (generation 1 for 8×8 tiles). Whole blocks need K to be a multiple of 64
/// ([`CoopTune::aligned_k`]); elsewhere the launcher drops `fi` and the checked `rp1` loop runs.
pub fn deep_coop_variant(size: u32) -> CoopVariant {
    match large_coop_variant(size) {
        CoopVariant::Family(t) => CoopVariant::Family(CoopTune { rq: true, ad: true, ..t }),
        v => v,
    }
}

/// Output blocks of 128×128 from which [`default_coop_variant`] takes the 128×128 tune.
pub const COOP_LARGE_BLOCKS: usize = 128;

/// The 128×128 tune (`fi1_cl1_vs4_uc1_ov1_su3_rp1`; generation 1 for 8×8 tiles): the default from
/// [`COOP_LARGE_BLOCKS`] blocks where K < [`COOP_DEEP_MIN_K`] and the blocks are fewer than
/// [`COOP_DEEP_MIN_BLOCKS`] ([`deep_coop_variant`] elsewhere), and what split-K slices run.
/// The vector f16 store (`ov1`,
/// whole blocks) measured in the 9th session's call 3 (H100, in-process A/B, every check
/// passed): 4096³ 208.6 vs 199.1–199.4 TFLOP/s, 2048×3072×768 143.8 vs 118.8–119.7; staging
/// in 8-byte units (`su1`) in the 10th session's calls 1 and 2: 4096³ 220.3 / 222.0 vs 204.1 /
/// 208.5 in the same process; with A's half-warps on rows 4 apart (`su3`, conflict-free A
/// stores) in call 3: 227.4 vs 223.9 (`su1`) and 210.1 (`ov1` alone), 2048×3072×768 176.5
/// vs 172.5 and 147.6. The next slab held in registers under the products (`rp1`, one slab,
/// two barriers per step; 11th session, H100, one process, 4 rounds): call A 4096³
/// 235.8–238.3 vs 224.1–227.4 TFLOP/s, 2048×3072×768 175.5–181.4 vs 171.7–176.0; call B
/// 235.9–239.0 vs 224.8–227.2 and 169.0–183.2 vs 166.4–175.3, BERT b8's 1024×3072×768
/// 162.6–165.8 vs 150.2–157.8 and 1024×2304×768 119.9–127.3 vs 116.4–124.0 (same registers,
/// 228, and workgroup memory, 23040 B). Edge blocks keep the checked `rp1` loop.
pub fn large_coop_variant(size: u32) -> CoopVariant {
    if size != 16 {
        return CoopVariant::Gen1;
    }
    let d = CoopTune::default();
    let t = CoopTune { fi: true, cl: true, vs: 4, uc: true, ov: true, su: 3, ..d };
    CoopVariant::Family(CoopTune { rp: true, ..t })
}
