//! conv2d / conv1d / conv_transpose2d on every device against the CPU reference (a table of
//! padding/stride/dilation/groups cases, odd sizes, non-contiguous inputs, zero-size batch, f16),
//! the CPU reference against hand-derived values, and the error cases.

mod common;
use common::conv_cases::CASES;
use common::*;
use mpsrt_tensor as mt;
use mpsrt_tensor::{
    conv1d, conv2d, conv2d_act, conv2d_fused, conv_transpose2d, Activation, Conv1dPadding,
    Conv2dOptions, ConvPadding, ConvTranspose2dOptions, DType, Place, Tensor,
};

fn check(what: &str, cpu: &Tensor, got: &Tensor, dtype: DType) {
    check_tol(what, cpu, got, dtype, 1e-4);
}

#[test]
fn conv2d_reference_hand_derived() {
    // 3×3 ramp 0..9 convolved with a 2×2 kernel [[1, 2], [3, 4]], no padding:
    // out[0,0] = 0·1 + 1·2 + 3·3 + 4·4 = 27, then 37, 57, 67; plus bias 1.
    let x = Tensor::from_slice(
        &(0..9).map(|v| v as f32).collect::<Vec<_>>(),
        &[1, 1, 3, 3],
        Place::Cpu,
    )
    .unwrap();
    let w = Tensor::from_slice(&[1f32, 2., 3., 4.], &[1, 1, 2, 2], Place::Cpu).unwrap();
    let b = Tensor::from_slice(&[1f32], &[1], Place::Cpu).unwrap();
    let y = conv2d(&x, &w, Some(&b), &Conv2dOptions::default()).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![28., 38., 58., 68.]);
    // 3×3 all-ones kernel, padding 1: sums of each 3×3 neighbourhood of the ramp.
    let ones = Tensor::from_slice(&[1f32; 9], &[1, 1, 3, 3], Place::Cpu).unwrap();
    let o = Conv2dOptions { padding: ConvPadding::symmetric(1, 1), ..Default::default() };
    let y = conv2d(&x, &ones, None, &o).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![8., 15., 12., 21., 36., 27., 20., 33., 24.]);
    // stride 2 on the same: corners only.
    let o = Conv2dOptions {
        stride: [2, 2],
        padding: ConvPadding::symmetric(1, 1),
        ..Default::default()
    };
    assert_eq!(
        conv2d(&x, &ones, None, &o).unwrap().to_vec::<f32>().unwrap(),
        vec![8., 12., 20., 24.]
    );
    // transposed conv of [[1, 2]] with kernel [[1, 1]] stride 2: [1 1 2 2].
    let x = Tensor::from_slice(&[1f32, 2.], &[1, 1, 1, 2], Place::Cpu).unwrap();
    let w = Tensor::from_slice(&[1f32, 1.], &[1, 1, 1, 2], Place::Cpu).unwrap();
    let o = ConvTranspose2dOptions { stride: [1, 2], ..Default::default() };
    let y = conv_transpose2d(&x, &w, None, &o).unwrap();
    assert_eq!(y.shape(), [1, 1, 1, 4]);
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1., 1., 2., 2.]);
    // conv1d SAME_UPPER with k=2 pads one at the end: [1 2 3] * [1 1] → [3 5 3].
    let x = Tensor::from_slice(&[1f32, 2., 3.], &[1, 1, 3], Place::Cpu).unwrap();
    let w = Tensor::from_slice(&[1f32, 1.], &[1, 1, 2], Place::Cpu).unwrap();
    let y = conv1d(&x, &w, None, 1, Conv1dPadding::SameUpper, 1, 1).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![3., 5., 3.]);
    let y = conv1d(&x, &w, None, 1, Conv1dPadding::SameLower, 1, 1).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1., 3., 5.]);
}

#[test]
fn conv2d_table_matches_cpu_on_every_device() {
    for (i, &(n, c, h, w, oc, kh, kw, stride, padding, dilation, groups, bias)) in
        CASES.iter().enumerate()
    {
        for dtype in [DType::F32, DType::F16] {
            let x = rnd(&[n, c, h, w], 10 + i as u64, dtype);
            let wt = rnd(&[oc, c / groups, kh, kw], 100 + i as u64, dtype);
            let b = rnd(&[oc], 1000 + i as u64, dtype);
            let o = Conv2dOptions { stride, padding, dilation, groups };
            let cpu = conv2d(&x, &wt, bias.then_some(&b), &o).unwrap();
            for p in gpus() {
                let (xg, wg, bg) = (x.to(p).unwrap(), wt.to(p).unwrap(), b.to(p).unwrap());
                let got = conv2d(&xg, &wg, bias.then_some(&bg), &o).unwrap();
                assert_eq!(got.place(), p);
                // Two f32 sums over K = c/groups·kh·kw terms of up to ±16 in different orders
                // (the CPU's packed SGEMM and the GPU's tiles): allow for K past 256.
                let tol = 1e-4 * (c / groups * kh * kw).div_ceil(256) as f64;
                check_tol(&format!("conv2d case {i} {dtype}"), &cpu, &got, dtype, tol);
            }
        }
    }
}

/// `conv2d_act` (bias and activation in the GEMM epilogue on the GPU) against the unfused CPU
/// route — conv2d, then the activation as a separate op — on the whole case table (lowered,
/// split-K, grouped, depthwise and empty cases all take their own path to the activation).
#[test]
fn conv2d_act_matches_conv_then_activation() {
    let acts = [Activation::Relu, Activation::LeakyRelu(0.1), Activation::Clip(-1.0, 2.0)];
    for (i, &(n, c, h, w, oc, kh, kw, stride, padding, dilation, groups, bias)) in
        CASES.iter().enumerate()
    {
        let act = acts[i % acts.len()];
        for dtype in [DType::F32, DType::F16] {
            let x = rnd(&[n, c, h, w], 20 + i as u64, dtype);
            let wt = rnd(&[oc, c / groups, kh, kw], 200 + i as u64, dtype);
            let b = rnd(&[oc], 2000 + i as u64, dtype);
            let o = Conv2dOptions { stride, padding, dilation, groups };
            let cpu = act.apply(&conv2d(&x, &wt, bias.then_some(&b), &o).unwrap()).unwrap();
            let what = format!("conv2d_act case {i} {dtype} {act:?}");
            let fused_cpu = conv2d_act(&x, &wt, bias.then_some(&b), &o, Some(act)).unwrap();
            check(&format!("{what} on cpu"), &cpu, &fused_cpu, dtype);
            // With a residual added before the activation (ResNet's Conv -> Add -> Relu).
            let r = rnd(cpu.shape(), 3000 + i as u64, dtype);
            let plain = conv2d(&x, &wt, bias.then_some(&b), &o).unwrap();
            let cpu_res = act.apply(&mt::add(&plain, &r).unwrap()).unwrap();
            let fused_cpu =
                conv2d_fused(&x, &wt, bias.then_some(&b), &o, Some(&r), Some(act)).unwrap();
            check(&format!("{what} +residual on cpu"), &cpu_res, &fused_cpu, dtype);
            for p in gpus() {
                let (xg, wg, bg) = (x.to(p).unwrap(), wt.to(p).unwrap(), b.to(p).unwrap());
                let got = conv2d_act(&xg, &wg, bias.then_some(&bg), &o, Some(act)).unwrap();
                check_tol(&format!("{what} on {p}"), &cpu, &got, dtype, 2e-3);
                let rg = r.to(p).unwrap();
                let got =
                    conv2d_fused(&xg, &wg, bias.then_some(&bg), &o, Some(&rg), Some(act)).unwrap();
                check_tol(&format!("{what} +residual on {p}"), &cpu_res, &got, dtype, 2e-3);
            }
        }
    }
}

#[test]
fn conv2d_non_contiguous_input_and_conv1d() {
    let x = rnd(&[2, 9, 8, 3], 7, DType::F32).permute(&[0, 3, 1, 2]).unwrap(); // (2, 3, 9, 8)
    let w = rnd(&[4, 3, 3, 3], 8, DType::F32);
    let o = Conv2dOptions { padding: ConvPadding::symmetric(1, 1), ..Default::default() };
    let cpu = conv2d(&x, &w, None, &o).unwrap();
    let dense = conv2d(&x.contiguous().unwrap(), &w, None, &o).unwrap();
    check("permuted vs dense", &dense, &cpu, DType::F32);
    let x1 = rnd(&[2, 4, 19], 9, DType::F32);
    let w1 = rnd(&[6, 2, 3], 10, DType::F32);
    let cpu1 = conv1d(&x1, &w1, None, 2, Conv1dPadding::Explicit(1, 2), 2, 2).unwrap();
    assert_eq!(cpu1.shape(), [2, 6, 9]);
    for p in gpus() {
        let xg = rnd(&[2, 9, 8, 3], 7, DType::F32).to(p).unwrap().permute(&[0, 3, 1, 2]).unwrap();
        assert!(!xg.is_contiguous());
        let got = conv2d(&xg, &w.to(p).unwrap(), None, &o).unwrap();
        check("conv2d permuted", &cpu, &got, DType::F32);
        let got = conv1d(
            &x1.to(p).unwrap(),
            &w1.to(p).unwrap(),
            None,
            2,
            Conv1dPadding::Explicit(1, 2),
            2,
            2,
        )
        .unwrap();
        check("conv1d", &cpu1, &got, DType::F32);
    }
}

/// (n, c, h, w, oc/g, k, stride, padding, output_padding, dilation, groups)
type TCase = (
    usize,
    usize,
    usize,
    usize,
    usize,
    [usize; 2],
    [usize; 2],
    [usize; 2],
    [usize; 2],
    [usize; 2],
    usize,
);

#[test]
fn conv_transpose2d_table_matches_cpu() {
    // (n, c, h, w, oc/g, k, stride, padding, output_padding, dilation, groups)
    let cases: &[TCase] = &[
        (1, 3, 5, 4, 2, [3, 3], [2, 2], [1, 1], [1, 0], [1, 1], 1),
        (2, 4, 3, 5, 3, [2, 3], [3, 1], [0, 1], [2, 0], [1, 2], 2),
        (1, 2, 4, 4, 1, [3, 3], [1, 1], [0, 0], [0, 0], [2, 2], 2),
        (1, 5, 1, 1, 4, [4, 4], [1, 1], [0, 0], [0, 0], [1, 1], 1),
    ];
    for (i, &(n, c, h, w, ocg, k, stride, padding, output_padding, dilation, groups)) in
        cases.iter().enumerate()
    {
        let x = rnd(&[n, c, h, w], 20 + i as u64, DType::F32);
        let wt = rnd(&[c, ocg, k[0], k[1]], 30 + i as u64, DType::F32);
        let b = rnd(&[ocg * groups], 40 + i as u64, DType::F32);
        let o = ConvTranspose2dOptions { stride, padding, output_padding, dilation, groups };
        let cpu = conv_transpose2d(&x, &wt, Some(&b), &o).unwrap();
        let want_h =
            (h - 1) * stride[0] + dilation[0] * (k[0] - 1) + output_padding[0] + 1 - 2 * padding[0];
        assert_eq!(cpu.shape()[2], want_h, "case {i}");
        for p in gpus() {
            let got = conv_transpose2d(
                &x.to(p).unwrap(),
                &wt.to(p).unwrap(),
                Some(&b.to(p).unwrap()),
                &o,
            )
            .unwrap();
            check(&format!("conv_transpose2d case {i}"), &cpu, &got, DType::F32);
        }
    }
}

#[test]
fn conv_errors_name_the_op_and_shapes() {
    for p in devices() {
        let x = rnd(&[1, 4, 5, 5], 1, DType::F32).to(p).unwrap();
        let w = rnd(&[6, 4, 3, 3], 2, DType::F32).to(p).unwrap();
        let bad_groups = Conv2dOptions { groups: 3, ..Default::default() };
        let e = conv2d(&x, &w, None, &bad_groups).unwrap_err().to_string();
        assert!(e.contains("conv2d") && e.contains("[1, 4, 5, 5]") && e.contains("groups"), "{e}");
        let big = rnd(&[6, 4, 7, 7], 3, DType::F32).to(p).unwrap();
        let e = conv2d(&x, &big, None, &Conv2dOptions::default()).unwrap_err().to_string();
        assert!(e.contains("conv2d") && e.contains("larger than the padded input"), "{e}");
        let zero = Conv2dOptions { stride: [0, 1], ..Default::default() };
        let e = conv2d(&x, &w, None, &zero).unwrap_err().to_string();
        assert!(e.contains("stride") && e.contains("positive"), "{e}");
        let w3 = rnd(&[6, 4, 3], 2, DType::F32).to(p).unwrap();
        assert!(conv2d(&x, &w3, None, &Conv2dOptions::default()).is_err());
        let b = rnd(&[5], 2, DType::F32).to(p).unwrap();
        let e = conv2d(&x, &w, Some(&b), &Conv2dOptions::default()).unwrap_err().to_string();
        assert!(e.contains("bias"), "{e}");
        let xi = x.astype(DType::I32).unwrap();
        assert!(conv2d(&xi, &w, None, &Conv2dOptions::default()).is_err());
        let wt = rnd(&[4, 2, 3, 3], 2, DType::F32).to(p).unwrap();
        let o = ConvTranspose2dOptions { output_padding: [1, 1], ..Default::default() };
        let e = conv_transpose2d(&x, &wt, None, &o).unwrap_err().to_string();
        assert!(e.contains("conv_transpose2d") && e.contains("output_padding"), "{e}");
    }
}
