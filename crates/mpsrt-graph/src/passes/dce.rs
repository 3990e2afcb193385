//! Dead-node elimination: drops nodes none of whose outputs reach a graph output, then the
//! initializers nothing reads any more.

use crate::ir::Graph;

/// Removes dead nodes and unused initializers; returns how many nodes were removed.
pub fn eliminate_dead_nodes(g: &mut Graph) -> usize {
    let mut live = vec![false; g.values.len()];
    for o in &g.outputs {
        live[o.0] = true;
    }
    // One backward sweep suffices because nodes are topologically ordered.
    let mut keep = vec![false; g.nodes.len()];
    for (i, node) in g.nodes.iter().enumerate().rev() {
        if node.outputs.iter().any(|o| live[o.0]) {
            keep[i] = true;
            for inp in &node.inputs {
                live[inp.0] = true;
            }
        }
    }
    let before = g.nodes.len();
    let mut k = keep.into_iter();
    g.nodes.retain(|_| k.next().unwrap_or(true));
    g.initializers.retain(|id, _| live[id.0]);
    before - g.nodes.len()
}
