//! `precision=f16` (`mpsrt_graph::passes::precision`, `Session::*_with_precision`): which nodes
//! the pass puts in f16 and which stay f32 with casts around them, that inputs/outputs keep f32,
//! that option values are parsed with errors naming the option, and that an f16 session agrees
//! with the f32 CPU reference within f16's rounding on the CPU and the GPU. Accuracy on whole
//! models (light CNNs, tiny GPT-2) is in python/tests/test_f16.py.

use mpsrt_core::{DType, Place};
use mpsrt_engine::{apply_precision, Precision, Session, SessionOptions};
use mpsrt_graph::{BinaryOp, ConvAttrs, Dim, Graph, HostTensor, Op, UnaryOp};
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

fn rand(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
        })
        .collect()
}

/// x [N,4,6,6] → Conv(3x3, 8) → Relu → GlobalAveragePool → Flatten → MatMul [8,5] → Add b
/// → Softmax → out; plus `e = Exp(conv)` as a second output (f32 op on an f16 value).
fn graph() -> Graph {
    let mut g = Graph::new();
    let n = Dim::Sym("n".into());
    let x = g.add_input("x", DType::F32, vec![n, Dim::Known(4), Dim::Known(6), Dim::Known(6)]);
    let x = x.unwrap();
    let w = g.add_initializer("w", HostTensor::from_f32(vec![8, 4, 3, 3], &rand(288, 1, 0.3)));
    let m = g.add_initializer("m", HostTensor::from_f32(vec![8, 5], &rand(40, 2, 0.5)));
    let b = g.add_initializer("b", HostTensor::from_f32(vec![5], &rand(5, 3, 0.1)));
    let (w, m, b) = (w.unwrap(), m.unwrap(), b.unwrap());
    let v: Vec<_> = ["c", "r", "p", "f", "y", "z", "out", "e"]
        .iter()
        .map(|n| g.add_value(*n, DType::F32, None).unwrap())
        .collect();
    let conv = ConvAttrs { kernel_shape: vec![3, 3], group: 1, ..Default::default() };
    g.add_node("conv", Op::Conv(conv), vec![x, w], vec![v[0]]);
    g.add_node("relu", Op::Unary(UnaryOp::Relu), vec![v[0]], vec![v[1]]);
    g.add_node("gap", Op::GlobalAveragePool, vec![v[1]], vec![v[2]]);
    g.add_node("flat", Op::Flatten { axis: 1 }, vec![v[2]], vec![v[3]]);
    g.add_node("mm", Op::MatMul, vec![v[3], m], vec![v[4]]);
    g.add_node("add", Op::Binary(BinaryOp::Add), vec![v[4], b], vec![v[5]]);
    g.add_node("softmax", Op::Softmax { axis: -1 }, vec![v[5]], vec![v[6]]);
    g.add_node("exp", Op::Unary(UnaryOp::Exp), vec![v[0]], vec![v[7]]);
    g.outputs = vec![v[6], v[7]];
    g
}

#[test]
fn pass_puts_heavy_ops_in_f16_and_sensitive_ones_in_f32() {
    let mut g = graph();
    let r = apply_precision(&mut g, Precision::F16).unwrap().unwrap();
    let dt = |name: &str| {
        let n = g.nodes.iter().find(|n| n.name == name).unwrap();
        g.value(n.outputs[0]).dtype
    };
    for n in ["conv", "relu", "flat", "mm", "add"] {
        assert_eq!(dt(n), DType::F16, "{n}");
    }
    for n in ["gap", "softmax", "exp"] {
        assert_eq!(dt(n), DType::F32, "{n}");
    }
    // Weights converted in place; casts: x in, relu→gap, flat's input is gap's f32 output
    // (cast in), add→softmax, conv→exp.
    assert_eq!(r.initializers, 3);
    assert_eq!(r.casts, 5, "{r:?}");
    assert_eq!(g.initializers.values().filter(|t| t.dtype == DType::F16).count(), 3);
    // The interface is unchanged.
    let sig: Vec<DType> = g.output_signature().iter().map(|s| s.dtype).collect();
    assert_eq!(sig, vec![DType::F32, DType::F32]);
    assert_eq!(g.input_signature()[0].dtype, DType::F32);
    // f32 leaves the graph alone.
    let mut g2 = graph();
    assert!(apply_precision(&mut g2, Precision::F32).unwrap().is_none());
    assert_eq!(g2.nodes.len(), graph().nodes.len());
}

#[test]
fn precision_values_parse_and_unknown_ones_name_the_option() {
    for s in ["f16", "FP16", "float16", "half"] {
        assert_eq!(s.parse::<Precision>().unwrap(), Precision::F16);
    }
    for s in ["f32", "fp32", "float32", "float"] {
        assert_eq!(s.parse::<Precision>().unwrap(), Precision::F32);
    }
    let e = "bf16".parse::<Precision>().unwrap_err().to_string();
    assert!(e.contains("precision") && e.contains("bf16") && e.contains("f16"), "{e}");
}

#[test]
fn f16_session_matches_f32_cpu_within_half_rounding() {
    let xs = rand(2 * 4 * 36, 7, 1.0);
    let run = |s: &Session, place: Place| {
        let x = Tensor::from_slice(&xs, &[2, 4, 6, 6], place).unwrap();
        let feeds: HashMap<String, Tensor> = [("x".to_string(), x)].into_iter().collect();
        s.run(&feeds).unwrap()
    };
    let reference = Session::from_graph(graph(), Place::Cpu, SessionOptions::default()).unwrap();
    let want = run(&reference, Place::Cpu);
    for place in places() {
        let s = Session::from_graph_with_precision(
            graph(),
            place,
            SessionOptions::default(),
            Precision::F16,
        )
        .unwrap();
        let got = run(&s, place);
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            assert_eq!(g.dtype(), DType::F32, "{place} {name}: outputs stay f32");
            let (g, w) = (g.to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap());
            let scale = w.iter().fold(0f32, |a, v| a.max(v.abs()));
            for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                // f16 keeps 11 significant bits: 2^-11 relative per rounding, a few roundings.
                assert!((a - b).abs() <= 4e-3 * scale, "{place} {name}[{i}]: {a} vs {b}");
            }
        }
    }
}

#[test]
fn server_config_precision_parameter() {
    use mpsrt_engine::triton::EngineBackend;
    use mpsrt_serve::{Backend, InstanceDevice};
    let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny_gpt2.onnx");
    let config = |value: &str| {
        let text = format!(
            "name: \"gpt2\"\nbackend: \"onnxruntime\"\n\
             parameters {{ key: \"precision\" value: {{ string_value: \"{value}\" }} }}"
        );
        mpsrt_serve::config::parse_pbtxt(&text).unwrap()
    };
    let c = config("f16");
    assert_eq!(mpsrt_serve::config::string_parameter(&c, "precision"), Some("f16"));
    let backend = EngineBackend::default();
    assert!(backend.load(&model, &c, InstanceDevice::Cpu).is_ok());
    let e = match backend.load(&model, &config("int8"), InstanceDevice::Cpu) {
        Ok(_) => panic!("precision int8 was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("gpt2") && e.contains("precision") && e.contains("int8"), "{e}");
}
