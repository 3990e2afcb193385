//! MobileNetV3 / EfficientNet patterns (issue 22: fewer steps at batch 1): Conv + HardSwish,
//! Conv + SiLU exported as `x * Sigmoid(x)`, depthwise convs with activations (applied by the
//! direct kernel while storing), squeeze-excitation (GlobalAveragePool → Conv → Relu → Conv →
//! HardSigmoid/Sigmoid → Mul) — planned as conv epilogues, checked against the unfused plan on
//! the CPU (every op separately) on every device.

use mpsrt_core::{DType, Place};
use mpsrt_engine::{Session, SessionOptions};
use mpsrt_graph::{BinaryOp, Dim, Graph, Op, Step, UnaryOp, ValueId};
use mpsrt_tensor::Tensor;

mod common;
use common::B;

fn places() -> Vec<Place> {
    let mut v = vec![Place::Cpu];
    if mpsrt_runtime::gpu_available() {
        v.push(Place::Gpu(0));
    } else {
        assert!(std::env::var("MPSRT_REQUIRE_GPU").as_deref() != Ok("1"), "no GPU adapter");
    }
    v
}

impl B {
    /// Squeeze-excitation over `c` channels: the gate's activation is `gate`.
    fn se(&mut self, x: ValueId, c: usize, gate: Op) -> ValueId {
        let p = self.node(Op::GlobalAveragePool, vec![x]);
        let q = self.conv(p, c, c / 2, 1, 1);
        let q = self.node(Op::Unary(UnaryOp::Relu), vec![q]);
        let r = self.conv(q, c / 2, c, 1, 1);
        let s = self.node(gate, vec![r]);
        self.node(Op::Binary(BinaryOp::Mul), vec![x, s])
    }
}

/// stem 3×3 + HardSwish → MobileNetV3 block (1×1 + HardSwish, depthwise 3×3 + HardSwish,
/// SE with HardSigmoid, 1×1 projection + residual) → EfficientNet block (1×1 + SiLU,
/// depthwise 5×5 + SiLU, SE with SiLU and Sigmoid, projection) → depthwise + Relu / Clip /
/// LeakyRelu → a gate of the pooled map (HardSigmoid) → 1×1 + Sigmoid.
fn graph() -> Graph {
    let mut b = B::new(0.6);
    let dims = vec![Dim::Sym("n".into()), Dim::Known(3), Dim::Known(11), Dim::Known(11)];
    let x = b.g.add_input("x", DType::F32, dims).unwrap();
    let stem = b.conv(x, 3, 8, 3, 1);
    let stem = b.node(Op::Unary(UnaryOp::HardSwish), vec![stem]);
    // MobileNetV3 block.
    let e = b.conv(stem, 8, 16, 1, 1);
    let e = b.node(Op::Unary(UnaryOp::HardSwish), vec![e]);
    let d = b.conv(e, 16, 16, 3, 16);
    let d = b.node(Op::Unary(UnaryOp::HardSwish), vec![d]);
    let s = b.se(d, 16, Op::HardSigmoid { alpha: 1.0 / 6.0, beta: 0.5 });
    let p = b.conv(s, 16, 8, 1, 1);
    let m = b.node(Op::Binary(BinaryOp::Add), vec![p, stem]);
    // EfficientNet block.
    let e = b.conv(m, 8, 24, 1, 1);
    let e = b.silu(e);
    let d = b.conv(e, 24, 24, 5, 24);
    let d = b.silu(d);
    let pool = b.node(Op::GlobalAveragePool, vec![d]);
    let q = b.conv(pool, 24, 6, 1, 1);
    let q = b.silu(q);
    let r = b.conv(q, 6, 24, 1, 1);
    let gate = b.node(Op::Unary(UnaryOp::Sigmoid), vec![r]);
    let s = b.node(Op::Binary(BinaryOp::Mul), vec![d, gate]);
    let p = b.conv(s, 24, 8, 1, 1);
    // Depthwise convs with the older activations (the direct kernel's other codes).
    let d1 = b.conv(p, 8, 8, 3, 8);
    let d1 = b.node(Op::Unary(UnaryOp::Relu), vec![d1]);
    let d2 = b.conv(d1, 8, 8, 3, 8);
    let d2 = b.node(Op::Clip { min: Some(-0.5), max: Some(0.7) }, vec![d2]);
    let d3 = b.conv(d2, 8, 8, 3, 8);
    let d3 = b.node(Op::LeakyRelu { alpha: 0.1 }, vec![d3]);
    // A gate that is no conv's output: HardSigmoid + the broadcast Mul in one fused kernel.
    let pool = b.node(Op::GlobalAveragePool, vec![d3]);
    let gate = b.node(Op::HardSigmoid { alpha: 0.3, beta: 0.4 }, vec![pool]);
    let d4 = b.node(Op::Binary(BinaryOp::Mul), vec![d3, gate]);
    let y = b.conv(d4, 8, 4, 1, 1);
    let y = b.node(Op::Unary(UnaryOp::Sigmoid), vec![y]);
    b.g.outputs = vec![y, m];
    b.g
}

fn run(place: Place, fusion: bool, n: usize) -> Vec<Vec<f32>> {
    let opts = SessionOptions { fusion, memory_planning: true };
    let sess = Session::from_graph(graph(), place, opts).unwrap();
    let xv: Vec<f32> = (0..n * 3 * 121).map(|i| (i as f32 * 0.13).sin() * 2.0).collect();
    let t = Tensor::from_slice(&xv, &[n, 3, 11, 11], place).unwrap();
    let feeds = [("x".to_string(), t)].into_iter().collect();
    // Three runs: the last one replays a recording on GPUs.
    let mut outs = Vec::new();
    for _ in 0..3 {
        outs = sess.run(&feeds).unwrap();
    }
    outs.iter().map(|(_, t)| t.to_vec::<f32>().unwrap()).collect()
}

#[test]
fn activation_epilogues_are_planned_and_match_unfused() {
    let sess = Session::from_graph(graph(), Place::Cpu, SessionOptions::default()).unwrap();
    let plan = sess.plan_for(&[vec![1, 3, 11, 11]]).unwrap();
    let mut acts: Vec<String> = Vec::new();
    for s in &plan.steps {
        if let Step::Epilogue { activation: Some(a), .. } = s {
            acts.push(plan.graph.nodes[*a].op.name().to_string());
        }
    }
    // Every conv but the two projections carries its activation; the SiLUs are Swish nodes.
    assert_eq!(
        acts,
        [
            "HardSwish",
            "HardSwish",
            "HardSwish",
            "Relu",
            "HardSigmoid",
            "Swish",
            "Swish",
            "Swish",
            "Sigmoid",
            "Relu",
            "Clip",
            "LeakyRelu",
            "Sigmoid"
        ],
        "{:?}",
        plan.steps
    );
    // 15 convs (the residual Add in its projection's epilogue), 3 pools, 2 gate Muls and the
    // HardSigmoid + Mul kernel.
    assert_eq!(plan.steps.len(), 21, "{}", plan.summary());
    let fused = plan.steps.iter().filter(|s| matches!(s, Step::Fused(f) if f.nodes.len() == 2));
    assert_eq!(fused.count(), 1, "{:?}", plan.steps);
    for n in [1, 2] {
        let want = run(Place::Cpu, false, n);
        assert!(want[0].iter().any(|&v| v > 0.05 && v < 0.95), "outputs saturate: {want:?}");
        for place in places() {
            for fusion in [true, false] {
                let got = run(place, fusion, n);
                for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.len(), w.len());
                    for (i, (a, b)) in g.iter().zip(w).enumerate() {
                        assert!(
                            (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                            "{place} fusion={fusion} n={n} output {o} [{i}]: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }
}
