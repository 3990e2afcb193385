//! Issue 23: BERT's linear layers with their bias, residual and GELU in the MatMul's epilogue
//! (`Step::Epilogue` anchored on a MatMul) — the FFN up-projection with the exported erf
//! chain, the down-projection with bias + residual, a long-K product (split-K: the epilogue
//! runs in the slice reduction), the tanh GELU and a bias-only projection — checked against
//! the unfused plan on the CPU (every op separately) on every device, in f32 and in
//! `precision=f16`.

use mpsrt_core::{DType, Place};
use mpsrt_engine::{Precision, Session, SessionOptions};
use mpsrt_graph::{BinaryOp, Dim, Graph, HostTensor, Op, Step, UnaryOp, ValueId};
use mpsrt_tensor::Tensor;

mod common;
use common::B;

const H: usize = 16;
const F: usize = 40;
const LONG_K: usize = 512;

fn scalar(b: &mut B, v: f32) -> ValueId {
    b.n += 1;
    b.g.add_initializer(format!("s{}", b.n), HostTensor::from_f32(vec![], &[v])).unwrap()
}

/// `x·W + bias` (W `[k, n]`, bias `[n]`).
fn linear(b: &mut B, x: ValueId, k: usize, n: usize) -> ValueId {
    let w = b.init(vec![k, n], 0.41 + b.n as f32 * 0.013);
    let bias = b.init(vec![n], 0.77);
    let y = b.node(Op::MatMul, vec![x, w]);
    b.node(Op::Binary(BinaryOp::Add), vec![bias, y])
}

/// GELU as torch exports it: `x · 0.5 · (1 + erf(x / √2))`.
fn erf_gelu(b: &mut B, x: ValueId) -> ValueId {
    let r2 = scalar(b, std::f32::consts::SQRT_2);
    let one = scalar(b, 1.0);
    let half = scalar(b, 0.5);
    let d = b.node(Op::Binary(BinaryOp::Div), vec![x, r2]);
    let e = b.node(Op::Unary(UnaryOp::Erf), vec![d]);
    let p = b.node(Op::Binary(BinaryOp::Add), vec![e, one]);
    let m = b.node(Op::Binary(BinaryOp::Mul), vec![x, p]);
    b.node(Op::Binary(BinaryOp::Mul), vec![m, half])
}

/// x `[n, 5, H]` → FFN (erf GELU, bias + residual) → a long-K FFN (tanh GELU, K = 512,
/// bias + residual) → a bias-only projection.
fn graph() -> Graph {
    let mut b = B::new(0.3);
    let dims = vec![Dim::Sym("n".into()), Dim::Known(5), Dim::Known(H)];
    let x = b.g.add_input("x", DType::F32, dims).unwrap();
    let up = linear(&mut b, x, H, F);
    let h = erf_gelu(&mut b, up);
    let down = linear(&mut b, h, F, H);
    let y1 = b.node(Op::Binary(BinaryOp::Add), vec![x, down]);
    let up = linear(&mut b, y1, H, LONG_K);
    let h = b.node(Op::Gelu { approximate_tanh: true }, vec![up]);
    let down = linear(&mut b, h, LONG_K, H);
    let y2 = b.node(Op::Binary(BinaryOp::Add), vec![down, y1]);
    let q = linear(&mut b, y2, H, 3 * H);
    b.g.outputs = vec![q, y2];
    b.g
}

fn places() -> Vec<Place> {
    let mut v = vec![Place::Cpu];
    if common::gpu() {
        v.push(common::GPU);
    }
    v
}

fn session(place: Place, fusion: bool, precision: Precision) -> Session {
    let opts = SessionOptions { fusion, memory_planning: true };
    Session::from_graph_with_precision(graph(), place, opts, precision).unwrap()
}

fn run(sess: &Session, place: Place, n: usize) -> Vec<Vec<f32>> {
    let xv: Vec<f32> = (0..n * 5 * H).map(|i| (i as f32 * 0.37).sin() * 1.5).collect();
    let t = Tensor::from_slice(&xv, &[n, 5, H], place).unwrap();
    let feeds = [("x".to_string(), t)].into_iter().collect();
    // Three runs: the last one replays a recording on GPUs.
    let mut outs = Vec::new();
    for _ in 0..3 {
        outs = sess.run(&feeds).unwrap();
    }
    outs.iter().map(|(_, t)| t.astype(DType::F32).unwrap().to_vec::<f32>().unwrap()).collect()
}

#[test]
fn linear_layers_run_with_bias_residual_and_gelu_in_the_matmul_epilogue() {
    let sess = session(Place::Cpu, true, Precision::F32);
    let plan = sess.plan_for(&[vec![2, 5, H]]).unwrap();
    let kinds: Vec<(bool, bool, Option<String>)> = plan
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Epilogue { anchor, bias, add, activation } => {
                assert_eq!(plan.graph.nodes[*anchor].op, Op::MatMul);
                let act = activation.map(|a| plan.graph.nodes[a].op.name().to_string());
                Some((bias.is_some(), add.is_some(), act))
            }
            _ => None,
        })
        .collect();
    let gelu = Some("Gelu".to_string());
    assert_eq!(
        kinds,
        [
            (true, false, gelu.clone()),
            (true, true, None),
            (true, false, gelu),
            (true, true, None),
            (true, false, None)
        ],
        "{:?}",
        plan.steps
    );
    assert_eq!(plan.steps.len(), 5, "every Add and GELU is in an epilogue: {}", plan.summary());
    // precision=f16: the weights are f16, the epilogues' biases f32 copies made at planning.
    let plan16 = session(Place::Cpu, true, Precision::F16).plan_for(&[vec![2, 5, H]]).unwrap();
    let mut biases = 0;
    for s in &plan16.steps {
        if let Step::Epilogue { anchor, bias: Some((_, b)), .. } = s {
            let w = plan16.graph.nodes[*anchor].inputs[1];
            assert_eq!(plan16.graph.value(w).dtype, DType::F16);
            assert_eq!(plan16.graph.value(*b).dtype, DType::F32);
            biases += 1;
        }
    }
    assert_eq!(biases, 5, "{:?}", plan16.steps);
    for n in [2] {
        let want = run(&session(Place::Cpu, false, Precision::F32), Place::Cpu, n);
        assert!(want[1].iter().any(|v| v.abs() > 1.0), "outputs are not all tiny: {want:?}");
        for place in places() {
            for (precision, tol) in [(Precision::F32, 2e-5), (Precision::F16, 2e-2)] {
                for fusion in [true, false] {
                    if precision == Precision::F16 && place == Place::Cpu && !fusion {
                        continue;
                    }
                    let got = run(&session(place, fusion, precision), place, n);
                    for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(g.len(), w.len());
                        for (i, (a, b)) in g.iter().zip(w).enumerate() {
                            assert!(
                                (a - b).abs() <= tol * (1.0 + b.abs()),
                                "{place} {precision} fusion={fusion} n={n} output {o} [{i}]: {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Unfused attention as torch's SDPA export writes it: `MatMul(q·√s, kᵀ·√s) + mask`,
/// softmax, the NaN guard, `·v` — the two scales move past the product (`passes::matmul_scale`).
fn attention_graph() -> Graph {
    let mut b = B::new(0.5);
    let sym = |d: &[usize]| {
        let mut v = vec![Dim::Sym("n".into())];
        v.extend(d.iter().map(|&x| Dim::Known(x)));
        v
    };
    let q = b.g.add_input("q", DType::F32, sym(&[2, 6, 4])).unwrap();
    let k = b.g.add_input("k", DType::F32, sym(&[2, 4, 6])).unwrap();
    let v = b.g.add_input("v", DType::F32, sym(&[2, 6, 4])).unwrap();
    let mask = b.g.add_input("mask", DType::F32, sym(&[1, 1, 6])).unwrap();
    let s1 = scalar(&mut b, 0.6);
    let s2 = scalar(&mut b, 0.8);
    let qs = b.node(Op::Binary(BinaryOp::Mul), vec![q, s1]);
    let ks = b.node(Op::Binary(BinaryOp::Mul), vec![k, s2]);
    let s = b.node(Op::MatMul, vec![qs, ks]);
    let s = b.node(Op::Binary(BinaryOp::Add), vec![s, mask]);
    let p = b.node(Op::Softmax { axis: -1 }, vec![s]);
    // transformers' NaN guard (the test keeps the chain unfused: `MPSRT_ATTENTION_NAN_GUARD=0`).
    let zero = scalar(&mut b, 0.0);
    let nan = b.node(Op::Unary(UnaryOp::IsNaN), vec![p]);
    let p = b.node(Op::Where, vec![nan, zero, p]);
    let o = b.node(Op::MatMul, vec![p, v]);
    b.g.outputs = vec![o];
    b.g
}

#[test]
fn attention_scales_after_the_product_match_the_unfused_plan() {
    // The attention pass would make the guarded chain one `Attention` node (the default since
    // the eleventh session); this test is about the chain's own plan. Read at each plan; no
    // other test of this binary has an attention chain.
    std::env::set_var("MPSRT_ATTENTION_NAN_GUARD", "0");
    let n = 2;
    let feed = |place: Place| {
        let mut f = std::collections::HashMap::new();
        for (k, (name, shape)) in
            [("q", [n, 2, 6, 4]), ("k", [n, 2, 4, 6]), ("v", [n, 2, 6, 4]), ("mask", [n, 1, 1, 6])]
                .into_iter()
                .enumerate()
        {
            let len: usize = shape.iter().product();
            let vals: Vec<f32> = (0..len)
                .map(|i| {
                    if name == "mask" {
                        if i % 6 == 5 {
                            -1e4
                        } else {
                            0.0
                        }
                    } else {
                        ((i + 7 * k) as f32 * 0.61).sin() * 3.0
                    }
                })
                .collect();
            f.insert(name.to_string(), Tensor::from_slice(&vals, &shape, place).unwrap());
        }
        f
    };
    let opts = |fusion| SessionOptions { fusion, memory_planning: true };
    let cpu = Session::from_graph(attention_graph(), Place::Cpu, opts(false)).unwrap();
    let want = cpu.run(&feed(Place::Cpu)).unwrap()[0].1.to_vec::<f32>().unwrap();
    let fused = Session::from_graph(attention_graph(), Place::Cpu, opts(true)).unwrap();
    let plan =
        fused.plan_for(&[vec![n, 2, 6, 4], vec![n, 2, 4, 6], vec![n, 2, 6, 4], vec![n, 1, 1, 6]]);
    let ops: Vec<String> =
        plan.unwrap().graph.nodes.iter().map(|x| x.op.name().to_string()).collect();
    assert_eq!(ops, ["MatMul", "Mul", "Add", "Softmax", "IsNaN", "Where", "MatMul"]);
    for place in places() {
        for (precision, tol) in [(Precision::F32, 1e-5), (Precision::F16, 1e-2)] {
            let s =
                Session::from_graph_with_precision(attention_graph(), place, opts(true), precision)
                    .unwrap();
            let got = s.run(&feed(place)).unwrap()[0].1.astype(DType::F32).unwrap();
            for (i, (a, b)) in got.to_vec::<f32>().unwrap().iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= tol * (1.0 + b.abs()),
                    "{place} {precision} [{i}]: {a} vs {b}"
                );
            }
        }
    }
}
