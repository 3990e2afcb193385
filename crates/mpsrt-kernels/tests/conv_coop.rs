//! The cooperative-matrix implicit-GEMM conv (`conv_coop.rs`): every conv shape class it renders
//! (1×1 stride 1 and 2, 3×3 stride 1 and 2, the 7×7 stride-2 stem, odd K, maps whose size is
//! not a multiple of 4) with every operand path and epilogue parses, validates with naga's
//! cooperative-matrix capability and translates to SPIR-V (what wgpu hands Vulkan) and MSL
//! (Apple's simdgroup matrices); and the planner's choices against fake adapter configuration
//! lists (lavapipe has no cooperative matrices, so the numerics are checked on the GPU
//! machine: `bench/conv_coop_check.py`).

use mpsrt_core::DType;
use mpsrt_kernels::validate::wgsl_to_msl;
use mpsrt_kernels::{
    plan_coop_conv, ConvShape, CoopConfig, CoopConvDevice, CoopConvRoute, CoopConvSpec,
    CoopDecline, MatmulAct,
};

/// `[c, hw, oc, k, stride, pad]` → a square conv shape.
fn conv(c: u32, hw: u32, oc: u32, k: u32, s: u32, p: u32) -> ConvShape {
    let o = (hw + 2 * p - k) / s + 1;
    ConvShape {
        c,
        h: hw,
        w: hw,
        oc,
        oh: o,
        ow: o,
        kh: k,
        kw: k,
        sh: s,
        sw: s,
        ph: p,
        pw: p,
        dh: 1,
        dw: 1,
    }
}

/// One of each ResNet-50 conv class, plus odd K / odd maps / dilation.
fn classes() -> Vec<(&'static str, ConvShape)> {
    vec![
        ("7x7 s2 stem", conv(3, 224, 64, 7, 2, 3)),
        ("1x1 s1 56", conv(64, 56, 256, 1, 1, 0)),
        ("1x1 s1 7 (P % 4 != 0)", conv(2048, 7, 512, 1, 1, 0)),
        ("1x1 s2 downsample", conv(256, 56, 512, 1, 2, 0)),
        ("3x3 s1", conv(64, 56, 64, 3, 1, 1)),
        ("3x3 s2", conv(128, 56, 128, 3, 2, 1)),
        ("3x3 odd C", conv(5, 9, 7, 3, 1, 1)),
        ("3x3 dilated 2", ConvShape { dh: 2, dw: 2, ph: 2, pw: 2, ..conv(16, 13, 32, 3, 1, 1) }),
    ]
}

fn cfg(s: u32, ab: DType, cr: DType) -> CoopConfig {
    CoopConfig { m: s, n: s, k: s, ab, cr }
}

const NVIDIA: [CoopConfig; 3] = [
    CoopConfig { m: 16, n: 16, k: 16, ab: DType::F16, cr: DType::F16 },
    CoopConfig { m: 16, n: 16, k: 16, ab: DType::F16, cr: DType::F32 },
    CoopConfig { m: 16, n: 8, k: 16, ab: DType::F16, cr: DType::F32 },
];

fn device(configs: &[CoopConfig]) -> CoopConvDevice<'_> {
    CoopConvDevice {
        configs,
        subgroup: (32, 32),
        shader_f16: true,
        subgroups: true,
        shared_limit: 49152,
        max_invocations: 1024,
        max_wg_dim: 65535,
    }
}

#[test]
fn every_shape_class_validates_and_translates() {
    let acts = [MatmulAct::None, MatmulAct::Relu, MatmulAct::Clip, MatmulAct::Silu];
    let mut n = 0;
    for (name, shape) in classes() {
        for (size, subgroup, tm, tn) in
            [(16, 32, 4, 4), (16, 32, 2, 2), (16, 32, 2, 4), (8, 32, 4, 4), (16, 64, 2, 4)]
        {
            let k8 = shape.k().is_multiple_of(8);
            let xv = shape.pointwise() && shape.sh == 1 && shape.p().is_multiple_of(4);
            for (i, w_vec) in [false, true].into_iter().enumerate() {
                if w_vec && !k8 {
                    continue;
                }
                let spec = CoopConvSpec {
                    shape,
                    size,
                    subgroup,
                    wm: if n % 5 == 3 { 4 } else { 2 },
                    wn: 2,
                    tm,
                    tn,
                    w_vec,
                    x_vec: xv && w_vec,
                    has_bias: i == 1 || tm == 2,
                    bias_f16: tn == 4,
                    has_res: i == 0,
                    act: acts[(n + i) % acts.len()],
                    bk: [32, 32, 64, 32, 16][n % 5].max(size),
                    slabs: if n % 3 == 0 { 1 } else { 2 },
                    alias: n % 4 == 1 || n % 4 == 2,
                    clamp: n % 3 == 1,
                    prefetch: n % 2 == 0,
                    pairs: n % 5 == 1 && shape.p().is_multiple_of(2),
                    splitk: 1,
                    mask: n % 2 == 1 && !shape.pointwise() && shape.kh * shape.kw <= 64,
                    emulate: false,
                };
                n += 1;
                let src = match spec.render() {
                    Ok(s) => s,
                    // 64 lanes × 4 subgroups cannot tile a 32-row, 64-column B slab evenly.
                    Err(e) if subgroup == 64 => {
                        assert!(e.contains("cannot tile"), "{name}: {e}");
                        continue;
                    }
                    Err(e) => panic!("{name} {spec:?}: {e}"),
                };
                let msl =
                    wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{name} {spec:?}: {e}\n{src}"));
                assert!(msl.contains("simdgroup"), "{name}");
                // The geometry is baked in; the gather's path matches the shape.
                assert!(src.contains(&format!("const K: u32 = {}u;", shape.k())), "{name}");
                assert_eq!(src.contains("var xv"), spec.x_vec, "{name}");
                assert_eq!(src.contains("let dy") || spec.mask, !shape.pointwise(), "{name}");
                assert_eq!(src.contains("var mk0"), spec.mask, "{name}");
                let rty = if spec.pairs { "res: array<vec2<f16>>" } else { "res: array<f16>" };
                assert_eq!(src.contains(rty), spec.has_res, "{name}");
                // The emulated form (lavapipe's numerics test) needs no cooperative matrices
                // and no subgroups.
                if subgroup == 32 {
                    let emu = CoopConvSpec { emulate: true, ..spec }.render().unwrap();
                    assert!(!emu.contains("coop_mat") && !emu.contains("subgroup_id"), "{name}");
                    wgsl_to_msl(&emu).unwrap_or_else(|e| panic!("{name} emulated: {e}\n{emu}"));
                }
            }
        }
    }
    assert!(n >= 60, "{n}");
}

#[test]
fn split_k_partials_and_their_sum_validate_and_translate() {
    let shape = conv(512, 7, 512, 3, 1, 1);
    let spec = plan_coop_conv(&device(&NVIDIA), &shape, 32, 1, CoopConvRoute::Force).unwrap();
    for (slabs, alias) in [(2, false), (1, true)] {
        let split = CoopConvSpec { splitk: 3, slabs, alias, ..spec };
        assert_eq!(split.grid(32)[2], 3);
        for emulate in [false, true] {
            let src = CoopConvSpec { emulate, ..split }.render().unwrap();
            assert!(src.contains("out: array<f32>") && src.contains("let kb = wid.z * "));
            wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
        }
    }
    // The partials take no epilogue: bias, residual or paired stores are refused.
    for bad in [
        CoopConvSpec { splitk: 2, has_bias: true, ..spec },
        CoopConvSpec { splitk: 2, has_res: true, ..spec },
        CoopConvSpec { splitk: 0, ..spec },
    ] {
        assert!(bad.render().is_err(), "{bad:?}");
    }
    for (bias, f16, res, act) in [
        (true, true, true, MatmulAct::Relu),
        (false, false, false, MatmulAct::None),
        (true, false, false, MatmulAct::Clip),
    ] {
        let src = mpsrt_kernels::conv_coop::coop_conv_splitk_reduce(bias, f16, res, act);
        wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    }
}

#[test]
fn render_refuses_what_the_planner_never_produces() {
    let shape = conv(3, 224, 64, 7, 2, 3);
    let spec = plan_coop_conv(&device(&NVIDIA), &shape, 1, 1, CoopConvRoute::Force).unwrap();
    // K = 147: no vector weight loads; not pointwise: no vector input loads.
    assert!(CoopConvSpec { w_vec: true, ..spec }.render().unwrap_err().contains("K % 8"));
    assert!(CoopConvSpec { x_vec: true, ..spec }.render().unwrap_err().contains("pointwise"));
    assert!(CoopConvSpec { size: 32, ..spec }.render().is_err());
    assert!(CoopConvSpec { tm: 3, ..spec }.render().is_err());
    assert!(CoopConvSpec { bk: 48, ..spec }.render().is_err());
    let empty = ConvShape { oc: 0, ..shape };
    assert!(CoopConvSpec { shape: empty, ..spec }.render().is_err());
}

#[test]
fn planner_picks_f32_accumulation_and_the_block() {
    let dev = device(&NVIDIA);
    let auto = CoopConvRoute::Auto { min_blocks: 32 };
    // ResNet-50 at batch 32, layer 1's 3×3: 128 × 64 blocks of 8 subgroups of 32.
    let s = plan_coop_conv(&dev, &conv(64, 56, 64, 3, 1, 1), 32, 1, auto).unwrap();
    let got = (s.size, s.subgroup, s.block_m(), s.block_n(), s.threads());
    assert_eq!(got, (16, 32, 128, 64, 256));
    let s = plan_coop_conv(&dev, &conv(64, 56, 256, 1, 1, 0), 32, 1, auto).unwrap();
    assert_eq!(s.grid(32), [1568, 2, 1]);
    assert!(s.shared_bytes() <= 49152);
    // Too few invocations per workgroup for 8 subgroups (or too little workgroup memory, as
    // lavapipe's 32 KiB): 64 × 64 blocks of 4 subgroups.
    let narrow = CoopConvDevice { max_invocations: 128, ..device(&NVIDIA) };
    let s = plan_coop_conv(&narrow, &conv(64, 56, 256, 1, 1, 0), 32, 1, auto).unwrap();
    assert_eq!((s.block_m(), s.block_n(), s.threads()), (64, 64, 128));
    // More column blocks than a grid dimension holds: 128-wide blocks halve them.
    let few = CoopConvDevice { max_wg_dim: 1000, ..device(&NVIDIA) };
    let s = plan_coop_conv(&few, &conv(64, 56, 256, 1, 1, 0), 32, 1, auto).unwrap();
    assert_eq!((s.block_m(), s.block_n()), (128, 128));
    let none = CoopConvDevice { max_wg_dim: 500, ..device(&NVIDIA) };
    assert!(plan_coop_conv(&none, &conv(64, 56, 256, 1, 1, 0), 32, 1, auto).is_err());
    // At batch 1 layer 4's 3×3 has 8 blocks of 64 × 64: declined unless forced.
    let small = conv(512, 7, 512, 3, 1, 1);
    assert_eq!(plan_coop_conv(&dev, &small, 1, 1, auto), Err(CoopDecline::TooSmall));
    assert!(plan_coop_conv(&dev, &small, 1, 1, CoopConvRoute::Force).is_ok());
    assert!(plan_coop_conv(&dev, &small, 32, 1, auto).is_ok());
    // Apple: 8×8 f16→f32, 4 × 4 tiles per subgroup: the same 128 × 64 block.
    let apple = [cfg(8, DType::F16, DType::F32)];
    let s = plan_coop_conv(&device(&apple), &small, 32, 1, auto).unwrap();
    assert_eq!((s.size, s.tm, s.block_m(), s.block_n()), (8, 4, 128, 64));
}

#[test]
fn planner_falls_back_without_a_usable_adapter() {
    let shape = conv(64, 56, 64, 3, 1, 1);
    let auto = CoopConvRoute::Auto { min_blocks: 32 };
    // No configurations at all (lavapipe), or only f16 accumulation, or non-f16 operands.
    for configs in [
        vec![],
        vec![cfg(16, DType::F16, DType::F16)],
        vec![cfg(16, DType::F32, DType::F32)],
        vec![CoopConfig { m: 16, n: 8, k: 16, ab: DType::F16, cr: DType::F32 }],
    ] {
        assert_eq!(
            plan_coop_conv(&device(&configs), &shape, 32, 1, auto),
            Err(CoopDecline::NoConfig)
        );
    }
    let off = plan_coop_conv(&device(&NVIDIA), &shape, 32, 1, CoopConvRoute::Off).unwrap_err();
    assert_eq!(off.to_string(), "MPSRT_COOP_CONV=0");
    let varying = CoopConvDevice { subgroup: (16, 64), ..device(&NVIDIA) };
    assert_eq!(
        plan_coop_conv(&varying, &shape, 32, 1, auto),
        Err(CoopDecline::SubgroupSize(16, 64))
    );
    let no_f16 = CoopConvDevice { shader_f16: false, ..device(&NVIDIA) };
    assert!(matches!(
        plan_coop_conv(&no_f16, &shape, 32, 1, auto),
        Err(CoopDecline::Unsupported(_))
    ));
    let no_sg = CoopConvDevice { subgroups: false, ..device(&NVIDIA) };
    assert!(matches!(
        plan_coop_conv(&no_sg, &shape, 32, 1, auto),
        Err(CoopDecline::Unsupported(_))
    ));
    // Grouped / depthwise convs stay on the fallback.
    let dw = ConvShape { c: 1, ..shape };
    assert!(matches!(
        plan_coop_conv(&device(&NVIDIA), &dw, 32, 64, auto),
        Err(CoopDecline::Unsupported(_))
    ));
    // Too little workgroup memory for either tile (16 KiB: WebGPU's default limit).
    let tiny = CoopConvDevice { shared_limit: 16384, ..device(&NVIDIA) };
    assert!(matches!(plan_coop_conv(&tiny, &shape, 32, 1, auto), Err(CoopDecline::Unsupported(_))));
    // A 32 KiB limit (lavapipe's) fits the 64 × 64 tile.
    let mid = CoopConvDevice { shared_limit: 32768, ..device(&NVIDIA) };
    let s = plan_coop_conv(&mid, &conv(64, 56, 256, 1, 1, 0), 32, 1, auto).unwrap();
    assert_eq!((s.block_m(), s.block_n()), (64, 64));
}

#[test]
fn tuned_structures_per_class_fit_and_render() {
    use mpsrt_kernels::conv_coop::{tuned_structure, tuned_structure_of, ConvClass};
    let classes = [
        (conv(3, 224, 64, 7, 2, 3), ConvClass::Wide),
        (conv(64, 56, 64, 3, 1, 1), ConvClass::Spatial64),
        (conv(256, 14, 256, 3, 1, 1), ConvClass::Spatial),
        (conv(128, 56, 128, 3, 2, 1), ConvClass::Spatial),
        (conv(64, 56, 256, 1, 1, 0), ConvClass::PointShort),
        (conv(256, 56, 64, 1, 1, 0), ConvClass::PointShort),
        (conv(256, 56, 128, 1, 1, 0), ConvClass::PointShort),
        (conv(1024, 14, 256, 1, 1, 0), ConvClass::PointLong),
        (conv(256, 56, 512, 1, 2, 0), ConvClass::PointStrided),
    ];
    let dev = device(&NVIDIA);
    for (shape, class) in classes {
        assert_eq!(ConvClass::of(&shape), class, "{shape:?}");
        assert_eq!(tuned_structure(&shape, 8), None, "8×8 tiles keep the planner's block");
        let t = tuned_structure(&shape, 16).unwrap();
        let plan = plan_coop_conv(&dev, &shape, 32, 1, CoopConvRoute::Force).unwrap();
        let spec = plan.with_structure(&t);
        // No block taller than the channels past 64 rows; within 48 KiB; renders.
        assert!(spec.block_m() <= shape.oc.max(64), "{class:?}: {spec:?}");
        // 64 × 128 blocks for the stem, ≤ 64-channel windows and 1×1 convs into or from ≤ 64
        // channels; 128 × 64 for the rest.
        let narrow = matches!(class, ConvClass::Wide | ConvClass::Spatial64)
            || (class == ConvClass::PointShort && (shape.oc <= 64 || shape.c <= 64));
        let want = if narrow { (64, 128) } else { (128, 64) };
        assert_eq!((spec.block_m(), spec.block_n()), want, "{class:?}: {spec:?}");
        // Session 15's table (A/B): 64 × 64 for ≤ 64 channels, else 128 × 64.
        let old = plan.with_structure(&tuned_structure_of(&shape, 16, 15).unwrap());
        let want = if shape.oc <= 64 { (64, 64) } else { (128, 64) };
        assert_eq!((old.block_m(), old.block_n()), want, "{class:?}: {old:?}");
        // Two workgroups per NVIDIA SM (the cooperative GEMM's measured budget).
        let budget = mpsrt_kernels::matmul_coop_family::COOP_SHARED_BUDGET;
        assert!(spec.shared_bytes() <= budget, "{class:?}: {spec:?}");
        let spec = mpsrt_kernels::CoopConvSpec {
            mask: spec.mask && !shape.pointwise() && shape.kh * shape.kw <= 32,
            pairs: spec.pairs && shape.p().is_multiple_of(2),
            ..spec
        };
        spec.render().unwrap_or_else(|e| panic!("{class:?}: {e}"));
    }
}

#[test]
fn split_k_only_below_one_workgroup_per_sm() {
    use mpsrt_kernels::conv_coop::auto_splitk;
    // Layer 4 of ResNet-50 b32: 100 workgroups of 128 × 64, K 4608 (3×3) or 2048 (1×1): 4
    // slices at the default target of 396 workgroups (3 with the old 264).
    assert_eq!(auto_splitk(100, 4608, 32, 132, 396), 4);
    assert_eq!(auto_splitk(100, 2048, 32, 132, 396), 4);
    assert_eq!(auto_splitk(100, 2048, 32, 132, 264), 3);
    // Layer 3's 196 workgroups stay whole; so does a K too short for 4 steps a slice.
    assert_eq!(auto_splitk(196, 2304, 32, 132, 264), 1);
    assert_eq!(auto_splitk(10, 192, 32, 132, 264), 1);
    assert_eq!(auto_splitk(10, 100_000, 32, 132, 264), 8);
    assert_eq!(auto_splitk(0, 4608, 32, 132, 264), 1);
}
