//! Convolutions whose operands are larger than one storage binding (`gpu/conv_split.rs`):
//! `MPSRT_MAX_BINDING_BYTES=65536` (16,384 floats) makes small convs cross the limit, so each
//! cut — over the batch, over output channels (whole groups), over output rows — runs on
//! lavapipe and must match the CPU, with bias, residual and activation. Own test binary: the
//! variable must be set before the GPU device opens.

mod common;
use common::*;
use mpsrt_tensor::{self as mt, Activation, Conv2dOptions, ConvPadding, DType, ErrorKind};

fn init() {
    std::env::set_var("MPSRT_MAX_BINDING_BYTES", "65536");
}

#[test]
fn convs_past_the_binding_limit_are_cut_and_match_cpu() {
    init();
    let pad = |p| ConvPadding::symmetric(p, p);
    // (what, n, c, hw, oc, k, stride, pad, groups): which operand crosses 16,384 floats.
    let cases = [
        ("batch: input and output", 6, 16, (14, 14), 16, 3, 1, 1, 1),
        ("output channels: weight", 1, 24, (10, 10), 80, 3, 1, 1, 1),
        ("groups: weight", 1, 64, (8, 8), 256, 3, 1, 1, 4),
        ("rows: one image", 1, 4, (72, 72), 4, 3, 1, 1, 1),
        ("rows: strided 5x5", 1, 4, (80, 70), 6, 5, 2, 2, 1),
        ("batch: depthwise", 4, 8, (24, 24), 8, 3, 1, 1, 8),
    ];
    for (i, &(what, n, c, (h, w), oc, k, s, p, groups)) in cases.iter().enumerate() {
        let x = rnd(&[n, c, h, w], 10 + i as u64, DType::F32);
        let wt = rnd(&[oc, c / groups, k, k], 20 + i as u64, DType::F32);
        let b = rnd(&[oc], 30 + i as u64, DType::F32);
        let o = Conv2dOptions { stride: [s, s], padding: pad(p), groups, ..Default::default() };
        let cpu = mt::conv2d(&x, &wt, Some(&b), &o).unwrap();
        let r = rnd(cpu.shape(), 40 + i as u64, DType::F32);
        let fused = Activation::Relu.apply(&mt::add(&cpu, &r).unwrap()).unwrap();
        for pl in gpus() {
            let (xg, wg, bg) = (x.to(pl).unwrap(), wt.to(pl).unwrap(), b.to(pl).unwrap());
            let got = mt::conv2d(&xg, &wg, Some(&bg), &o).unwrap();
            check_tol(&format!("{what} on {pl}"), &cpu, &got, DType::F32, 1e-3);
            let rg = r.to(pl).unwrap();
            let got = mt::conv2d_fused(&xg, &wg, Some(&bg), &o, Some(&rg), Some(Activation::Relu))
                .unwrap();
            check_tol(&format!("{what} +residual relu on {pl}"), &fused, &got, DType::F32, 1e-3);
        }
    }
    // A transposed conv past the limit is cut over the batch.
    let x = rnd(&[3, 8, 30, 30], 50, DType::F32);
    let wt = rnd(&[8, 4, 3, 3], 51, DType::F32);
    let o = mt::ConvTranspose2dOptions { padding: [1, 1], ..Default::default() };
    let cpu = mt::conv_transpose2d(&x, &wt, None, &o).unwrap();
    for pl in gpus() {
        let got = mt::conv_transpose2d(&x.to(pl).unwrap(), &wt.to(pl).unwrap(), None, &o).unwrap();
        check_tol(&format!("transposed, batch on {pl}"), &cpu, &got, DType::F32, 1e-3);
    }
}

#[test]
fn a_conv_no_cut_can_fit_names_the_limit() {
    init();
    // One output row of one channel of one image is 19,998 floats: nothing to cut.
    let x = rnd(&[1, 1, 1, 20000], 1, DType::F32);
    let w = rnd(&[1, 1, 1, 3], 2, DType::F32);
    for pl in gpus() {
        let e = mt::conv2d(&x.to(pl).unwrap(), &w.to(pl).unwrap(), None, &Default::default())
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::OutOfMemory, "{e}");
        assert!(e.to_string().contains("max_storage_buffer_binding_size"), "{e}");
    }
}
