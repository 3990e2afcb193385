//! BERT as torch's TorchScript exporter writes Hugging Face's `BertModel` (issue 23):
//! `tests/data/tiny_bert.onnx` (`python scripts/bert_onnx.py ... --hidden 32 --heads 4 --seq 8
//! --vocab 50`: 2 layers, batch symbolic, transformers' index-built padding mask, SDPA's
//! shape-computed scale, LayerNormalization, erf GELU; random weights).
//!
//! - The plan replays on the GPU (lavapipe in CI): the mask's `Gather` over index constants
//!   folded from shapes reads them from their host bytes, not back from the device; replayed
//!   runs give bit-identical outputs to a session that runs every step.
//! - The compiled plan has the fused ops (Attention with the scale folded in, no `Mul`/`Sqrt`
//!   steps left for it, one Gelu per layer, Q/K/V as one GEMM) and agrees with the unfused CPU
//!   plan; so does the decomposed-LayerNorm / tanh-GELU export form.

use mpsrt_core::Place;
use mpsrt_engine::{Precision, Session, SessionOptions};
use mpsrt_tensor::Tensor;
use std::collections::HashMap;
use std::path::PathBuf;

const SEQ: usize = 8;

fn model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny_bert.onnx")
}

/// One layer, hidden 16, LayerNorm decomposed into ReduceMean/Sub/Pow/.../Add and GELU's tanh
/// form (`--decomposed-ln --tanh-gelu`).
fn decomposed() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny_bert_decomposed.onnx")
}

fn gpu() -> bool {
    let ok = mpsrt_runtime::gpu_available();
    assert!(ok || std::env::var("MPSRT_REQUIRE_GPU").as_deref() != Ok("1"), "no GPU adapter");
    ok
}

/// Token ids and a padding mask for `batch` rows: row `r` pads its last `r % 3` positions.
fn feeds(batch: usize, seed: i64) -> HashMap<String, Tensor> {
    let ids: Vec<i64> = (0..batch * SEQ).map(|i| (i as i64 * 7 + seed * 13) % 50).collect();
    let mask: Vec<i64> =
        (0..batch * SEQ).map(|i| i64::from(i % SEQ < SEQ - (i / SEQ) % 3)).collect();
    let t = |v: &[i64]| Tensor::from_slice(v, &[batch, SEQ], Place::Cpu).unwrap();
    [("input_ids".to_string(), t(&ids)), ("attention_mask".to_string(), t(&mask))]
        .into_iter()
        .collect()
}

fn out(s: &Session, f: &HashMap<String, Tensor>) -> Vec<f32> {
    s.run(f).unwrap()[0].1.to(Place::Cpu).unwrap().to_vec::<f32>().unwrap()
}

#[test]
fn tiny_bert_replays_bit_identical() {
    if !gpu() {
        return;
    }
    let opts = SessionOptions::default();
    let replayed = Session::load(model(), Place::Gpu(0), opts).unwrap().with_replay(true);
    let stepwise = Session::load(model(), Place::Gpu(0), opts).unwrap().with_replay(false);
    for batch in [2, 3] {
        for run in 0..4 {
            let f = feeds(batch, run);
            assert_eq!(out(&replayed, &f), out(&stepwise, &f), "batch {batch} run {run}");
        }
        let status = replayed.replay_status(&[vec![batch, SEQ], vec![batch, SEQ]]).unwrap();
        assert!(status.starts_with("ready"), "batch {batch}: {status}");
    }
}

#[test]
fn tiny_bert_fuses_and_matches_the_unfused_cpu_plan() {
    let s = Session::load(model(), Place::Cpu, SessionOptions::default()).unwrap();
    let plan = s.plan_for(&[vec![2, SEQ], vec![2, SEQ]]).unwrap();
    let ops: Vec<String> = plan.graph.nodes.iter().map(|n| n.op.name()).collect();
    let count = |name: &str| ops.iter().filter(|o| *o == name).count();
    assert_eq!(count("Attention"), 2, "{ops:?}");
    // SDPA's √scale multiplies and the Sqrt/Div chain computing them are folded away; the erf
    // GELU chain is one Gelu node.
    assert_eq!(count("Sqrt") + count("Div") + count("Mul") + count("Erf"), 0, "{ops:?}");
    assert_eq!(count("Gelu"), 2, "{ops:?}");
    // The index-built padding mask's `And(true, mask)` is the mask itself.
    assert_eq!(count("And"), 0, "{ops:?}");
    // Q, K and V: one GEMM over the concatenated weights, sliced (views) per projection.
    assert_eq!((count("MatMul"), count("Slice")), (2 * 4, 2 * 3), "{ops:?}");
    assert!(plan.init_steps.is_empty(), "{:?}", plan.init_steps);

    let unfused = SessionOptions { fusion: false, ..SessionOptions::default() };
    let reference = Session::load(model(), Place::Cpu, unfused).unwrap();
    let mut places = vec![Place::Cpu];
    if gpu() {
        places.push(Place::Gpu(0));
    }
    let f = feeds(3, 1);
    let want = out(&reference, &f);
    for place in places {
        let got = out(&Session::load(model(), place, SessionOptions::default()).unwrap(), &f);
        assert_eq!(got.len(), want.len());
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= 1e-4, "{place:?} [{i}]: {a} vs {b}");
        }
    }
}

#[test]
fn decomposed_layernorm_and_tanh_gelu_fuse_and_match() {
    let s = Session::load(decomposed(), Place::Cpu, SessionOptions::default()).unwrap();
    let plan = s.plan_for(&[vec![2, SEQ], vec![2, SEQ]]).unwrap();
    let ops: Vec<String> = plan.graph.nodes.iter().map(|n| n.op.name()).collect();
    let count = |name: &str| ops.iter().filter(|o| *o == name).count();
    assert_eq!(count("LayerNormalization"), 3, "{ops:?}");
    assert_eq!(count("Gelu"), 1, "{ops:?}");
    for gone in ["ReduceMean", "Pow", "Tanh", "Sqrt", "Div"] {
        assert_eq!(count(gone), 0, "{gone}: {ops:?}");
    }
    let unfused = SessionOptions { fusion: false, ..SessionOptions::default() };
    let f = feeds(2, 3);
    let want = out(&Session::load(decomposed(), Place::Cpu, unfused).unwrap(), &f);
    let mut places = vec![Place::Cpu];
    if gpu() {
        places.push(Place::Gpu(0));
    }
    for place in places {
        let got = out(&Session::load(decomposed(), place, SessionOptions::default()).unwrap(), &f);
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= 1e-4, "{place:?} [{i}]: {a} vs {b}");
        }
    }
}

/// `precision=f16` (issue 23): the same fusions (Gelu, merged Q/K/V GEMM, Attention; the
/// LayerNorms stay f32 between casts, so their statistics are f32) and outputs within f16's
/// rounding of the f32 CPU plan (2e-2 absolute on unit-scale LayerNorm outputs).
#[test]
fn tiny_bert_f16_keeps_the_fusions() {
    let f16 = |place| {
        let opts = SessionOptions::default();
        Session::load_with_precision(model(), place, opts, Precision::F16).unwrap()
    };
    let s = f16(Place::Cpu);
    let plan = s.plan_for(&[vec![2, SEQ], vec![2, SEQ]]).unwrap();
    let ops: Vec<String> = plan.graph.nodes.iter().map(|n| n.op.name()).collect();
    let count = |name: &str| ops.iter().filter(|o| *o == name).count();
    assert_eq!((count("Gelu"), count("Attention"), count("MatMul")), (2, 2, 8), "{ops:?}");
    assert_eq!(count("LayerNormalization"), 5, "{ops:?}");
    let f = feeds(2, 5);
    let want = out(&Session::load(model(), Place::Cpu, SessionOptions::default()).unwrap(), &f);
    let mut places = vec![Place::Cpu];
    if gpu() {
        places.push(Place::Gpu(0));
    }
    for place in places {
        let got = out(&f16(place), &f);
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= 2e-2, "{place:?} [{i}]: {a} vs {b}");
        }
    }
}

/// transformers' index-built padding mask: a `Gather` over the flattened mask at the constant
/// `b·S + s` (all rows, in order) is the mask reshaped — a view on the GPU — and `And(m, true)`
/// is `m` (the node is merged away); a gather at any other constant order still gathers. Values
/// against the unfused CPU plan on every place.
#[test]
fn identity_gather_and_and_true_keep_the_values() {
    use mpsrt_graph::{BinaryOp, Dim, Graph, HostTensor, Op};
    let mut g = Graph::new();
    let x = g.add_input("x", mpsrt_core::DType::F32, vec![Dim::Known(6), Dim::Known(2)]).unwrap();
    let mf = g.add_input("m", mpsrt_core::DType::F32, vec![Dim::Known(2), Dim::Known(3)]).unwrap();
    let ident = g.add_initializer("ident", HostTensor::from_i64(vec![2, 3], &[0, 1, 2, 3, 4, 5]));
    let perm = g.add_initializer("perm", HostTensor::from_i64(vec![2, 3], &[5, 0, 4, 1, 3, 2]));
    let truth = HostTensor::from_f64(mpsrt_core::DType::Bool, vec![1], &[1.0]);
    let truth = g.add_initializer("true", truth).unwrap();
    let (one, zero) = (HostTensor::from_f32(vec![], &[1.0]), HostTensor::from_f32(vec![], &[0.0]));
    let (one, zero) =
        (g.add_initializer("one", one).unwrap(), g.add_initializer("zero", zero).unwrap());
    let v = |g: &mut Graph, n: &str, dt| g.add_value(n, dt, None).unwrap();
    let (y1, y2) =
        (v(&mut g, "y1", mpsrt_core::DType::F32), v(&mut g, "y2", mpsrt_core::DType::F32));
    let (a, w) = (v(&mut g, "a", mpsrt_core::DType::Bool), v(&mut g, "w", mpsrt_core::DType::F32));
    g.add_node("g1", Op::Gather { axis: 0 }, vec![x, ident.unwrap()], vec![y1]);
    g.add_node("g2", Op::Gather { axis: 0 }, vec![x, perm.unwrap()], vec![y2]);
    let m = v(&mut g, "mb", mpsrt_core::DType::Bool);
    g.add_node("cast", Op::Cast { to: mpsrt_core::DType::Bool }, vec![mf], vec![m]);
    g.add_node("and", Op::Binary(BinaryOp::And), vec![truth, m], vec![a]);
    g.add_node("where", Op::Where, vec![a, one, zero], vec![w]);
    g.outputs = vec![y1, y2, w];
    let plan = Session::from_graph(g.clone(), Place::Cpu, SessionOptions::default()).unwrap();
    let plan = plan.plan_for(&[vec![6, 2], vec![2, 3]]).unwrap();
    let ops: Vec<String> = plan.graph.nodes.iter().map(|n| n.op.name()).collect();
    assert!(!ops.iter().any(|o| o == "And"), "{ops:?}");
    let xs: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 2.0).collect();
    let ms = [1.0f32, 0.0, 1.0, 1.0, 0.0, 0.0];
    let f: HashMap<String, Tensor> = [
        ("x".to_string(), Tensor::from_slice(&xs, &[6, 2], Place::Cpu).unwrap()),
        ("m".to_string(), Tensor::from_slice(&ms, &[2, 3], Place::Cpu).unwrap()),
    ]
    .into_iter()
    .collect();
    let all = |s: &Session| -> Vec<Vec<f32>> {
        s.run(&f)
            .unwrap()
            .into_iter()
            .map(|(_, t)| t.to(Place::Cpu).unwrap().to_vec().unwrap())
            .collect()
    };
    let unfused = SessionOptions { fusion: false, ..SessionOptions::default() };
    let want = all(&Session::from_graph(g.clone(), Place::Cpu, unfused).unwrap());
    assert_eq!(want[0], xs);
    assert_eq!(want[1][..4], [xs[10], xs[11], xs[0], xs[1]]);
    assert_eq!(want[2], [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
    let mut places = vec![Place::Cpu];
    if gpu() {
        places.push(Place::Gpu(0));
    }
    for place in places {
        let got = all(&Session::from_graph(g.clone(), place, SessionOptions::default()).unwrap());
        assert_eq!(got, want, "{place:?}");
    }
}
