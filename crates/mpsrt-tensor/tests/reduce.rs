//! Reductions, softmax and normalization on every device against the CPU reference, the CPU
//! reference against hand-derived values, and the error cases.

mod common;
use common::*;
use mpsrt_tensor::{self as mt, DType, Place, Result, Tensor};

fn check(what: &str, cpu: &Tensor, f: impl Fn(Place) -> Result<Tensor>, rtol: f64, atol: f64) {
    let want = cpu.to_f64_vec().unwrap();
    for p in gpus() {
        let got = f(p).unwrap_or_else(|e| panic!("{what} on {p}: {e}"));
        assert_eq!(got.shape(), cpu.shape(), "{what}: shape");
        assert_eq!(got.dtype(), cpu.dtype(), "{what}: dtype");
        assert_close(&format!("{what} on {p}"), &got.to_f64_vec().unwrap(), &want, rtol, atol);
    }
}

type Red = fn(&Tensor, Option<&[isize]>, bool) -> Result<Tensor>;

#[test]
fn reductions_match_cpu_reference() {
    let ops: &[(&str, Red)] = &[
        ("sum", mt::sum),
        ("mean", mt::mean),
        ("prod", mt::prod),
        ("max", mt::max),
        ("min", mt::min),
        ("logsumexp", mt::logsumexp),
        ("norm", mt::norm),
        ("var", |x, a, k| mt::var(x, a, 1.0, k)),
        ("std", |x, a, k| mt::std(x, a, 0.0, k)),
    ];
    let cases: &[(&[usize], Option<&[isize]>)] = &[
        (&[17], None),
        (&[3, 1023], Some(&[-1])),
        (&[33, 65], Some(&[0])),
        (&[4, 5, 6], Some(&[0, 2])),
        (&[2, 3, 4, 5], Some(&[1, 3])),
        (&[300, 8], Some(&[1])),
        (&[7, 300], Some(&[0])),
        (&[0, 3], Some(&[1])),
        (&[], None),
    ];
    let mut seed = 7;
    for &(name, f) in ops {
        for &(shape, axes) in cases {
            for dtype in [DType::F32, DType::F16, DType::I32] {
                if dtype == DType::I32 && name == "prod" {
                    continue;
                }
                seed += 1;
                let n: usize = shape.iter().product();
                let edges = dtype != DType::I32 && name != "prod";
                let x = tensor(&values(n, seed, edges), shape, dtype);
                for keep in [false, true] {
                    let cpu = f(&x, axes, keep).unwrap();
                    let (rt, at) = if dtype == DType::F16 { (4e-3, 4e-3) } else { (1e-4, 1e-4) };
                    let what = format!("{name}({shape:?} {dtype}, {axes:?}, keep={keep})");
                    check(&what, &cpu, |p| f(&x.to(p)?, axes, keep), rt, at);
                }
                // Non-contiguous input: transposed view.
                if shape.len() == 2 && n > 0 {
                    let xt = x.transpose(0, 1).unwrap();
                    let cpu = f(&xt, axes, false).unwrap();
                    check(
                        &format!("{name} transposed {shape:?}"),
                        &cpu,
                        |p| f(&x.to(p)?.transpose(0, 1)?, axes, false),
                        1e-4,
                        4e-3,
                    );
                }
            }
        }
    }
}

#[test]
fn arg_reductions_match_cpu_reference() {
    for (i, &(shape, axis)) in [
        (&[17usize][..], None),
        (&[5, 33][..], Some(-1isize)),
        (&[40, 7][..], Some(0)),
        (&[3, 300][..], Some(1)),
    ]
    .iter()
    .enumerate()
    {
        for dtype in [DType::F32, DType::F16, DType::I32] {
            let n: usize = shape.iter().product();
            let mut v = values(n, 50 + i as u64, dtype != DType::I32);
            v.iter_mut().step_by(3).for_each(|x| *x = 1.0); // ties
            let x = tensor(&v, shape, dtype);
            for f in [mt::argmax, mt::argmin] {
                let cpu = f(&x, axis, false).unwrap();
                assert_eq!(cpu.dtype(), DType::I32);
                check(
                    &format!("arg {shape:?} {dtype} {axis:?}"),
                    &cpu,
                    |p| f(&x.to(p)?, axis, false),
                    0.0,
                    0.0,
                );
            }
        }
    }
}

#[test]
fn cpu_reference_hand_values() {
    let x =
        Tensor::from_slice(&[1.0f32, 5.0, 2.0, 5.0, f32::NAN, 0.0], &[2, 3], Place::Cpu).unwrap();
    let s = mt::sum(&x.slice(0, Some(0), Some(1), 1).unwrap(), None, false).unwrap();
    assert_eq!(s.to_f64_vec().unwrap(), vec![8.0]);
    assert_eq!(mt::argmax(&x, Some(1), false).unwrap().to_f64_vec().unwrap(), vec![1.0, 1.0]);
    assert_eq!(mt::argmin(&x, Some(1), false).unwrap().to_f64_vec().unwrap(), vec![0.0, 1.0]);
    assert!(mt::max(&x, Some(&[1]), false).unwrap().to_f64_vec().unwrap()[1].is_nan());
    let v = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4], Place::Cpu).unwrap();
    assert_close(
        "var",
        &mt::var(&v, None, 1.0, false).unwrap().to_f64_vec().unwrap(),
        &[5.0 / 3.0],
        1e-6,
        0.0,
    );
    assert_close(
        "std0",
        &mt::std(&v, None, 0.0, false).unwrap().to_f64_vec().unwrap(),
        &[1.25f64.sqrt()],
        1e-6,
        0.0,
    );
    assert_close(
        "lse",
        &mt::logsumexp(&v, None, false).unwrap().to_f64_vec().unwrap(),
        &[4.440_189_7],
        1e-6,
        0.0,
    );
    assert_close(
        "norm",
        &mt::norm(&v, None, false).unwrap().to_f64_vec().unwrap(),
        &[30f64.sqrt()],
        1e-6,
        0.0,
    );
    let e = Tensor::from_slice::<f32>(&[], &[0, 2], Place::Cpu).unwrap();
    assert_eq!(mt::sum(&e, Some(&[0]), false).unwrap().to_f64_vec().unwrap(), vec![0.0, 0.0]);
    assert_eq!(mt::prod(&e, Some(&[0]), false).unwrap().to_f64_vec().unwrap(), vec![1.0, 1.0]);
    assert!(mt::mean(&e, Some(&[0]), false).unwrap().to_f64_vec().unwrap()[0].is_nan());
    let b = Tensor::from_bools(&[true, false, true], &[3], Place::Cpu).unwrap();
    let bs = mt::sum(&b, None, false).unwrap();
    assert_eq!((bs.dtype(), bs.to_f64_vec().unwrap()), (DType::I32, vec![2.0]));
    let sm =
        mt::softmax(&Tensor::from_slice(&[0.0f32, 0.0], &[2], Place::Cpu).unwrap(), 0).unwrap();
    assert_eq!(sm.to_f64_vec().unwrap(), vec![0.5, 0.5]);
}

#[test]
fn reduction_errors_name_the_op() {
    for p in devices() {
        let e = Tensor::from_slice::<f32>(&[], &[0, 2], Place::Cpu).unwrap().to(p).unwrap();
        let err = mt::max(&e, Some(&[0]), false).unwrap_err().to_string();
        assert!(err.contains("[max]") && err.contains("[0, 2]"), "{err}");
        assert!(mt::argmax(&e, Some(0), false).unwrap_err().to_string().contains("[argmax]"));
        let x = mt::zeros(&[2, 3], DType::F32, p).unwrap();
        assert!(mt::sum(&x, Some(&[2]), false).unwrap_err().to_string().contains("[sum]"));
        assert!(mt::sum(&x, Some(&[1, -1]), false).unwrap_err().to_string().contains("repeated"));
        assert!(mt::softmax(&x, 5).unwrap_err().to_string().contains("[softmax]"));
    }
}

#[test]
fn softmax_matches_cpu_reference() {
    // (shape, axis, special values): rows of up to 16×256 scalars / 8×256 vec4s take the
    // register-row kernel (1, 4, 5 and 8 chunks below), 4097 and 9000 the streaming kernels.
    // Random rows with special values are almost always NaN rows, so most cases run without.
    let cases: &[(&[usize], isize, bool)] = &[
        (&[3, 1023], -1, true),
        (&[3, 1023], -1, false),
        (&[33, 17], 0, false),
        (&[4, 5, 6], 1, true),
        (&[2, 256], 1, false),
        (&[300, 5], -1, true),
        (&[0, 4], 1, false),
        (&[5], 0, false),
        (&[2, 8192], 1, false),
        (&[3, 4100], -1, false),
        (&[2, 4097], -1, false),
        (&[2, 9000], -1, false),
        (&[70, 3], 0, false),
        // Short rows sharing a workgroup: 32 vec4s (BERT's 128 scores; 13 rows, not a multiple
        // of the 8 per workgroup), 25 vec4s, 33 / 64 scalars, and a strided axis.
        (&[13, 128], -1, true),
        (&[2, 3, 5, 128], -1, false),
        (&[37, 100], -1, false),
        (&[11, 33], -1, false),
        (&[9, 64], 1, false),
        (&[64, 9], 0, false),
    ];
    for (i, &(shape, axis, edges)) in cases.iter().enumerate() {
        for dtype in [DType::F32, DType::F16] {
            let n: usize = shape.iter().product();
            let x = tensor(&values(n, 90 + i as u64, edges), shape, dtype);
            for (name, f) in [
                ("softmax", mt::softmax as fn(&Tensor, isize) -> Result<Tensor>),
                ("log_softmax", mt::log_softmax),
            ] {
                let cpu = f(&x, axis).unwrap();
                let (rt, at) = if dtype == DType::F16 { (4e-3, 2e-3) } else { (1e-5, 1e-6) };
                check(
                    &format!("{name}({shape:?} {dtype}, {axis})"),
                    &cpu,
                    |p| f(&x.to(p)?, axis),
                    rt,
                    at,
                );
            }
        }
    }
}

/// Row sums / means / norms over many aligned f32 rows take the register-row kernel (1, 3 and 8
/// `vec4` chunks per thread here); finite values, so the sums are really compared.
#[test]
fn register_row_sums_match_cpu_reference() {
    let ops: &[(&str, Red)] = &[("sum", mt::sum), ("mean", mt::mean), ("norm", mt::norm)];
    for (i, shape) in [[70usize, 8], [65, 2052], [64, 8192]].iter().enumerate() {
        let x = tensor(&values(shape[0] * shape[1], 300 + i as u64, false), shape, DType::F32);
        for &(name, f) in ops {
            let cpu = f(&x, Some(&[1]), false).unwrap();
            check(
                &format!("{name}({shape:?})"),
                &cpu,
                |p| f(&x.to(p)?, Some(&[1]), false),
                1e-4,
                1e-3,
            );
        }
    }
}

#[test]
fn softmax_special_rows_match_cpu_reference() {
    let (inf, nan) = (f64::INFINITY, f64::NAN);
    // Rows of 8: +inf present, all -inf, some -inf, NaN present, ordinary; last axis (vec4
    // register rows) and, transposed, the first axis (scalar register rows).
    let rows: [[f64; 8]; 5] = [
        [1.0, inf, -2.0, 0.0, 3.0, -inf, 0.5, 1.0],
        [-inf; 8],
        [-inf, 2.0, -inf, 2.0, -1.0, -inf, 0.0, 1.0],
        [0.0, 1.0, nan, 2.0, 3.0, 4.0, 5.0, 6.0],
        [0.25, -1.0, 2.0, 3.5, -0.5, 1.0, 0.0, -3.0],
    ];
    let flat: Vec<f64> = rows.iter().flatten().copied().collect();
    let x = tensor(&flat, &[5, 8], DType::F32);
    let xt = x.transpose(0, 1).unwrap();
    for (name, f) in [
        ("softmax", mt::softmax as fn(&Tensor, isize) -> Result<Tensor>),
        ("log_softmax", mt::log_softmax),
    ] {
        for (t, axis) in [(&x, 1), (&xt, 0)] {
            let cpu = f(t, axis).unwrap();
            check(
                &format!("{name} special rows, axis {axis}"),
                &cpu,
                |p| f(&t.to(p)?, axis),
                1e-6,
                1e-7,
            );
        }
    }
}

#[test]
fn normalization_matches_cpu_reference() {
    let x = tensor(&values(2 * 6 * 5 * 3, 3, false), &[2, 6, 5, 3], DType::F32);
    let w = tensor(&values(6, 4, false), &[6], DType::F32);
    let b = tensor(&values(6, 5, false), &[6], DType::F32);
    let rv = mt::add_scalar(&mt::abs(&w).unwrap(), 0.5).unwrap();
    let lw = tensor(&values(15, 6, false), &[5, 3], DType::F32);
    type F = dyn Fn(&Tensor, &Tensor, &Tensor, &Tensor, &Tensor) -> Result<Tensor>;
    let ops: Vec<(&str, Box<F>)> = vec![
        ("batch_norm", Box::new(|x, w, b, rv, _| mt::batch_norm(x, b, rv, Some(w), Some(b), 1e-5))),
        (
            "batch_norm_train",
            Box::new(|x, w, b, _, _| mt::batch_norm_train(x, Some(w), Some(b), 1e-5).map(|r| r.0)),
        ),
        (
            "batch_norm_train_var",
            Box::new(|x, _, _, _, _| mt::batch_norm_train(x, None, None, 1e-5).map(|r| r.2)),
        ),
        ("layer_norm", Box::new(|x, _, _, _, lw| mt::layer_norm(x, &[5, 3], Some(lw), None, 1e-5))),
        ("group_norm", Box::new(|x, w, b, _, _| mt::group_norm(x, 3, Some(w), Some(b), 1e-5))),
        ("instance_norm", Box::new(|x, _, _, _, _| mt::instance_norm(x, None, None, 1e-5))),
    ];
    for (name, f) in &ops {
        let cpu = f(&x, &w, &b, &rv, &lw).unwrap();
        check(
            name,
            &cpu,
            |p| f(&x.to(p)?, &w.to(p)?, &b.to(p)?, &rv.to(p)?, &lw.to(p)?),
            1e-4,
            1e-4,
        );
    }
    // Hand value: layer norm of [1, 2, 3] → [-1.2247, 0, 1.2247].
    let v = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[1, 3], Place::Cpu).unwrap();
    let y = mt::layer_norm(&v, &[3], None, None, 0.0).unwrap();
    assert_close("ln", &y.to_f64_vec().unwrap(), &[-1.224_744_9, 0.0, 1.224_744_9], 1e-5, 1e-6);
    assert!(mt::group_norm(&x, 4, None, None, 1e-5)
        .unwrap_err()
        .to_string()
        .contains("[group_norm]"));
    assert!(mt::layer_norm(&x, &[4], None, None, 1e-5)
        .unwrap_err()
        .to_string()
        .contains("[layer_norm]"));
}
