//! Fusion analyses. Elementwise fusion groups maximal trees of elementwise nodes whose
//! intermediates have a single consumer and the group output's shape, so one generated kernel
//! can compute the group per output element without materializing intermediates. Epilogue
//! candidates find conv/matmul nodes followed by a constant bias add and/or an activation that the
//! producing kernel could apply while storing its result.

use crate::ir::{Dim, Graph, HostTensor, ValueId};
use crate::op::{BinaryOp, Op};

/// A group of elementwise nodes computed by one kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FusedElementwise {
    /// Node indices (into `graph.nodes`), in topological order; the last one produces `output`.
    pub nodes: Vec<usize>,
    /// Values read from outside the group, in first-use order: the kernel's bindings.
    pub inputs: Vec<ValueId>,
    /// The only value of the group visible outside it.
    pub output: ValueId,
}

/// A conv/matmul/gemm node with ops its kernel could apply in its epilogue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Epilogue {
    /// The Conv/MatMul/Gemm node.
    pub anchor: usize,
    /// An `Add` of a constant bias: (node index, bias value).
    pub bias: Option<(usize, ValueId)>,
    /// A following activation node.
    pub activation: Option<usize>,
}

impl Epilogue {
    /// All nodes the epilogue would absorb, anchor first.
    pub fn nodes(&self) -> Vec<usize> {
        let mut v = vec![self.anchor];
        v.extend(self.bias.map(|b| b.0));
        v.extend(self.activation);
        v
    }

    /// The value the fused kernel would produce.
    pub fn output(&self, g: &Graph) -> ValueId {
        let last = self.activation.or(self.bias.map(|b| b.0)).unwrap_or(self.anchor);
        g.nodes[last].outputs[0]
    }
}

fn consumers(g: &Graph) -> Vec<Vec<usize>> {
    let mut c = vec![Vec::new(); g.values.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for v in &n.inputs {
            if !c[v.0].contains(&i) {
                c[v.0].push(i);
            }
        }
    }
    c
}

/// Groups elementwise nodes; only groups of two or more nodes are returned. Nodes listed in
/// `exclude` (e.g. absorbed by an epilogue) never join a group.
pub fn fuse_elementwise(g: &Graph, exclude: &[usize]) -> Vec<FusedElementwise> {
    let uses = g.use_counts();
    let producers = g.producers();
    let is_output: Vec<bool> = {
        let mut v = vec![false; g.values.len()];
        for o in &g.outputs {
            v[o.0] = true;
        }
        v
    };
    let mut group_of: Vec<Option<usize>> = vec![None; g.nodes.len()];
    let mut groups: Vec<Option<(Vec<usize>, ValueId)>> = Vec::new();
    for (i, node) in g.nodes.iter().enumerate() {
        if !node.op.is_elementwise() || node.outputs.len() != 1 || exclude.contains(&i) {
            continue;
        }
        let out = node.outputs[0];
        let out_shape = &g.value(out).shape;
        let mut members = vec![i];
        for &v in &node.inputs {
            let Some(p) = producers[v.0] else { continue };
            let Some(gp) = group_of[p] else { continue };
            let Some((_, gout)) = &groups[gp] else { continue };
            // Intermediates must stay invisible and broadcast to the output's shape: an
            // elementwise op commutes with broadcasting, so a smaller intermediate (SE's gate,
            // `Sigmoid([1, C, 1, 1])` before the `Mul` with `[1, C, H, W]`) is recomputed per
            // output element from its inputs, which the kernel broadcasts to the output.
            if *gout != v
                || uses[v.0] != 1
                || is_output[v.0]
                || !broadcasts_to(g.value(v).shape.as_deref(), out_shape.as_deref())
            {
                continue;
            }
            if let Some((nodes, _)) = groups[gp].take() {
                members.extend(nodes);
            }
        }
        members.sort_unstable();
        let id = groups.len();
        for &m in &members {
            group_of[m] = Some(id);
        }
        groups.push(Some((members, out)));
    }
    groups
        .into_iter()
        .flatten()
        .filter(|(nodes, _)| nodes.len() >= 2)
        .map(|(nodes, output)| {
            let produced: Vec<ValueId> =
                nodes.iter().flat_map(|&n| g.nodes[n].outputs.iter().copied()).collect();
            let mut inputs = Vec::new();
            for &n in &nodes {
                for &v in &g.nodes[n].inputs {
                    if !produced.contains(&v) && !inputs.contains(&v) {
                        inputs.push(v);
                    }
                }
            }
            FusedElementwise { nodes, inputs, output }
        })
        .collect()
}

/// Whether a value of shape `v` broadcasts to `out` without growing it: no higher rank, and
/// every dim (aligned from the right) equal to the output's or a known 1. Unknown shapes never.
fn broadcasts_to(v: Option<&[Dim]>, out: Option<&[Dim]>) -> bool {
    let (Some(v), Some(out)) = (v, out) else { return false };
    v.len() <= out.len()
        && v.iter().rev().zip(out.iter().rev()).all(|(a, b)| a == b || a.known() == Some(1))
}

/// Finds conv/matmul/gemm nodes followed by a constant per-channel bias add and/or activation.
pub fn epilogue_candidates(g: &Graph) -> Vec<Epilogue> {
    let uses = g.use_counts();
    let cons = consumers(g);
    let is_output = |v: ValueId| g.outputs.contains(&v);
    // The single consumer of `v`, if `v` is private to it.
    let sole = |v: ValueId| -> Option<usize> {
        if uses[v.0] == 1 && !is_output(v) {
            cons[v.0].first().copied()
        } else {
            None
        }
    };
    let mut out = Vec::new();
    for (i, node) in g.nodes.iter().enumerate() {
        let channel_axis_last = match node.op {
            Op::Conv(_) => false,
            Op::MatMul | Op::Gemm { .. } => true,
            _ => continue,
        };
        let Some(&y) = node.outputs.first() else { continue };
        let mut e = Epilogue { anchor: i, bias: None, activation: None };
        let mut cur = y;
        if let Some(c) = sole(cur) {
            let cn = &g.nodes[c];
            if cn.op == Op::Binary(BinaryOp::Add) && cn.inputs.len() == 2 && cn.outputs.len() == 1 {
                let other = if cn.inputs[0] == cur { cn.inputs[1] } else { cn.inputs[0] };
                if is_channel_bias(g, y, other, channel_axis_last) {
                    e.bias = Some((c, other));
                    cur = cn.outputs[0];
                }
            }
        }
        if let Some(c) = sole(cur) {
            if g.nodes[c].op.is_activation()
                && g.nodes[c].inputs.len() == 1
                && g.nodes[c].outputs.len() == 1
            {
                e.activation = Some(c);
            }
        }
        if e.bias.is_some() || e.activation.is_some() {
            out.push(e);
        }
    }
    out
}

/// Whether `b` is a constant holding one value per output channel of `y`, shaped so that it
/// broadcasts along that channel only (`[C]`/`[1, C]` for matmul, `[C, 1, 1]`/`[1, C, 1, 1]` for conv).
fn is_channel_bias(g: &Graph, y: ValueId, b: ValueId, last: bool) -> bool {
    let (Some(t), Some(ys)) = (g.initializers.get(&b), g.value(y).shape.as_ref()) else {
        return false;
    };
    if ys.len() < 2 || t.shape.len() > ys.len() {
        return false;
    }
    let ch_axis = if last { ys.len() - 1 } else { 1 };
    let Some(c) = ys[ch_axis].known() else { return false };
    let lead = ys.len() - t.shape.len();
    t.shape.iter().enumerate().all(|(k, &d)| if k + lead == ch_axis { d == c } else { d == 1 })
        && t.numel() == c
}

/// Which Conv/Gemm/MatMul nodes run with an epilogue (`Step::Epilogue`), per node index.
#[derive(Debug, Clone, Default)]
pub(crate) struct EpilogueChoice {
    /// The bias `Add` node a MatMul anchor applies, and the constant bias (N values).
    pub bias_of: Vec<Option<(usize, ValueId)>>,
    /// The activation node a Conv/Gemm/MatMul anchor applies.
    pub act_of: Vec<Option<usize>>,
    /// The `Add` node a Conv anchor applies, and the Add's other operand (the residual).
    pub add_of: Vec<Option<(usize, ValueId)>>,
    /// Nodes absorbed into some anchor's epilogue (they get no step of their own).
    pub absorbed: Vec<bool>,
}

/// Chooses the epilogues the kernels run: Conv/Gemm + Relu/LeakyRelu/Clip (from
/// [`epilogue_candidates`]) and Conv + `Add` of a same-shape tensor available before the conv
/// (ResNet's residual), optionally followed by such an activation. `hoisted` nodes never take
/// part. The intermediate values must be private (one consumer, not graph outputs).
pub(crate) fn choose_epilogues(g: &Graph, hoisted: &[bool]) -> EpilogueChoice {
    let n = g.nodes.len();
    let mut ch = EpilogueChoice::none(n);
    let uses = g.use_counts();
    let cons = consumers(g);
    let producers = g.producers();
    let private = |v: ValueId| uses[v.0] == 1 && !g.outputs.contains(&v);
    let activation_after = |v: ValueId| -> Option<usize> {
        let c = *cons[v.0].first()?;
        let node = &g.nodes[c];
        (private(v)
            && !hoisted[c]
            && node.op.is_epilogue_activation()
            && node.inputs.len() == 1
            && node.outputs.len() == 1)
            .then_some(c)
    };
    for e in epilogue_candidates(g) {
        let Some(a) = e.activation else { continue };
        let anchor_ok = matches!(g.nodes[e.anchor].op, Op::Conv(_) | Op::Gemm { .. });
        if e.bias.is_none()
            && anchor_ok
            && g.nodes[a].op.is_epilogue_activation()
            && !hoisted[e.anchor]
            && !hoisted[a]
            && g.nodes[e.anchor].outputs.len() == 1
        {
            ch.act_of[e.anchor] = Some(a);
            ch.absorbed[a] = true;
        }
    }
    if matmul_epilogues_on() {
        choose_matmul_epilogues(g, hoisted, &mut ch);
    }
    for (ai, add) in g.nodes.iter().enumerate() {
        if add.op != Op::Binary(BinaryOp::Add)
            || add.inputs.len() != 2
            || hoisted[ai]
            || ch.absorbed[ai]
        {
            continue;
        }
        for k in 0..2 {
            let (y, other) = (add.inputs[k], add.inputs[1 - k]);
            let Some(ci) = producers[y.0] else { continue };
            let conv = &g.nodes[ci];
            let same_shape = {
                let (ys, os) = (g.value(y), g.value(other));
                ys.dtype == os.dtype
                    && ys.shape.is_some()
                    && ys.shape.as_deref().and_then(crate::ir::concrete).is_some()
                    && ys.shape == os.shape
            };
            // The residual must exist before the conv's step runs.
            let available = producers[other.0].is_none_or(|pi| pi < ci);
            if y == other
                || !matches!(conv.op, Op::Conv(_))
                || conv.outputs.len() != 1
                || hoisted[ci]
                || ch.act_of[ci].is_some()
                || ch.add_of[ci].is_some()
                || !private(y)
                || !same_shape
                || !available
            {
                continue;
            }
            ch.add_of[ci] = Some((ai, other));
            ch.absorbed[ai] = true;
            if let Some(c) = add.outputs.first().and_then(|&o| activation_after(o)) {
                ch.act_of[ci] = Some(c);
                ch.absorbed[c] = true;
            }
            break;
        }
    }
    ch
}

impl EpilogueChoice {
    /// No epilogues for a graph of `n` nodes.
    pub(crate) fn none(n: usize) -> Self {
        EpilogueChoice {
            bias_of: vec![None; n],
            act_of: vec![None; n],
            add_of: vec![None; n],
            absorbed: vec![false; n],
        }
    }
}

/// Whether MatMul nodes take epilogues and scalar scales move past MatMuls
/// (`MPSRT_MATMUL_EPILOGUE=0` turns both off, read at each plan: the A/B switch for the
/// fusion below and `matmul_scale.rs`).
pub(crate) fn matmul_epilogues_on() -> bool {
    std::env::var("MPSRT_MATMUL_EPILOGUE").map_or(true, |v| v.trim() != "0")
}

/// A linear layer's tail in the MatMul's epilogue (issue 23, BERT): `MatMul(x, W)` of float
/// operands with at least 2 dims each, then optionally `Add` of a constant bias of N values
/// (last axis), then optionally `Add` of a same-shape, same-type tensor computed before the
/// MatMul (the residual), then optionally an epilogue activation or `Gelu` — at least one of
/// them. BERT's projections: QKV `MatMul → Add(bias)`, attention output and FFN down
/// `MatMul → Add(bias) → Add(residual)`, FFN up `MatMul → Add(bias) → Gelu`. Every
/// intermediate must be private (one consumer, not a graph output) and no node hoisted.
fn choose_matmul_epilogues(g: &Graph, hoisted: &[bool], ch: &mut EpilogueChoice) {
    let uses = g.use_counts();
    let cons = consumers(g);
    let producers = g.producers();
    let private = |v: ValueId| uses[v.0] == 1 && !g.outputs.contains(&v);
    // The sole consumer of private `v` when it is a plain binary Add, and its other operand.
    let add_after = |v: ValueId| -> Option<(usize, ValueId)> {
        let c = *cons[v.0].first()?;
        let node = &g.nodes[c];
        (private(v)
            && !hoisted[c]
            && node.op == Op::Binary(BinaryOp::Add)
            && node.inputs.len() == 2
            && node.outputs.len() == 1
            && node.inputs[0] != node.inputs[1])
            .then(|| (c, if node.inputs[0] == v { node.inputs[1] } else { node.inputs[0] }))
    };
    let concrete_shape = |v: ValueId| g.value(v).shape.as_deref().and_then(crate::ir::concrete);
    for (i, node) in g.nodes.iter().enumerate() {
        if node.op != Op::MatMul
            || node.inputs.len() != 2
            || node.outputs.len() != 1
            || hoisted[i]
            || ch.absorbed[i]
        {
            continue;
        }
        let y = node.outputs[0];
        let ranks_ok = node.inputs.iter().all(|&v| concrete_shape(v).is_some_and(|s| s.len() >= 2));
        let float = matches!(g.value(y).dtype, mpsrt_core::DType::F32 | mpsrt_core::DType::F16);
        if !ranks_ok || !float || concrete_shape(y).is_none() {
            continue;
        }
        let mut cur = y;
        let mut bias = None;
        if let Some((c, other)) = add_after(cur) {
            let bias_dtype_ok = g.value(other).dtype == g.value(y).dtype;
            if bias_dtype_ok && is_channel_bias(g, y, other, true) {
                bias = Some((c, other));
                cur = g.nodes[c].outputs[0];
            }
        }
        let mut add = None;
        if let Some((c, other)) = add_after(cur) {
            let (vc, vo) = (g.value(cur), g.value(other));
            let available = producers[other.0].is_none_or(|pi| pi < i);
            if vc.dtype == vo.dtype
                && concrete_shape(other).is_some()
                && vc.shape == vo.shape
                && available
                && !g.initializers.contains_key(&other)
            {
                add = Some((c, other));
                cur = g.nodes[c].outputs[0];
            }
        }
        let mut act = None;
        if let Some(&c) = cons[cur.0].first() {
            let an = &g.nodes[c];
            if private(cur)
                && !hoisted[c]
                && (an.op.is_epilogue_activation() || matches!(an.op, Op::Gelu { .. }))
                && an.inputs.len() == 1
                && an.outputs.len() == 1
            {
                act = Some(c);
            }
        }
        if bias.is_none() && add.is_none() && act.is_none() {
            continue;
        }
        ch.bias_of[i] = bias;
        ch.add_of[i] = add;
        ch.act_of[i] = act;
        for n in [bias.map(|b| b.0), add.map(|a| a.0), act].into_iter().flatten() {
            ch.absorbed[n] = true;
        }
    }
}

/// The GEMM epilogues read C (a MatMul's bias) in f32: an f16 bias initializer (precision=f16
/// converts weights in place) gets an f32 copy here, once per plan, instead of a cast dispatch
/// on every run. The absorbed bias `Add` keeps the f16 original (it never runs).
pub(crate) fn widen_f16_biases(g: &mut Graph, ch: &mut EpilogueChoice) {
    let mut done: Vec<(ValueId, ValueId)> = Vec::new();
    for b in ch.bias_of.iter_mut().flatten() {
        if let Some(&(_, w)) = done.iter().find(|(f, _)| *f == b.1) {
            b.1 = w;
            continue;
        }
        let Some(h) = g.initializers.get(&b.1) else { continue };
        if h.dtype != mpsrt_core::DType::F16 {
            continue;
        }
        let vals: Vec<f32> = h.to_f64_vec().into_iter().map(|v| v as f32).collect();
        let t = HostTensor::from_f32(h.shape.clone(), &vals);
        let name = format!("{}__epilogue_f32", g.value(b.1).name);
        if let Ok(w) = g.add_initializer(name, t) {
            done.push((b.1, w));
            b.1 = w;
        }
    }
}
