//! `GetCapability`: which nodes the EP claims. A node is a candidate when its op is in the
//! importer's table or is a `com.microsoft` contrib op with a rewrite (`mpsrt_onnx::contrib`;
//! variants the rewrite refuses fail the trial import below and stay with ORT), it has no subgraph, and every typed tensor it touches
//! has an element type the engine stores as is. Candidates are grouped into convex runs (a
//! topological order that takes supported nodes whenever one is ready: a contiguous run of a
//! topological order never has an outside node on a path between two of its nodes). Groups
//! that only compute shapes or move data are left to ORT, and so are groups too small to pay
//! for the trip (the cost model in [`worth_claiming`]). Every group is then imported and
//! compiled for real into the engine `Session` that `Compile` will use (so the weights are
//! imported once); a group that fails is narrowed to the nodes that import alone, so we never
//! claim a node we cannot run.

use crate::abi::{OrtGraph, OrtNode, OrtValueInfo};
use crate::convert::{build_model, feed_dtype};
use crate::ort::{self, R};
use mpsrt_core::Place;
use mpsrt_engine::{Precision, Session, SessionOptions};
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

/// Ops whose cost grows faster than their output (a reduction over a weight or window per
/// output element): a group holding one is always worth the GPU.
const HEAVY: &[&str] = &[
    "Conv",
    "ConvTranspose",
    "MatMul",
    "Gemm",
    "Einsum",
    "Attention",
    "MultiHeadAttention",
    "FusedMatMul",
    "FusedConv",
    "GroupQueryAttention",
    "MatMulNBits",
    "MatMulInteger",
    "QLinearConv",
    "QLinearMatMul",
    "ConvInteger",
    "LSTM",
    "GRU",
    "RNN",
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
    /// Elements of its outputs when every output shape is static; `None` when one is dynamic.
    out_elems: Option<u64>,
}

fn candidate(n: *const OrtNode) -> R<NodeInfo> {
    let op = ort::node_op(n)?;
    let domain = ort::node_domain(n)?;
    let input_vis = ort::node_inputs(n)?;
    let output_vis = ort::node_outputs(n)?;
    let mut subgraphs = 0usize;
    // SAFETY: per the C API.
    ort::check(unsafe { ort::api().Node_GetNumSubgraphs(n, &mut subgraphs) })?;
    // Contrib ops are rewritten into default-domain nodes (`contrib.rs`) before import.
    let mut supported = ((matches!(domain.as_str(), "" | "ai.onnx")
        && mpsrt_onnx::ops::lookup(&op).is_some())
        || crate::contrib::is_contrib(&domain, &op))
        && !DECLINED.contains(&op.as_str())
        && subgraphs == 0;
    let mut float_out = false;
    let mut out_elems = Some(0u64);
    for &vi in &input_vis {
        if supported && !vi.is_null() && ort::initializer(vi)?.is_none() {
            if let Some(t) = ort::value_type(vi)? {
                supported &= feed_dtype(t.elem).is_some();
            }
        }
    }
    for &vi in output_vis.iter().filter(|v| !v.is_null()) {
        let t = ort::value_type(vi)?;
        let n = t.as_ref().and_then(|t| t.dims.as_ref()).and_then(|d| {
            d.iter().try_fold(1u64, |acc, &(x, _)| (x >= 0).then(|| acc.saturating_mul(x as u64)))
        });
        out_elems = out_elems.zip(n).map(|(a, b)| a.saturating_add(b));
        if let Some(t) = t {
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
        out_elems,
    })
}

/// The cost model: whether running `group` on the GPU can beat ORT's CPU EP. A fused node
/// costs a fixed price (a submission and, at the graph's edges, a transfer and a wait: tens of
/// microseconds on a discrete GPU) that the CPU EP does not pay; the CPU EP's time grows with
/// the work. Work is counted as elements produced. A group holding a [`HEAVY`] op, or one
/// whose shapes are dynamic (sized by the request: batch, sequence), is always claimed; a
/// group with static shapes producing fewer than `min_elements` elements in all (64 Ki by
/// default: about what the CPU EP streams through in the time of one GPU round trip) is left
/// to ORT.
fn worth_claiming(nodes: &[NodeInfo], group: &[usize], min_elements: u64) -> bool {
    if min_elements == 0 || group.iter().any(|&i| HEAVY.contains(&nodes[i].op.as_str())) {
        return true;
    }
    match group.iter().try_fold(0u64, |acc, &i| nodes[i].out_elems.map(|n| acc.saturating_add(n))) {
        None => true,
        Some(work) => work >= min_elements,
    }
}

/// Convex groups of supported nodes (indices into `nodes`), in topological order, each worth
/// claiming (see [`worth_claiming`]).
fn partition(nodes: &[NodeInfo], min_elements: u64) -> Vec<Vec<usize>> {
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
        .filter(|g| {
            let ok = worth_claiming(nodes, g, min_elements);
            if !ok {
                crate::log(&format!(
                    "group of {} node(s) ({}) left to ORT: static shapes, no heavy op, under {min_elements} elements",
                    g.len(),
                    g.iter().map(|&i| nodes[i].op.as_str()).collect::<Vec<_>>().join(", ")
                ));
            }
            ok
        })
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
            if vi.is_null() {
                continue; // an omitted optional output
            }
            // SAFETY: per the C API.
            ort::check(unsafe { ort::api().ValueInfo_IsGraphOutput(vi, &mut is_out) })?;
            if !name.is_empty() && (is_out || read_outside.contains(name.as_str())) {
                outs.push(vi);
            }
        }
    }
    Ok((ins, outs))
}

/// The group imported and compiled into an engine session (the error, if the engine cannot).
fn compiles(
    nodes: &[NodeInfo],
    group: &[usize],
    opsets: &[(String, i64)],
    ir: i64,
    place: Place,
    options: SessionOptions,
    precision: Precision,
) -> R<Result<Session, String>> {
    let (ins, mut outs) = boundary(nodes, group)?;
    if outs.is_empty() {
        outs = group.iter().flat_map(|&i| nodes[i].output_vis.iter().copied()).collect();
    }
    let ptrs: Vec<*const OrtNode> = group.iter().map(|&i| nodes[i].ptr).collect();
    let model = match build_model(&ptrs, &ins, &outs, opsets, ir) {
        Ok(m) => m,
        Err(s) => return Ok(Err(ort::take_message(s))),
    };
    drop(ptrs);
    if group.len() > 1 {
        dump(&model, group.len());
    }
    let r = mpsrt_onnx::import_model(&model, None).and_then(|m| {
        drop(model); // the protobuf's copy of the weights, before the session makes its own
        Session::from_graph_with_precision(m.graph, place, options, precision)
    });
    Ok(r.map_err(|e| e.to_string()))
}

/// `MPSRT_ORT_DUMP_DIR=DIR`: each claimed group's model (as the engine imports it, weights
/// inline) is written to `DIR/group_<n>_<nodes>.onnx`, so `mpsrt bench` can run exactly what
/// the EP runs beside the original file.
fn dump(model: &mpsrt_onnx::proto::ModelProto, nodes: usize) {
    use prost::Message;
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let Ok(dir) = std::env::var("MPSRT_ORT_DUMP_DIR") else { return };
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::path::Path::new(&dir).join(format!("group_{n}_{nodes}.onnx"));
    let r =
        std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, model.encode_to_vec()));
    crate::log(&format!("dumped a group of {nodes} nodes to {}: {r:?}", path.display()));
}

/// Key of a group: its nodes' output names, sorted (unique in an ONNX graph, and the same in
/// the graph ORT hands to `Compile`, where the node handles differ).
pub fn group_key(outputs: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut k: Vec<String> = outputs.into_iter().filter(|o| !o.is_empty()).collect();
    k.sort_unstable();
    k
}

/// A claimed group: its nodes, its key and the session compiled for it.
pub struct Claimed {
    pub nodes: Vec<*const OrtNode>,
    pub key: Vec<String>,
    pub session: Session,
}

/// The groups of nodes to claim, each fused into one node, with their compiled sessions.
pub fn claim(
    graph: *const OrtGraph,
    place: Place,
    options: SessionOptions,
    precision: Precision,
    min_elements: u64,
) -> R<Vec<Claimed>> {
    let all = ort::graph_nodes(graph)?;
    let mut nodes = all.iter().map(|&n| candidate(n)).collect::<R<Vec<_>>>()?;
    let opsets = ort::graph_opsets(graph)?;
    let mut ir = 0i64;
    // SAFETY: per the C API.
    ort::check(unsafe { ort::api().Graph_GetOnnxIRVersion(graph, &mut ir) })?;
    for _round in 0..4 {
        let groups = partition(&nodes, min_elements);
        let mut changed = false;
        let mut ok_groups = Vec::new();
        for g in groups {
            match compiles(&nodes, &g, &opsets, ir, place, options, precision)? {
                Ok(s) => ok_groups.push((g, s)),
                Err(why) => {
                    crate::log(&format!("group of {} nodes declined: {why}", g.len()));
                    // Narrow: keep the nodes that compile alone; the rest go back to ORT.
                    for &i in &g {
                        let r =
                            compiles(&nodes, &[i], &opsets, ir, Place::Cpu, options, precision)?;
                        if let Err(e) = r {
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
                .map(|(g, session)| Claimed {
                    key: group_key(g.iter().flat_map(|&i| nodes[i].outputs.iter().cloned())),
                    nodes: g.into_iter().map(|i| nodes[i].ptr).collect(),
                    session,
                })
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
            out_elems: None,
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
        assert_eq!(partition(&nodes, 1), vec![vec![0, 1], vec![3]]);
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
        assert_eq!(partition(&nodes, 1), vec![vec![0, 2], vec![3]]);
    }

    #[test]
    fn the_cost_model_leaves_small_static_groups_to_ort() {
        let small = |op: &str, elems| {
            let mut x = n(op, &["in"], &["o"], true);
            x.out_elems = elems;
            x
        };
        let nodes = vec![small("Relu", Some(60)), small("Conv", Some(60)), small("Relu", None)];
        assert!(!worth_claiming(&nodes, &[0], 65536)); // 60 elements: the CPU EP wins
        assert!(worth_claiming(&nodes, &[0], 0)); // min_elements=0 claims everything
        assert!(worth_claiming(&nodes, &[1], 65536)); // a heavy op
        assert!(worth_claiming(&nodes, &[2], 65536)); // dynamic shapes
        assert!(worth_claiming(&[small("Relu", Some(1 << 20))], &[0], 65536));
    }

    #[test]
    fn shape_only_groups_are_left_to_ort() {
        let mut shape = n("Shape", &["in"], &["s"], true);
        shape.float_out = false;
        let nodes = vec![shape, n("Foo", &["s"], &["y"], false), n("Relu", &["y"], &["z"], true)];
        assert_eq!(partition(&nodes, 1), vec![vec![2]]);
        let nodes = vec![n("Reshape", &["in"], &["r"], true)];
        assert!(partition(&nodes, 1).is_empty());
    }
}
