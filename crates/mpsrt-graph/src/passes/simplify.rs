//! Removes nodes that are identities at inference time (Identity, Dropout whose mask is unused)
//! by rewiring their consumers to the node's input, and rewrites `x * Sigmoid(x)` (how
//! exporters write SiLU) into one `Swish` node, an activation a conv/GEMM epilogue applies.

use crate::ir::{Graph, ValueId};
use crate::op::{BinaryOp, Op, UnaryOp};

/// Rewrites `Mul(x, Sigmoid(x))` (either operand order) whose sigmoid value is read by that
/// `Mul` only (and is no graph output) into `Swish { alpha: 1 }(x)` at the `Mul`'s position,
/// keeping the `Mul`'s output value and name; the orphaned `Sigmoid` is left for dead-node
/// elimination. Returns how many were rewritten. EfficientNet's 49 SiLUs are this pattern.
pub fn fuse_silu(g: &mut Graph) -> usize {
    let uses = g.use_counts();
    let producers = g.producers();
    let mut n = 0;
    for i in 0..g.nodes.len() {
        let node = &g.nodes[i];
        if node.op != Op::Binary(BinaryOp::Mul) || node.inputs.len() != 2 || node.outputs.len() != 1
        {
            continue;
        }
        let found = (0..2).find_map(|k| {
            let (x, s) = (node.inputs[k], node.inputs[1 - k]);
            let p = producers[s.0]?;
            let sig = &g.nodes[p];
            (sig.op == Op::Unary(UnaryOp::Sigmoid)
                && sig.inputs.len() == 1
                && sig.inputs[0] == x
                && x != s
                && uses[s.0] == 1
                && !g.outputs.contains(&s)
                && g.value(x).dtype.is_float())
            .then_some(x)
        });
        if let Some(x) = found {
            let node = &mut g.nodes[i];
            node.op = Op::Swish { alpha: 1.0 };
            node.inputs = vec![x];
            n += 1;
        }
    }
    n
}

/// Returns how many nodes were removed. An identity whose output is a graph output is kept
/// (the executor copies), because graph outputs must keep their own names and buffers.
pub fn remove_identities(g: &mut Graph) -> usize {
    let uses = g.use_counts();
    let outputs: std::collections::HashSet<ValueId> = g.outputs.iter().copied().collect();
    let mut replace: Vec<ValueId> = (0..g.values.len()).map(ValueId).collect();
    let resolve = |r: &Vec<ValueId>, mut v: ValueId| {
        while r[v.0] != v {
            v = r[v.0];
        }
        v
    };
    let before = g.nodes.len();
    g.nodes.retain_mut(|node| {
        for i in node.inputs.iter_mut() {
            *i = resolve(&replace, *i);
        }
        let removable = match node.op {
            Op::Identity => true,
            Op::Dropout => node.outputs.get(1).is_none_or(|m| uses[m.0] == 0),
            _ => false,
        };
        match (removable, node.inputs.first(), node.outputs.first()) {
            (true, Some(&src), Some(&dst)) if !outputs.contains(&dst) => {
                replace[dst.0] = src;
                false
            }
            _ => true,
        }
    });
    before - g.nodes.len()
}
