//! Every conv algorithm the planner can pick (`gpu/conv_plan.rs`), forced in turn with
//! `MPSRT_CONV_ALGO` (read per call, so one test walks them all; one test function, because
//! the variable is process-wide), on the shared case table against the CPU backend: plain,
//! and with a residual and an activation in the epilogue. A forced algorithm that cannot run
//! a case (Winograd on a strided conv) falls back to the automatic choice, which is checked
//! the same way.

mod common;
use common::conv_cases::CASES;
use common::*;
use mpsrt_tensor::{self as mt, conv2d, conv2d_fused, Activation, Conv2dOptions, DType};

#[test]
fn every_conv_algorithm_matches_cpu() {
    let acts = [Activation::Relu, Activation::LeakyRelu(0.1), Activation::Clip(-1.0, 2.0)];
    let mut want = Vec::new();
    for (i, &(n, c, h, w, oc, kh, kw, stride, padding, dilation, groups, bias)) in
        CASES.iter().enumerate()
    {
        let x = rnd(&[n, c, h, w], 70 + i as u64, DType::F32);
        let wt = rnd(&[oc, c / groups, kh, kw], 700 + i as u64, DType::F32);
        let b = rnd(&[oc], 7000 + i as u64, DType::F32);
        let o = Conv2dOptions { stride, padding, dilation, groups };
        let cpu = conv2d(&x, &wt, bias.then_some(&b), &o).unwrap();
        let r = rnd(cpu.shape(), 9000 + i as u64, DType::F32);
        let act = acts[i % acts.len()];
        let fused = act.apply(&mt::add(&cpu, &r).unwrap()).unwrap();
        want.push((x, wt, b, o, bias, r, act, cpu, fused, c / groups * kh * kw));
    }
    // `lowered`, `legacy` and `auto` are what `conv.rs` and `conv_gemm.rs` already cover.
    for algo in ["winograd2", "winograd4", "splitk", "gemm"] {
        std::env::set_var("MPSRT_CONV_ALGO", algo);
        let t0 = std::time::Instant::now();
        for (i, (x, wt, b, o, bias, r, act, cpu, fused, k)) in want.iter().enumerate() {
            // Grouped convs never reach these algorithms (covered in `conv.rs`).
            if o.groups > 1 {
                continue;
            }
            // f32 sums over K terms in other orders: allow for long K. F(4,3)'s transforms
            // scale intermediate values by up to ~100 (Bᵀ's 4s and 5s, G's 1/24), so its
            // rounding error is ~5× that of direct summation, as for cuDNN's Winograd.
            let scale = if algo == "winograd4" { 5e-4 } else { 2e-4 };
            let tol = scale * k.div_ceil(128) as f64;
            for p in gpus() {
                let (xg, wg, bg, rg) =
                    (x.to(p).unwrap(), wt.to(p).unwrap(), b.to(p).unwrap(), r.to(p).unwrap());
                let bg = bias.then_some(&bg);
                let what = format!("{algo} case {i} on {p}");
                check_tol(&what, cpu, &conv2d(&xg, &wg, bg, o).unwrap(), DType::F32, tol);
                let got = conv2d_fused(&xg, &wg, bg, o, Some(&rg), Some(*act)).unwrap();
                check_tol(&format!("{what} +residual {act:?}"), fused, &got, DType::F32, tol);
            }
        }
        eprintln!("{algo}: {:.1} s", t0.elapsed().as_secs_f64());
    }
    std::env::remove_var("MPSRT_CONV_ALGO");
}
