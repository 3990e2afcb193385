//! Session tests on graphs built in code, run on the CPU and on the GPU (lavapipe in CI;
//! `MPSRT_REQUIRE_GPU=1` makes a missing adapter a failure): fused and unfused plans agree with
//! hand-computed values, views, reductions and the input-validation errors.

use mpsrt_core::{DType, ErrorKind, Place};
use mpsrt_engine::{Session, SessionOptions};
use mpsrt_graph::{BinaryOp, Dim, Graph, HostTensor, Op, ReduceKind, UnaryOp};
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

/// y = relu(x + b) * 2 ; s = sum(y, axis 1) ; t = transpose(y)
fn graph() -> Graph {
    let mut g = Graph::new();
    let x = g.add_input("x", DType::F32, vec![Dim::Sym("batch".into()), Dim::Known(3)]).unwrap();
    let b = g.add_initializer("b", HostTensor::from_f32(vec![3], &[1.0, -1.0, 0.5])).unwrap();
    let two = g.add_initializer("two", HostTensor::from_f32(vec![], &[2.0])).unwrap();
    let a = g.add_value("a", DType::F32, None).unwrap();
    let r = g.add_value("r", DType::F32, None).unwrap();
    let y = g.add_value("y", DType::F32, None).unwrap();
    let s = g.add_value("s", DType::F32, None).unwrap();
    let t = g.add_value("t", DType::F32, None).unwrap();
    g.add_node("add", Op::Binary(BinaryOp::Add), vec![x, b], vec![a]);
    g.add_node("relu", Op::Unary(UnaryOp::Relu), vec![a], vec![r]);
    g.add_node("mul", Op::Binary(BinaryOp::Mul), vec![r, two], vec![y]);
    g.add_node(
        "sum",
        Op::Reduce {
            kind: ReduceKind::Sum,
            axes: Some(vec![1]),
            keepdims: false,
            noop_with_empty_axes: false,
        },
        vec![y],
        vec![s],
    );
    g.add_node("tr", Op::Transpose { perm: None }, vec![y], vec![t]);
    g.outputs = vec![y, s, t];
    g
}

fn feeds(x: &[f32], rows: usize, place: Place) -> HashMap<String, Tensor> {
    let t = Tensor::from_slice(x, &[rows, 3], place).unwrap();
    [("x".to_string(), t)].into_iter().collect()
}

#[test]
fn fused_and_unfused_plans_match_reference() {
    let x = [1.0f32, 2.0, -3.0, -2.0, 0.5, 4.0];
    let want_y = [4.0f32, 2.0, 0.0, 0.0, 0.0, 9.0];
    for place in places() {
        for fusion in [true, false] {
            for memory_planning in [true, false] {
                let opts = SessionOptions { fusion, memory_planning };
                let s = Session::from_graph(graph(), place, opts).unwrap();
                assert_eq!(s.inputs()[0].dims_i64(), vec![-1, 3]);
                let out = s.run(&feeds(&x, 2, place)).unwrap();
                let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
                assert_eq!(names, ["y", "s", "t"]);
                assert_eq!(out[0].1.to_vec::<f32>().unwrap(), want_y, "{place} {opts:?}");
                assert_eq!(out[1].1.to_vec::<f32>().unwrap(), [6.0, 9.0]);
                assert_eq!(out[2].1.shape(), [3, 2]);
                assert_eq!(out[2].1.to_vec::<f32>().unwrap(), [4.0, 0.0, 2.0, 0.0, 0.0, 9.0]);
                // A second batch size goes through a second plan.
                let out = s.run(&feeds(&x[..3], 1, place)).unwrap();
                assert_eq!(out[1].1.to_vec::<f32>().unwrap(), [6.0]);
            }
        }
    }
}

#[test]
fn input_errors_name_expected_and_given() {
    let s = Session::from_graph(graph(), Place::Cpu, SessionOptions::default()).unwrap();
    let e = s.run(&HashMap::new()).unwrap_err();
    assert!(e.to_string().contains("missing input \"x\""), "{e}");
    let mut f = feeds(&[0.0; 6], 2, Place::Cpu);
    f.insert("z".into(), Tensor::from_slice(&[1.0f32], &[1], Place::Cpu).unwrap());
    let e = s.run(&f).unwrap_err();
    assert!(e.to_string().contains("unknown input \"z\""), "{e}");
    let bad = Tensor::from_slice(&[1i32; 6], &[2, 3], Place::Cpu).unwrap();
    let e = s.run(&[("x".to_string(), bad)].into_iter().collect()).unwrap_err();
    assert!(e.to_string().contains("expected dtype float32, given int32"), "{e}");
    let bad = Tensor::from_slice(&[1f32; 8], &[2, 4], Place::Cpu).unwrap();
    let e = s.run(&[("x".to_string(), bad)].into_iter().collect()).unwrap_err();
    assert!(e.to_string().contains("expected shape [batch, 3], given [2, 4]"), "{e}");
}

#[test]
fn unsupported_ops_fail_at_load_with_counts() {
    use mpsrt_onnx::proto::{
        GraphProto, ModelProto, NodeProto, OperatorSetIdProto, ValueInfoProto,
    };
    use prost::Message;
    let node = |op: &str, i: &str, o: &str| NodeProto {
        op_type: Some(op.into()),
        input: vec![i.into()],
        output: vec![o.into()],
        ..Default::default()
    };
    let vi = |n: &str| ValueInfoProto { name: Some(n.into()), ..Default::default() };
    // Every op of the model is listed with its count, before anything runs.
    let m = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: vec![
                node("Det", "x", "a"),
                node("Det", "a", "b"),
                node("Relu", "b", "c"),
                node("STFT", "c", "d"),
            ],
            input: vec![vi("x")],
            output: vec![vi("d")],
            ..Default::default()
        }),
        ..Default::default()
    };
    let e =
        Session::load_bytes(&m.encode_to_vec(), Place::Cpu, SessionOptions::default()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    let msg = e.to_string();
    assert!(msg.contains("Det \u{d7}2") && msg.contains("STFT \u{d7}1"), "{msg}");
    assert!(!msg.contains("Relu"), "{msg}");
}

/// A ResNet block tail: `y = Relu(Conv_a(x) + Conv_b(x))` (3×3 and 1×1, with biases) and a
/// `Conv -> LeakyRelu` branch; with fusion the second conv runs the residual Add and the Relu in
/// its epilogue. Fused and unfused plans agree on every device, and with the CPU's unfused plan.
#[test]
fn conv_epilogues_match_the_unfused_plan() {
    use mpsrt_graph::ConvAttrs;
    let mut g = Graph::new();
    let x = g
        .add_input(
            "x",
            DType::F32,
            vec![Dim::Known(2), Dim::Known(5), Dim::Known(6), Dim::Known(7)],
        )
        .unwrap();
    let vals = |n: usize, k: f32| -> Vec<f32> { (0..n).map(|i| (i as f32 * k).sin()).collect() };
    let init = |g: &mut Graph, name: &str, shape: Vec<usize>, k: f32| {
        let n = shape.iter().product();
        g.add_initializer(name, HostTensor::from_f32(shape, &vals(n, k))).unwrap()
    };
    let wa = init(&mut g, "wa", vec![8, 5, 3, 3], 0.37);
    let ba = init(&mut g, "ba", vec![8], 1.3);
    let wb = init(&mut g, "wb", vec![8, 5, 1, 1], 0.71);
    let bb = init(&mut g, "bb", vec![8], 2.1);
    let v = |g: &mut Graph, name: &str| g.add_value(name, DType::F32, None).unwrap();
    let (a, b, s, y, c, z) = (
        v(&mut g, "a"),
        v(&mut g, "b"),
        v(&mut g, "s"),
        v(&mut g, "y"),
        v(&mut g, "c"),
        v(&mut g, "z"),
    );
    let pad1 = ConvAttrs { group: 1, pads: vec![1, 1, 1, 1], ..Default::default() };
    g.add_node("conv_a", Op::Conv(pad1), vec![x, wa, ba], vec![a]);
    g.add_node(
        "conv_b",
        Op::Conv(ConvAttrs { group: 1, ..Default::default() }),
        vec![x, wb, bb],
        vec![b],
    );
    g.add_node("add", Op::Binary(BinaryOp::Add), vec![a, b], vec![s]);
    g.add_node("relu", Op::Unary(UnaryOp::Relu), vec![s], vec![y]);
    let wc = wb_c(&mut g);
    g.add_node(
        "conv_c",
        Op::Conv(ConvAttrs { group: 1, ..Default::default() }),
        vec![y, wc],
        vec![c],
    );
    g.add_node("leaky", Op::LeakyRelu { alpha: 0.1 }, vec![c], vec![z]);
    g.outputs = vec![z];
    let xv = vals(2 * 5 * 6 * 7, 0.13);
    let run = |place: Place, fusion: bool| {
        let opts = SessionOptions { fusion, memory_planning: true };
        let sess = Session::from_graph(g.clone(), place, opts).unwrap();
        let t = Tensor::from_slice(&xv, &[2, 5, 6, 7], place).unwrap();
        let out = sess.run(&[("x".to_string(), t)].into_iter().collect()).unwrap();
        out[0].1.to_vec::<f32>().unwrap()
    };
    let plan = Session::from_graph(g.clone(), Place::Cpu, SessionOptions::default())
        .unwrap()
        .plan_for(&[vec![2, 5, 6, 7]])
        .unwrap();
    let epilogues: Vec<_> = plan
        .steps
        .iter()
        .filter_map(|s| match s {
            mpsrt_graph::Step::Epilogue { add, activation, .. } => {
                Some((add.is_some(), activation.is_some()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(epilogues, [(true, true), (false, true)], "{:?}", plan.steps);
    let want = run(Place::Cpu, false);
    assert!(want.iter().any(|&v| v < 0.0) && want.iter().any(|&v| v > 0.0));
    for place in places() {
        for fusion in [true, false] {
            let got = run(place, fusion);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "{place} fusion={fusion} [{i}]: {g} vs {w}"
                );
            }
        }
    }
}

fn wb_c(g: &mut Graph) -> mpsrt_graph::ValueId {
    let w: Vec<f32> = (0..24).map(|i| (i as f32 * 0.29).cos()).collect();
    g.add_initializer("wc", HostTensor::from_f32(vec![3, 8, 1, 1], &w)).unwrap()
}

/// Caffe-style `Conv -> Mul -> Add -> Relu` (folded into the conv: one epilogue step) and a
/// pre-activation `Mul -> Add -> Mul -> Sub -> Div -> Relu` by per-channel and scalar
/// constants (merged into one `relu(x * s + t)` kernel), against the same arithmetic done op by
/// op with the tensor library on the CPU (no graph passes involved).
#[test]
fn affine_chains_fold_into_convs_and_merge() {
    use mpsrt_graph::ConvAttrs;
    let mut g = Graph::new();
    let dims = vec![Dim::Known(2), Dim::Known(5), Dim::Known(6), Dim::Known(7)];
    let x = g.add_input("x", DType::F32, dims).unwrap();
    let vals = |n: usize, k: f32| -> Vec<f32> { (0..n).map(|i| (i as f32 * k).sin()).collect() };
    let consts: Vec<(&str, Vec<usize>, Vec<f32>)> = vec![
        ("w", vec![8, 5, 3, 3], vals(360, 0.37)),
        ("k1", vec![8, 1, 1], vals(8, 0.9)),
        ("k2", vec![1, 8, 1, 1], vals(8, 1.7)),
        ("s1", vec![5, 1, 1], vals(5, 0.6)),
        ("t1", vec![5, 1, 1], vals(5, 2.3)),
        ("two", vec![], vec![2.0]),
        ("u", vec![1, 5, 1, 1], vals(5, 0.4)),
        ("d", vec![5, 1, 1], vec![0.5, -2.0, 4.0, 1.5, 3.0]),
    ];
    let mut ids = HashMap::new();
    for (name, shape, v) in &consts {
        let id = g.add_initializer(*name, HostTensor::from_f32(shape.clone(), v)).unwrap();
        ids.insert(*name, id);
    }
    let names = ["c", "m", "a", "y1", "p", "q", "r", "s", "t", "y2"];
    let v: HashMap<&str, _> =
        names.iter().map(|&n| (n, g.add_value(n, DType::F32, None).unwrap())).collect();
    let pad1 = ConvAttrs { group: 1, pads: vec![1, 1, 1, 1], ..Default::default() };
    g.add_node("conv", Op::Conv(pad1), vec![x, ids["w"]], vec![v["c"]]);
    let bin = |g: &mut Graph, op, a, b, out| g.add_node("n", Op::Binary(op), vec![a, b], vec![out]);
    bin(&mut g, BinaryOp::Mul, v["c"], ids["k1"], v["m"]);
    bin(&mut g, BinaryOp::Add, ids["k2"], v["m"], v["a"]);
    g.add_node("relu1", Op::Unary(UnaryOp::Relu), vec![v["a"]], vec![v["y1"]]);
    bin(&mut g, BinaryOp::Mul, x, ids["s1"], v["p"]);
    bin(&mut g, BinaryOp::Add, v["p"], ids["t1"], v["q"]);
    bin(&mut g, BinaryOp::Mul, ids["two"], v["q"], v["r"]);
    bin(&mut g, BinaryOp::Sub, ids["u"], v["r"], v["s"]);
    bin(&mut g, BinaryOp::Div, v["s"], ids["d"], v["t"]);
    g.add_node("relu2", Op::Unary(UnaryOp::Relu), vec![v["t"]], vec![v["y2"]]);
    g.outputs = vec![v["y1"], v["y2"]];

    let sess = Session::from_graph(g.clone(), Place::Cpu, SessionOptions::default()).unwrap();
    let plan = sess.plan_for(&[vec![2, 5, 6, 7]]).unwrap();
    let ops: Vec<String> = plan.graph.nodes.iter().map(|n| n.op.name().to_string()).collect();
    assert_eq!(ops, ["Conv", "Relu", "Mul", "Add", "Relu"], "{ops:?}");
    assert!(
        matches!(plan.steps[..], [mpsrt_graph::Step::Epilogue { .. }, mpsrt_graph::Step::Fused(_)]),
        "{:?}",
        plan.steps
    );

    // Reference: the original ops one by one, CPU tensor library.
    let t = |name: &str| {
        let (_, shape, v) = consts.iter().find(|c| c.0 == name).unwrap();
        Tensor::from_slice(v, shape, Place::Cpu).unwrap()
    };
    let xv = vals(2 * 5 * 6 * 7, 0.13);
    let xt = Tensor::from_slice(&xv, &[2, 5, 6, 7], Place::Cpu).unwrap();
    let opts = mpsrt_tensor::Conv2dOptions {
        padding: mpsrt_tensor::ConvPadding::Explicit([1; 4]),
        ..Default::default()
    };
    use mpsrt_tensor::{add, divide, multiply, relu, subtract};
    let c = mpsrt_tensor::conv2d(&xt, &t("w"), None, &opts).unwrap();
    let y1 = relu(&add(&t("k2"), &multiply(&c, &t("k1")).unwrap()).unwrap()).unwrap();
    let q = add(&multiply(&xt, &t("s1")).unwrap(), &t("t1")).unwrap();
    let s = subtract(&t("u"), &multiply(&t("two"), &q).unwrap()).unwrap();
    let y2 = relu(&divide(&s, &t("d")).unwrap()).unwrap();
    let want = [y1.to_vec::<f32>().unwrap(), y2.to_vec::<f32>().unwrap()];
    for w in &want {
        assert!(w.iter().any(|&v| v > 0.0) && w.contains(&0.0));
    }
    for place in places() {
        let sess = Session::from_graph(g.clone(), place, SessionOptions::default()).unwrap();
        let xt = Tensor::from_slice(&xv, &[2, 5, 6, 7], place).unwrap();
        let out = sess.run(&[("x".to_string(), xt)].into_iter().collect()).unwrap();
        for (k, w) in want.iter().enumerate() {
            let got = out[k].1.to_vec::<f32>().unwrap();
            for (i, (g, w)) in got.iter().zip(w).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "{place} y{} [{i}]: {g} vs {w}",
                    k + 1
                );
            }
        }
    }
}
