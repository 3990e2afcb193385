//! Removes nodes that are identities at inference time (Identity, Dropout whose mask is unused)
//! by rewiring their consumers to the node's input.

use crate::ir::{Graph, ValueId};
use crate::op::Op;

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
