//! DenseNet's concat written in place by its producers (issue 22): a synthetic dense block
//! (BN-ReLU as a fused affine, 1×1 and 3×3 growth convs, a max-pool stem and an average-pool
//! transition as producers) with a part read by a second consumer, a nested concat (the
//! incremental pattern), a concat of a graph input and of an initializer, and a concat that
//! is a graph output — run on the GPU (lavapipe in CI) with the rewrite on and off, step by
//! step and replayed, at batch 1 (dense slices) and batch 3 (slices strided by the buffer's
//! channel count): bit-identical, and within float tolerance of the CPU (which runs every
//! concat as an op). The BN-ReLU steps on the concats are folded into the convs reading them
//! (`gate_fold.rs`: the conv gathers `max(x·s + t, 0)` straight from the concat's view, with
//! its image stride at batch 3) in both GPU runs; a third run without that fold checks it to
//! float tolerance.

use mpsrt_core::{DType, Place};
use mpsrt_engine::{Session, SessionOptions};
use mpsrt_graph::{BinaryOp, ConvAttrs, Dim, Graph, Op, PoolAttrs, UnaryOp, ValueId};
use mpsrt_tensor::Tensor;
use std::collections::HashMap;

mod common;
use common::{gpu, B, GPU};

impl B {
    /// A k×k conv (pad k/2), without a bias as DenseNet's.
    fn conv_nobias(&mut self, x: ValueId, cin: usize, cout: usize, k: usize) -> ValueId {
        let w = self.init(vec![cout, cin, k, k], 0.31 + self.n as f32 * 0.01);
        let p = k / 2;
        let attrs = ConvAttrs { group: 1, pads: vec![p, p, p, p], ..Default::default() };
        self.node(Op::Conv(attrs), vec![x, w])
    }
    /// BN with constant parameters (a fused `x·s + t`) and Relu.
    fn bn_relu(&mut self, x: ValueId, c: usize) -> ValueId {
        let s = self.init(vec![1, c, 1, 1], 0.7);
        let t = self.init(vec![1, c, 1, 1], 1.3);
        let m = self.node(Op::Binary(BinaryOp::Mul), vec![x, s]);
        let a = self.node(Op::Binary(BinaryOp::Add), vec![m, t]);
        self.node(Op::Unary(UnaryOp::Relu), vec![a])
    }
    fn pool(&mut self, x: ValueId, max: bool) -> ValueId {
        let attrs = PoolAttrs {
            kernel: vec![2, 2],
            strides: vec![2, 2],
            pads: vec![0; 4],
            dilations: vec![1, 1],
            ..Default::default()
        };
        let op = if max { Op::MaxPool(attrs) } else { Op::AveragePool(attrs) };
        self.node(op, vec![x])
    }
    fn concat(&mut self, parts: Vec<ValueId>) -> ValueId {
        self.node(Op::Concat { axis: 1 }, parts)
    }
}

const GROWTH: usize = 4;

/// A dense block of `layers` layers on `f0` (`c0` channels): every layer concatenates all
/// earlier features (torchvision's pattern). Returns the block's concat and its features.
fn dense_block(b: &mut B, f0: ValueId, c0: usize, layers: usize) -> (ValueId, Vec<ValueId>) {
    let mut feats = vec![f0];
    for k in 0..layers {
        let cat = b.concat(feats.clone());
        let c = c0 + k * GROWTH;
        let h = b.bn_relu(cat, c);
        let h = b.conv_nobias(h, c, 8, 1);
        let h = b.node(Op::Unary(UnaryOp::Relu), vec![h]);
        feats.push(b.conv_nobias(h, 8, GROWTH, 3));
    }
    (b.concat(feats.clone()), feats)
}

/// Input `[n, 3, 2·hw, 2·hw]` → stem conv + max-pool → dense block (3 layers) → transition
/// (BN-ReLU, 1×1, average pool) → incremental block (each concat extends the last one) → a
/// concat of the graph input `y`, a conv output and an initializer → BN-ReLU.
fn graph(hw: usize, n: usize) -> Graph {
    let mut b = B::new(0.5);
    let dims =
        |c: usize, s: usize| vec![Dim::Known(n), Dim::Known(c), Dim::Known(s), Dim::Known(s)];
    let x = b.g.add_input("x", DType::F32, dims(3, 2 * hw)).unwrap();
    let y = b.g.add_input("y", DType::F32, dims(2, hw / 2)).unwrap();
    let stem = b.conv_nobias(x, 3, 8, 3);
    let stem = b.node(Op::Unary(UnaryOp::Relu), vec![stem]);
    let f0 = b.pool(stem, true);
    let (cat1, feats) = dense_block(&mut b, f0, 8, 3);
    // A part with a second consumer (read from its slice).
    let side = b.node(Op::Unary(UnaryOp::Sigmoid), vec![feats[2]]);
    let c1 = 8 + 3 * GROWTH;
    let t = b.bn_relu(cat1, c1);
    let t = b.conv_nobias(t, c1, 8, 1);
    let t = b.pool(t, false);
    // Incremental block on the half map: c_{k+1} = concat(c_k, f_k).
    let mut cat = t;
    let mut c = 8;
    for _ in 0..3 {
        let h = b.bn_relu(cat, c);
        let f = b.conv_nobias(h, c, GROWTH, 3);
        cat = b.concat(vec![cat, f]);
        c += GROWTH;
    }
    // A graph input and an initializer as parts (they keep their own tensors and are copied).
    let k = b.init(vec![n, 3, hw / 2, hw / 2], 0.9);
    let g = b.conv_nobias(cat, c, 2, 1);
    // A fused elementwise producer first (its slice at offset 0: dense and aligned at batch 1).
    let sq = b.node(Op::Binary(BinaryOp::Mul), vec![y, y]);
    let e = b.node(Op::Unary(UnaryOp::Relu), vec![sq]);
    let mixed = b.concat(vec![e, y, g, k]);
    let out = b.bn_relu(mixed, 9);
    // A concat that is a graph output is not absorbed.
    let last = b.concat(vec![g, y]);
    b.g.outputs = vec![out, side, last];
    b.g
}

fn feeds(n: usize, hw: usize, place: Place) -> HashMap<String, Tensor> {
    let xs = n * 3 * 4 * hw * hw;
    let xv: Vec<f32> = (0..xs).map(|i| (i as f32 * 0.37).sin() * 2.0).collect();
    let ys = n * 2 * (hw / 2) * (hw / 2);
    let yv: Vec<f32> = (0..ys).map(|i| (i as f32 * 0.11).cos()).collect();
    let x = Tensor::from_slice(&xv, &[n, 3, 2 * hw, 2 * hw], place).unwrap();
    let y = Tensor::from_slice(&yv, &[n, 2, hw / 2, hw / 2], place).unwrap();
    [("x".to_string(), x), ("y".to_string(), y)].into_iter().collect()
}

/// Outputs of `runs` runs (the third replays on GPUs); `inplace` toggles the rewrite.
type Stats = (usize, usize, usize);

fn run(place: Place, inplace: bool, n: usize, hw: usize, runs: usize) -> (Vec<Vec<f32>>, Stats) {
    run_with(place, inplace, true, n, hw, runs).0
}

fn run_with(
    place: Place,
    inplace: bool,
    fold: bool,
    n: usize,
    hw: usize,
    runs: usize,
) -> ((Vec<Vec<f32>>, Stats), usize) {
    let sess = Session::from_graph(graph(hw, n), place, SessionOptions::default())
        .unwrap()
        .with_concat_inplace(inplace)
        .with_gate_fold(fold);
    let f = feeds(n, hw, place);
    let mut outs = Vec::new();
    for _ in 0..runs {
        outs = sess.run(&f).unwrap();
    }
    let shapes = vec![vec![n, 3, 2 * hw, 2 * hw], vec![n, 2, hw / 2, hw / 2]];
    let stats = sess.concat_stats(&shapes).unwrap();
    let (_, affine, _, fallbacks) = sess.gate_folds(&shapes).unwrap();
    assert_eq!(fallbacks, 0);
    ((outs.iter().map(|(_, t)| t.to_vec::<f32>().unwrap()).collect(), stats), affine)
}

fn close(a: &[Vec<f32>], b: &[Vec<f32>]) {
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len());
        for (i, (p, q)) in x.iter().zip(y).enumerate() {
            assert!((p - q).abs() <= 1e-4 * (1.0 + q.abs()), "element {i}: {p} vs {q}");
        }
    }
}

#[test]
fn dense_concats_in_place_are_bit_identical_to_concat_steps() {
    if !gpu() {
        return;
    }
    // 8×8 maps (P % 4 == 0: vector stores) and 7×7 (scalar), batch 1 (dense slices) and 3.
    for (hw, n) in [(8, 1), (6, 3)] {
        let (off, stats_off) = run(GPU, false, n, hw, 1);
        assert_eq!(stats_off, (0, 0, 0));
        // Step by step (1 run), then step by step, captured and replayed (3 runs: the replay
        // does not count its writes).
        for (runs, counted) in [(1, 1), (3, 2)] {
            let (on, (absorbed, placed, copied)) = run(GPU, true, n, hw, runs);
            // Block 1: 3 layer concats + its output; the incremental block's 3; the concat of
            // the input, a conv and the initializer. Not the graph output's.
            assert_eq!(absorbed, 8, "hw {hw} n {n}");
            // In place: block 1's 3 growth convs (whole K), the incremental block's first (it
            // reads the pool's own tensor), the 1×1 conv of the last group. Copied: the two
            // pools' outputs, the graph input, the initializer, and the incremental block's
            // other 2 convs — with their BN-ReLU folded in they read the group's own buffer,
            // which a dispatch cannot also write (invariant 4). The fused `Relu(y·y)` writes
            // its slice at batch 1 (dense) and is copied at batch 3 (strided).
            let (p, c) = if n == 1 { (6, 6) } else { (5, 7) };
            assert_eq!((placed, copied), (p * counted, c * counted), "hw {hw} n {n}");
            assert_eq!(on, off, "hw {hw} n {n} runs {runs}: in place differs from concat steps");
        }
        let (cpu, _) = run(Place::Cpu, true, n, hw, 1);
        close(&off, &cpu);
        // The 7 BN-ReLUs read by a conv were folded (not the graph output's); without the fold.
        let ((unfolded, _), affine) = run_with(GPU, true, false, n, hw, 1);
        assert_eq!(affine, 0);
        assert_eq!(run_with(GPU, true, true, n, hw, 1).1, 7);
        close(&off, &unfolded);
    }
    // Convs other than the implicit GEMM (the lowered im2col route, read per call): every
    // part copied, every folded BN-ReLU computed first by the step's own expression — still
    // bit-identical to the plain plan (the only test of this binary: the knob is safe).
    std::env::set_var("MPSRT_CONV_ALGO", "lowered");
    let ((plain, _), _) = run_with(GPU, false, false, 3, 6, 1);
    let ((on, (_, placed, _)), affine) = run_with(GPU, true, true, 3, 6, 3);
    std::env::remove_var("MPSRT_CONV_ALGO");
    assert_eq!((placed, affine), (0, 7));
    assert_eq!(on, plain, "lowered convs: in place + folded differs from the plain plan");
}
