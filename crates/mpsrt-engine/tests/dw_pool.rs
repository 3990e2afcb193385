//! A depthwise conv and the `GlobalAveragePool` of its output as one dispatch (issue 22,
//! EfficientNet-B0's squeeze-excitation blocks; `dw_pool.rs`): EfficientNet-like blocks
//! (depthwise 3×3 stride 1 + SiLU, depthwise 5×5 stride 2 without activation, each pooled into
//! an SE gate), run on the GPU (lavapipe in CI) with the fusion on and off, step by step and
//! replayed, at batch 1 and 2: the depthwise outputs bit-identical, everything downstream of
//! the pooled mean within float tolerance (another summation order), and within float
//! tolerance of the CPU. Also the 1×1 convs on 1×1 maps as GEMVs (`MPSRT_CONV_VEC=1`) against
//! the CPU.

use mpsrt_core::{DType, Place};
use mpsrt_engine::{Session, SessionOptions};
use mpsrt_graph::{BinaryOp, ConvAttrs, Dim, Graph, Op, UnaryOp};
use mpsrt_tensor::Tensor;

mod common;
use common::{gpu, B, GPU};

/// x → 1×1 expand + SiLU → depthwise 3×3 + SiLU → SE (pool, 1×1 + SiLU, 1×1 + Sigmoid) → gated
/// 1×1 projection → depthwise 5×5 stride 2 (pads 2, no activation) → pool → 1×1. Outputs: the
/// head, both depthwise outputs, the first gate.
fn graph() -> Graph {
    let mut b = B::new(0.6);
    let dims = vec![Dim::Sym("n".into()), Dim::Known(8), Dim::Known(11), Dim::Known(11)];
    let x = b.g.add_input("x", DType::F32, dims).unwrap();
    let e = b.conv(x, 8, 16, 1, 1);
    let e = b.silu(e);
    let d1 = b.conv(e, 16, 16, 3, 16);
    let d1 = b.silu(d1);
    let p = b.node(Op::GlobalAveragePool, vec![d1]);
    let q = b.conv(p, 16, 4, 1, 1);
    let q = b.silu(q);
    let r = b.conv(q, 4, 16, 1, 1);
    let gate = b.node(Op::Unary(UnaryOp::Sigmoid), vec![r]);
    let m = b.node(Op::Binary(BinaryOp::Mul), vec![d1, gate]);
    let y = b.conv(m, 16, 12, 1, 1);
    let w = b.init(vec![12, 1, 5, 5], 0.23);
    let bias = b.init(vec![12], 0.7);
    let attrs =
        ConvAttrs { group: 12, strides: vec![2, 2], pads: vec![2, 2, 2, 2], ..Default::default() };
    let d2 = b.node(Op::Conv(attrs), vec![y, w, bias]);
    let p2 = b.node(Op::GlobalAveragePool, vec![d2]);
    let head = b.conv(p2, 12, 5, 1, 1);
    b.g.outputs = vec![head, d1, d2, gate];
    b.g
}

fn run(place: Place, on: bool, n: usize, runs: usize) -> (Vec<Vec<f32>>, (usize, usize)) {
    let sess = Session::from_graph(graph(), place, SessionOptions::default())
        .unwrap()
        .with_gate_fold(false)
        .with_dw_pool(on);
    let xv: Vec<f32> = (0..n * 8 * 121).map(|i| (i as f32 * 0.31).sin() * 1.5).collect();
    let t = Tensor::from_slice(&xv, &[n, 8, 11, 11], place).unwrap();
    let feeds = [("x".to_string(), t)].into_iter().collect();
    let mut outs = Vec::new();
    for _ in 0..runs {
        outs = sess.run(&feeds).unwrap();
    }
    let fused = sess.dw_pools(&[vec![n, 8, 11, 11]]).unwrap();
    (outs.iter().map(|(_, t)| t.to_vec::<f32>().unwrap()).collect(), fused)
}

fn close(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (p, q) in a.iter().zip(b) {
        assert!((p - q).abs() <= 1e-4 * (1.0 + q.abs()), "{what}: {p} vs {q}");
    }
}

#[test]
fn depthwise_conv_and_pool_in_one_dispatch_match_the_two_steps() {
    if !gpu() {
        return;
    }
    // The SE convs as GEMMs first (`MPSRT_CONV_VEC` is read per conv; this binary's only
    // test, so no other test sees it).
    std::env::set_var("MPSRT_CONV_VEC", "0");
    for n in [1, 2] {
        let (off, fused) = run(GPU, false, n, 1);
        assert_eq!(fused, (0, 0));
        let (cpu, _) = run(Place::Cpu, false, n, 1);
        for runs in [1, 3] {
            // runs 3: the second run is captured, the third replayed.
            let (on, fused) = run(GPU, true, n, runs);
            // Both pairs fused, and the fused kernel took them on every run.
            assert_eq!(fused, (2, 0), "n {n}");
            assert_eq!(on[1], off[1], "n {n} runs {runs}: first depthwise output differs");
            assert_eq!(on[2], off[2], "n {n} runs {runs}: second depthwise output differs");
            for (i, what) in [(0, "head"), (3, "gate")] {
                close(&on[i], &off[i], &format!("{what}, n {n} runs {runs}"));
                close(&on[i], &cpu[i], &format!("{what} vs CPU, n {n} runs {runs}"));
            }
        }
        // The SE convs and the head (1×1 convs on 1×1 maps) as GEMVs: the first depthwise
        // output is upstream of them (bit-identical), the rest within tolerance.
        std::env::set_var("MPSRT_CONV_VEC", "1");
        for dw in [false, true] {
            let (vec, _) = run(GPU, dw, n, 3);
            assert_eq!(vec[1], off[1], "n {n} dw {dw}: first depthwise output differs");
            for (i, what) in [(0, "head"), (2, "second depthwise"), (3, "gate")] {
                close(&vec[i], &cpu[i], &format!("GEMV convs: {what} vs CPU, n {n} dw {dw}"));
            }
        }
        std::env::set_var("MPSRT_CONV_VEC", "0");
    }
    std::env::remove_var("MPSRT_CONV_VEC");
    // The GEMV kernel itself takes such convs (K = 20, 300 and 2000: 32, 64 and 256 lanes
    // per output) and matches the CPU conv.
    let vals = |n: usize, k: f32| (0..n).map(|i| ((i as f32 + 1.0) * k).sin()).collect::<Vec<_>>();
    for k in [20, 300, 2000] {
        let (x, w, b) = (vals(2 * k, 0.7), vals(37 * k, 0.11), vals(37, 0.5));
        let on = |p: Place| {
            let x = Tensor::from_slice(&x, &[2, k, 1, 1], p).unwrap();
            let w = Tensor::from_slice(&w, &[37, k, 1, 1], p).unwrap();
            (x, w, Tensor::from_slice(&b, &[37], p).unwrap())
        };
        let act = Some(mpsrt_tensor::Activation::Silu);
        let (xg, wg, bg) = on(GPU);
        let y = mpsrt_tensor::conv1x1_vec(&xg, &wg, Some(&bg), act).unwrap().expect("GEMV route");
        let (xc, wc, bc) = on(Place::Cpu);
        let opts = mpsrt_tensor::Conv2dOptions::default();
        let want = mpsrt_tensor::conv2d_fused(&xc, &wc, Some(&bc), &opts, None, act).unwrap();
        assert_eq!(y.shape(), want.shape());
        let (y, want) = (y.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
        close(&y, &want, &format!("conv1x1_vec K {k}"));
    }
}
