//! matmul / gemm / linear on every device against the CPU reference: odd sizes, broadcast
//! batch dims, transposed operands, 1-D operands, zero-size dims, f16, and the error cases.

mod common;
use common::*;
use mpsrt_tensor::{self as mt, DType, Place, Result, Tensor};

fn check(what: &str, cpu: &Tensor, f: impl Fn(Place) -> Result<Tensor>, tol: f64) {
    let want = cpu.to_f64_vec().unwrap();
    for p in gpus() {
        let got = f(p).unwrap_or_else(|e| panic!("{what} on {p}: {e}"));
        assert_eq!(got.shape(), cpu.shape(), "{what}: shape");
        assert_eq!(got.dtype(), cpu.dtype(), "{what}: dtype");
        assert_close(&format!("{what} on {p}"), &got.to_f64_vec().unwrap(), &want, tol, tol);
    }
}

#[test]
fn matmul_matches_cpu_reference() {
    let cases: &[(&[usize], &[usize])] = &[
        (&[1, 1], &[1, 1]),
        (&[3, 5], &[5, 7]),
        (&[17, 33], &[33, 17]),
        (&[130, 129], &[129, 131]),
        (&[64, 128], &[128, 68]),
        (&[2, 3, 17, 9], &[9, 33]),
        (&[4, 1, 5, 8], &[3, 8, 12]),
        (&[33], &[33, 17]),
        (&[40, 33], &[33]),
        (&[33], &[33]),
        (&[1, 256], &[256, 100]),
        (&[0, 4], &[4, 5]),
        (&[3, 0], &[0, 5]),
    ];
    for (i, &(sa, sb)) in cases.iter().enumerate() {
        for dtype in [DType::F32, DType::F16] {
            let a = tensor(&values(sa.iter().product(), 10 + i as u64, false), sa, dtype);
            let b = tensor(&values(sb.iter().product(), 20 + i as u64, false), sb, dtype);
            let cpu = mt::matmul(&a, &b).unwrap();
            let tol = if dtype == DType::F16 { 2e-2 } else { 1e-4 };
            check(
                &format!("matmul({sa:?}, {sb:?}, {dtype})"),
                &cpu,
                |p| mt::matmul(&a.to(p)?, &b.to(p)?),
                tol,
            );
        }
    }
}

#[test]
fn transposed_operands_without_copies() {
    for (m, k, n) in [(3usize, 5usize, 7usize), (64, 32, 64), (130, 17, 33), (1, 64, 1)] {
        let at = tensor(&values(m * k, 1, false), &[k, m], DType::F32);
        let bt = tensor(&values(k * n, 2, false), &[n, k], DType::F32);
        let a = tensor(&values(m * k, 3, false), &[m, k], DType::F32);
        let b = tensor(&values(k * n, 4, false), &[k, n], DType::F32);
        type F = fn(&Tensor, &Tensor, &Tensor, &Tensor) -> Result<Tensor>;
        let fs: [(&str, F); 3] = [
            ("aT b", |at, _, _, b| mt::matmul(&at.transpose(0, 1)?, b)),
            ("a bT", |_, bt, a, _| mt::matmul(a, &bt.transpose(0, 1)?)),
            ("aT bT", |at, bt, _, _| mt::matmul(&at.transpose(0, 1)?, &bt.transpose(0, 1)?)),
        ];
        for (name, f) in fs {
            let cpu = f(&at, &bt, &a, &b).unwrap();
            check(
                &format!("{name} {m}x{k}x{n}"),
                &cpu,
                |p| f(&at.to(p)?, &bt.to(p)?, &a.to(p)?, &b.to(p)?),
                1e-4,
            );
        }
    }
}

#[test]
fn gemm_and_linear_match_cpu_reference() {
    let a = tensor(&values(9 * 5, 1, false), &[5, 9], DType::F32);
    let b = tensor(&values(9 * 6, 2, false), &[6, 9], DType::F32);
    let c = tensor(&values(6, 3, false), &[6], DType::F32);
    let bg = tensor(&values(5 * 6, 7, false), &[6, 5], DType::F32);
    let cpu = mt::gemm(&a, &bg, Some(&c), 0.5, 2.0, true, true).unwrap();
    assert_eq!(cpu.shape(), &[9, 6]);
    check(
        "gemm",
        &cpu,
        |p| mt::gemm(&a.to(p)?, &bg.to(p)?, Some(&c.to(p)?), 0.5, 2.0, true, true),
        1e-4,
    );
    // One row (a batch-1 classifier): the GEMV kernel with C in its epilogue, B transposed
    // (K-contiguous lanes) and row-major, C broadcast from [N] and given as [1, N].
    let row = tensor(&values(37, 8, false), &[1, 37], DType::F32);
    let wt = tensor(&values(13 * 37, 9, false), &[13, 37], DType::F32);
    let c13 = tensor(&values(13, 10, false), &[13], DType::F32);
    for (tb, w, cv) in [
        (true, wt.clone(), c13.clone()),
        (false, wt.transpose(0, 1).unwrap().contiguous().unwrap(), c13.reshape(&[1, 13]).unwrap()),
    ] {
        let cpu = mt::gemm(&row, &w, Some(&cv), 0.5, 2.0, false, tb).unwrap();
        check(
            &format!("gemm one row transB={tb}"),
            &cpu,
            |p| mt::gemm(&row.to(p)?, &w.to(p)?, Some(&cv.to(p)?), 0.5, 2.0, false, tb),
            1e-4,
        );
    }
    let x = tensor(&values(2 * 3 * 9, 4, false), &[2, 3, 9], DType::F32);
    let cpu = mt::linear(&x, &b, Some(&c)).unwrap();
    assert_eq!(cpu.shape(), &[2, 3, 6]);
    check("linear", &cpu, |p| mt::linear(&x.to(p)?, &b.to(p)?, Some(&c.to(p)?)), 1e-4);
    let cpu = mt::linear(&x, &b, None).unwrap();
    check("linear nobias", &cpu, |p| mt::linear(&x.to(p)?, &b.to(p)?, None), 1e-4);
}

/// `gemm_act` (activation in the GPU GEMM's epilogue, or after the GEMV) against the unfused
/// CPU route: gemm, then the activation as its own elementwise op.
#[test]
fn gemm_act_matches_gemm_then_activation() {
    use mt::Activation::*;
    // (M, K, N, with C, act): tiled vec4 store, scalar store (N % 4 != 0), GEMV (M = 1).
    let cases = [
        (9, 13, 12, true, Relu),
        (33, 7, 70, false, LeakyRelu(0.2)),
        (5, 16, 17, true, Clip(-1.0, 1.5)),
        (1, 40, 9, false, Relu),
        (1, 40, 9, true, LeakyRelu(0.01)),
    ];
    for (i, &(m, k, n, with_c, act)) in cases.iter().enumerate() {
        let a = tensor(&values(m * k, 40 + i as u64, false), &[m, k], DType::F32);
        let b = tensor(&values(k * n, 50 + i as u64, false), &[k, n], DType::F32);
        let c = tensor(&values(n, 60 + i as u64, false), &[n], DType::F32);
        let c = with_c.then_some(&c);
        let cpu = act.apply(&mt::gemm(&a, &b, c, 1.0, 1.0, false, false).unwrap()).unwrap();
        let fused_cpu = mt::gemm_act(&a, &b, c, 1.0, 1.0, false, false, Some(act)).unwrap();
        assert_eq!(fused_cpu.to_f64_vec().unwrap(), cpu.to_f64_vec().unwrap(), "case {i} cpu");
        check(
            &format!("gemm_act case {i} ({m}x{k}x{n}, {act:?})"),
            &cpu,
            |p| {
                let c = c.map(|c| c.to(p)).transpose()?;
                mt::gemm_act(&a.to(p)?, &b.to(p)?, c.as_ref(), 1.0, 1.0, false, false, Some(act))
            },
            1e-4,
        );
    }
}

#[test]
fn cpu_reference_hand_values_and_errors() {
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], Place::Cpu).unwrap();
    let b = Tensor::from_slice(&[5.0f32, 6.0, 7.0, 8.0], &[2, 2], Place::Cpu).unwrap();
    assert_eq!(mt::matmul(&a, &b).unwrap().to_f64_vec().unwrap(), vec![19.0, 22.0, 43.0, 50.0]);
    let g = mt::gemm(&a, &b, Some(&a), 1.0, 1.0, true, false).unwrap();
    assert_eq!(g.to_f64_vec().unwrap(), vec![27.0, 32.0, 41.0, 48.0]);
    for p in devices() {
        let x = mt::zeros(&[2, 3], DType::F32, p).unwrap();
        let y = mt::zeros(&[4, 5], DType::F32, p).unwrap();
        let e = mt::matmul(&x, &y).unwrap_err().to_string();
        assert!(e.contains("[matmul]") && e.contains("[2, 3]") && e.contains("[4, 5]"), "{e}");
        let e = mt::gemm(&x, &y, None, 1.0, 0.0, false, false).unwrap_err().to_string();
        assert!(e.contains("[gemm]"), "{e}");
        let e = mt::linear(&x, &y, None).unwrap_err().to_string();
        assert!(e.contains("[linear]") && e.contains("[2, 3]"), "{e}");
    }
}
