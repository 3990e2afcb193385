//! `GetCapability`: which nodes the EP claims. A node is a candidate when its op is in the
//! importer's table (default ONNX domain only: `com.microsoft` contrib ops that ORT's optimizer
//! makes are declined, so ORT keeps them), it has no subgraph, and every typed tensor it touches
//! has an element type the engine stores as is. Candidates are grouped into convex runs (a
//! topological order that takes supported nodes whenever one is ready: a contiguous run of a
//! topological order never has an outside node on a path between two of its nodes). Groups
//! that only compute shapes or move data are left to ORT. Every group is then imported and
//! compiled for real, on the CPU place (no upload); a group that fails is narrowed to the nodes
//! that import alone, so we never claim a node we cannot run.

use crate::abi::{OrtGraph, OrtNode, OrtValueInfo};
use crate::convert::{build_model, feed_dtype};
use crate::ort::{self, R};
use mpsrt_core::Place;
use mpsrt_engine::{Session, SessionOptions};
use std::collections::{BTreeSet, HashMap, HashSet};

/// Ops that move or reshape data, or compute shapes: a group made only of these is not worth a
/// trip to the GPU (ORT's CPU EP runs them in place).
const LIGHT: &[&str] = &[
    "Shape",
    "Size",
    "Gather",
    "Unsqueeze",
    "Squeeze",
    "Concat",
    "Slice",
    "Cast",
    "Reshape",
    "Constant",
    "ConstantOfShape",
    "Range",
    "Identity",
    "Flatten",
    "Expand",
    "Equal",
    "Where",
    "NonZero",
    "Tile",
    "Greater",
    "Less",
    "Not",
    "And",
    "Or",
];

/// Ops in the importer's table that the EP still declines (none today; a row here keeps a
/// regressing op on ORT's CPU EP).
const DECLINED: &[&str] = &[];

struct NodeInfo {
    ptr: *const OrtNode,
    op: String,
    inputs: Vec<String>,
    outputs: Vec<String>,
    input_vis: Vec<*const OrtValueInfo>,
    output_vis: Vec<*const OrtValueInfo>,
    supported: bool,
    /// Produces a floating-point tensor (not a shape computation).
    float_out: bool,
}

fn candidate(n: *const OrtNode) -> R<NodeInfo> {
    let op = ort::node_op(n)?;
    let domain = ort::node_domain(n)?;
    let input_vis = ort::node_inputs(n)?;
    let output_vis = ort::node_outputs(n)?;
    let mut subgraphs = 0usize;
    // SAFETY: per the C API.
    ort::check(unsafe { ort::api().Node_GetNumSubgraphs(n, &mut subgraphs) })?;
    let mut supported = matches!(domain.as_str(), "" | "ai.onnx")
        && mpsrt_onnx::ops::lookup(&op).is_some()
        && !DECLINED.contains(&op.as_str())
        && subgraphs == 0;
    let mut float_out = false;
    for &vi in &input_vis {
        if supported && !vi.is_null() && ort::initializer(vi)?.is_none() {
            if let Some(t) = ort::value_type(vi)? {
                supported &= feed_dtype(t.elem).is_some();
            }
        }
    }
    for &vi in &output_vis {
        if let Some(t) = ort::value_type(vi)? {
            supported &= feed_dtype(t.elem).is_some();
            float_out |= matches!(t.elem, 1 | 10 | 11);
        }
    }
    let names =
        |v: &[*const OrtValueInfo]| v.iter().map(|&x| ort::value_name(x)).collect::<R<Vec<_>>>();
    Ok(NodeInfo {
        ptr: n,
        inputs: names(&input_vis)?,
        outputs: names(&output_vis)?,
        op,
        input_vis,
        output_vis,
        supported,
        float_out,
    })
}

/// Convex groups of supported nodes (indices into `nodes`), in topological order.
fn partition(nodes: &[NodeInfo]) -> Vec<Vec<usize>> {
    let producer: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.outputs.iter().filter(|o| !o.is_empty()).map(move |o| (o.as_str(), i)))
        .collect();
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut indeg = vec![0usize; nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        let preds: BTreeSet<usize> =
            n.inputs.iter().filter_map(|x| producer.get(x.as_str()).copied()).collect();
        indeg[i] = preds.len();
        for p in preds {
            consumers[p].push(i);
        }
    }
    let (mut sup, mut unsup) = (BTreeSet::new(), BTreeSet::new());
    for (i, &d) in indeg.iter().enumerate() {
        if d == 0 {
            if nodes[i].supported {
                sup.insert(i)
            } else {
                unsup.insert(i)
            };
        }
    }
    let (mut groups, mut cur) = (Vec::new(), Vec::new());
    loop {
        let next = if let Some(i) = sup.pop_first() {
            cur.push(i);
            i
        } else if let Some(i) = unsup.pop_first() {
            if !cur.is_empty() {
                groups.push(std::mem::take(&mut cur));
            }
            i
        } else {
            break;
        };
        for &c in &consumers[next] {
            indeg[c] -= 1;
            if indeg[c] == 0 {
                if nodes[c].supported {
                    sup.insert(c)
                } else {
                    unsup.insert(c)
                };
            }
        }
    }
    if !cur.is_empty() {
        groups.push(cur);
    }
    groups
        .into_iter()
        .filter(|g| g.iter().any(|&i| nodes[i].float_out && !LIGHT.contains(&nodes[i].op.as_str())))
        .collect()
}

/// Boundary of a group: inputs produced outside it, outputs read outside it (or graph outputs).
fn boundary(
    nodes: &[NodeInfo],
    group: &[usize],
) -> R<(Vec<*const OrtValueInfo>, Vec<*const OrtValueInfo>)> {
    let inside: HashSet<usize> = group.iter().copied().collect();
    let produced: HashSet<&str> =
        group.iter().flat_map(|&i| nodes[i].outputs.iter().map(String::as_str)).collect();
    let read_outside: HashSet<&str> = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| !inside.contains(i))
        .flat_map(|(_, n)| n.inputs.iter().map(String::as_str))
        .collect();
    let (mut ins, mut outs, mut seen) = (Vec::new(), Vec::new(), HashSet::new());
    for &i in group {
        for (name, &vi) in nodes[i].inputs.iter().zip(&nodes[i].input_vis) {
            if !name.is_empty() && !produced.contains(name.as_str()) && seen.insert(name.clone()) {
                ins.push(vi);
            }
        }
        for (name, &vi) in nodes[i].outputs.iter().zip(&nodes[i].output_vis) {
            let mut is_out = false;
            // SAFETY: per the C API.
            ort::check(unsafe { ort::api().ValueInfo_IsGraphOutput(vi, &mut is_out) })?;
            if !name.is_empty() && (is_out || read_outside.contains(name.as_str())) {
                outs.push(vi);
            }
        }
    }
    Ok((ins, outs))
}

/// Whether the engine imports and compiles these nodes (the error, if not).
fn compiles(
    nodes: &[NodeInfo],
    group: &[usize],
    opsets: &[(String, i64)],
    ir: i64,
) -> R<Result<(), String>> {
    let (ins, mut outs) = boundary(nodes, group)?;
    if outs.is_empty() {
        outs = group.iter().flat_map(|&i| nodes[i].output_vis.iter().copied()).collect();
    }
    let ptrs: Vec<*const OrtNode> = group.iter().map(|&i| nodes[i].ptr).collect();
    let model = match build_model(&ptrs, &ins, &outs, opsets, ir) {
        Ok(m) => m,
        Err(s) => return Ok(Err(ort::take_message(s))),
    };
    let r = mpsrt_onnx::import_model(&model, None)
        .and_then(|m| Session::from_graph(m.graph, Place::Cpu, SessionOptions::default()));
    Ok(r.map(|_| ()).map_err(|e| e.to_string()))
}

/// The groups of nodes to claim, each fused into one node.
pub fn claim(graph: *const OrtGraph) -> R<Vec<Vec<*const OrtNode>>> {
    let all = ort::graph_nodes(graph)?;
    let mut nodes = all.iter().map(|&n| candidate(n)).collect::<R<Vec<_>>>()?;
    let opsets = ort::graph_opsets(graph)?;
    let mut ir = 0i64;
    // SAFETY: per the C API.
    ort::check(unsafe { ort::api().Graph_GetOnnxIRVersion(graph, &mut ir) })?;
    for _round in 0..4 {
        let groups = partition(&nodes);
        let mut changed = false;
        let mut ok_groups = Vec::new();
        for g in groups {
            match compiles(&nodes, &g, &opsets, ir)? {
                Ok(()) => ok_groups.push(g),
                Err(why) => {
                    crate::log(&format!("group of {} nodes declined: {why}", g.len()));
                    // Narrow: keep the nodes that compile alone; the rest go back to ORT.
                    for &i in &g {
                        if let Err(e) = compiles(&nodes, &[i], &opsets, ir)? {
                            crate::log(&format!("  node {} ({}) declined: {e}", i, nodes[i].op));
                            nodes[i].supported = false;
                            changed = true;
                        }
                    }
                }
            }
        }
        if !changed {
            return Ok(ok_groups
                .into_iter()
                .map(|g| g.into_iter().map(|i| nodes[i].ptr).collect())
                .collect());
        }
    }
    Ok(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(op: &str, ins: &[&str], outs: &[&str], supported: bool) -> NodeInfo {
        NodeInfo {
            ptr: std::ptr::null(),
            op: op.into(),
            inputs: ins.iter().map(|s| s.to_string()).collect(),
            outputs: outs.iter().map(|s| s.to_string()).collect(),
            input_vis: vec![],
            output_vis: vec![],
            supported,
            float_out: true,
        }
    }

    #[test]
    fn groups_are_split_around_an_unsupported_node_on_a_path() {
        // a -> b -> X(unsupported) -> d, and a -> d: {a, b, d} would not be convex.
        let nodes = vec![
            n("Relu", &["in"], &["a"], true),
            n("Relu", &["a"], &["b"], true),
            n("Foo", &["b"], &["x"], false),
            n("Add", &["x", "a"], &["d"], true),
        ];
        assert_eq!(partition(&nodes), vec![vec![0, 1], vec![3]]);
    }

    #[test]
    fn independent_supported_nodes_join_one_group_before_an_unsupported_one() {
        // X depends on nothing; a and c are ready first and both taken before X.
        let nodes = vec![
            n("Relu", &["in"], &["a"], true),
            n("Foo", &["in"], &["x"], false),
            n("Relu", &["a"], &["c"], true),
            n("Add", &["c", "x"], &["d"], true),
        ];
        assert_eq!(partition(&nodes), vec![vec![0, 2], vec![3]]);
    }

    #[test]
    fn shape_only_groups_are_left_to_ort() {
        let mut shape = n("Shape", &["in"], &["s"], true);
        shape.float_out = false;
        let nodes = vec![shape, n("Foo", &["s"], &["y"], false), n("Relu", &["y"], &["z"], true)];
        assert_eq!(partition(&nodes), vec![vec![2]]);
        let nodes = vec![n("Reshape", &["in"], &["r"], true)];
        assert!(partition(&nodes).is_empty());
    }
}
