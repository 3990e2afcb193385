//! Squeeze-excitation's gate `Mul` folded into the conv that reads its product (issue 22,
//! EfficientNet-B0's 16 blocks): EfficientNet-like blocks (1×1 expand + SiLU, depthwise 3×3 +
//! SiLU, SE with SiLU and Sigmoid, the gated product read by a 1×1 projection with a residual,
//! by a 3×3 conv, with the gate as either operand of the `Mul`) and a product with a second
//! reader (not folded), run on the GPU (lavapipe in CI) with the fold on and off, step by step
//! and replayed, at batch 1 and 2: bit-identical with the gate's two convs as steps
//! (the default), within float tolerance with them fused into one dispatch
//! (`MPSRT_SE_FUSE=1`: another summation order), and within float tolerance of the CPU. The
//! folds are off by default (measured slower on an H200); the tests turn them on.

use mpsrt_core::{DType, Place};
use mpsrt_engine::{Session, SessionOptions};
use mpsrt_graph::{BinaryOp, Dim, Graph, Op, UnaryOp, ValueId};
use mpsrt_tensor::Tensor;

mod common;
use common::{gpu, B, GPU};

impl B {
    /// Expand, depthwise, SE gate; returns (depthwise output, gate).
    fn se(&mut self, x: ValueId, cin: usize, c: usize) -> (ValueId, ValueId) {
        let e = self.conv(x, cin, c, 1, 1);
        let e = self.silu(e);
        let d = self.conv(e, c, c, 3, c);
        let d = self.silu(d);
        let p = self.node(Op::GlobalAveragePool, vec![d]);
        let q = self.conv(p, c, c / 4, 1, 1);
        let q = self.silu(q);
        let r = self.conv(q, c / 4, c, 1, 1);
        (d, self.node(Op::Unary(UnaryOp::Sigmoid), vec![r]))
    }
}

/// Three blocks: gated product → 1×1 projection + residual (folded); gate first in the `Mul`
/// → 3×3 conv (folded); a product also read by an output (not folded) → 1×1.
fn graph() -> Graph {
    let mut b = B::new(0.6);
    let dims = vec![Dim::Sym("n".into()), Dim::Known(8), Dim::Known(9), Dim::Known(9)];
    let x = b.g.add_input("x", DType::F32, dims).unwrap();
    let (d, gate) = b.se(x, 8, 16);
    let m = b.node(Op::Binary(BinaryOp::Mul), vec![d, gate]);
    let p = b.conv(m, 16, 8, 1, 1);
    let y1 = b.node(Op::Binary(BinaryOp::Add), vec![p, x]);
    let (d, gate) = b.se(y1, 8, 24);
    let m = b.node(Op::Binary(BinaryOp::Mul), vec![gate, d]);
    let y2 = b.conv(m, 24, 8, 3, 1);
    let (d, gate) = b.se(y2, 8, 16);
    let m3 = b.node(Op::Binary(BinaryOp::Mul), vec![d, gate]);
    let y3 = b.conv(m3, 16, 4, 1, 1);
    b.g.outputs = vec![y3, m3];
    b.g
}

type Stats = (usize, usize, usize, usize);

fn run(place: Place, fold: bool, n: usize, runs: usize) -> (Vec<Vec<f32>>, Stats) {
    let sess = Session::from_graph(graph(), place, SessionOptions::default())
        .unwrap()
        .with_gate_fold(fold);
    let xv: Vec<f32> = (0..n * 8 * 81).map(|i| (i as f32 * 0.29).sin() * 1.5).collect();
    let t = Tensor::from_slice(&xv, &[n, 8, 9, 9], place).unwrap();
    let feeds = [("x".to_string(), t)].into_iter().collect();
    let mut outs = Vec::new();
    for _ in 0..runs {
        outs = sess.run(&feeds).unwrap();
    }
    let stats = sess.gate_folds(&[vec![n, 8, 9, 9]]).unwrap();
    (outs.iter().map(|(_, t)| t.to_vec::<f32>().unwrap()).collect(), stats)
}

fn close(a: &[Vec<f32>], b: &[Vec<f32>], what: &str) {
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len());
        for (p, q) in x.iter().zip(y) {
            assert!((p - q).abs() <= 1e-4 * (1.0 + q.abs()), "{what}: {p} vs {q}");
        }
    }
}

#[test]
fn folded_gates_are_bit_identical_to_mul_steps() {
    if !gpu() {
        return;
    }
    // The only test of this binary: the knob is read when a plan's state is made.
    for n in [1, 2] {
        let (off, stats) = run(GPU, false, n, 1);
        assert_eq!(stats, (0, 0, 0, 0));
        std::env::set_var("MPSRT_SE_FUSE", "0");
        for runs in [1, 3] {
            let (on, stats) = run(GPU, true, n, runs);
            // Two of the three products are folded; every run's conv took its gate.
            assert_eq!(stats, (2, 0, 0, 0), "n {n}");
            assert_eq!(on, off, "n {n} runs {runs}: folded gates differ from Mul steps");
        }
        std::env::set_var("MPSRT_SE_FUSE", "1");
        for runs in [1, 3] {
            let (on, stats) = run(GPU, true, n, runs);
            // And the three gates' conv pairs run as one dispatch each.
            assert_eq!(stats, (2, 0, 3, 0), "n {n}");
            close(&on, &off, &format!("fused SE gates, n {n} runs {runs}"));
        }
        std::env::remove_var("MPSRT_SE_FUSE");
        let (cpu, _) = run(Place::Cpu, true, n, 1);
        close(&off, &cpu, &format!("CPU, n {n}"));
    }
    // Routes other than the implicit GEMM take the gate by multiplying first (the Mul step's
    // own kernel): still bit-identical.
    std::env::set_var("MPSRT_SE_FUSE", "0");
    std::env::set_var("MPSRT_CONV_ALGO", "lowered");
    let (off, _) = run(GPU, false, 1, 1);
    let (on, stats) = run(GPU, true, 1, 3);
    std::env::remove_var("MPSRT_CONV_ALGO");
    std::env::remove_var("MPSRT_SE_FUSE");
    assert_eq!(stats, (2, 0, 0, 0));
    assert_eq!(on, off, "lowered convs: folded gates differ from Mul steps");
}
