//! The implicit-GEMM conv kernel (`conv.wgsl`'s `conv_gemm`), which the launcher keeps for
//! column matrices past the binding limit: forced on with `MPSRT_CONV_IMPLICIT_GEMM=1` (read
//! once per process, so this file is its own test binary) and checked on the shared case table
//! against the CPU backend.

mod common;
use common::conv_cases::CASES;
use common::*;
use mpsrt_tensor::{conv2d, Conv2dOptions, DType};

#[test]
fn implicit_gemm_kernel_matches_cpu() {
    std::env::set_var("MPSRT_CONV_IMPLICIT_GEMM", "1");
    for (i, &(n, c, h, w, oc, kh, kw, stride, padding, dilation, groups, bias)) in
        CASES.iter().enumerate()
    {
        let vals = |shape: &[usize], seed| {
            let len: usize = shape.iter().product();
            tensor(&values(len, seed, false), shape, DType::F32)
        };
        let x = vals(&[n, c, h, w], 10 + i as u64);
        let wt = vals(&[oc, c / groups, kh, kw], 100 + i as u64);
        let b = vals(&[oc], 1000 + i as u64);
        let o = Conv2dOptions { stride, padding, dilation, groups };
        let cpu = conv2d(&x, &wt, bias.then_some(&b), &o).unwrap();
        for p in gpus() {
            let (xg, wg, bg) = (x.to(p).unwrap(), wt.to(p).unwrap(), b.to(p).unwrap());
            let got = conv2d(&xg, &wg, bias.then_some(&bg), &o).unwrap();
            let (g, want) = (got.to_f64_vec().unwrap(), cpu.to_f64_vec().unwrap());
            // f32 sums over K = c/groups·kh·kw terms in different orders: allow for K past 256.
            let tol = 1e-4 * (c / groups * kh * kw).div_ceil(256) as f64;
            assert_close(&format!("implicit gemm case {i}"), &g, &want, 1e-4, tol);
        }
    }
}
