//! Operands larger than one storage binding (VGG's 392 MiB fully-connected weight against
//! lavapipe's 128 MiB): `MPSRT_MAX_BINDING_BYTES` lowers the limit for this process, so small
//! tensors take the column-block path (windows into B's buffer) and must match the CPU.
//! Own test binary: the variable has to be set before the GPU device opens.

mod common;
use common::*;
use mpsrt_tensor::{self as mt, DType, Tensor};

fn init() {
    // 64 KiB: a [K=300, N=200] f32 weight (234 KiB) needs 4+ windows.
    std::env::set_var("MPSRT_MAX_BINDING_BYTES", "65536");
}

#[test]
fn gemm_with_transposed_weight_beyond_binding_limit() {
    init();
    let cases: &[(usize, usize, usize)] =
        &[(1, 300, 200), (5, 300, 200), (3, 257, 131), (2, 40, 1500)];
    for &(m, k, n) in cases {
        let x = tensor(&values(m * k, 1, false), &[m, k], DType::F32);
        let w = tensor(&values(n * k, 2, false), &[n, k], DType::F32);
        let c = tensor(&values(n, 3, false), &[n], DType::F32);
        let want = mt::gemm(&x, &w, Some(&c), 0.5, 2.0, false, true).unwrap();
        let want_lin = mt::linear(&x, &w, None).unwrap();
        for p in gpus() {
            let (xg, wg, cg) = (x.to(p).unwrap(), w.to(p).unwrap(), c.to(p).unwrap());
            let got = mt::gemm(&xg, &wg, Some(&cg), 0.5, 2.0, false, true).unwrap();
            assert_eq!(got.shape(), &[m, n]);
            let what = format!("gemm [{m},{k}]x[{n},{k}]^T on {p}");
            assert_close(
                &what,
                &got.to_f64_vec().unwrap(),
                &want.to_f64_vec().unwrap(),
                1e-4,
                1e-4,
            );
            let got = mt::linear(&xg, &wg, None).unwrap();
            let what = format!("linear [{m},{k}]x[{n},{k}]^T on {p}");
            let want = want_lin.to_f64_vec().unwrap();
            assert_close(&what, &got.to_f64_vec().unwrap(), &want, 1e-4, 1e-4);
        }
    }
}

#[test]
fn untransposed_operand_beyond_binding_limit_matches_cpu() {
    init();
    // A row-major B [K, N] past the limit: its columns are not stored apart, so the GEMM's
    // piece planner cuts K or N (`gpu/matmul.rs::split`); once refused, now computed.
    let (k, n) = (300, 200);
    let w = tensor(&values(n * k, 2, false), &[k, n], DType::F32);
    let x = tensor(&values(2 * k, 1, false), &[2, k], DType::F32);
    let want = mt::matmul(&x, &w).unwrap().to_f64_vec().unwrap();
    for p in gpus() {
        let got = mt::matmul(&x.to(p).unwrap(), &w.to(p).unwrap()).unwrap();
        assert_close(
            &format!("[2,{k}]x[{k},{n}] on {p}"),
            &got.to_f64_vec().unwrap(),
            &want,
            1e-4,
            1e-4,
        );
        // The device keeps working.
        let t: Tensor = mt::ones(&[3], DType::F32, p).unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0; 3]);
    }
}

#[test]
fn batched_conv_with_column_matrix_beyond_binding_limit() {
    init();
    // Merged column matrix [K=144, N·P=4·49] is 110 KiB > 64 KiB while the input (12 KiB)
    // fits: the batched conv must not take the one-GEMM route, and still match the CPU.
    let (n, c, oc, hw, k) = (4, 16, 8, 7, 3);
    let x = tensor(&values(n * c * hw * hw, 4, false), &[n, c, hw, hw], DType::F32);
    let w = tensor(&values(oc * c * k * k, 5, false), &[oc, c, k, k], DType::F32);
    let o = mt::Conv2dOptions { padding: mt::ConvPadding::symmetric(1, 1), ..Default::default() };
    let want = mt::conv2d(&x, &w, None, &o).unwrap().to_f64_vec().unwrap();
    for p in gpus() {
        let got = mt::conv2d(&x.to(p).unwrap(), &w.to(p).unwrap(), None, &o).unwrap();
        let what = format!("batched 3x3 conv past the binding limit on {p}");
        assert_close(&what, &got.to_f64_vec().unwrap(), &want, 1e-4, 1e-4);
    }
}
