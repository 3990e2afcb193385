//! `layernorm::layer_norm_last` (issue 23): the one-kernel GPU layer norm, with and without a
//! residual input, bias and the sum output, vec4 and scalar rows, views with offsets (rows past
//! 65535 workgroups, the 2-D grid, are left out: ~10 s on lavapipe), against
//! the CPU composition (`add` + `layer_norm`, f64 statistics checked by `reduce.rs`'s tests).
//! Tolerance 1e-4 absolute on unit-scale outputs (f32 sums in a different order).

mod common;

use mpsrt_tensor::layernorm::layer_norm_last;
use mpsrt_tensor::{Place, Tensor};

fn t(shape: &[usize], seed: u64, place: Place) -> Tensor {
    let n = shape.iter().product();
    let v: Vec<f32> = common::values(n, seed, false).into_iter().map(|v| v as f32).collect();
    Tensor::from_slice(&v, shape, Place::Cpu).unwrap().to(place).unwrap()
}

fn host(t: &Tensor) -> Vec<f32> {
    t.to(Place::Cpu).unwrap().to_vec::<f32>().unwrap()
}

#[test]
fn one_kernel_layer_norm_matches_the_cpu_composition() {
    // The segmented (1) and flat (2) forms are opt-in (read per launch); rows past their
    // register capacity (512 / 1024 vec4s) keep the row form.
    for form in ["1", "2"] {
        std::env::set_var("MPSRT_LAYERNORM_SEG", form);
        run_cases();
    }
}

fn run_cases() {
    // (shape, residual, bias, sum_out, view offset in rows)
    let cases: &[(&[usize], bool, bool, bool, usize)] = &[
        (&[3, 5, 768], true, true, true, 0),
        (&[2, 3, 768], false, true, false, 0),
        (&[4, 7], true, false, true, 0),
        (&[5, 12], true, true, false, 2),
        (&[3, 9], false, false, false, 1),
        // The segmented form's widest rows (64 threads × 8 vec4s) and the long-row form; the
        // flat form's 256 threads of 2 and 4 vec4s, and its row form past 1024 vec4s.
        (&[3, 2048], true, true, true, 1),
        (&[2, 2052], false, true, false, 0),
        (&[2, 4096], true, true, false, 0),
        (&[2, 4100], false, false, false, 0),
    ];
    for place in common::gpus() {
        for &(shape, res, bias, sum_out, skip) in cases {
            let n = *shape.last().unwrap();
            let mut big = shape.to_vec();
            big[0] += skip;
            // Inputs that start `skip` rows into their buffer (views with an offset).
            let view = |seed, place| {
                let b = t(&big, seed, place);
                b.slice(0, Some(skip as isize), None, 1).unwrap()
            };
            let run = |place: Place| {
                let x = view(1, place);
                let r = res.then(|| view(2, place));
                let w = t(&[n], 3, place);
                let b = bias.then(|| t(&[n], 4, place));
                layer_norm_last(&x, r.as_ref(), &w, b.as_ref(), 1e-5, sum_out).unwrap()
            };
            let (want, want_s) = run(Place::Cpu);
            let (got, got_s) = run(place);
            assert_eq!(got.shape(), shape);
            let close = |a: &[f32], b: &[f32], what: &str| {
                assert_eq!(a.len(), b.len());
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    assert!((x - y).abs() <= 1e-4, "{shape:?} {what} [{i}]: {x} vs {y}");
                }
            };
            close(&host(&got), &host(&want), "y");
            assert_eq!(got_s.is_some(), sum_out);
            if let (Some(g), Some(w)) = (got_s, want_s) {
                close(&host(&g), &host(&w), "sum");
            }
        }
    }
}

#[test]
fn bad_parameters_name_the_op() {
    let x = t(&[2, 4], 1, Place::Cpu);
    let e = layer_norm_last(&x, None, &t(&[3], 2, Place::Cpu), None, 1e-5, false).unwrap_err();
    assert!(e.to_string().contains("layer_norm") && e.to_string().contains("4 elements"), "{e}");
    let r = t(&[4, 2], 3, Place::Cpu);
    let e = layer_norm_last(&x, Some(&r), &t(&[4], 2, Place::Cpu), None, 1e-5, false);
    assert!(e.unwrap_err().to_string().contains("residual"));
}

/// f16 rows (`precision=f16` graphs): the kernel's packed path (rows and offsets a multiple of
/// 4) and the composition otherwise, against the CPU composition of the same f16 values in f32
/// (tolerance: the f16 rounding of unit-scale outputs, 2^-11 relative, plus 1e-3).
#[test]
fn f16_rows_match_the_f32_composition() {
    // The segmented form is opt-in (read per launch); rows past 512 vec4s keep the row form.
    std::env::set_var("MPSRT_LAYERNORM_SEG", "1");
    use mpsrt_tensor::DType;
    let cases: &[(&[usize], bool, bool, bool, usize)] = &[
        (&[3, 5, 768], true, true, true, 0),
        (&[2, 3, 768], false, true, false, 0),
        (&[5, 12], true, true, false, 1),
        (&[3, 9], false, false, false, 0),
    ];
    for place in common::gpus() {
        for &(shape, res, bias, sum_out, skip) in cases {
            let n = *shape.last().unwrap();
            let mut big = shape.to_vec();
            big[0] += skip;
            let h = |shape: &[usize], seed| t(shape, seed, Place::Cpu).astype(DType::F16).unwrap();
            let view = |seed| h(&big, seed).slice(0, Some(skip as isize), None, 1).unwrap();
            let (x, r) = (view(1), res.then(|| view(2)));
            let (w, b) = (h(&[n], 3), bias.then(|| h(&[n], 4)));
            let f32s = |t: &Tensor| t.astype(DType::F32).unwrap();
            let (want, want_s) = layer_norm_last(
                &f32s(&x),
                r.as_ref().map(f32s).as_ref(),
                &f32s(&w),
                b.as_ref().map(f32s).as_ref(),
                1e-5,
                sum_out,
            )
            .unwrap();
            let g = |t: &Tensor| t.to(place).unwrap();
            let (got, got_s) = layer_norm_last(
                &g(&x),
                r.as_ref().map(g).as_ref(),
                &g(&w),
                b.as_ref().map(g).as_ref(),
                1e-5,
                sum_out,
            )
            .unwrap();
            assert_eq!((got.dtype(), got.shape()), (DType::F16, shape));
            let close = |a: &Tensor, b: &Tensor, what: &str| {
                let (a, b) = (host(&f32s(a)), host(b));
                for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                    let tol = 1e-3 + y.abs() / 2048.0;
                    assert!((x - y).abs() <= tol, "{shape:?} {what} [{i}]: {x} vs {y}");
                }
            };
            close(&got, &want, "y");
            if let (Some(gs), Some(ws)) = (got_s, want_s) {
                close(&gs, &ws, "sum");
            }
        }
    }
}
