//! The attention pattern pass and the fused kernel behind ONNX `Attention`: graphs built in code
//! as exporters write them (`MatMul → Div → Add mask → Softmax → MatMul`, torch's SDPA export
//! with `√scale` multiplies on q and kᵀ) compile to one `Attention` node and agree with the
//! unfused plan (`SessionOptions { fusion: false }`) on the CPU and on the GPU (lavapipe in CI).
//! Tolerances: f32 2e-5 absolute (outputs of magnitude ≤ 1, f32 in a different order); f16
//! 4e-3 (the unfused graph rounds the probabilities to f16 before the second product).

use mpsrt_core::{DType, Place};
use mpsrt_engine::{Session, SessionOptions};
use mpsrt_graph::PlanOptions;
use mpsrt_graph::{AttentionAttrs, BinaryOp, CompiledGraph, Dim, Graph, HostTensor, Op, UnaryOp};
use mpsrt_tensor::Tensor;
use std::collections::HashMap;

fn places() -> Vec<Place> {
    let mut v = vec![Place::Cpu];
    if mpsrt_runtime::gpu_available() {
        v.push(Place::Gpu(0));
    } else {
        assert!(std::env::var("MPSRT_REQUIRE_GPU").as_deref() != Ok("1"), "no GPU adapter");
    }
    v
}

fn dims(s: &[usize]) -> Vec<Dim> {
    s.iter().map(|&d| Dim::Known(d)).collect()
}

/// Deterministic values in ±0.5.
fn vals(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.5) as f32
        })
        .collect()
}

/// `[b, h, s, d]` attention in the exporter's form. `bert`: scores divided by √d and a
/// `[b, 1, 1, s]` additive mask input; otherwise q and kᵀ each multiplied by `d^-1/4` and a
/// constant causal `[1, 1, s, s]` mask of 0 / -inf.
fn pattern(dt: DType, [b, h, s, d]: [usize; 4], bert: bool) -> Graph {
    let mut g = Graph::new();
    let q = g.add_input("q", dt, dims(&[b, h, s, d])).unwrap();
    let kt = g.add_input("kt", dt, dims(&[b, h, d, s])).unwrap();
    let v = g.add_input("v", dt, dims(&[b, h, s, d])).unwrap();
    let c = |g: &mut Graph, name: &str, x: f64| {
        g.add_initializer(name, HostTensor::from_f64(dt, vec![], &[x])).unwrap()
    };
    let tmp = |g: &mut Graph, n: &str| g.add_value(n, dt, None).unwrap();
    let scores = tmp(&mut g, "scores");
    let scaled = tmp(&mut g, "scaled");
    let masked = tmp(&mut g, "masked");
    let probs = tmp(&mut g, "probs");
    let y = tmp(&mut g, "y");
    if bert {
        let mask = g.add_input("mask", dt, dims(&[b, 1, 1, s])).unwrap();
        let sd = c(&mut g, "sqrt_d", (d as f64).sqrt());
        g.add_node("qk", Op::MatMul, vec![q, kt], vec![scores]);
        g.add_node("div", Op::Binary(BinaryOp::Div), vec![scores, sd], vec![scaled]);
        g.add_node("add", Op::Binary(BinaryOp::Add), vec![mask, scaled], vec![masked]);
    } else {
        let f = (d as f64).powf(-0.25);
        let (cq, ck) = (c(&mut g, "cq", f), c(&mut g, "ck", f));
        let (qs, ks) = (tmp(&mut g, "qs"), tmp(&mut g, "ks"));
        g.add_node("mq", Op::Binary(BinaryOp::Mul), vec![q, cq], vec![qs]);
        g.add_node("mk", Op::Binary(BinaryOp::Mul), vec![ck, kt], vec![ks]);
        let causal: Vec<f64> =
            (0..s * s).map(|e| if e % s > e / s { f64::NEG_INFINITY } else { 0.0 }).collect();
        let m = g.add_initializer("causal", HostTensor::from_f64(dt, vec![1, 1, s, s], &causal));
        g.add_node("qk", Op::MatMul, vec![qs, ks], vec![scaled]);
        g.add_node("add", Op::Binary(BinaryOp::Add), vec![scaled, m.unwrap()], vec![masked]);
    }
    g.add_node("softmax", Op::Softmax { axis: -1 }, vec![masked], vec![probs]);
    g.add_node("pv", Op::MatMul, vec![probs, v], vec![y]);
    g.outputs = vec![y];
    g
}

fn feeds(dt: DType, [b, h, s, d]: [usize; 4], bert: bool, place: Place) -> HashMap<String, Tensor> {
    let t = |shape: &[usize], seed| {
        let n = shape.iter().product();
        Tensor::from_slice(&vals(n, seed), shape, Place::Cpu)
            .unwrap()
            .astype(dt)
            .unwrap()
            .to(place)
            .unwrap()
    };
    let mut f: HashMap<String, Tensor> = [
        ("q".to_string(), t(&[b, h, s, d], 1)),
        ("kt".to_string(), t(&[b, h, d, s], 2)),
        ("v".to_string(), t(&[b, h, s, d], 3)),
    ]
    .into_iter()
    .collect();
    if bert {
        // Batch 1 pads its last 4 keys with -10000 (BERT's extended attention mask).
        let m: Vec<f32> =
            (0..b * s).map(|e| if e / s == 1 && e % s >= s - 4 { -10000.0 } else { 0.0 }).collect();
        let mt = Tensor::from_slice(&m, &[b, 1, 1, s], Place::Cpu).unwrap().astype(dt).unwrap();
        f.insert("mask".into(), mt.to(place).unwrap());
    }
    f
}

#[test]
fn pattern_compiles_to_one_attention_node() {
    for bert in [true, false] {
        let g = pattern(DType::F32, [2, 3, 5, 8], bert);
        let c = CompiledGraph::new(g.clone(), PlanOptions::default()).unwrap();
        let ops: Vec<String> = c.graph().nodes.iter().map(|n| n.op.name()).collect();
        assert_eq!(ops, ["Transpose", "Attention"], "bert={bert}");
        let Op::Attention(a) = &c.graph().nodes[1].op else { unreachable!() };
        let AttentionAttrs { scale, has_mask, .. } = a;
        assert!((scale.unwrap() - 1.0 / 8f32.sqrt()).abs() < 1e-6, "{scale:?}");
        assert!(*has_mask);
        // Fusion off: the pattern stays.
        let off = PlanOptions { fuse_epilogues: false, ..PlanOptions::default() };
        let c = CompiledGraph::new(g, off).unwrap();
        assert!(c.graph().nodes.iter().any(|n| n.op.name() == "Softmax"));
    }
    // A scores value that is also a graph output is not private: no rewrite.
    let mut g = pattern(DType::F32, [1, 2, 4, 8], true);
    let scores = g.find("scores").unwrap();
    g.outputs.push(scores);
    let c = CompiledGraph::new(g, PlanOptions::default()).unwrap();
    assert!(c.graph().nodes.iter().all(|n| n.op.name() != "Attention"));
}

#[test]
fn fused_attention_matches_the_unfused_graph() {
    let cases = [
        (DType::F32, [2, 4, 13, 16], true),
        (DType::F32, [1, 2, 37, 64], false),
        // ≥ 16 query rows in f32: two GEMMs around the one-pass masked softmax on GPUs.
        (DType::F32, [2, 3, 20, 16], true),
        (DType::F16, [2, 2, 21, 32], true),
        (DType::F16, [1, 3, 17, 64], false),
    ];
    let unfused_opts = SessionOptions { fusion: false, ..SessionOptions::default() };
    for (dt, shape, bert) in cases {
        let reference = Session::from_graph(pattern(dt, shape, bert), Place::Cpu, unfused_opts)
            .unwrap()
            .run(&feeds(dt, shape, bert, Place::Cpu))
            .unwrap();
        let want = reference[0].1.astype(DType::F32).unwrap().to_f64_vec().unwrap();
        for place in places() {
            let s = Session::from_graph(pattern(dt, shape, bert), place, SessionOptions::default());
            let got = s.unwrap().run(&feeds(dt, shape, bert, place)).unwrap();
            let got = got[0].1.astype(DType::F32).unwrap().to_f64_vec().unwrap();
            let atol = if dt == DType::F16 { 4e-3 } else { 2e-5 };
            assert_eq!(got.len(), want.len());
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= atol,
                    "{dt} {shape:?} bert={bert} on {place:?}: [{i}] {a} vs {b}"
                );
            }
        }
    }
}

/// torch's TorchScript export of `scaled_dot_product_attention`: the scale is computed in the
/// graph from `Shape(q)` (`sqrt(1 / sqrt(d))` on q and on `Transpose(k)`), so with a symbolic
/// batch it is constant only once the plan's shapes are concrete: the plan fuses it.
#[test]
fn shape_computed_scale_fuses_in_the_plan() {
    let (h, s, d) = (2, 9, 16);
    let mut g = Graph::new();
    let n = Dim::Sym("batch".into());
    let k4 = |g: &mut Graph, name: &str| {
        let shape = vec![n.clone(), Dim::Known(h), Dim::Known(s), Dim::Known(d)];
        g.add_input(name, DType::F32, shape).unwrap()
    };
    let (q, k, v) = (k4(&mut g, "q"), k4(&mut g, "k"), k4(&mut g, "v"));
    let one = g.add_initializer("one", HostTensor::from_f32(vec![], &[1.0])).unwrap();
    let t = |g: &mut Graph, name: &str, op: Op, ins: Vec<mpsrt_graph::ValueId>| {
        let dt = if name == "shape" { DType::I64 } else { DType::F32 };
        let o = g.add_value(name, dt, None).unwrap();
        g.add_node(name, op, ins, vec![o]);
        o
    };
    let shp = t(&mut g, "shape", Op::Shape { start: 3, end: None }, vec![q]);
    let f = t(&mut g, "cast", Op::Cast { to: DType::F32 }, vec![shp]);
    let r = t(&mut g, "sqrt_d", Op::Unary(UnaryOp::Sqrt), vec![f]);
    let sc = t(&mut g, "scale", Op::Binary(BinaryOp::Div), vec![one, r]);
    let hs = t(&mut g, "half", Op::Unary(UnaryOp::Sqrt), vec![sc]);
    let qs = t(&mut g, "qs", Op::Binary(BinaryOp::Mul), vec![q, hs]);
    let kt = t(&mut g, "kt", Op::Transpose { perm: Some(vec![0, 1, 3, 2]) }, vec![k]);
    let ks = t(&mut g, "ks", Op::Binary(BinaryOp::Mul), vec![kt, hs]);
    let qk = t(&mut g, "qk", Op::MatMul, vec![qs, ks]);
    let p = t(&mut g, "p", Op::Softmax { axis: -1 }, vec![qk]);
    let y = t(&mut g, "y", Op::MatMul, vec![p, v]);
    g.outputs = vec![y];
    let c = CompiledGraph::new(g.clone(), PlanOptions::default()).unwrap();
    let plan = c.plan(&[vec![3, h, s, d], vec![3, h, s, d], vec![3, h, s, d]]).unwrap();
    let ops: Vec<String> = plan.graph.nodes.iter().map(|n| n.op.name()).collect();
    assert!(ops.contains(&"Attention".to_string()), "{ops:?}");
    assert!(!ops.contains(&"Softmax".to_string()), "{ops:?}");
    let feeds = |place: Place| -> HashMap<String, Tensor> {
        ["q", "k", "v"]
            .iter()
            .enumerate()
            .map(|(i, nm)| {
                let x =
                    Tensor::from_slice(&vals(3 * h * s * d, i as u64 + 7), &[3, h, s, d], place);
                (nm.to_string(), x.unwrap())
            })
            .collect()
    };
    let off = SessionOptions { fusion: false, ..SessionOptions::default() };
    let want = Session::from_graph(g.clone(), Place::Cpu, off).unwrap().run(&feeds(Place::Cpu));
    let want = want.unwrap()[0].1.to_f64_vec().unwrap();
    for place in places() {
        let s = Session::from_graph(g.clone(), place, SessionOptions::default()).unwrap();
        let got = s.run(&feeds(place)).unwrap()[0].1.to_f64_vec().unwrap();
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= 2e-5, "{place:?}: [{i}] {a} vs {b}");
        }
    }
}

/// `precision=f16` on an f32 model keeps Softmax in f32 between casts: the chain (casts
/// included) still becomes one f16 Attention node, within f16 rounding of the f32 model.
#[test]
fn f16_precision_graph_still_fuses() {
    let shape = [2, 2, 11, 32];
    let mut g = pattern(DType::F32, shape, true);
    mpsrt_engine::apply_precision(&mut g, mpsrt_engine::Precision::F16).unwrap();
    let c = CompiledGraph::new(g.clone(), PlanOptions::default()).unwrap();
    let ops: Vec<String> = c.graph().nodes.iter().map(|n| n.op.name()).collect();
    assert!(ops.contains(&"Attention".to_string()), "{ops:?}");
    assert!(!ops.contains(&"Softmax".to_string()), "{ops:?}");
    let off = SessionOptions { fusion: false, ..SessionOptions::default() };
    let f32_graph = pattern(DType::F32, shape, true);
    let want = Session::from_graph(f32_graph, Place::Cpu, off).unwrap();
    let want = want.run(&feeds(DType::F32, shape, true, Place::Cpu)).unwrap()[0].1.to_f64_vec();
    let want = want.unwrap();
    for place in places() {
        let s = Session::from_graph(g.clone(), place, SessionOptions::default()).unwrap();
        let got = s.run(&feeds(DType::F32, shape, true, place)).unwrap();
        let got = got[0].1.astype(DType::F32).unwrap().to_f64_vec().unwrap();
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= 4e-3, "{place:?}: [{i}] {a} vs {b}");
        }
    }
}

/// transformers' SDPA export guards fully masked rows after the softmax:
/// `p = Where(IsNaN(softmax), 0, softmax)` feeds the second product (BERT-base from
/// `bench/engine_torch.py export`). `g` with that guard inserted.
fn with_nan_guard(mut g: Graph, dt: DType) -> Graph {
    let probs = g.find("probs").unwrap();
    let flag = g.add_value("probs_nan", DType::Bool, None).unwrap();
    let guarded = g.add_value("probs_guarded", dt, None).unwrap();
    let zero = g.add_initializer("zero", HostTensor::from_f64(dt, vec![], &[0.0])).unwrap();
    g.add_node("isnan", Op::Unary(UnaryOp::IsNaN), vec![probs], vec![flag]);
    g.add_node("guard", Op::Where, vec![flag, zero, probs], vec![guarded]);
    let pv = g.nodes.iter().position(|n| n.name == "pv").unwrap();
    g.nodes[pv].inputs[0] = guarded;
    // Nodes in topological order: the product after its new producers.
    let n = g.nodes.remove(pv);
    g.nodes.push(n);
    g
}

/// The NaN-guarded pattern fuses by default, f32 and under precision=f16 (guard, casts and all;
/// `MPSRT_ATTENTION_NAN_GUARD=0`: never, `f16`: f16 chains only), and matches the unfused f32
/// graph (whose guard never fires: the mask is finite) — on GPUs the f32 node runs as two GEMMs
/// around the one-pass masked softmax.
#[test]
fn nan_guarded_softmax_fuses() {
    // Read at each plan; no other test here has the guard, so this test owns the variable.
    let shape = [2, 2, 11, 32];
    let fused = |f16: bool| {
        let mut g = with_nan_guard(pattern(DType::F32, shape, true), DType::F32);
        if f16 {
            mpsrt_engine::apply_precision(&mut g, mpsrt_engine::Precision::F16).unwrap();
        }
        let c = CompiledGraph::new(g, PlanOptions::default()).unwrap();
        c.graph().nodes.iter().any(|n| n.op.name() == "Attention")
    };
    std::env::set_var("MPSRT_ATTENTION_NAN_GUARD", "f16");
    assert!(fused(true) && !fused(false), "f16: f16 chains only");
    std::env::set_var("MPSRT_ATTENTION_NAN_GUARD", "0");
    assert!(!fused(true) && !fused(false), "0: never");
    std::env::remove_var("MPSRT_ATTENTION_NAN_GUARD");
    for f16 in [false, true] {
        let mut g = with_nan_guard(pattern(DType::F32, shape, true), DType::F32);
        if f16 {
            mpsrt_engine::apply_precision(&mut g, mpsrt_engine::Precision::F16).unwrap();
        }
        let c = CompiledGraph::new(g.clone(), PlanOptions::default()).unwrap();
        let ops: Vec<String> = c.graph().nodes.iter().map(|n| n.op.name()).collect();
        assert!(ops.contains(&"Attention".to_string()), "f16={f16}: {ops:?}");
        for gone in ["Softmax", "Where", "IsNaN"] {
            assert!(!ops.contains(&gone.to_string()), "f16={f16}: {ops:?}");
        }
        let off = SessionOptions { fusion: false, ..SessionOptions::default() };
        let plain = with_nan_guard(pattern(DType::F32, shape, true), DType::F32);
        let want = Session::from_graph(plain, Place::Cpu, off).unwrap();
        let want = want.run(&feeds(DType::F32, shape, true, Place::Cpu)).unwrap()[0].1.to_f64_vec();
        let want = want.unwrap();
        let tol = if f16 { 4e-3 } else { 2e-5 };
        for place in places() {
            let s = Session::from_graph(g.clone(), place, SessionOptions::default()).unwrap();
            let got = s.run(&feeds(DType::F32, shape, true, place)).unwrap();
            let got = got[0].1.astype(DType::F32).unwrap().to_f64_vec().unwrap();
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!((a - b).abs() <= tol, "f16={f16} {place:?}: [{i}] {a} vs {b}");
            }
        }
    }
}

/// Repeated mask preparation is merged (`passes/transformer.rs::merge_duplicates`): two layers
/// each turning the same bool padding mask into a bias with their own `0` / `-inf` constants
/// (transformers' SDPA export) plan one `Where`, and the outputs equal the unmerged plan's.
#[test]
fn repeated_mask_preparation_is_merged() {
    let mut g = Graph::new();
    let x = g.add_input("x", DType::F32, dims(&[2, 3])).unwrap();
    let keep = g.add_input("keep", DType::Bool, dims(&[2, 3])).unwrap();
    let mut outs = Vec::new();
    for layer in 0..2 {
        let c = |g: &mut Graph, n: &str, v: f64| {
            let name = format!("{n}{layer}");
            g.add_initializer(name, HostTensor::from_f64(DType::F32, vec![], &[v])).unwrap()
        };
        let (zero, ninf) = (c(&mut g, "zero", 0.0), c(&mut g, "ninf", f64::NEG_INFINITY));
        let bias = g.add_value(format!("bias{layer}"), DType::F32, None).unwrap();
        let y = g.add_value(format!("y{layer}"), DType::F32, None).unwrap();
        g.add_node(format!("where{layer}"), Op::Where, vec![keep, zero, ninf], vec![bias]);
        g.add_node(format!("add{layer}"), Op::Binary(BinaryOp::Add), vec![x, bias], vec![y]);
        outs.push(y);
    }
    g.outputs = outs;
    let c = CompiledGraph::new(g.clone(), PlanOptions::default()).unwrap();
    let wheres = c.graph().nodes.iter().filter(|n| n.op == Op::Where).count();
    assert_eq!(wheres, 1, "{:?}", c.graph().nodes.iter().map(|n| n.op.name()).collect::<Vec<_>>());
    let feed = |place: Place| {
        let mut f = HashMap::new();
        f.insert("x".into(), Tensor::from_slice(&vals(6, 3), &[2, 3], place).unwrap());
        let k = [true, false, true, true, true, false];
        f.insert("keep".into(), Tensor::from_bools(&k, &[2, 3], place).unwrap());
        f
    };
    let off = SessionOptions { fusion: false, ..SessionOptions::default() };
    let want = Session::from_graph(g.clone(), Place::Cpu, off).unwrap();
    let want = want.run(&feed(Place::Cpu)).unwrap();
    for place in places() {
        let s = Session::from_graph(g.clone(), place, SessionOptions::default()).unwrap();
        let got = s.run(&feed(place)).unwrap();
        for ((_, a), (_, b)) in got.iter().zip(&want) {
            assert_eq!(a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap(), "{place:?}");
        }
    }
}

/// The f32 composed attention with a plain padding mask replays as its dispatches alone: no
/// per-run upload (the key-position `arange` is built only for causal/window/padding-length
/// rules; BERT-base replayed 12 such copies, one per layer).
#[test]
fn composed_f32_attention_replays_without_uploads() {
    if !mpsrt_runtime::gpu_available() {
        return;
    }
    let shape = [2, 2, 32, 32];
    let g = with_nan_guard(pattern(DType::F32, shape, true), DType::F32);
    let s = Session::from_graph(g, Place::Gpu(0), SessionOptions::default()).unwrap();
    let s = s.with_replay(true);
    let f = feeds(DType::F32, shape, true, Place::Gpu(0));
    for _ in 0..3 {
        s.run(&f).unwrap();
    }
    let st = s.replay_status(&[
        vec![2, 2, 32, 32],
        vec![2, 2, 32, 32],
        vec![2, 2, 32, 32],
        vec![2, 1, 1, 32],
    ]);
    let st = st.unwrap();
    let count = |what: &str| -> usize {
        let end = st.find(&format!(" {what}")).unwrap_or_else(|| panic!("{st}"));
        st[..end].rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(st.starts_with("ready"), "{st}");
    assert_eq!(count("dispatches,"), count("commands,"), "{st}");
}
