//! The cooperative-matrix f16 conv (`gpu/conv_coop.rs`, issue 23) on a device without matrix
//! units: `MPSRT_COOP_CONV_EMULATE=1` runs the same kernel — slabs, im2col gather, double
//! buffering, epilogue — with its matrix products in f32 registers, so lavapipe checks the
//! kernel's indexing on every conv class against the CPU conv of the same f16 values (the
//! cooperative products themselves are checked on the GPU machine,
//! `bench/conv_coop_check.py`). Also: the route is not taken for grouped convs or with
//! `MPSRT_COOP_CONV=0`, and this device's own plan declines without matrix units. The knobs are
//! read per call; one test function, so no other test of this binary races on them.

mod common;
use common::*;
use mpsrt_kernels::{ConvShape, CoopConvRoute, CoopDecline};
use mpsrt_tensor::Activation;
use mpsrt_tensor::{conv2d_fused, conv_coop_direct_launches, conv_coop_launches, plan_f16_conv};
use mpsrt_tensor::{Conv2dOptions, ConvPadding, DType};

/// `(n, c, h, w, oc, k, stride, pad [t, l, b, r], dilation, bias, residual, act)`.
type Case = (
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    [usize; 4],
    usize,
    bool,
    bool,
    Option<Activation>,
);

const CASES: &[Case] = &[
    // 3×3 stride 1, odd K (45: scalar weight loads), residual + Relu (ResNet's block end).
    (2, 5, 9, 9, 7, 3, 1, [1, 1, 1, 1], 1, true, true, Some(Activation::Relu)),
    // 3×3 stride 2, K = 144 (vector weight loads), 70 channels: two channel blocks.
    (3, 16, 11, 11, 70, 3, 2, [1, 1, 1, 1], 1, true, false, Some(Activation::Relu)),
    // 1×1 stride 1 with P % 4 == 0 (vector input loads), columns across images, residual.
    (2, 24, 6, 6, 40, 1, 1, [0, 0, 0, 0], 1, true, true, None),
    // 1×1 stride 1 with P = 25 (scalar gather), residual without activation.
    (2, 8, 5, 5, 16, 1, 1, [0, 0, 0, 0], 1, false, true, None),
    // 1×1 stride 2 (the downsample projection).
    (2, 16, 9, 9, 20, 1, 2, [0, 0, 0, 0], 1, true, false, None),
    // 7×7 stride 2 pad 3 (the stem), K = 147, Clip.
    (1, 3, 20, 20, 8, 7, 2, [3, 3, 3, 3], 1, true, false, Some(Activation::Clip(-1.0, 6.0))),
    // Asymmetric padding, dilation 2, Silu.
    (2, 8, 10, 12, 12, 3, 1, [2, 1, 0, 3], 2, true, false, Some(Activation::Silu)),
    // More columns than one 64-wide block per image row and a partial last block.
    (1, 32, 13, 17, 33, 3, 1, [1, 1, 1, 1], 1, true, true, Some(Activation::Relu)),
    // K = 576 in 3 split-K slices: f32 partials, then the sum with bias, residual and Relu.
    (2, 64, 6, 6, 48, 3, 1, [1, 1, 1, 1], 1, true, true, Some(Activation::Relu)),
    // The direct pointwise kernel (P, C, OC multiples of 16): a partial channel block (48 of
    // 64) and residual + Relu; column tiles past N·P (48 columns, 128-column blocks) with a
    // residual; four K steps per load batch, f16 bias and Clip, one 64-row block over 32.
    (2, 32, 4, 8, 48, 1, 1, [0, 0, 0, 0], 1, true, true, Some(Activation::Relu)),
    (3, 16, 4, 4, 16, 1, 1, [0, 0, 0, 0], 1, false, true, None),
    (1, 64, 8, 8, 32, 1, 1, [0, 0, 0, 0], 1, true, false, Some(Activation::Clip(-1.0, 6.0))),
    // A strided 1×1 whose subsampled map (4×4) takes vector loads: run on the copy.
    (2, 16, 8, 8, 20, 1, 2, [0, 0, 0, 0], 1, true, true, None),
];

/// The direct kernel's tiles, subgroups and K unroll for cases 9-11.
const DIRECT: [(&str, &str, &str); 3] = [("2x2", "1", "2"), ("1x4", "2", "4"), ("4x1", "4", "4")];

#[test]
fn emulated_kernel_matches_the_cpu_conv_and_routes() {
    let Some(&gpu) = gpus().first() else { return };
    std::env::set_var("MPSRT_COOP_CONV_EMULATE", "1");
    std::env::set_var("MPSRT_COOP_CONV", "1");
    std::env::set_var("MPSRT_COOP_CONV_DIRECT", "1");
    let half = |shape: &[usize], seed| rnd(shape, seed, DType::F16);
    for (i, &(n, c, h, w, oc, k, s, pad, d, bias, res, act)) in CASES.iter().enumerate() {
        let seed = 10 * i as u64;
        let direct = DIRECT.get(i.wrapping_sub(9)).copied().unwrap_or(("", "", ""));
        std::env::set_var("MPSRT_COOP_DIRECT_TILE", direct.0);
        std::env::set_var("MPSRT_COOP_DIRECT_SGS", direct.1);
        std::env::set_var("MPSRT_COOP_DIRECT_KU", direct.2);
        // Both load forms: branches and clamped selects.
        std::env::set_var("MPSRT_COOP_CONV_CLAMP", if i % 2 == 1 { "1" } else { "0" });
        // Both epilogues: residual and bias loaded up front (default), and per element.
        std::env::set_var("MPSRT_COOP_CONV_PREFETCH", if i == 3 || i == 4 { "0" } else { "1" });
        // Paired column stores where the output map is even (cases 1, 2, 5, 6; the launcher
        // keeps single stores for the odd maps of 0, 3 and 7).
        std::env::set_var("MPSRT_COOP_CONV_PAIRS", if i == 4 { "0" } else { "1" });
        std::env::set_var("MPSRT_COOP_CONV_SPLITK", if i == 8 { "3" } else { "0" });
        // The strided 1×1 of case 12 on a subsampled copy of its input, at stride 1 (case 4's
        // 5×5 output map would not take vector loads: the strided gather).
        std::env::set_var("MPSRT_COOP_CONV_SUBSAMPLE", if i == 12 { "1" } else { "0" });
        // Tap masks for the padded windows (cases 0, 1, 5, 6, 7, 8; 2–4 are pointwise).
        std::env::set_var("MPSRT_COOP_CONV_MASK", if i % 3 == 1 { "0" } else { "1" });
        // Two mask words for the 7×7 window (case 5).
        std::env::set_var("MPSRT_COOP_CONV_MASK64", if i == 5 { "1" } else { "0" });
        // K steps of 64 (with 32×32 blocks: lavapipe's 32 KiB of workgroup memory).
        // K steps of 16 with one slab stage (cases 0, 3 and 6 also one stage at K 32).
        let (bk, tile) = match i % 3 {
            2 => ("64", "1x1"),
            _ if i == 4 || i == 7 => ("16", ""),
            _ => ("32", ""),
        };
        std::env::set_var("MPSRT_COOP_CONV_SLABS", if i % 3 == 0 || i == 4 { "1" } else { "2" });
        // The epilogue's scratch inside the slab memory (packed-word slabs) for half the cases.
        std::env::set_var("MPSRT_COOP_CONV_ALIAS", if i % 2 == 0 { "1" } else { "0" });
        std::env::set_var("MPSRT_COOP_CONV_BK", bk);
        std::env::set_var("MPSRT_COOP_CONV_TILE", tile);
        // 4×2 subgroups of 1×2 tiles (64×64 blocks of 256 invocations) for some cases.
        let warps = if i % 4 == 1 { "4x2" } else { "" };
        std::env::set_var("MPSRT_COOP_CONV_WARPS", warps);
        if i % 4 == 1 {
            std::env::set_var("MPSRT_COOP_CONV_TILE", "1x2");
        }
        // The cooperative GEMM's shape: 2 × 2 subgroups of 4 × 4 tiles (128 × 128), and of
        // 2 × 4 tiles (64 × 128).
        if i == 6 || i == 7 {
            std::env::set_var("MPSRT_COOP_CONV_WARPS", "2x2");
            std::env::set_var("MPSRT_COOP_CONV_TILE", if i == 6 { "2x4" } else { "4x4" });
        }
        let x = half(&[n, c, h, w], seed);
        // Weights scaled so sums stay well inside f16's range.
        let wv: Vec<f64> =
            values(oc * c * k * k, seed + 1, false).iter().map(|v| v / 4.0).collect();
        let wt = tensor(&wv, &[oc, c, k, k], DType::F16);
        let b = half(&[oc], seed + 2);
        let o = Conv2dOptions {
            stride: [s, s],
            padding: ConvPadding::Explicit(pad),
            dilation: [d, d],
            groups: 1,
        };
        let f32_of = |t: &mpsrt_tensor::Tensor| t.astype(DType::F32).unwrap();
        let out_shape =
            conv2d_fused(&f32_of(&x), &f32_of(&wt), None, &o, None, None).unwrap().shape().to_vec();
        let r = half(&out_shape, seed + 3);
        let (bias, res) = (bias.then_some(&b), res.then_some(&r));
        let want = conv2d_fused(
            &f32_of(&x),
            &f32_of(&wt),
            bias.map(f32_of).as_ref(),
            &o,
            res.map(f32_of).as_ref(),
            act,
        )
        .unwrap();
        let g = |t: &mpsrt_tensor::Tensor| t.to(gpu).unwrap();
        let (before, direct0) = (conv_coop_launches(), conv_coop_direct_launches());
        let got = conv2d_fused(&g(&x), &g(&wt), bias.map(g).as_ref(), &o, res.map(g).as_ref(), act)
            .unwrap();
        assert_eq!(conv_coop_launches(), before + 1, "case {i}: the cooperative route ran");
        let direct_ran = conv_coop_direct_launches() == direct0 + 1;
        assert_eq!(direct_ran, (9..12).contains(&i), "case {i}: the direct pointwise kernel ran");
        assert_eq!(got.dtype(), DType::F16, "case {i}");
        // f32 accumulation, one f16 rounding of the result (and of the residual's sum).
        let (gv, wv) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
        assert_close(&format!("emulated coop conv case {i}"), &gv, &wv, 2e-3, 2e-2);
    }
    // Not taken: grouped convs, and MPSRT_COOP_CONV=0; both still right.
    let (x, wt) = (half(&[2, 8, 6, 6], 1), half(&[8, 4, 3, 3], 2));
    let o =
        Conv2dOptions { groups: 2, padding: ConvPadding::symmetric(1, 1), ..Default::default() };
    let before = conv_coop_launches();
    let got =
        conv2d_fused(&x.to(gpu).unwrap(), &wt.to(gpu).unwrap(), None, &o, None, None).unwrap();
    let want = conv2d_fused(&x, &wt, None, &o, None, None).unwrap();
    check_tol("grouped f16 conv", &want, &got, DType::F16, 0.0);
    std::env::set_var("MPSRT_COOP_CONV", "0");
    let wt = half(&[8, 8, 1, 1], 3);
    let o = Conv2dOptions::default();
    let got =
        conv2d_fused(&x.to(gpu).unwrap(), &wt.to(gpu).unwrap(), None, &o, None, None).unwrap();
    let want = conv2d_fused(&x, &wt, None, &o, None, None).unwrap();
    check_tol("f16 conv, coop off", &want, &got, DType::F16, 0.0);
    assert_eq!(conv_coop_launches(), before, "declined routes launch nothing");
    std::env::remove_var("MPSRT_COOP_CONV_EMULATE");
    std::env::remove_var("MPSRT_COOP_CONV");
    for v in [
        "MPSRT_COOP_CONV_CLAMP",
        "MPSRT_COOP_CONV_PREFETCH",
        "MPSRT_COOP_CONV_BK",
        "MPSRT_COOP_CONV_TILE",
        "MPSRT_COOP_CONV_WARPS",
        "MPSRT_COOP_CONV_SLABS",
        "MPSRT_COOP_CONV_ALIAS",
        "MPSRT_COOP_CONV_PAIRS",
        "MPSRT_COOP_CONV_SPLITK",
        "MPSRT_COOP_CONV_MASK",
        "MPSRT_COOP_CONV_DIRECT",
        "MPSRT_COOP_CONV_SUBSAMPLE",
        "MPSRT_COOP_CONV_MASK64",
        "MPSRT_COOP_DIRECT_TILE",
        "MPSRT_COOP_DIRECT_SGS",
        "MPSRT_COOP_DIRECT_KU",
    ] {
        std::env::remove_var(v);
    }
    // This device's own plan: without matrix units (lavapipe) the fallback runs.
    let props = mpsrt_runtime::gpu_device(0).unwrap().properties().clone();
    if props.coop_matrix.is_empty() {
        let shape = ConvShape {
            c: 64,
            h: 56,
            w: 56,
            oc: 64,
            oh: 56,
            ow: 56,
            kh: 3,
            kw: 3,
            sh: 1,
            sw: 1,
            ph: 1,
            pw: 1,
            dh: 1,
            dw: 1,
        };
        let plan = plan_f16_conv(&props, &shape, 32, 1, CoopConvRoute::Auto { min_blocks: 32 });
        assert_eq!(plan, Err(CoopDecline::NoConfig));
    }
}
