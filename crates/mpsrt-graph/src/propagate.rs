//! The inference driver: walks nodes in order, infers every output's type and shape and, when
//! folding is on, replaces shape/index nodes whose inputs are all constant by their values.
//! Doing both in one walk is what lets `Reshape(x, Concat(Gather(Shape(x)), ...))` resolve: the
//! shape input of the Reshape is a constant by the time the Reshape is inferred.

use crate::canon::{canonicalize, is_pending, param_inputs};
use crate::eval::eval;
use crate::infer::{infer_node, InferIn};
use crate::ir::{checked_numel, concrete, dims, shape_str, Dim, Graph, HostTensor, Node};
use crate::op::Op;
use mpsrt_core::{DType, Error, Result};

/// Largest constant (in elements) the folder materializes. Light ONNX models build their weights
/// with `ConstantOfShape`; folding those would bloat the host graph by hundreds of megabytes.
pub const FOLD_LIMIT: usize = 1 << 16;

/// Infers every value's dtype and shape (symbolic where needed). With `fold`, constant-folds
/// shape subgraphs; folded outputs become initializers and their nodes disappear.
pub fn propagate(g: &mut Graph, fold: bool) -> Result<()> {
    let nodes = std::mem::take(&mut g.nodes);
    let mut kept = Vec::with_capacity(nodes.len());
    let mut nodes = nodes.into_iter();
    let result = (|| {
        for mut node in nodes.by_ref() {
            canonicalize(&mut node, g)?;
            // Parameters known only at specialization: leave this node (and what depends on
            // it) unshaped for now; specialization reports it if it stays that way.
            let unshaped_input =
                node.inputs.iter().any(|v| g.values.get(v.0).is_some_and(|v| v.shape.is_none()));
            if is_pending(&node) || unshaped_input {
                for o in &node.outputs {
                    if let Some(v) = g.values.get_mut(o.0) {
                        v.shape = None;
                    }
                }
                kept.push(node);
                continue;
            }
            if fold && try_fold(g, &node)? {
                continue;
            }
            let outs = {
                let ins = infer_inputs(g, &node)?;
                infer_node(&node, &ins)?
            };
            set_outputs(g, &node, outs)?;
            kept.push(node);
        }
        Ok(())
    })();
    // Restore the node list even on error so the graph stays usable for messages.
    kept.extend(nodes);
    g.nodes = kept;
    result
}

fn op_name(node: &Node) -> String {
    if node.name.is_empty() {
        node.op.name()
    } else {
        format!("{} {}", node.op.name(), node.name)
    }
}

fn infer_inputs<'g>(g: &'g Graph, node: &Node) -> Result<Vec<InferIn<'g>>> {
    node.inputs
        .iter()
        .map(|&id| {
            let v = g
                .values
                .get(id.0)
                .ok_or_else(|| Error::invalid(op_name(node), "input id out of range"))?;
            let shape = v.shape.as_deref().ok_or_else(|| {
                Error::shape(
                    op_name(node),
                    format!(
                        "input {:?} has no inferred shape (is it produced before use?)",
                        v.name
                    ),
                )
            })?;
            Ok(InferIn { dtype: v.dtype, shape, value: g.initializers.get(&id) })
        })
        .collect()
}

fn set_outputs(g: &mut Graph, node: &Node, outs: Vec<(DType, Vec<Dim>)>) -> Result<()> {
    if outs.len() < node.outputs.len() {
        return Err(Error::invalid(
            op_name(node),
            format!("node has {} outputs but the op produces {}", node.outputs.len(), outs.len()),
        ));
    }
    for (&id, (dt, shape)) in node.outputs.iter().zip(outs) {
        let v = g
            .values
            .get_mut(id.0)
            .ok_or_else(|| Error::invalid(op_name(node), "output id out of range"))?;
        v.dtype = dt;
        v.shape = Some(shape);
    }
    Ok(())
}

/// Folds `node` if possible; returns whether it was folded (and so should be dropped).
fn try_fold(g: &mut Graph, node: &Node) -> Result<bool> {
    if !node.op.is_foldable() || node.outputs.is_empty() {
        return Ok(false);
    }
    // Shape/Size depend only on the input's shape, which may be concrete even when the value is not.
    if let Op::Shape { .. } | Op::Size = node.op {
        let Some(&x) = node.inputs.first() else { return Ok(false) };
        let Some(shape) = g.values.get(x.0).and_then(|v| v.shape.as_deref()).and_then(concrete)
        else {
            return Ok(false);
        };
        let t = match node.op {
            Op::Shape { start, end } => {
                let r = shape.len() as i64;
                let cl = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
                let (s, e) = (cl(start), cl(end.unwrap_or(r)));
                let vals: Vec<i64> = shape[s..e.max(s)].iter().map(|&d| d as i64).collect();
                HostTensor::from_i64(vec![vals.len()], &vals)
            }
            _ => HostTensor::from_i64(vec![], &[shape.iter().product::<usize>() as i64]),
        };
        set_const(g, node, 0, t);
        return Ok(true);
    }
    if !node.inputs.iter().all(|i| g.initializers.contains_key(i)) {
        return Ok(false);
    }
    let outs = {
        let ins = infer_inputs(g, node)?;
        infer_node(node, &ins)?
    };
    let mut concrete_outs = Vec::new();
    for (dt, s) in &outs {
        let Some(c) = concrete(s) else { return Ok(false) };
        match checked_numel(&c) {
            Some(n) if n <= FOLD_LIMIT || matches!(node.op, Op::Constant(_)) => {}
            _ => return Ok(false),
        }
        concrete_outs.push((*dt, c));
    }
    let vals = {
        let ins: Vec<&HostTensor> =
            node.inputs.iter().filter_map(|i| g.initializers.get(i)).collect();
        eval(node, &ins, &concrete_outs)?
    };
    let Some(vals) = vals else {
        set_outputs(g, node, outs)?;
        return Ok(false);
    };
    for (k, t) in vals.into_iter().enumerate().take(node.outputs.len()) {
        let expect = checked_numel(&t.shape).map(|n| n * t.dtype.size());
        if expect != Some(t.bytes.len()) {
            return Err(Error::invalid(
                op_name(node),
                "constant folding produced an inconsistent tensor",
            ));
        }
        set_const(g, node, k, t);
    }
    Ok(true)
}

fn set_const(g: &mut Graph, node: &Node, k: usize, t: HostTensor) {
    if let Some(&id) = node.outputs.get(k) {
        if let Some(v) = g.values.get_mut(id.0) {
            v.dtype = t.dtype;
            v.shape = Some(dims(&t.shape));
        }
        g.initializers.insert(id, t);
    }
}

/// Specializes a graph to concrete input shapes (in `graph.inputs` order): binds symbols, checks
/// known dims, re-infers every shape with folding on, removes dead and identity nodes, and checks
/// that every remaining value has a concrete shape.
pub fn specialize(graph: &Graph, input_shapes: &[Vec<usize>]) -> Result<Graph> {
    specialize_with_values(graph, input_shapes, &[])
}

/// Like [`specialize`], also binding the values of some inputs (`(input index, value)`): inputs
/// that feed shape parameters (a Reshape target, Slice bounds...) given at run time. Bound
/// inputs become constants of the specialized graph, so the folder resolves those shapes.
pub fn specialize_with_values(
    graph: &Graph,
    input_shapes: &[Vec<usize>],
    values: &[(usize, HostTensor)],
) -> Result<Graph> {
    if input_shapes.len() != graph.inputs.len() {
        return Err(Error::invalid(
            "specialize",
            format!("graph has {} inputs, got {} shapes", graph.inputs.len(), input_shapes.len()),
        ));
    }
    let mut g = graph.clone();
    let mut bound: std::collections::HashMap<String, (usize, String)> = Default::default();
    for (&id, given) in graph.inputs.iter().zip(input_shapes) {
        let v = graph.value(id);
        if let Some(decl) = &v.shape {
            let bad = || {
                Error::shape(
                    "specialize",
                    format!("input {:?} expects shape {}, got {given:?}", v.name, shape_str(decl)),
                )
            };
            if decl.len() != given.len() {
                return Err(bad());
            }
            for (d, &n) in decl.iter().zip(given) {
                match d {
                    Dim::Known(k) if *k != n => return Err(bad()),
                    Dim::Sym(s) => {
                        if let Some((prev, who)) = bound.get(s) {
                            if *prev != n {
                                return Err(Error::shape(
                                    "specialize",
                                    format!("dimension {s:?} is {prev} in input {who:?} but {n} in input {:?}", v.name),
                                ));
                            }
                        }
                        bound.insert(s.clone(), (n, v.name.clone()));
                    }
                    _ => {}
                }
            }
        }
    }
    for (i, t) in values {
        let id = *g.inputs.get(*i).ok_or_else(|| {
            Error::invalid("specialize", format!("no input #{i} to bind a value to"))
        })?;
        let v = g.value(id);
        if t.shape != input_shapes[*i] || t.dtype != v.dtype {
            return Err(Error::invalid(
                "specialize",
                format!(
                    "value bound to input {:?} is {} {:?}, expected {} {:?}",
                    v.name, t.dtype, t.shape, v.dtype, input_shapes[*i]
                ),
            ));
        }
        g.initializers.insert(id, t.clone());
    }
    // Forget inferred intermediate shapes: they are recomputed from the concrete inputs.
    let inputs: std::collections::HashSet<_> = g.inputs.iter().copied().collect();
    for (i, v) in g.values.iter_mut().enumerate() {
        let id = crate::ir::ValueId(i);
        if inputs.contains(&id) {
            v.shape =
                Some(dims(&input_shapes[g.inputs.iter().position(|&x| x == id).unwrap_or(0)]));
        } else if !graph.initializers.contains_key(&id) {
            v.shape = None;
        }
    }
    propagate(&mut g, true)?;
    crate::passes::simplify::remove_identities(&mut g);
    crate::passes::dce::eliminate_dead_nodes(&mut g);
    for node in &g.nodes {
        if is_pending(node) {
            return Err(Error::invalid(
                op_name(node),
                "parameter inputs (axes, pads, split sizes, bounds) must be constants or bound values; \
                 pass them with the input values (CompiledGraph::plan_with_values)",
            ));
        }
        for &o in &node.outputs {
            let v = g.value(o);
            if v.shape.as_deref().and_then(concrete).is_none() {
                let why = match v.shape.as_deref() {
                    Some(s) => {
                        format!("still has a symbolic shape {} after specialization", shape_str(s))
                    }
                    None => {
                        "has no shape: an input it depends on has parameters that were not bound"
                            .to_string()
                    }
                };
                return Err(Error::shape(op_name(node), format!("output {:?} {why}", v.name)));
            }
        }
    }
    Ok(g)
}

/// Tensor inputs of each op whose *values* determine output shapes.
fn shape_param_inputs(op: &Op) -> &'static [usize] {
    match op {
        Op::Reshape { .. } | Op::Expand | Op::Tile => &[1],
        Op::Slice => &[1, 2, 3, 4],
        Op::ConstantOfShape(_) => &[0],
        Op::Range => &[0, 1, 2],
        _ => &[],
    }
}

/// Indices (into `graph.inputs`) of the inputs whose values, not just shapes, decide the shapes
/// of the graph: they reach a shape parameter through foldable ops. Executors pass their values
/// to specialization (and key plan caches by them).
pub fn value_inputs(graph: &Graph) -> Vec<usize> {
    let mut needed = vec![false; graph.values.len()];
    // Reverse topological order: every consumer is visited before its producer.
    for node in graph.nodes.iter().rev() {
        let value_needed = node.outputs.iter().any(|o| needed[o.0]);
        for (k, v) in node.inputs.iter().enumerate() {
            let through = value_needed
                && node.op.is_foldable()
                && !matches!(node.op, Op::Shape { .. } | Op::Size);
            if through
                || shape_param_inputs(&node.op).contains(&k)
                || param_inputs(&node.op).contains(&k)
            {
                needed[v.0] = true;
            }
        }
    }
    graph
        .inputs
        .iter()
        .enumerate()
        .filter(|(_, v)| needed[v.0] && !graph.initializers.contains_key(v))
        .map(|(i, _)| i)
        .collect()
}
