//! Issue 23: a linear layer's bias, residual and activation (GELU included) in the MatMul's
//! epilogue — BERT's `MatMul → Add(bias) → Gelu` and `MatMul → Add(bias) → Add(residual)` as
//! one `Step::Epilogue` each — and the cases that must stay separate steps.

mod common;

use common::{node, value};
use mpsrt_graph::*;

fn bias(g: &mut Graph, name: &str, n: usize) -> ValueId {
    let vals: Vec<f32> = (0..n).map(|i| i as f32 * 0.1).collect();
    g.add_initializer(name, HostTensor::from_f32(vec![n], &vals)).unwrap()
}

fn weight(g: &mut Graph, name: &str, k: usize, n: usize) -> ValueId {
    g.add_initializer(name, HostTensor::from_f32(vec![k, n], &vec![0.01; k * n])).unwrap()
}

#[test]
fn bert_ffn_bias_gelu_and_bias_residual_are_matmul_epilogues() {
    // h = Gelu(x·W1 + b1); y = h·W2 + b2 + x (output); z = y·W3 (output, no epilogue).
    let mut g = Graph::new();
    let x = value(&mut g, "f32[N,5,8]", 0);
    let (w1, b1) = (weight(&mut g, "w1", 8, 16), bias(&mut g, "b1", 16));
    let (w2, b2) = (weight(&mut g, "w2", 16, 8), bias(&mut g, "b2", 8));
    let w3 = weight(&mut g, "w3", 8, 4);
    let m1 = node(&mut g, "m1", Op::MatMul, vec![x, w1]);
    let a1 = node(&mut g, "a1", Op::Binary(BinaryOp::Add), vec![m1, b1]);
    let h = node(&mut g, "gelu", Op::Gelu { approximate_tanh: false }, vec![a1]);
    let m2 = node(&mut g, "m2", Op::MatMul, vec![h, w2]);
    let a2 = node(&mut g, "a2", Op::Binary(BinaryOp::Add), vec![b2, m2]);
    let y = node(&mut g, "res", Op::Binary(BinaryOp::Add), vec![x, a2]);
    let z = node(&mut g, "m3", Op::MatMul, vec![y, w3]);
    g.outputs = vec![y, z];
    let plan =
        CompiledGraph::new(g, PlanOptions::default()).unwrap().plan(&[vec![2, 5, 8]]).unwrap();
    let steps: Vec<(Vec<ValueId>, Vec<ValueId>)> =
        plan.steps.iter().map(|s| plan.step_io(s)).collect();
    assert_eq!(plan.steps.len(), 3, "{:?}", plan.steps);
    assert!(
        matches!(
            plan.steps[0],
            Step::Epilogue { bias: Some(_), add: None, activation: Some(_), .. }
        ),
        "{:?}",
        plan.steps
    );
    assert_eq!(steps[0], (vec![x, w1, b1], vec![h]));
    assert!(
        matches!(
            plan.steps[1],
            Step::Epilogue { bias: Some(_), add: Some(_), activation: None, .. }
        ),
        "{:?}",
        plan.steps
    );
    assert_eq!(steps[1], (vec![h, w2, b2, x], vec![y]));
    assert!(matches!(plan.steps[2], Step::Node(_)), "{:?}", plan.steps);
    for v in [m1, a1, m2, a2] {
        assert_eq!(plan.storage[v.0], Storage::None, "{v:?} is never stored");
    }
    assert!(plan.summary().contains("2 conv/gemm steps with an epilogue"), "{}", plan.summary());
}

#[test]
fn matmul_epilogue_needs_private_values_a_constant_bias_and_an_earlier_residual() {
    // Each MatMul reads its own input (one input's projections would be merged first).
    let mut g = Graph::new();
    let x: Vec<ValueId> = (0..3).map(|k| value(&mut g, "f32[N,8]", k)).collect();
    let v = value(&mut g, "f32[8]", 3);
    let w = weight(&mut g, "w", 8, 8);
    let b = bias(&mut g, "b", 8);
    // 1. The biased value is also a graph output: the Relu cannot join, the bias does.
    let m1 = node(&mut g, "m1", Op::MatMul, vec![x[0], w]);
    let a1 = node(&mut g, "a1", Op::Binary(BinaryOp::Add), vec![m1, b]);
    let r1 = node(&mut g, "r1", Op::Unary(UnaryOp::Relu), vec![a1]);
    // 2. A bias that is an input, not a constant: the Add stays a step of its own.
    let m2 = node(&mut g, "m2", Op::MatMul, vec![x[1], w]);
    let a2 = node(&mut g, "a2", Op::Binary(BinaryOp::Add), vec![m2, v]);
    // 3. The residual is computed after the MatMul: only the bias fuses.
    let m3 = node(&mut g, "m3", Op::MatMul, vec![x[2], w]);
    let a3 = node(&mut g, "a3", Op::Binary(BinaryOp::Add), vec![m3, b]);
    let late = node(&mut g, "late", Op::Unary(UnaryOp::Neg), vec![x[0]]);
    let y3 = node(&mut g, "y3", Op::Binary(BinaryOp::Add), vec![a3, late]);
    g.outputs = vec![a1, r1, a2, y3];
    let shapes = [vec![3, 8], vec![3, 8], vec![3, 8], vec![8]];
    let plan = CompiledGraph::new(g, PlanOptions::default()).unwrap().plan(&shapes).unwrap();
    let epis: Vec<&Step> =
        plan.steps.iter().filter(|s| matches!(s, Step::Epilogue { .. })).collect();
    assert_eq!(epis.len(), 2, "{:?}", plan.steps);
    for e in epis {
        assert!(
            matches!(e, Step::Epilogue { bias: Some((_, bv)), add: None, activation: None, .. } if *bv == b),
            "{e:?}"
        );
    }
    // The unfused Add of the input `v` and the late residual Add stay steps of their own.
    let outs: Vec<ValueId> = plan.steps.iter().flat_map(|s| plan.step_io(s).1).collect();
    for v in [a1, r1, a2, y3] {
        assert!(outs.contains(&v), "{v:?} has a step");
    }
}

#[test]
fn gelu_is_no_conv_epilogue() {
    // Conv → Gelu: the conv kernels have no GELU code, so the Gelu stays a step.
    let mut g = Graph::new();
    let x = value(&mut g, "f32[N,2,4,4]", 0);
    let w = g.add_initializer("w", HostTensor::from_f32(vec![2, 2, 1, 1], &[0.5; 4])).unwrap();
    let c =
        node(&mut g, "conv", Op::Conv(ConvAttrs { group: 1, ..Default::default() }), vec![x, w]);
    let y = node(&mut g, "gelu", Op::Gelu { approximate_tanh: false }, vec![c]);
    g.outputs = vec![y];
    let plan =
        CompiledGraph::new(g, PlanOptions::default()).unwrap().plan(&[vec![1, 2, 4, 4]]).unwrap();
    assert!(!plan.steps.iter().any(|s| matches!(s, Step::Epilogue { .. })), "{:?}", plan.steps);
}

#[test]
fn scalar_scales_of_both_matmul_operands_move_past_the_product() {
    // s = MatMul(q·0.5, 0.25·k) + mask → MatMul(q, k)·0.125 + mask: one fused Mul+Add step.
    let mut g = Graph::new();
    let q = value(&mut g, "f32[N,2,4,3]", 0);
    let k = value(&mut g, "f32[N,2,3,4]", 1);
    let mask = value(&mut g, "f32[N,1,1,4]", 2);
    let half = g.add_initializer("half", HostTensor::from_f32(vec![], &[0.5])).unwrap();
    let quarter = g.add_initializer("quarter", HostTensor::from_f32(vec![1], &[0.25])).unwrap();
    let qs = node(&mut g, "qs", Op::Binary(BinaryOp::Mul), vec![q, half]);
    let ks = node(&mut g, "ks", Op::Binary(BinaryOp::Mul), vec![quarter, k]);
    let s = node(&mut g, "scores", Op::MatMul, vec![qs, ks]);
    let y = node(&mut g, "masked", Op::Binary(BinaryOp::Add), vec![s, mask]);
    g.outputs = vec![y];
    let shapes = [vec![2, 2, 4, 3], vec![2, 2, 3, 4], vec![2, 1, 1, 4]];
    let plan = CompiledGraph::new(g, PlanOptions::default()).unwrap().plan(&shapes).unwrap();
    let ops: Vec<String> = plan.graph.nodes.iter().map(|n| n.op.name().to_string()).collect();
    assert_eq!(ops, ["MatMul", "Mul", "Add"], "{:?}", plan.graph.nodes);
    let mm = &plan.graph.nodes[0];
    assert_eq!(mm.inputs, vec![q, k], "the product reads the unscaled operands");
    let c = plan.graph.nodes[1].inputs[1];
    assert_eq!(plan.graph.initializers[&c].to_f64_vec(), vec![0.125]);
    assert_eq!(plan.steps.len(), 2, "MatMul, then Mul + Add fused: {:?}", plan.steps);
    assert!(matches!(&plan.steps[1], Step::Fused(f) if f.nodes.len() == 2), "{:?}", plan.steps);
}
