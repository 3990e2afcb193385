//! `MatmulSpec::render_strided_out` (the tiled GEMM storing at meta strides: attention's `p·v`
//! written sequence-major) validates and translates to MSL for the tunes, loads, stores and
//! batch ranks the launcher uses, stores through the meta's row stride, and refuses stream-K
//! and residual epilogues (both index the output contiguously).

use mpsrt_core::DType;
use mpsrt_kernels::validate::wgsl_to_msl;
use mpsrt_kernels::{GemmTune, MatmulAct, MatmulSpec, OperandLoad};

#[test]
fn strided_output_gemm_renders_and_validates() {
    use OperandLoad::*;
    let tunes = [
        GemmTune::legacy(64),
        GemmTune { bm: 64, bn: 64, db: true, wl: true, k16: true, sk: false },
        GemmTune { bm: 128, bn: 64, db: true, wl: true, k16: false, sk: false },
    ];
    for tune in tunes {
        for (a, b, vec_out, batch_dims, has_c) in [
            (VecK, VecMN, true, 2, false),
            (Scalar, Scalar, false, 1, true),
            (VecK, Scalar, true, 0, false),
        ] {
            let spec = MatmulSpec {
                dtype: DType::F32,
                tune,
                a,
                b,
                has_c,
                vec_out,
                batch_dims,
                act: MatmulAct::None,
                has_res: false,
            };
            let src = spec.render_strided_out().unwrap();
            assert!(src.contains("m * ldo + n") && !src.contains("m * N + n"), "{spec:?}\n{src}");
            wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
            let res = MatmulSpec { has_res: true, ..spec };
            assert!(res.render_strided_out().is_err());
            let sk = MatmulSpec { tune: GemmTune { sk: true, ..GemmTune::legacy(128) }, ..spec };
            assert!(sk.render_strided_out().is_err());
        }
    }
}
