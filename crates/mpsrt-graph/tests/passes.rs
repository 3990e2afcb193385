//! Constant folding, dead-node elimination, fusion grouping, memory planning and the plan cache.

mod common;

use common::{node, value};
use mpsrt_core::DType;
use mpsrt_graph::passes::{dce, fusion, simplify};
use mpsrt_graph::*;
use std::sync::Arc;

/// `y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1]))`, the exporter idiom for
/// "flatten keeping the batch".
fn reshape_chain() -> Graph {
    let mut g = Graph::new();
    let x = value(&mut g, "f32[N,3,4,4]", 0);
    let idx = value(&mut g, "#0", 1);
    let minus1 = value(&mut g, "=-1", 2);
    let s = node(&mut g, "shape", Op::Shape { start: 0, end: None }, vec![x]);
    let n = node(&mut g, "gather", Op::Gather { axis: 0 }, vec![s, idx]);
    let n1 = node(&mut g, "unsq", Op::Unsqueeze { axes: vec![0] }, vec![n]);
    let target = node(&mut g, "concat", Op::Concat { axis: 0 }, vec![n1, minus1]);
    let y = node(&mut g, "reshape", Op::Reshape { allowzero: false }, vec![x, target]);
    g.outputs = vec![y];
    g
}

#[test]
fn shape_chain_folds_to_a_constant_once_shapes_are_concrete() {
    let mut g = reshape_chain();
    // Symbolic: nothing folds (Shape of [N,3,4,4] is not constant), the rank is still known.
    propagate(&mut g, true).unwrap();
    assert_eq!(g.nodes.len(), 5);
    assert_eq!(g.value(g.outputs[0]).shape.as_ref().unwrap().len(), 2);

    let s = specialize(&g, &[vec![2, 3, 4, 4]]).unwrap();
    let ops: Vec<String> = s.nodes.iter().map(|n| n.op.name()).collect();
    assert_eq!(ops, ["Reshape"], "only the reshape survives");
    let target =
        s.initializers.get(&s.nodes[0].inputs[1]).expect("shape input folded to an initializer");
    assert_eq!(target.to_i64_vec(), vec![2, -1]);
    assert_eq!(shape_str(s.value(s.outputs[0]).shape.as_ref().unwrap()), "[2, 48]");
    // Initializers only the folded nodes used are gone.
    assert_eq!(s.initializers.len(), 1);
}

#[test]
fn specialize_checks_inputs() {
    let g = reshape_chain();
    let err = specialize(&g, &[vec![2, 4, 4, 4]]).unwrap_err().to_string();
    assert!(err.contains("expects shape [N, 3, 4, 4], got [2, 4, 4, 4]"), "{err}");
    let err = specialize(&g, &[vec![2, 3, 4]]).unwrap_err().to_string();
    assert!(err.contains("expects shape"), "{err}");

    let mut two = Graph::new();
    let a = value(&mut two, "f32[B,4]", 0);
    let b = value(&mut two, "f32[B,4]", 1);
    let y = node(&mut two, "add", Op::Binary(BinaryOp::Add), vec![a, b]);
    two.outputs = vec![y];
    let err = specialize(&two, &[vec![2, 4], vec![3, 4]]).unwrap_err().to_string();
    assert!(err.contains("dimension \"B\" is 2 in input \"in0\" but 3 in input \"in1\""), "{err}");
}

#[test]
fn dead_nodes_and_identities_are_removed() {
    let mut g = Graph::new();
    let x = value(&mut g, "f32[4]", 0);
    let w = g.add_initializer("unused_w", HostTensor::from_f32(vec![4], &[1.0; 4])).unwrap();
    let dead = node(&mut g, "dead", Op::Binary(BinaryOp::Mul), vec![x, w]);
    let _dead2 = node(&mut g, "dead2", Op::Unary(UnaryOp::Exp), vec![dead]);
    let id = node(&mut g, "id", Op::Identity, vec![x]);
    let drop = node(&mut g, "drop", Op::Dropout, vec![id]);
    let y = node(&mut g, "relu", Op::Unary(UnaryOp::Relu), vec![drop]);
    g.outputs = vec![y];
    assert_eq!(simplify::remove_identities(&mut g), 2);
    assert_eq!(dce::eliminate_dead_nodes(&mut g), 2);
    assert!(g.initializers.is_empty());
    assert_eq!(g.nodes.len(), 1);
    assert_eq!(g.nodes[0].inputs, vec![x], "relu reads x directly");
    g.validate().unwrap();
}

#[test]
fn elementwise_fusion_groups() {
    let mut g = Graph::new();
    let x = value(&mut g, "f32[2,4]", 0);
    let c = value(&mut g, "f32[4]", 1);
    let v = value(&mut g, "f32[1,4]", 2);
    // Chain: Mul -> Add -> Relu (one group).
    let m = node(&mut g, "mul", Op::Binary(BinaryOp::Mul), vec![x, c]);
    let a = node(&mut g, "add", Op::Binary(BinaryOp::Add), vec![m, c]);
    let r = node(&mut g, "relu", Op::Unary(UnaryOp::Relu), vec![a]);
    // Tree: e has two consumers so it stays alone; Neg, Abs and their Add fuse.
    let e = node(&mut g, "exp", Op::Unary(UnaryOp::Exp), vec![x]);
    let n = node(&mut g, "neg", Op::Unary(UnaryOp::Neg), vec![e]);
    let ab = node(&mut g, "abs", Op::Unary(UnaryOp::Abs), vec![e]);
    let t = node(&mut g, "sum", Op::Binary(BinaryOp::Add), vec![n, ab]);
    // Broadcast: Sigmoid of a [1,4] value feeding a [2,4] add fuses (recomputed per output
    // element; squeeze-excitation's gate).
    let s = node(&mut g, "sig", Op::Unary(UnaryOp::Sigmoid), vec![v]);
    let b = node(&mut g, "badd", Op::Binary(BinaryOp::Add), vec![s, x]);
    // A non-elementwise op breaks chains.
    let sm = node(&mut g, "softmax", Op::Softmax { axis: -1 }, vec![r]);
    let out = node(&mut g, "tanh", Op::Unary(UnaryOp::Tanh), vec![sm]);
    g.outputs = vec![t, b, out];
    propagate(&mut g, false).unwrap();
    let groups = fusion::fuse_elementwise(&g, &[]);
    let names = |f: &FusedElementwise| {
        f.nodes.iter().map(|&i| g.nodes[i].name.as_str()).collect::<Vec<_>>()
    };
    assert_eq!(groups.len(), 3, "{groups:?}");
    assert_eq!(names(&groups[0]), ["mul", "add", "relu"]);
    assert_eq!(groups[0].inputs, vec![x, c]);
    assert_eq!(groups[0].output, r);
    assert_eq!(names(&groups[1]), ["neg", "abs", "sum"]);
    assert_eq!(groups[1].inputs, vec![e]);
    assert_eq!(groups[1].output, t);
    assert_eq!(names(&groups[2]), ["sig", "badd"]);
    assert_eq!(groups[2].inputs, vec![v, x]);
    assert_eq!(groups[2].output, b);
}

#[test]
fn epilogue_candidates_find_bias_and_activation() {
    let mut g = Graph::new();
    let x = value(&mut g, "f32[2,8]", 0);
    let w = g.add_initializer("w", HostTensor::from_f32(vec![8, 4], &[0.5; 32])).unwrap();
    let bias = g.add_initializer("b", HostTensor::from_f32(vec![4], &[0.1; 4])).unwrap();
    let mm = node(&mut g, "mm", Op::MatMul, vec![x, w]);
    let add = node(&mut g, "bias", Op::Binary(BinaryOp::Add), vec![mm, bias]);
    let y = node(&mut g, "gelu", Op::Gelu { approximate_tanh: false }, vec![add]);
    g.outputs = vec![y];
    propagate(&mut g, false).unwrap();
    let e = fusion::epilogue_candidates(&g);
    assert_eq!(e, vec![Epilogue { anchor: 0, bias: Some((1, bias)), activation: Some(2) }]);
    assert_eq!(e[0].output(&g), y);
}

#[test]
fn slot_assignment_reuses_dead_buffers() {
    let l = |bytes, first, last| Lifetime { bytes, first, last };
    // A linear chain: each value dies when the next is written, so two slots ping-pong.
    let chain = [l(100, 0, 1), l(100, 1, 2), l(100, 2, 3), l(100, 3, 3)];
    let a = assign_slots(&chain, true);
    assert_eq!(a.slot_of, vec![0, 1, 0, 1]);
    assert_eq!(a.stats.peak_with_reuse, 2 * 112, "sizes round up to 16 bytes");
    assert_eq!(a.stats.peak_without_reuse, 4 * 112);
    assert_eq!(a.stats.live_peak, 2 * 112);
    let none = assign_slots(&chain, false);
    assert_eq!(none.slot_of, vec![0, 1, 2, 3]);
    assert_eq!(none.stats.peak_with_reuse, none.stats.peak_without_reuse);

    // Best fit picks the smallest free slot that fits; a too-small free slot grows.
    let mixed = [l(1000, 0, 2), l(64, 1, 2), l(48, 3, 4), l(2000, 3, 4)];
    let a = assign_slots(&mixed, true);
    assert_eq!(a.slot_of, vec![0, 1, 1, 0]);
    assert_eq!(a.slot_bytes, vec![2000, 64]);
    assert_eq!(a.stats.peak_without_reuse, 1008 + 64 + 48 + 2000);
}

#[test]
fn plan_walk_and_storage() {
    let mut g = Graph::new();
    let x = value(&mut g, "f32[B,16]", 0);
    let w = g.add_initializer("w", HostTensor::from_f32(vec![16, 16], &[0.0; 256])).unwrap();
    let mut cur = x;
    for i in 0..4 {
        let mm = node(&mut g, &format!("mm{i}"), Op::MatMul, vec![cur, w]);
        let r = node(&mut g, &format!("relu{i}"), Op::Unary(UnaryOp::Relu), vec![mm]);
        let e = node(&mut g, &format!("exp{i}"), Op::Unary(UnaryOp::Exp), vec![r]);
        cur = e;
    }
    g.outputs = vec![cur];
    let compiled = CompiledGraph::new(g, PlanOptions::default()).unwrap();
    let plan = compiled.plan(&[vec![8, 16]]).unwrap();
    // 4 matmuls + 4 fused relu/exp groups.
    assert_eq!(plan.steps.len(), 8);
    assert!(plan.init_steps.is_empty());
    let mut written = Vec::new();
    for step in &plan.steps {
        let (ins, outs) = plan.step_io(step);
        for v in ins {
            assert_ne!(plan.storage[v.0], Storage::None, "every read value has storage");
        }
        written.extend(outs);
    }
    assert_eq!(plan.storage[x.0], Storage::Input(0));
    assert_eq!(plan.storage[w.0], Storage::Constant);
    assert_eq!(plan.storage[plan.graph.outputs[0].0], Storage::Output(0));
    let slots: std::collections::BTreeSet<_> = written
        .iter()
        .filter_map(|v| if let Storage::Slot(s) = plan.storage[v.0] { Some(s) } else { None })
        .collect();
    assert_eq!(slots.len(), 2, "7 intermediates of 512 bytes ping-pong between two slots");
    assert_eq!(plan.memory.peak_with_reuse, 2 * 512);
    assert_eq!(plan.memory.peak_without_reuse, 7 * 512);
}

#[test]
fn plan_cache_is_bounded_lru() {
    let mut g = Graph::new();
    let x = value(&mut g, "f32[B,4]", 0);
    let y = node(&mut g, "relu", Op::Unary(UnaryOp::Relu), vec![x]);
    g.outputs = vec![y];
    let compiled = CompiledGraph::new(g, PlanOptions::default()).unwrap();
    let p1 = compiled.plan(&[vec![1, 4]]).unwrap();
    assert!(Arc::ptr_eq(&p1, &compiled.plan(&[vec![1, 4]]).unwrap()));
    for b in 2..=20 {
        compiled.plan(&[vec![b, 4]]).unwrap();
    }
    assert_eq!(compiled.cached_plans(), plan::DEFAULT_PLAN_CACHE);
    assert!(
        !Arc::ptr_eq(&p1, &compiled.plan(&[vec![1, 4]]).unwrap()),
        "the oldest plan was evicted"
    );
    assert_eq!(compiled.plan(&[vec![7, 4]]).unwrap().shape(y), vec![7, 4]);
    let _ = DType::F32;
}

#[test]
fn constant_only_nodes_are_hoisted_into_init_steps() {
    let mut g = Graph::new();
    let x = value(&mut g, "f32[1,300,300]", 0);
    let shape = value(&mut g, "=300,300", 1);
    // 90,000 elements: above the fold limit, so the weight is built on the device, once.
    let w = node(
        &mut g,
        "weights",
        Op::ConstantOfShape(HostTensor::from_f32(vec![], &[0.5])),
        vec![shape],
    );
    let y = node(&mut g, "mm", Op::MatMul, vec![x, w]);
    g.outputs = vec![y];
    let plan =
        CompiledGraph::new(g, PlanOptions::default()).unwrap().plan(&[vec![1, 300, 300]]).unwrap();
    assert_eq!(plan.init_steps, vec![Step::Node(0)]);
    assert_eq!(plan.steps, vec![Step::Node(1)]);
    assert_eq!(plan.storage[w.0], Storage::Persistent);
    assert_eq!(plan.memory.persistent, 300 * 300 * 4);
}

#[test]
fn runtime_shape_parameters_are_value_inputs_bound_at_planning() {
    // y = Reshape(x, target) with `target` a graph input: the plan depends on its value.
    let mut g = Graph::new();
    let x = value(&mut g, "f32[2,3,4]", 0);
    let target = value(&mut g, "i64[2]", 1);
    let y = node(&mut g, "reshape", Op::Reshape { allowzero: false }, vec![x, target]);
    g.outputs = vec![y];
    let compiled = CompiledGraph::new(g, PlanOptions::default()).unwrap();
    assert_eq!(compiled.value_inputs(), &[1]);
    let err = compiled.plan(&[vec![2, 3, 4], vec![2]]).unwrap_err().to_string();
    assert!(err.contains("depend on the values of inputs [\"in1\"]"), "{err}");
    let a = compiled
        .plan_with_values(&[vec![2, 3, 4], vec![2]], &[HostTensor::from_i64(vec![2], &[6, -1])])
        .unwrap();
    let b = compiled
        .plan_with_values(&[vec![2, 3, 4], vec![2]], &[HostTensor::from_i64(vec![2], &[-1, 3])])
        .unwrap();
    assert_eq!(a.shape(y), vec![6, 4]);
    assert_eq!(b.shape(y), vec![8, 3]);
    assert_eq!(compiled.cached_plans(), 2, "plans are keyed by the bound values too");
}

#[test]
fn parameter_inputs_are_canonicalized_into_attributes() {
    // ReduceSum with axes as a runtime input, and CastLike: both become canonical ops.
    let mut g = Graph::new();
    let x = value(&mut g, "f32[2,3,4]", 0);
    let axes = value(&mut g, "i64[1]", 1);
    let like = value(&mut g, "f16[1]", 2);
    let sum = Op::Reduce {
        kind: ReduceKind::Sum,
        axes: None,
        keepdims: false,
        noop_with_empty_axes: false,
    };
    let r = node(&mut g, "sum", sum, vec![x, axes]);
    let c = node(&mut g, "castlike", Op::CastLike, vec![r, like]);
    g.outputs = vec![c];
    let compiled = CompiledGraph::new(g, PlanOptions::default()).unwrap();
    assert_eq!(compiled.value_inputs(), &[1], "axes decide the reduced shape");
    let plan = compiled
        .plan_with_values(
            &[vec![2, 3, 4], vec![1], vec![1]],
            &[HostTensor::from_i64(vec![1], &[1])],
        )
        .unwrap();
    let ops: Vec<&Op> = plan.graph.nodes.iter().map(|n| &n.op).collect();
    let want_sum = Op::Reduce {
        kind: ReduceKind::Sum,
        axes: Some(vec![1]),
        keepdims: false,
        noop_with_empty_axes: false,
    };
    assert_eq!(ops, vec![&want_sum, &Op::Cast { to: DType::F16 }]);
    assert!(plan.graph.nodes.iter().all(|n| n.inputs.len() == 1), "parameter inputs dropped");
    assert_eq!(plan.shape(c), vec![2, 4]);
    assert_eq!(plan.graph.value(c).dtype, DType::F16);
}

#[test]
fn batchnorm_folds_into_a_constant_conv() {
    let mut g = Graph::new();
    let x = value(&mut g, "f32[N,1,4,4]", 0);
    let c = |g: &mut Graph, name: &str, v: &[f32], shape: Vec<usize>| {
        g.add_initializer(name, HostTensor::from_f32(shape, v)).unwrap()
    };
    let w = c(&mut g, "w", &[1.0, 1.0], vec![2, 1, 1, 1]);
    let gamma = c(&mut g, "gamma", &[4.0, 3.0], vec![2]);
    let beta = c(&mut g, "beta", &[0.5, 0.0], vec![2]);
    let mean = c(&mut g, "mean", &[1.0, 0.0], vec![2]);
    let var = c(&mut g, "var", &[3.0, 8.0], vec![2]);
    let conv =
        node(&mut g, "conv", Op::Conv(ConvAttrs { group: 1, ..Default::default() }), vec![x, w]);
    let y = node(
        &mut g,
        "bn",
        Op::BatchNormalization { epsilon: 1.0 },
        vec![conv, gamma, beta, mean, var],
    );
    g.outputs = vec![y];
    let compiled = CompiledGraph::new(g, PlanOptions::default()).unwrap();
    let g = compiled.graph();
    assert_eq!(g.nodes.len(), 1);
    let n = &g.nodes[0];
    assert_eq!((n.op.name(), n.outputs[0]), ("Conv".to_string(), y));
    // scale = gamma / sqrt(var + eps) = [2, 1]; bias' = (0 - mean) * scale + beta = [-1.5, 0].
    assert_eq!(g.initializers[&n.inputs[1]].to_f64_vec(), vec![2.0, 1.0]);
    assert_eq!(g.initializers[&n.inputs[2]].to_f64_vec(), vec![-1.5, 0.0]);
    assert_eq!(g.initializers.len(), 2, "BN parameters and the old weight are gone");
    let plan = compiled.plan(&[vec![3, 1, 4, 4]]).unwrap();
    assert_eq!(plan.shape(y), vec![3, 2, 4, 4]);
}

#[test]
fn batchnorm_folds_into_a_conv_with_computed_weights() {
    // Light ONNX models build conv weights with ConstantOfShape (too large to fold): the BN
    // still folds, through a Mul on the weight that the planner runs once.
    let mut g = Graph::new();
    let x = value(&mut g, "f32[N,64,4,4]", 0);
    let shape = value(&mut g, "=128,64,3,3", 1);
    let w = node(
        &mut g,
        "weights",
        Op::ConstantOfShape(HostTensor::from_f32(vec![], &[0.5])),
        vec![shape],
    );
    let c = |g: &mut Graph, name: &str, v: f32| {
        g.add_initializer(name, HostTensor::from_f32(vec![128], &[v; 128])).unwrap()
    };
    let (gamma, beta, mean, var) = (
        c(&mut g, "gamma", 2.0),
        c(&mut g, "beta", 1.0),
        c(&mut g, "mean", 0.5),
        c(&mut g, "var", 3.0),
    );
    let conv =
        node(&mut g, "conv", Op::Conv(ConvAttrs { group: 1, ..Default::default() }), vec![x, w]);
    let y = node(
        &mut g,
        "bn",
        Op::BatchNormalization { epsilon: 1.0 },
        vec![conv, gamma, beta, mean, var],
    );
    g.outputs = vec![y];
    let compiled = CompiledGraph::new(g, PlanOptions::default()).unwrap();
    let g = compiled.graph();
    let names: Vec<String> = g.nodes.iter().map(|n| n.op.name().to_string()).collect();
    assert_eq!(names, ["ConstantOfShape", "Mul", "Conv"]);
    let (mul, conv) = (&g.nodes[1], &g.nodes[2]);
    assert_eq!((mul.inputs[0], conv.inputs[1], conv.outputs[0]), (w, mul.outputs[0], y));
    // scale = 2 / sqrt(3 + 1) = 1 per channel, shaped [128, 1, 1, 1]; bias' = -0.5 * 1 + 1.
    let s = &g.initializers[&mul.inputs[1]];
    assert_eq!((s.shape.clone(), s.to_f64_vec()[0]), (vec![128, 1, 1, 1], 1.0));
    assert_eq!(g.initializers[&conv.inputs[2]].to_f64_vec(), vec![0.5; 128]);
    let plan = compiled.plan(&[vec![1, 64, 4, 4]]).unwrap();
    assert_eq!(plan.init_steps, vec![Step::Node(0), Step::Node(1)], "weights built once");
    assert_eq!(plan.steps, vec![Step::Node(2)]);
    // Only the scaled weight outlives the init steps.
    assert_eq!(plan.storage[w.0], Storage::None);
    assert_eq!(plan.storage[mul.outputs[0].0], Storage::Persistent);
    assert_eq!(plan.memory.persistent, 128 * 64 * 9 * 4);
}

#[test]
fn other_batchnorms_become_a_fusable_affine() {
    // x -> BN (constant parameters, no producing conv) -> Relu: Mul + Add + Relu, one kernel.
    let mut g = Graph::new();
    let x = value(&mut g, "f32[N,2,3,3]", 0);
    let c = |g: &mut Graph, name: &str, v: &[f32]| {
        g.add_initializer(name, HostTensor::from_f32(vec![2], v)).unwrap()
    };
    let gamma = c(&mut g, "gamma", &[4.0, 3.0]);
    let beta = c(&mut g, "beta", &[0.5, 0.0]);
    let mean = c(&mut g, "mean", &[1.0, 0.0]);
    let var = c(&mut g, "var", &[3.0, 8.0]);
    let bn = node(
        &mut g,
        "bn",
        Op::BatchNormalization { epsilon: 1.0 },
        vec![x, gamma, beta, mean, var],
    );
    let y = node(&mut g, "relu", Op::Unary(UnaryOp::Relu), vec![bn]);
    g.outputs = vec![y];
    let compiled = CompiledGraph::new(g, PlanOptions::default()).unwrap();
    let g = compiled.graph();
    let names: Vec<String> = g.nodes.iter().map(|n| n.op.name().to_string()).collect();
    assert_eq!(names, ["Mul", "Add", "Relu"]);
    // s = gamma / sqrt(var + eps) = [2, 1], t = beta - mean * s = [-1.5, 0], shaped [2, 1, 1].
    let s = &g.initializers[&g.nodes[0].inputs[1]];
    let t = &g.initializers[&g.nodes[1].inputs[1]];
    assert_eq!((s.shape.clone(), s.to_f64_vec()), (vec![2, 1, 1], vec![2.0, 1.0]));
    assert_eq!((t.shape.clone(), t.to_f64_vec()), (vec![2, 1, 1], vec![-1.5, 0.0]));
    assert_eq!(g.nodes[1].outputs[0], bn, "the Add writes the BN's output value");
    let plan = compiled.plan(&[vec![1, 2, 3, 3]]).unwrap();
    assert!(matches!(plan.steps[..], [Step::Fused(_)]), "{:?}", plan.steps);
    // Off with fold_batchnorm = false.
    let mut g2 = Graph::new();
    let x = value(&mut g2, "f32[N,2]", 0);
    let p: Vec<_> = ["g", "b", "m", "v"]
        .iter()
        .map(|&n| g2.add_initializer(n, HostTensor::from_f32(vec![2], &[1.0, 1.0])).unwrap())
        .collect();
    let y = node(
        &mut g2,
        "bn",
        Op::BatchNormalization { epsilon: 1e-5 },
        vec![x, p[0], p[1], p[2], p[3]],
    );
    g2.outputs = vec![y];
    let off = PlanOptions { fold_batchnorm: false, ..PlanOptions::default() };
    let compiled = CompiledGraph::new(g2, off).unwrap();
    assert_eq!(compiled.graph().nodes[0].op.name(), "BatchNormalization");
}

#[test]
fn executors_can_reject_unsupported_ops_up_front() {
    let mut g = Graph::new();
    let x = value(&mut g, "f32[4]", 0);
    let a = node(&mut g, "a", Op::Unary(UnaryOp::Erf), vec![x]);
    let b = node(&mut g, "b", Op::Unary(UnaryOp::Erf), vec![a]);
    let c = node(&mut g, "c", Op::Lrn { size: 3, alpha: 1e-4, beta: 0.75, bias: 1.0 }, vec![b]);
    let y = node(&mut g, "d", Op::Unary(UnaryOp::Relu), vec![c]);
    g.outputs = vec![y];
    let err = g.check_ops("gpu", |op| matches!(op, Op::Unary(UnaryOp::Relu))).unwrap_err();
    assert_eq!(
        err.to_string(),
        "[gpu] model uses 2 op types not supported here: Erf \u{d7}2, Lrn \u{d7}1"
    );
    g.check_ops("cpu", |_| true).unwrap();
}

#[test]
fn conv_gemm_activations_run_in_the_epilogue_step() {
    // g1 = Gemm(x, w) -> Relu -> Exp (output); g2 = Gemm(x, w) is itself an output, so its
    // LeakyRelu stays a separate step; Clip without an upper bound is not an epilogue.
    let mut g = Graph::new();
    let x = value(&mut g, "f32[B,16]", 0);
    let w = g.add_initializer("w", HostTensor::from_f32(vec![16, 16], &[0.0; 256])).unwrap();
    let gemm = || Op::Gemm { alpha: 1.0, beta: 1.0, trans_a: false, trans_b: false };
    let g1 = node(&mut g, "g1", gemm(), vec![x, w]);
    let r = node(&mut g, "relu", Op::Unary(UnaryOp::Relu), vec![g1]);
    let e = node(&mut g, "exp", Op::Unary(UnaryOp::Exp), vec![r]);
    let g2 = node(&mut g, "g2", gemm(), vec![x, w]);
    let l = node(&mut g, "leaky", Op::LeakyRelu { alpha: 0.1 }, vec![g2]);
    let g3 = node(&mut g, "g3", gemm(), vec![x, w]);
    let c = node(&mut g, "clip", Op::Clip { min: Some(0.0), max: None }, vec![g3]);
    g.outputs = vec![e, g2, l, c];
    let plan = CompiledGraph::new(g.clone(), PlanOptions::default())
        .unwrap()
        .plan(&[vec![2, 16]])
        .unwrap();
    assert_eq!(
        plan.steps,
        vec![
            Step::Epilogue { anchor: 0, bias: None, add: None, activation: Some(1) },
            Step::Node(2),
            Step::Node(3),
            Step::Node(4),
            Step::Node(5),
            Step::Node(6),
        ]
    );
    assert_eq!(plan.storage[g1.0], Storage::None, "the anchor's output is never stored");
    assert_eq!(plan.step_io(&plan.steps[0]), (vec![x, w], vec![r]));
    assert!(plan.summary().contains("1 conv/gemm steps with an epilogue"), "{}", plan.summary());
    let off = PlanOptions { fuse_epilogues: false, ..PlanOptions::default() };
    let plan = CompiledGraph::new(g, off).unwrap().plan(&[vec![2, 16]]).unwrap();
    assert!(!plan.steps.iter().any(|s| matches!(s, Step::Epilogue { .. })), "{:?}", plan.steps);
}

#[test]
fn conv_residual_add_and_relu_run_in_the_epilogue_step() {
    // ResNet block tail: a = Conv(x); b = Conv(x) (the shortcut, computed after a);
    // y = Relu(Add(a, b)). The Add can only anchor on b's conv (a exists before it).
    let mut g = Graph::new();
    let x = value(&mut g, "f32[N,4,5,5]", 0);
    let w = g.add_initializer("w", HostTensor::from_f32(vec![4, 4, 1, 1], &[0.5; 16])).unwrap();
    let conv = || Op::Conv(ConvAttrs { group: 1, ..Default::default() });
    let a = node(&mut g, "conv_a", conv(), vec![x, w]);
    let b = node(&mut g, "conv_b", conv(), vec![x, w]);
    let s = node(&mut g, "add", Op::Binary(BinaryOp::Add), vec![a, b]);
    let y = node(&mut g, "relu", Op::Unary(UnaryOp::Relu), vec![s]);
    g.outputs = vec![y];
    let plan =
        CompiledGraph::new(g, PlanOptions::default()).unwrap().plan(&[vec![1, 4, 5, 5]]).unwrap();
    assert_eq!(
        plan.steps,
        vec![
            Step::Node(0),
            Step::Epilogue { anchor: 1, bias: None, add: Some((2, a)), activation: Some(3) }
        ]
    );
    assert_eq!(plan.step_io(&plan.steps[1]), (vec![x, w, a], vec![y]));
    assert_eq!((plan.storage[b.0], plan.storage[s.0]), (Storage::None, Storage::None));
    assert!(matches!(plan.storage[a.0], Storage::Slot(_)), "the residual is stored");
}

#[test]
fn affine_chains_merge_and_fold_into_the_conv() {
    // Conv (ConstantOfShape weights) -> BN -> Mul -> Add -> Relu, the Caffe-converted pattern:
    // BN and the Mul/Add scale layer all end up in the conv, the Relu in its epilogue.
    let mut g = Graph::new();
    // A weight too large to fold at load (4·3·80·80 > FOLD_LIMIT elements).
    let x = value(&mut g, "f32[N,3,80,80]", 0);
    let shape = value(&mut g, "=4,3,80,80", 1);
    let w =
        node(&mut g, "w", Op::ConstantOfShape(HostTensor::from_f32(vec![], &[0.5])), vec![shape]);
    let c = |g: &mut Graph, name: &str, shape: Vec<usize>, v: &[f32]| {
        g.add_initializer(name, HostTensor::from_f32(shape, v)).unwrap()
    };
    let bn: Vec<_> =
        ["g", "b", "m", "v"].iter().map(|n| c(&mut g, n, vec![4], &[1.0, 1.0, 0.0, 3.0])).collect();
    let k1 = c(&mut g, "k1", vec![4, 1, 1], &[2.0, 3.0, 4.0, 5.0]);
    let k2 = c(&mut g, "k2", vec![1, 4, 1, 1], &[1.0, 0.0, -1.0, 0.5]);
    let conv =
        node(&mut g, "conv", Op::Conv(ConvAttrs { group: 1, ..Default::default() }), vec![x, w]);
    let y = node(
        &mut g,
        "bn",
        Op::BatchNormalization { epsilon: 1.0 },
        vec![conv, bn[0], bn[1], bn[2], bn[3]],
    );
    let m = node(&mut g, "mul", Op::Binary(BinaryOp::Mul), vec![y, k1]);
    let a = node(&mut g, "add", Op::Binary(BinaryOp::Add), vec![m, k2]);
    let r = node(&mut g, "relu", Op::Unary(UnaryOp::Relu), vec![a]);
    g.outputs = vec![r];
    let compiled = CompiledGraph::new(g, PlanOptions::default()).unwrap();
    let g = compiled.graph();
    let names: Vec<String> = g.nodes.iter().map(|n| n.op.name().to_string()).collect();
    assert_eq!(names, ["ConstantOfShape", "Mul", "Mul", "Conv", "Relu"]);
    let conv = &g.nodes[3];
    assert_eq!(conv.outputs[0], a, "the conv writes the chain's value");
    // gamma = beta = mean = var = p per channel: BN scale s = p / sqrt(p + 1), bias
    // p - p * s (stored as f32 by the BN fold), then * k1 + k2.
    let p = [1.0f64, 1.0, 0.0, 3.0];
    let want_b: Vec<f64> = (0..4)
        .map(|i| (p[i] - p[i] * (p[i] / (p[i] + 1.0).sqrt())) as f32 as f64)
        .enumerate()
        .map(|(i, b)| (b * [2.0, 3.0, 4.0, 5.0][i] + [1.0, 0.0, -1.0, 0.5][i]) as f32 as f64)
        .collect();
    assert_eq!(g.initializers[&conv.inputs[2]].to_f64_vec(), want_b);
    let scale2 = &g.initializers[&g.nodes[2].inputs[1]];
    assert_eq!(
        (scale2.shape.clone(), scale2.to_f64_vec()),
        (vec![4, 1, 1, 1], vec![2.0, 3.0, 4.0, 5.0])
    );
    let plan = compiled.plan(&[vec![1, 3, 80, 80]]).unwrap();
    assert!(
        matches!(plan.steps[..], [Step::Epilogue { activation: Some(_), .. }]),
        "{:?}",
        plan.steps
    );
}

#[test]
fn affine_chains_merge_only_per_channel_private_constants() {
    // Each case: x (f32[N,3,4,5]) -> op1(k1) -> op2(k2) -> output; whether it becomes one
    // Mul + Add (`merged`) or stays as built.
    let k3 = (vec![3, 1, 1], vec![2.0f32, 3.0, 4.0]);
    let scalar = (vec![], vec![0.5f32]);
    let spatial = (vec![4, 5], vec![1.5f32; 20]);
    let zero = (vec![3, 1, 1], vec![1.0f32, 0.0, 2.0]);
    type K = (Vec<usize>, Vec<f32>);
    let cases: Vec<(&str, BinaryOp, K, BinaryOp, K, bool, bool)> = vec![
        (
            "mul then add, per channel",
            BinaryOp::Mul,
            k3.clone(),
            BinaryOp::Add,
            k3.clone(),
            false,
            true,
        ),
        (
            "scalar then per channel",
            BinaryOp::Sub,
            scalar.clone(),
            BinaryOp::Div,
            k3.clone(),
            false,
            true,
        ),
        ("spatial constant", BinaryOp::Mul, spatial, BinaryOp::Add, k3.clone(), false, false),
        ("division by zero", BinaryOp::Add, k3.clone(), BinaryOp::Div, zero, false, false),
        (
            "intermediate also an output",
            BinaryOp::Mul,
            k3.clone(),
            BinaryOp::Add,
            scalar,
            true,
            false,
        ),
    ];
    for (what, op1, (s1, v1), op2, (s2, v2), share, merged) in cases {
        let mut g = Graph::new();
        let x = value(&mut g, "f32[N,3,4,5]", 0);
        let k1 = g.add_initializer("k1", HostTensor::from_f32(s1, &v1)).unwrap();
        let k2 = g.add_initializer("k2", HostTensor::from_f32(s2, &v2)).unwrap();
        let a = node(&mut g, "a", Op::Binary(op1), vec![x, k1]);
        let b = node(&mut g, "b", Op::Binary(op2), vec![a, k2]);
        g.outputs = if share { vec![b, a] } else { vec![b] };
        let compiled = CompiledGraph::new(g, PlanOptions::default()).unwrap();
        let g = compiled.graph();
        let ops: Vec<String> = g.nodes.iter().map(|n| n.op.name().to_string()).collect();
        let want: Vec<String> = if merged {
            vec!["Mul".into(), "Add".into()]
        } else {
            vec![format!("{op1:?}"), format!("{op2:?}")]
        };
        assert_eq!(ops, want, "{what}");
        assert_eq!(g.nodes.last().unwrap().outputs[0], b, "{what}: the output value is kept");
        if merged {
            assert_eq!(g.nodes[0].inputs[0], x, "{what}");
            assert_eq!(g.initializers[&g.nodes[0].inputs[1]].shape, vec![3, 1, 1], "{what}");
        }
    }
}

/// Attention's Q/K/V projections of one input merge into one GEMM even when their biases are
/// one shared initializer (ORT's constant sharing gives every all-zero bias of a freshly
/// initialized model the same initializer): the concatenated bias repeats it per member, and the
/// shared initializer stays while another node still reads it, and goes when none does.
#[test]
fn projections_merge_with_a_shared_bias() {
    for other_reader in [true, false] {
        let mut g = Graph::new();
        let x = value(&mut g, "f32[N,5,4]", 0);
        let bias =
            g.add_initializer("b", HostTensor::from_f32(vec![3], &[0.5, -1.0, 2.0])).unwrap();
        let mut outs = Vec::new();
        for p in 0..3 {
            let w: Vec<f32> = (0..12).map(|i| (i + 12 * p) as f32 * 0.25).collect();
            let wv =
                g.add_initializer(format!("w{p}"), HostTensor::from_f32(vec![4, 3], &w)).unwrap();
            let m = node(&mut g, &format!("mm{p}"), Op::MatMul, vec![x, wv]);
            outs.push(node(&mut g, &format!("add{p}"), Op::Binary(BinaryOp::Add), vec![m, bias]));
        }
        if other_reader {
            let o = node(&mut g, "other", Op::Binary(BinaryOp::Mul), vec![outs[0], bias]);
            outs[0] = o;
        }
        g.outputs = outs;
        assert_eq!(passes::transformer::fuse_projections(&mut g), 1, "other reader {other_reader}");
        let ops: Vec<String> = g.nodes.iter().map(|n| n.op.name()).collect();
        assert_eq!(ops.iter().filter(|o| **o == "MatMul").count(), 1, "{ops:?}");
        assert_eq!(ops.iter().filter(|o| **o == "Slice").count(), 3, "{ops:?}");
        let merged_bias = g
            .nodes
            .iter()
            .find(|n| n.name.ends_with("/bias"))
            .map(|n| &g.initializers[&n.inputs[1]])
            .unwrap();
        assert_eq!(merged_bias.shape, vec![9]);
        assert_eq!(merged_bias.to_f64_vec(), [0.5, -1.0, 2.0].repeat(3));
        assert_eq!(
            g.initializers.contains_key(&bias),
            other_reader,
            "shared bias kept only if read"
        );
        assert!(
            !g.initializers.values().any(|t| t.shape == [4, 3]),
            "each member's weight dropped"
        );
    }
}
