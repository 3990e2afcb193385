//! The implicit-GEMM conv kernel (`mpsrt-kernels/src/conv_gemm.rs`), forced on for every
//! ungrouped conv with `MPSRT_CONV_GEMM=1` (read once per process, so this file is its own
//! test binary) and checked on the shared case table against the CPU backend, for each of the
//! five tile shapes (`MPSRT_CONV_GEMM_TILE`), plain and with bias + residual + activation in
//! the epilogue, f32 (and f16 on one tile shape), and with inputs that start at an offset or
//! are not contiguous.

mod common;
use common::conv_cases::CASES;
use common::*;
use mpsrt_tensor::{
    self as mt, conv2d, conv2d_fused, Activation, Conv2dOptions, ConvPadding, DType,
};

#[test]
fn implicit_gemm_conv_matches_cpu_for_every_tile_shape() {
    std::env::set_var("MPSRT_CONV_GEMM", "1");
    let acts = [Activation::Relu, Activation::LeakyRelu(0.1), Activation::Clip(-1.0, 2.0)];
    // Beyond the table: 4-aligned maps (vector stores), K % 4 != 0, a column count that is
    // not a multiple of any tile, and more than one tile of channels.
    let extra = [
        (2, 16, 6, 6, 72, 3, 3, [1, 1], ConvPadding::Explicit([1, 1, 1, 1]), [1, 1], 1, true),
        (3, 5, 9, 11, 140, 1, 1, [2, 2], ConvPadding::Explicit([0; 4]), [1, 1], 1, true),
        (2, 3, 13, 12, 9, 5, 3, [1, 2], ConvPadding::Explicit([2, 1, 0, 1]), [2, 1], 1, false),
    ];
    for tile in ["64x64", "64x128", "128x64", "128x128", "32x128"] {
        std::env::set_var("MPSRT_CONV_GEMM_TILE", tile);
        for (i, &(n, c, h, w, oc, kh, kw, stride, padding, dilation, groups, bias)) in
            CASES.iter().chain(extra.iter()).enumerate()
        {
            let act = acts[i % acts.len()];
            // f16 (widened to f32 around the kernel) once, on the first tile shape.
            let dtypes: &[DType] =
                if tile == "64x64" { &[DType::F32, DType::F16] } else { &[DType::F32] };
            for &dtype in dtypes {
                let x = rnd(&[n, c, h, w], 40 + i as u64, dtype);
                let wt = rnd(&[oc, c / groups, kh, kw], 400 + i as u64, dtype);
                let b = rnd(&[oc], 4000 + i as u64, dtype);
                let o = Conv2dOptions { stride, padding, dilation, groups };
                let cpu = conv2d(&x, &wt, bias.then_some(&b), &o).unwrap();
                let r = rnd(cpu.shape(), 5000 + i as u64, dtype);
                let cpu_res = act.apply(&mt::add(&cpu, &r).unwrap()).unwrap();
                let what = format!("conv_gemm {tile} case {i} {dtype}");
                for p in gpus() {
                    let (xg, wg, bg) = (x.to(p).unwrap(), wt.to(p).unwrap(), b.to(p).unwrap());
                    let got = conv2d(&xg, &wg, bias.then_some(&bg), &o).unwrap();
                    check_tol(&format!("{what} on {p}"), &cpu, &got, dtype, 2e-3);
                    let rg = r.to(p).unwrap();
                    let got = conv2d_fused(&xg, &wg, bias.then_some(&bg), &o, Some(&rg), Some(act))
                        .unwrap();
                    check_tol(
                        &format!("{what} +residual {act:?} on {p}"),
                        &cpu_res,
                        &got,
                        dtype,
                        2e-3,
                    );
                }
            }
        }
    }
}

#[test]
fn implicit_gemm_conv_reads_offset_and_strided_inputs() {
    std::env::set_var("MPSRT_CONV_GEMM", "1");
    let o = Conv2dOptions { padding: ConvPadding::symmetric(1, 1), ..Default::default() };
    let big = rnd(&[3, 6, 8, 8], 1, DType::F32);
    let w = rnd(&[20, 6, 3, 3], 2, DType::F32);
    let b = rnd(&[20], 3, DType::F32);
    // Images 1..3 of a batch: a contiguous view starting at an offset.
    let x = big.slice(0, Some(1), Some(3), 1).unwrap();
    // The same values laid out NHWC and permuted to NCHW: not contiguous.
    let nhwc = x.permute(&[0, 2, 3, 1]).unwrap().contiguous().unwrap();
    let permuted = nhwc.permute(&[0, 3, 1, 2]).unwrap();
    let cpu = conv2d(&x.contiguous().unwrap(), &w, Some(&b), &o).unwrap();
    for p in gpus() {
        let (wg, bg) = (w.to(p).unwrap(), b.to(p).unwrap());
        let bigg = big.to(p).unwrap();
        let xg = bigg.slice(0, Some(1), Some(3), 1).unwrap();
        check_tol(
            &format!("offset input on {p}"),
            &cpu,
            &conv2d(&xg, &wg, Some(&bg), &o).unwrap(),
            DType::F32,
            1e-4,
        );
        let pg = permuted.to(p).unwrap();
        check_tol(
            &format!("permuted input on {p}"),
            &cpu,
            &conv2d(&pg, &wg, Some(&bg), &o).unwrap(),
            DType::F32,
            1e-4,
        );
    }
}
