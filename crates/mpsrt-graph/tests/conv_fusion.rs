//! Issue 22's batch-1 step savings: `x * Sigmoid(x)` rewritten into one Swish node, the
//! MobileNet/EfficientNet activations (HardSwish, HardSigmoid, Sigmoid, SiLU) as conv epilogues,
//! and elementwise groups whose intermediates broadcast to the output (squeeze-excitation's gate).

mod common;

use common::{node, value};
use mpsrt_graph::passes::simplify;
use mpsrt_graph::*;

#[test]
fn silu_is_one_swish_node_only_when_the_sigmoid_is_private() {
    let mut g = Graph::new();
    let x = value(&mut g, "f32[N,4]", 0);
    let y = value(&mut g, "f32[N,4]", 1);
    // a = x * sigmoid(x), sigmoid(x) operand first: rewritten.
    let s1 = node(&mut g, "s1", Op::Unary(UnaryOp::Sigmoid), vec![x]);
    let a = node(&mut g, "a", Op::Binary(BinaryOp::Mul), vec![s1, x]);
    // b = y * sigmoid(x): not SiLU.
    let s2 = node(&mut g, "s2", Op::Unary(UnaryOp::Sigmoid), vec![x]);
    let b = node(&mut g, "b", Op::Binary(BinaryOp::Mul), vec![y, s2]);
    // c = y * sigmoid(y), but sigmoid(y) is also an output: kept.
    let s3 = node(&mut g, "s3", Op::Unary(UnaryOp::Sigmoid), vec![y]);
    let c = node(&mut g, "c", Op::Binary(BinaryOp::Mul), vec![y, s3]);
    g.outputs = vec![a, b, c, s3];
    assert_eq!(simplify::fuse_silu(&mut g), 1);
    let ops: Vec<String> = g.nodes.iter().map(|n| n.op.name().to_string()).collect();
    assert_eq!(ops, ["Sigmoid", "Swish", "Sigmoid", "Mul", "Sigmoid", "Mul"]);
    assert_eq!(g.nodes[1].op, Op::Swish { alpha: 1.0 });
    assert_eq!((g.nodes[1].inputs.clone(), g.nodes[1].outputs.clone()), (vec![x], vec![a]));
    // The orphaned sigmoid is dropped when the graph is compiled.
    let cg = CompiledGraph::new(g, PlanOptions::default()).unwrap();
    let n_sigmoid = cg.graph().nodes.iter().filter(|n| n.op.name() == "Sigmoid").count();
    assert_eq!(n_sigmoid, 2);
}

#[test]
fn mobilenet_activations_and_silu_are_conv_epilogues() {
    // c_k = Conv(x) -> act_k for HardSwish, HardSigmoid, Sigmoid and x * Sigmoid(x).
    let mut g = Graph::new();
    let x = value(&mut g, "f32[N,2,5,5]", 0);
    let w = g.add_initializer("w", HostTensor::from_f32(vec![2, 2, 1, 1], &[0.5; 4])).unwrap();
    let conv = || Op::Conv(ConvAttrs { group: 1, ..Default::default() });
    let mut outs = Vec::new();
    for (k, act) in [
        Op::Unary(UnaryOp::HardSwish),
        Op::HardSigmoid { alpha: 0.2, beta: 0.5 },
        Op::Unary(UnaryOp::Sigmoid),
    ]
    .into_iter()
    .enumerate()
    {
        let c = node(&mut g, &format!("conv{k}"), conv(), vec![x, w]);
        outs.push(node(&mut g, &format!("act{k}"), act, vec![c]));
    }
    let c = node(&mut g, "conv3", conv(), vec![x, w]);
    let s = node(&mut g, "sig", Op::Unary(UnaryOp::Sigmoid), vec![c]);
    outs.push(node(&mut g, "silu", Op::Binary(BinaryOp::Mul), vec![c, s]));
    g.outputs = outs;
    let plan = CompiledGraph::new(g, PlanOptions::default()).unwrap().plan(&[vec![1, 2, 5, 5]]);
    let plan = plan.unwrap();
    let acts: Vec<String> = plan
        .steps
        .iter()
        .map(|s| match s {
            Step::Epilogue { activation: Some(a), add: None, .. } => {
                plan.graph.nodes[*a].op.name().to_string()
            }
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(acts, ["HardSwish", "HardSigmoid", "Sigmoid", "Swish"]);
}

#[test]
fn squeeze_excitation_gate_fuses_with_its_broadcast_mul() {
    // y = x * HardSigmoid(Relu(p)) with p: [N, C, 1, 1] and x: [N, C, 4, 4]: one kernel that
    // recomputes the gate per output element (it was three steps: the gate is not the output's
    // shape).
    let mut g = Graph::new();
    let x = value(&mut g, "f32[N,3,4,4]", 0);
    let p = value(&mut g, "f32[N,3,1,1]", 1);
    let r = node(&mut g, "relu", Op::Unary(UnaryOp::Relu), vec![p]);
    let h = node(&mut g, "hsig", Op::HardSigmoid { alpha: 0.2, beta: 0.5 }, vec![r]);
    let y = node(&mut g, "mul", Op::Binary(BinaryOp::Mul), vec![x, h]);
    g.outputs = vec![y];
    let cg = CompiledGraph::new(g, PlanOptions::default()).unwrap();
    let plan = cg.plan(&[vec![2, 3, 4, 4], vec![2, 3, 1, 1]]).unwrap();
    match &plan.steps[..] {
        [Step::Fused(f)] => {
            assert_eq!((f.nodes.clone(), f.inputs.clone()), (vec![0, 1, 2], vec![p, x]))
        }
        other => panic!("{other:?}"),
    }
    // An intermediate read twice stays materialized.
    let mut g = Graph::new();
    let x = value(&mut g, "f32[N,3,4,4]", 0);
    let p = value(&mut g, "f32[N,3,1,1]", 1);
    let h = node(&mut g, "hsig", Op::HardSigmoid { alpha: 0.2, beta: 0.5 }, vec![p]);
    let y = node(&mut g, "mul", Op::Binary(BinaryOp::Mul), vec![x, h]);
    let z = node(&mut g, "add", Op::Binary(BinaryOp::Add), vec![x, h]);
    g.outputs = vec![y, z];
    let cg = CompiledGraph::new(g, PlanOptions::default()).unwrap();
    let plan = cg.plan(&[vec![2, 3, 4, 4], vec![2, 3, 1, 1]]).unwrap();
    assert_eq!(plan.steps, [Step::Node(0), Step::Node(1), Step::Node(2)]);
}
