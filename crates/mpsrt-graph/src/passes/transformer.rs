//! Transformer patterns that exporters write as chains of small ops, rewritten into the one op
//! the engine runs as one kernel (issue 23):
//!
//! - **GELU, erf form** — `x · (1 + erf(x / √2)) · 0.5` (`Div` by √2 or `Mul` by 1/√2; the two
//!   products in any association) — and **tanh form** —
//!   `0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))` (`Pow(x, 3)`) — become
//!   `Gelu { approximate_tanh }`. `x` is read twice by the chain, which kept the bias `Add` in
//!   front of it out of the elementwise fusion group; as one `Gelu` node it fuses.
//! - **Decomposed LayerNorm** (opset < 17 exports): `m = ReduceMean(x, last axis)`,
//!   `d = x − m`, `v = ReduceMean(Pow(d, 2))` (or `d·d`), `y = d / Sqrt(v + ε) · γ (+ β)` becomes
//!   `LayerNormalization { axis: -1, epsilon: ε }(x, γ, β)` — one GPU kernel.
//! - **Projections of one input** (attention's Q, K, V): one GEMM over the concatenated weights
//!   and one bias add, sliced per projection (views); see [`fuse_projections`].
//!
//! Every intermediate must be private to the chain (one consumer, or two for `d`, not a graph
//! output) and constants must match to 1e-3 relative (an f16 √2 is 1.4141); the last node of
//! the chain is rewritten in place (keeping its output value and name) and the others are left
//! to dead-node elimination.

use crate::ir::{Graph, HostTensor, Node, ValueId};
use crate::op::{BinaryOp, Op, ReduceKind, UnaryOp};
use mpsrt_core::DType;

struct Ctx<'a> {
    g: &'a Graph,
    uses: Vec<usize>,
    producers: Vec<Option<usize>>,
    consumers: Vec<Vec<usize>>,
}

impl Ctx<'_> {
    fn private(&self, v: ValueId, n: usize) -> bool {
        self.uses[v.0] == n && !self.g.outputs.contains(&v)
    }

    /// The only consumer of private `v`.
    fn next(&self, v: ValueId) -> Option<usize> {
        self.private(v, 1).then(|| self.consumers[v.0].first().copied()).flatten()
    }

    fn scalar(&self, v: ValueId) -> Option<f64> {
        let t = self.g.initializers.get(&v)?;
        (t.numel() == 1 && t.dtype.is_float()).then(|| t.to_f64_vec()[0])
    }

    fn is_const(&self, v: ValueId, want: f64) -> bool {
        self.scalar(v).is_some_and(|c| (c - want).abs() <= 1e-3 * want.abs().max(1e-12))
    }

    /// `(other operand, node)` when `v` is produced by `op` with one operand `x`.
    fn binary_with(&self, v: ValueId, op: BinaryOp, x: ValueId) -> Option<(ValueId, usize)> {
        let i = self.producers[v.0]?;
        let n = &self.g.nodes[i];
        if n.op != Op::Binary(op) || n.inputs.len() != 2 {
            return None;
        }
        match (n.inputs[0] == x, n.inputs[1] == x) {
            (true, false) => Some((n.inputs[1], i)),
            (false, true) if matches!(op, BinaryOp::Mul | BinaryOp::Add) => Some((n.inputs[0], i)),
            _ => None,
        }
    }

    /// The binary `op` node consuming private `v`, and its other operand.
    fn consumer_op(&self, v: ValueId, op: BinaryOp) -> Option<(usize, ValueId)> {
        let c = self.next(v)?;
        let n = &self.g.nodes[c];
        if n.op != Op::Binary(op) || n.inputs.len() != 2 || n.outputs.len() != 1 {
            return None;
        }
        let other = if n.inputs[0] == v { n.inputs[1] } else { n.inputs[0] };
        (other != v).then_some((c, other))
    }
}

/// GELU's tail from `a1 = 1 + f(x)` (private): the products with `x` and 0.5. Returns the final
/// node and the tail's nodes.
fn gelu_tail(c: &Ctx, a1: ValueId, x: ValueId) -> Option<(usize, Vec<usize>)> {
    let (m1, o1) = c.consumer_op(a1, BinaryOp::Mul)?;
    let y1 = c.g.nodes[m1].outputs[0];
    if o1 == x || c.is_const(o1, 0.5) {
        // (x · a1) · 0.5 or (a1 · 0.5) · x.
        let want_half = o1 == x;
        let (m2, o2) = c.consumer_op(y1, BinaryOp::Mul)?;
        let ok = if want_half { c.is_const(o2, 0.5) } else { o2 == x };
        return ok.then(|| (m2, vec![m1, m2]));
    }
    // (x · 0.5) · a1.
    let (half, h) = c.binary_with(o1, BinaryOp::Mul, x)?;
    (c.is_const(half, 0.5) && c.private(o1, 1)).then(|| (m1, vec![h, m1]))
}

/// `(x, nodes, final node, tanh form)` for a GELU chain around the `Erf`/`Tanh` node `i`.
fn gelu_at(c: &Ctx, i: usize) -> Option<(ValueId, Vec<usize>, usize, bool)> {
    let n = &c.g.nodes[i];
    let tanh = match n.op {
        Op::Unary(UnaryOp::Erf) => false,
        Op::Unary(UnaryOp::Tanh) => true,
        _ => return None,
    };
    let (&[u], &[e]) = (&n.inputs[..], &n.outputs[..]) else { return None };
    if !c.private(u, 1) {
        return None;
    }
    let p = c.producers[u.0]?;
    let pn = &c.g.nodes[p];
    let (Op::Binary(op), &[a, b]) = (&pn.op, &pn.inputs[..]) else { return None };
    let mut nodes = vec![p, i];
    let x = if !tanh {
        match op {
            BinaryOp::Div if c.is_const(b, std::f64::consts::SQRT_2) => a,
            BinaryOp::Mul if c.is_const(b, std::f64::consts::FRAC_1_SQRT_2) => a,
            BinaryOp::Mul if c.is_const(a, std::f64::consts::FRAC_1_SQRT_2) => b,
            _ => return None,
        }
    } else {
        // √(2/π) · (x + 0.044715 · x³)
        let k = (2.0 / std::f64::consts::PI).sqrt();
        let inner = match op {
            BinaryOp::Mul if c.is_const(b, k) => a,
            BinaryOp::Mul if c.is_const(a, k) => b,
            _ => return None,
        };
        let ai = c.producers[inner.0]?;
        let an = &c.g.nodes[ai];
        if an.op != Op::Binary(BinaryOp::Add) || an.inputs.len() != 2 || !c.private(inner, 1) {
            return None;
        }
        let found = (0..2).find_map(|k| {
            let (x, cube_scaled) = (an.inputs[k], an.inputs[1 - k]);
            let mi = c.producers[cube_scaled.0]?;
            let mn = &c.g.nodes[mi];
            if mn.op != Op::Binary(BinaryOp::Mul) || !c.private(cube_scaled, 1) {
                return None;
            }
            let (cube, coef) = if c.is_const(mn.inputs[1], 0.044715) {
                (mn.inputs[0], mn.inputs[1])
            } else {
                (mn.inputs[1], mn.inputs[0])
            };
            if !c.is_const(coef, 0.044715) || !c.private(cube, 1) {
                return None;
            }
            let (three, pi) = c.binary_with(cube, BinaryOp::Pow, x)?;
            c.is_const(three, 3.0).then_some((x, vec![pi, mi, ai]))
        });
        let (x, more) = found?;
        nodes.extend(more);
        x
    };
    if !c.g.value(x).dtype.is_float() || !c.private(e, 1) {
        return None;
    }
    let (a1node, one) = c.consumer_op(e, BinaryOp::Add)?;
    if !c.is_const(one, 1.0) {
        return None;
    }
    nodes.push(a1node);
    let (fin, tail) = gelu_tail(c, c.g.nodes[a1node].outputs[0], x)?;
    nodes.extend(tail);
    Some((x, nodes, fin, tanh))
}

/// Whether `n` reduces the last axis of a value of rank `rank` (mean, keepdims).
fn mean_last(n: &Op, rank: usize) -> bool {
    match n {
        Op::Reduce { kind: ReduceKind::Mean, axes: Some(a), keepdims: true, .. } => {
            a.len() == 1 && (a[0] == -1 || a[0] == rank as i64 - 1)
        }
        _ => false,
    }
}

/// `(x, gamma, beta, eps, final node, nodes)` for a decomposed layer norm whose first
/// `ReduceMean` is node `i`.
#[allow(clippy::type_complexity)]
fn layernorm_at(
    c: &Ctx,
    i: usize,
) -> Option<(ValueId, ValueId, Option<ValueId>, f64, usize, Vec<usize>)> {
    let g = c.g;
    let n = &g.nodes[i];
    let (&[x], &[m]) = (&n.inputs[..], &n.outputs[..]) else { return None };
    let rank = g.value(x).shape.as_ref()?.len();
    if !mean_last(&n.op, rank) || !g.value(x).dtype.is_float() {
        return None;
    }
    let si = c.next(m)?;
    let sn = &g.nodes[si];
    if sn.op != Op::Binary(BinaryOp::Sub) || sn.inputs[..] != [x, m] {
        return None;
    }
    let d = sn.outputs[0];
    if !c.private(d, 2) {
        return None;
    }
    let (mut sq, mut div) = (None, None);
    for &k in &c.consumers[d.0] {
        let kn = &g.nodes[k];
        match (&kn.op, &kn.inputs[..]) {
            (Op::Binary(BinaryOp::Pow), &[a, two]) if a == d && c.is_const(two, 2.0) => {
                sq = Some(k)
            }
            (Op::Binary(BinaryOp::Mul), &[a, b]) if a == d && b == d => sq = Some(k),
            (Op::Binary(BinaryOp::Div), &[a, _]) if a == d => div = Some(k),
            _ => {}
        }
    }
    let (sq, div) = (sq?, div?);
    let vi = c.next(g.nodes[sq].outputs[0])?;
    if !mean_last(&g.nodes[vi].op, rank) {
        return None;
    }
    let (ai, eps) = c.consumer_op(g.nodes[vi].outputs[0], BinaryOp::Add)?;
    let eps = c.scalar(eps)?;
    let ri = c.next(g.nodes[ai].outputs[0])?;
    let rn = &g.nodes[ri];
    if rn.op != Op::Unary(UnaryOp::Sqrt) || g.nodes[div].inputs[1] != rn.outputs[0] {
        return None;
    }
    if !c.private(rn.outputs[0], 1) {
        return None;
    }
    // Scale (and bias) vectors of the last axis' length.
    let last = g.value(x).shape.as_ref()?.last()?.known()?;
    let vector = |v: ValueId| g.initializers.get(&v).is_some_and(|t| t.numel() == last);
    let (mi, gamma) = c.consumer_op(g.nodes[div].outputs[0], BinaryOp::Mul)?;
    if !vector(gamma) {
        return None;
    }
    let mut nodes = vec![i, si, sq, vi, ai, ri, div, mi];
    let mut fin = mi;
    let mut beta = None;
    if let Some((bi, b)) = c.consumer_op(g.nodes[mi].outputs[0], BinaryOp::Add) {
        if vector(b) {
            nodes.push(bi);
            (fin, beta) = (bi, Some(b));
        }
    }
    Some((x, gamma, beta, eps, fin, nodes))
}

/// `(MatMul node, bias Add node, weight, bias)`.
type Projection = (usize, usize, ValueId, ValueId);

/// Projections of one input by constant weights with a constant bias — `Add(MatMul(x, Wᵢ), bᵢ)`
/// for `Wᵢ [K, Nᵢ]`, `bᵢ [Nᵢ]`, like attention's Q, K and V — become one
/// `Add(MatMul(x, [W₁ W₂ …]), [b₁ b₂ …])` and a `Slice` view of its last axis per projection:
/// one wider GEMM (more workgroups for a small batch) and one bias add instead of 2·n
/// dispatches. Only weights and biases read by that one node each join (the old ones are
/// dropped). Returns how many groups were merged.
pub fn fuse_projections(g: &mut Graph) -> usize {
    // Weights and biases may be shared: ORT's constant sharing gives every all-zero bias of a
    // freshly initialized model one initializer. A merged member stops using its weight and
    // bias; an initializer is dropped only when no use is left.
    let mut uses = g.use_counts();
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); g.values.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for v in &n.inputs {
            consumers[v.0].push(i);
        }
    }
    // (matmul node, bias add node, weight, bias) per candidate, grouped by input.
    let mut groups: Vec<(ValueId, Vec<Projection>)> = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let (Op::MatMul, &[x, w], &[y]) = (&n.op, &n.inputs[..], &n.outputs[..]) else { continue };
        let Some(wt) = g.initializers.get(&w) else { continue };
        if wt.shape.len() != 2 || !wt.dtype.is_float() {
            continue;
        }
        if uses[y.0] != 1 || g.outputs.contains(&y) {
            continue;
        }
        let Some(&ai) = consumers[y.0].first() else { continue };
        let an = &g.nodes[ai];
        if an.op != Op::Binary(BinaryOp::Add) || an.inputs.len() != 2 {
            continue;
        }
        let b = if an.inputs[0] == y { an.inputs[1] } else { an.inputs[0] };
        let Some(bt) = g.initializers.get(&b) else { continue };
        if bt.shape != [wt.shape[1]] || bt.dtype != wt.dtype || b == y || b == x {
            continue;
        }
        match groups.iter_mut().find(|(v, _)| *v == x) {
            Some((_, m)) => m.push((i, ai, w, b)),
            None => groups.push((x, vec![(i, ai, w, b)])),
        }
    }
    let mut removed = Vec::new();
    let mut inserted = Vec::new();
    let mut merged = 0;
    for (x, mut members) in groups {
        let (k, dt) = {
            let w0 = &g.initializers[&members[0].2];
            (w0.shape[0], w0.dtype)
        };
        members.retain(|m| {
            let w = &g.initializers[&m.2];
            w.shape[0] == k && w.dtype == dt
        });
        if members.len() < 2 {
            continue;
        }
        let widths: Vec<usize> = members.iter().map(|m| g.initializers[&m.2].shape[1]).collect();
        let total: usize = widths.iter().sum();
        let es = dt.size();
        let mut wb = Vec::with_capacity(k * total * es);
        for r in 0..k {
            for (m, &n) in members.iter().zip(&widths) {
                wb.extend_from_slice(&g.initializers[&m.2].bytes[r * n * es..(r + 1) * n * es]);
            }
        }
        let mut bb = Vec::with_capacity(total * es);
        for m in &members {
            bb.extend_from_slice(&g.initializers[&m.3].bytes);
        }
        let (Ok(wcat), Ok(bcat)) =
            (HostTensor::new(dt, vec![k, total], wb), HostTensor::new(dt, vec![total], bb))
        else {
            continue;
        };
        let first = members.iter().map(|m| m.0).min().unwrap_or(0);
        let name = g.nodes[first].name.clone();
        let wv = g.add_temp("projections_w", dt);
        let bv = g.add_temp("projections_b", dt);
        for (v, t) in [(wv, wcat), (bv, bcat)] {
            g.value_mut(v).shape = Some(crate::ir::dims(&t.shape));
            g.initializers.insert(v, t);
        }
        let y = g.add_temp("projections", dt);
        let z = g.add_temp("projections_bias", dt);
        let shape = g.value(x).shape.clone().map(|mut s| {
            s.pop();
            s.push(crate::ir::Dim::Known(total));
            s
        });
        g.value_mut(y).shape = shape.clone();
        g.value_mut(z).shape = shape;
        let node = |op, inputs, outputs, suffix: &str| Node {
            op,
            inputs,
            outputs,
            name: format!("{name}/{suffix}"),
        };
        inserted.push((first, node(Op::MatMul, vec![x, wv], vec![y], "merged")));
        inserted.push((first, node(Op::Binary(BinaryOp::Add), vec![y, bv], vec![z], "bias")));
        let mut off = 0i64;
        for (m, &n) in members.iter().zip(&widths) {
            let c = |g: &mut Graph, hint: &str, v: i64| {
                let id = g.add_temp(hint, mpsrt_core::DType::I64);
                g.value_mut(id).shape = Some(crate::ir::dims(&[1]));
                g.initializers.insert(id, HostTensor::from_i64(vec![1], &[v]));
                id
            };
            let (s, e, a) = (
                c(g, "slice_start", off),
                c(g, "slice_end", off + n as i64),
                c(g, "slice_axis", -1),
            );
            let out = g.nodes[m.1].outputs[0];
            let sn = node(Op::Slice, vec![z, s, e, a], vec![out], "slice");
            // The Add's position: after the merged nodes, before its consumers.
            let an = &mut g.nodes[m.1];
            *an = Node { name: an.name.clone(), ..sn };
            removed.push(m.0);
            for c in [m.2, m.3] {
                uses[c.0] -= 1;
                if uses[c.0] == 0 {
                    g.initializers.remove(&c);
                }
            }
            off += n as i64;
        }
        merged += 1;
    }
    if merged > 0 {
        super::fold_bn::rebuild(g, &removed, inserted);
    }
    merged
}

/// Merges projections ([`fuse_projections`]) and rewrites every GELU and decomposed LayerNorm
/// chain; returns how many rewrites.
pub fn fuse_transformer_patterns(g: &mut Graph) -> usize {
    fuse_projections(g) + fuse_chains(g) + merge_duplicates(g)
}

/// Repeated mask preparation merged: an elementwise node (`Where`, `Cast`, `Expand`, unary,
/// binary) whose op, attributes and inputs equal an earlier node's — small constants compared
/// by value, so each layer's own copy of `0` or `-inf` matches — has its consumers read the
/// earlier node's output instead, and DCE removes it. transformers' SDPA export converts the
/// one padding mask again in every layer (`Where(mask, 0, -inf)`: 12 identical steps in
/// BERT-base, each writing a `[b, 1, s, s]` bias once the attention is fused). Graph outputs
/// are never merged away. Returns how many nodes were merged.
fn merge_duplicates(g: &mut Graph) -> usize {
    use std::collections::HashMap;
    let key_of = |g: &Graph, v: ValueId| match g.initializers.get(&v) {
        Some(t) if t.bytes.len() <= 16 => format!("c{:?}{:?}{:?}", t.dtype, t.shape, t.bytes),
        _ => format!("v{}", v.0),
    };
    let mut seen: HashMap<String, ValueId> = HashMap::new();
    let mut remap: HashMap<ValueId, ValueId> = HashMap::new();
    let mut merged = 0;
    for i in 0..g.nodes.len() {
        for v in g.nodes[i].inputs.iter_mut() {
            if let Some(&r) = remap.get(v) {
                *v = r;
            }
        }
        let n = &g.nodes[i];
        if let Some(x) = and_true_operand(g, n) {
            remap.insert(n.outputs[0], x);
            merged += 1;
            continue;
        }
        let pure =
            matches!(n.op, Op::Where | Op::Cast { .. } | Op::Expand | Op::Unary(_) | Op::Binary(_));
        if !pure || n.outputs.len() != 1 || g.outputs.contains(&n.outputs[0]) {
            continue;
        }
        let ins: Vec<String> = n.inputs.iter().map(|&v| key_of(g, v)).collect();
        let key = format!("{:?}|{}", n.op, ins.join(","));
        let out = n.outputs[0];
        match seen.get(&key) {
            Some(&first) if g.value(first).dtype == g.value(out).dtype => {
                remap.insert(out, first);
                merged += 1;
            }
            Some(_) => {}
            None => {
                seen.insert(key, out);
            }
        }
    }
    merged
}

/// `And(x, true)` (either order) whose constant is one element of rank ≤ `x`'s: the output is
/// `x` itself. transformers' index-built padding mask ANDs the mask with a constant `true`
/// (one dispatch per run for nothing); `MPSRT_AND_TRUE=0` keeps the node.
fn and_true_operand(g: &Graph, n: &Node) -> Option<ValueId> {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("MPSRT_AND_TRUE").map_or(true, |v| v.trim() != "0"));
    if !on || n.op != Op::Binary(BinaryOp::And) || n.inputs.len() != 2 || n.outputs.len() != 1 {
        return None;
    }
    if g.outputs.contains(&n.outputs[0]) {
        return None;
    }
    let is_true = |v: ValueId| {
        g.initializers
            .get(&v)
            .is_some_and(|t| t.dtype == DType::Bool && t.bytes.len() == 1 && t.bytes[0] != 0)
    };
    let (c, x) = match (is_true(n.inputs[0]), is_true(n.inputs[1])) {
        (true, _) => (n.inputs[0], n.inputs[1]),
        (_, true) => (n.inputs[1], n.inputs[0]),
        _ => return None,
    };
    let rank_c = g.initializers.get(&c)?.shape.len();
    let xv = g.value(x);
    let rank_x = xv.shape.as_ref()?.len();
    (xv.dtype == DType::Bool && g.value(n.outputs[0]).dtype == DType::Bool && rank_c <= rank_x)
        .then_some(x)
}

fn fuse_chains(g: &mut Graph) -> usize {
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); g.values.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for v in &n.inputs {
            consumers[v.0].push(i);
        }
    }
    let c = Ctx { g, uses: g.use_counts(), producers: g.producers(), consumers };
    let mut taken = vec![false; g.nodes.len()];
    let mut rewrites: Vec<(usize, Op, Vec<ValueId>)> = Vec::new();
    for i in 0..g.nodes.len() {
        if let Some((x, nodes, fin, tanh)) = gelu_at(&c, i) {
            if nodes.iter().all(|&n| !taken[n]) {
                nodes.iter().for_each(|&n| taken[n] = true);
                rewrites.push((fin, Op::Gelu { approximate_tanh: tanh }, vec![x]));
            }
        } else if let Some((x, gamma, beta, eps, fin, nodes)) = layernorm_at(&c, i) {
            if nodes.iter().all(|&n| !taken[n]) {
                nodes.iter().for_each(|&n| taken[n] = true);
                let mut ins = vec![x, gamma];
                ins.extend(beta);
                let op = Op::LayerNormalization { axis: -1, epsilon: eps as f32 };
                rewrites.push((fin, op, ins));
            }
        }
    }
    let count = rewrites.len();
    for (fin, op, inputs) in rewrites {
        let node = &mut g.nodes[fin];
        node.op = op;
        node.inputs = inputs;
    }
    count
}
