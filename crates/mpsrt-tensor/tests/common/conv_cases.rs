//! The conv2d case table shared by `conv.rs` (every device vs the CPU),
//! `conv_implicit_gemm.rs` (the same table through the implicit-GEMM kernel) and
//! `conv_algos.rs` (through each `MPSRT_CONV_ALGO`: Winograd, split-K, whole-K GEMM, ...).

use mpsrt_tensor::ConvPadding;

/// (n, c, h, w, oc, kh, kw, stride, padding, dilation, groups, bias)
pub type Case = (
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    [usize; 2],
    ConvPadding,
    [usize; 2],
    usize,
    bool,
);

pub const CASES: &[Case] = &[
    (1, 3, 7, 9, 5, 3, 3, [1, 1], ConvPadding::Explicit([1, 1, 1, 1]), [1, 1], 1, true),
    (2, 4, 9, 8, 6, 3, 2, [2, 1], ConvPadding::Explicit([0, 2, 1, 0]), [1, 1], 2, false),
    (1, 5, 11, 10, 7, 3, 3, [2, 3], ConvPadding::SameUpper, [1, 1], 1, true),
    (1, 2, 8, 7, 3, 2, 3, [3, 2], ConvPadding::SameLower, [1, 1], 1, false),
    (1, 3, 12, 13, 4, 3, 3, [1, 1], ConvPadding::Explicit([2, 2, 2, 2]), [2, 2], 1, true),
    (2, 6, 9, 9, 6, 3, 3, [1, 1], ConvPadding::Explicit([1, 1, 1, 1]), [1, 1], 6, true), // depthwise
    (1, 4, 7, 7, 8, 3, 3, [2, 2], ConvPadding::Explicit([1, 1, 1, 1]), [1, 1], 4, false), // dw ×2
    (1, 33, 5, 5, 70, 1, 1, [1, 1], ConvPadding::Explicit([0; 4]), [1, 1], 1, true),     // 1×1 GEMM
    (3, 17, 9, 9, 65, 1, 1, [2, 2], ConvPadding::Explicit([0; 4]), [1, 1], 1, false), // downsample
    (1, 3, 23, 21, 8, 7, 7, [2, 2], ConvPadding::Explicit([3, 3, 3, 3]), [1, 1], 1, true), // stem
    (1, 1, 1, 1, 1, 1, 1, [1, 1], ConvPadding::Explicit([0; 4]), [1, 1], 1, false),
    (0, 3, 5, 5, 2, 3, 3, [1, 1], ConvPadding::Explicit([0; 4]), [1, 1], 1, true), // empty batch
    // batch-1 small maps with long K: the split-K product (K = 1152 and 1024)
    (1, 128, 7, 7, 96, 3, 3, [1, 1], ConvPadding::Explicit([1, 1, 1, 1]), [1, 1], 1, true),
    (1, 1024, 5, 5, 64, 1, 1, [1, 1], ConvPadding::Explicit([0; 4]), [1, 1], 1, false),
    // K = 288: split into 4 slices of 72 only by the wide rule (one reduce pass with the epilogue)
    (1, 32, 10, 10, 40, 3, 3, [1, 1], ConvPadding::Explicit([1, 1, 1, 1]), [1, 1], 1, true),
    // 128×128 tile variant (≥ 128 big tiles, ≥ 128 channels), odd K = 63 and N = 130
    (2, 7, 64, 64, 130, 3, 3, [1, 1], ConvPadding::Explicit([1, 1, 1, 1]), [1, 1], 1, true),
    // Batched small maps (P ≤ 1024) run as one GEMM over all images: im2col in [K, N·P] layout
    // (3×3, P = 49) and the 1×1 input transposed to [C, N·P] (P = 30); a 1×1 batch on a larger
    // map (P = 1056) stays one product per image.
    (4, 24, 7, 7, 40, 3, 3, [1, 1], ConvPadding::Explicit([1, 1, 1, 1]), [1, 1], 1, true),
    (3, 33, 6, 5, 70, 1, 1, [1, 1], ConvPadding::Explicit([0; 4]), [1, 1], 1, true),
    (2, 8, 33, 32, 12, 1, 1, [1, 1], ConvPadding::Explicit([0; 4]), [1, 1], 1, false),
    // Merged and long enough in K (288) for split-K on the merged product (4 slices of 72).
    (2, 32, 5, 5, 24, 3, 3, [1, 1], ConvPadding::Explicit([1, 1, 1, 1]), [1, 1], 1, true),
    // Winograd F(2,3): asymmetric padding and odd output maps (edge tiles cut off), and a
    // batch with more than one tile row of channels; split-K: K = 600 with N·OC·P = 3·20·35 a
    // multiple of 4, and K = 45 (slices of 8, the last one short).
    (2, 5, 6, 11, 9, 3, 3, [1, 1], ConvPadding::Explicit([0, 1, 2, 1]), [1, 1], 1, true),
    (3, 16, 9, 8, 70, 3, 3, [1, 1], ConvPadding::Explicit([1, 1, 1, 1]), [1, 1], 1, false),
    (3, 24, 7, 5, 20, 5, 5, [1, 1], ConvPadding::Explicit([2, 2, 2, 2]), [1, 1], 1, true),
    (4, 5, 6, 6, 8, 3, 3, [2, 2], ConvPadding::Explicit([1, 1, 1, 1]), [1, 1], 1, true),
];
