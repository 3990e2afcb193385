//! The cooperative conv's structure per conv class (`plan_coop_conv` picks the block the
//! device allows; this picks, within it, what was measured fastest for each kind of conv):
//! subgroups and tiles per workgroup, K step, slab stages, the scratch inside the slabs,
//! paired stores, tap masks, split-K. Pure, so the choice is tested without a GPU; the
//! launcher applies it unless `MPSRT_COOP_CONV_TUNED=0` and where the device's limits allow.

use super::{ConvShape, CoopConvSpec};

/// The kinds of conv whose best structure differs (ResNet-50's at batch 32 on an H100).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConvClass {
    /// A window the gather cannot vectorize or mask: more than 32 taps (the 7×7 stem).
    Wide,
    /// A padded / strided window of ≤ 32 taps into at most 64 output channels.
    Spatial64,
    /// A padded / strided window of ≤ 32 taps into more than 64 channels.
    Spatial,
    /// 1×1 stride 1 with K ≤ 256 (the bottlenecks' expanding and first reducing convs).
    PointShort,
    /// 1×1 stride 1 with K > 256.
    PointLong,
    /// 1×1 with a stride (the downsample projections).
    PointStrided,
}

impl ConvClass {
    pub fn of(shape: &ConvShape) -> Self {
        if !shape.pointwise() {
            if shape.kh * shape.kw > 32 {
                ConvClass::Wide
            } else if shape.oc <= 64 {
                ConvClass::Spatial64
            } else {
                ConvClass::Spatial
            }
        } else if shape.sh != 1 || shape.sw != 1 {
            ConvClass::PointStrided
        } else if shape.k() <= 256 {
            ConvClass::PointShort
        } else {
            ConvClass::PointLong
        }
    }
}

/// One structure: subgroups (`wm × wn`) of `tm × tn` tiles, K step, slab stages, aliased
/// scratch, paired stores, tap masks, split-K where the grid is small.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvStructure {
    pub wm: u32,
    pub wn: u32,
    pub tm: u32,
    pub tn: u32,
    pub bk: u32,
    pub slabs: u32,
    pub alias: bool,
    pub pairs: bool,
    pub mask: bool,
    pub split: bool,
}

/// The structure for a conv of `shape` with 16×16 tiles; `None` keeps the planner's (8×8
/// tiles). Blocks taller than the conv's channels shed subgroups along M (a 128-row block
/// over 64 channels would be half empty).
pub fn tuned_structure(shape: &ConvShape, size: u32) -> Option<ConvStructure> {
    tuned_structure_of(shape, size, 16)
}

/// [`tuned_structure`] as of a session's table: `15` leaves out session 16's 64 × 128 blocks
/// (for A/B: `MPSRT_COOP_CONV_TUNED=15`), anything later is the current table.
pub fn tuned_structure_of(shape: &ConvShape, size: u32, session: u32) -> Option<ConvStructure> {
    let class = ConvClass::of(shape);
    let mut t = structure_of(class, size)?;
    if session <= 15 {
        t = ConvStructure { wm: 4, wn: 2, ..t };
    }
    // 1×1 convs into at most 64 channels or from at most 64: 64 × 128 blocks too (H100,
    // session 16 call 3: 64 → 64 0.021 → 0.019 ms, 256 → 64 0.045 → 0.040, 64 → 256 0.060 →
    // 0.056; 256 → 128 lost, 0.068 → 0.080: a 64-row block over 128 channels reads the input
    // twice).
    if session > 15 && class == ConvClass::PointShort && (shape.oc <= 64 || shape.k() <= 64) {
        t = ConvStructure { wm: 2, wn: 4, ..t };
    }
    while t.wm > 1 && t.wm * t.tm * size > shape.oc.max(size) && t.wm * t.tm * size > 64 {
        t.wm /= 2;
    }
    Some(t)
}

fn structure_of(class: ConvClass, size: u32) -> Option<ConvStructure> {
    if size != 16 {
        return None;
    }
    // One slab stage of K 32 (128 × 64 blocks of 4 × 2 subgroups; 64 × 64 of 2 × 2 for ≤ 64
    // channels): 23040 bytes of workgroup memory against the two stages' 37888, so two
    // workgroups fit on an SM (the cooperative GEMM's `COOP_SHARED_BUDGET`). H100, session 15
    // call 1 (ResNet-50 b32 f16, per-step GPU times): layer 3's 3×3 0.104 vs 0.165 ms, its
    // 1×1s 0.045 / 0.054 vs 0.066 / 0.085, layer 4's downsample 0.115 vs 0.174.
    let d = ConvStructure {
        wm: 4,
        wn: 2,
        tm: 2,
        tn: 2,
        bk: 32,
        slabs: 1,
        alias: false,
        // Paired column stores and tap masks (where the map is even / the window has ≤ 32
        // taps; the launcher checks): call 3 on an H100, every eligible conv faster — stem
        // 0.215 → 0.185 ms, layer-1 1×1 64→256 0.089 → 0.066, layer-1 3×3 0.151 → 0.139 —
        // all convs 4.93 → 4.65 GPU ms, p50 4.61–4.68 → 4.34.
        pairs: true,
        mask: true,
        split: false,
    };
    // The stem and the ≤ 64-channel 3×3 convs: 2 × 4 subgroups, 64 × 128 blocks (the 64-row
    // block covers every channel; 22016 bytes; H100, session 16 call 3: stem 0.172 → 0.131 ms,
    // layer-1 3×3 0.122–0.124 → 0.097–0.100 each).
    let wide = ConvStructure { wm: 2, wn: 4, ..d };
    // Split-K where the grid is under one workgroup per SM (layer 4's 3×3 and 1×1 2048 → 512
    // convs at batch 32; `auto_splitk`): the long-K classes.
    Some(match class {
        ConvClass::Wide | ConvClass::Spatial64 => wide,
        ConvClass::PointShort | ConvClass::PointStrided => d,
        ConvClass::Spatial | ConvClass::PointLong => ConvStructure { split: true, ..d },
    })
}

impl CoopConvSpec {
    /// This spec with structure `t` (operand-dependent fields are the launcher's to set).
    pub fn with_structure(self, t: &ConvStructure) -> Self {
        CoopConvSpec {
            wm: t.wm,
            wn: t.wn,
            tm: t.tm,
            tn: t.tn,
            bk: t.bk,
            slabs: t.slabs,
            alias: t.alias,
            pairs: t.pairs,
            mask: t.mask,
            ..self
        }
    }
}

/// K slices for a conv whose grid has `blocks` workgroups (`auto` split-K): none from `below`
/// workgroups up (132: one per SM of an H100, where two fit per SM; call 2, H100: splitting
/// layer 3's 196-workgroup convs in two cost 17–19 µs each, again in session 16), else enough
/// slices to reach `target` (396, three per SM; 264 until session 16), each at least 4 K steps
/// of `bk`, at most 8. Layer 4 of ResNet-50 b32 (100 workgroups): its 3×3 convs 0.171–0.180
/// → 0.145–0.160 ms in 3 slices, 0.129–0.139 → 0.106–0.117 in 4 (6: 0.113–0.127; session 16
/// call 3), its 2048 → 512 1×1 convs 0.068–0.072 → 0.062–0.063.
pub fn auto_splitk(blocks: u32, k: u32, bk: u32, below: u32, target: u32) -> u32 {
    if blocks >= below || blocks == 0 {
        return 1;
    }
    target.div_ceil(blocks).min(k / (bk * 4)).clamp(1, 8)
}
