//! The direct pointwise cooperative conv (`conv_coop_direct.rs`): which shapes it takes, and
//! every tile / unroll / epilogue combination parses, validates with naga's cooperative-matrix
//! capability and translates to MSL (Apple's simdgroup matrices), with its emulated form (the
//! lavapipe numerics test's) free of cooperative matrices and subgroup builtins.

use mpsrt_kernels::conv_coop::CoopDirectSpec;
use mpsrt_kernels::validate::wgsl_to_msl;
use mpsrt_kernels::{ConvShape, MatmulAct};

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

#[test]
fn takes_only_whole_fragments_of_one_image() {
    assert!(CoopDirectSpec::fits(&conv(64, 56, 256, 1, 1, 0)));
    assert!(CoopDirectSpec::fits(&conv(512, 28, 128, 1, 1, 0)));
    for (why, s) in [
        ("P = 196", conv(1024, 14, 256, 1, 1, 0)),
        ("stride 2", conv(256, 56, 512, 1, 2, 0)),
        ("3x3", conv(64, 56, 64, 3, 1, 1)),
        ("C = 24", conv(24, 56, 64, 1, 1, 0)),
        ("OC = 40", conv(64, 56, 40, 1, 1, 0)),
    ] {
        assert!(!CoopDirectSpec::fits(&s), "{why}");
    }
    let s = conv(64, 56, 256, 1, 1, 0);
    assert_eq!(CoopDirectSpec::k_unroll(&s, 4), 4);
    assert_eq!(CoopDirectSpec::k_unroll(&conv(48, 56, 64, 1, 1, 0), 4), 1);
    assert_eq!(CoopDirectSpec::k_unroll(&conv(96, 56, 64, 1, 1, 0), 4), 2);
}

#[test]
fn every_variant_validates_and_translates() {
    let acts = [MatmulAct::None, MatmulAct::Relu, MatmulAct::Clip];
    let mut n = 0;
    for shape in [conv(64, 56, 256, 1, 1, 0), conv(256, 28, 64, 1, 1, 0), conv(32, 4, 48, 1, 1, 0)]
    {
        for (sgs, tm, tn, ku) in [(1, 2, 2, 2), (2, 1, 4, 4), (4, 4, 1, 1), (1, 1, 1, 2)] {
            let spec = CoopDirectSpec {
                shape,
                subgroup: 32,
                sgs,
                tm,
                tn,
                ku: CoopDirectSpec::k_unroll(&shape, ku),
                has_bias: n % 2 == 0,
                bias_f16: n % 3 == 0,
                has_res: n % 3 != 1,
                act: acts[n % 3],
                emulate: false,
            };
            n += 1;
            let src = spec.render().unwrap_or_else(|e| panic!("{spec:?}: {e}"));
            let msl = wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
            assert!(msl.contains("simdgroup"));
            assert_eq!(src.contains("res: array<vec2<f16>>"), spec.has_res);
            assert!(!src.contains("workgroupBarrier();\n    let"), "no barrier in the K loop");
            let emu = CoopDirectSpec { emulate: true, ..spec }.render().unwrap();
            assert!(!emu.contains("coop_mat") && !emu.contains("subgroup_id"));
            wgsl_to_msl(&emu).unwrap_or_else(|e| panic!("emulated {spec:?}: {e}\n{emu}"));
        }
    }
    let bad = CoopDirectSpec {
        shape: conv(48, 56, 64, 1, 1, 0),
        subgroup: 32,
        sgs: 1,
        tm: 2,
        tn: 2,
        ku: 2,
        has_bias: false,
        bias_f16: false,
        has_res: false,
        act: MatmulAct::None,
        emulate: false,
    };
    assert!(bad.render().is_err(), "ku must divide K / 16");
}
