//! Attention as exported by frameworks, found and replaced by one `Attention` node:
//!
//! ```text
//! MatMul(q·c₁, kᵀ·c₂) → [Mul|Div by a scalar constant] → [Add mask] → Softmax(last axis) → MatMul(·, v)
//! ```
//!
//! (`c₁`, `c₂` optional scalar constants: torch's exported `scaled_dot_product_attention`
//! scales q and kᵀ by `√scale` each; BERT-style exports divide the scores by `√d`; with
//! `precision=f16` the softmax sits between `Cast(f32)` and `Cast(f16)`, which go too; the
//! NaN guard transformers' SDPA export writes after the softmax, `Where(IsNaN(p), 0, p)`,
//! goes too (`MPSRT_ATTENTION_NAN_GUARD=0`: never; `f16`: f16 chains only) — it gives zeros
//! for fully masked rows, as the engine's `Attention` does.) Every
//! intermediate must feed only the next node of the chain, operands must be 4-D
//! (`[batch, heads, seq, head]`, kᵀ as `[batch, heads, head, keys]`) with matching dims where
//! known, f32 or f16. The rewrite is `Transpose(kᵀ, [0, 1, 3, 2])` — a view at run time — then
//! `Attention(q, k, v, mask)` with the folded scale and an f32 softmax, which the engine runs
//! as the fused kernel on the GPU (the composition elsewhere).
//!
//! One difference on purpose: a query row whose mask removes every key gives zeros (ONNX
//! `Attention`'s rule) where the unfused Softmax gives NaN. Exported masks use large finite
//! negatives (-10000, `finfo.min`), for which both agree.

use super::fold_bn::rebuild;
use crate::attention::AttentionAttrs;
use crate::ir::{Dim, Graph, Node, ValueId};
use crate::op::{BinaryOp, Op, UnaryOp};
use mpsrt_core::DType;

/// The scalar value of a constant (initializer with one element), or of a one-element value
/// computed from such constants by `Sqrt`, `Reciprocal`, float `Cast`s and `Mul`/`Div`/`Add`/
/// `Sub` — torch's SDPA export computes its scale as `Sqrt(Cast(1 / Sqrt(Cast(d))))` from
/// `Shape(q)`, which the shape folder leaves as nodes (it folds integer shape arithmetic, not
/// float math); those nodes become dead once the chain is absorbed.
fn scalar_const(g: &Graph, v: ValueId) -> Option<f64> {
    scalar_value(g, v, 8)
}

fn scalar_value(g: &Graph, v: ValueId, depth: usize) -> Option<f64> {
    if let Some(t) = g.initializers.get(&v) {
        return (t.numel() == 1 && (t.dtype.is_float() || depth < 8)).then(|| t.to_f64_vec()[0]);
    }
    let numel_one =
        g.value(v).shape.as_ref().is_some_and(|s| s.iter().all(|d| d.known() == Some(1)));
    if depth == 0 || !numel_one {
        return None;
    }
    let n = g.nodes.iter().find(|n| n.outputs.first() == Some(&v))?;
    let arg = |k: usize| n.inputs.get(k).and_then(|&x| scalar_value(g, x, depth - 1));
    let r = match (&n.op, n.inputs.len()) {
        (Op::Unary(crate::op::UnaryOp::Sqrt), 1) => arg(0)?.sqrt(),
        (Op::Unary(crate::op::UnaryOp::Reciprocal), 1) => 1.0 / arg(0)?,
        (Op::Cast { to }, 1) if to.is_float() => arg(0)?,
        (Op::Binary(op), 2) => {
            let (a, b) = (arg(0)?, arg(1)?);
            match op {
                BinaryOp::Mul => a * b,
                BinaryOp::Div => a / b,
                BinaryOp::Add => a + b,
                BinaryOp::Sub => a - b,
                _ => return None,
            }
        }
        _ => return None,
    };
    (g.value(v).dtype.is_float() && r.is_finite()).then_some(r)
}

/// Known rank-4 shape of `v`.
fn shape4(g: &Graph, v: ValueId) -> Option<[Dim; 4]> {
    let s = g.value(v).shape.as_ref()?;
    <[Dim; 4]>::try_from(s.clone()).ok()
}

/// Dims that may be equal: equal, or one of them not known.
fn compatible(a: &Dim, b: &Dim) -> bool {
    match (a.known(), b.known()) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    }
}

struct Walk<'a> {
    g: &'a Graph,
    uses: Vec<usize>,
    producers: Vec<Option<usize>>,
    consumers: Vec<Vec<usize>>,
}

impl Walk<'_> {
    /// The single consumer of `v` when `v` is private (one use, not a graph output).
    fn only_consumer(&self, v: ValueId) -> Option<usize> {
        if self.uses[v.0] != 1 || self.g.outputs.contains(&v) {
            return None;
        }
        self.consumers[v.0].first().copied()
    }

    /// `x` for `x * c` (either order) or `x / c` with `c` a scalar constant, when `v` is the
    /// private output of such a node: `(x, factor, node)`.
    fn scaled(&self, v: ValueId) -> Option<(ValueId, f64, usize)> {
        if self.uses[v.0] != 1 || self.g.outputs.contains(&v) {
            return None;
        }
        let i = self.producers[v.0]?;
        let n = &self.g.nodes[i];
        let (&[a, b], Op::Binary(op)) = (&n.inputs[..], &n.op) else { return None };
        match op {
            BinaryOp::Mul => match (scalar_const(self.g, a), scalar_const(self.g, b)) {
                (None, Some(c)) => Some((a, c, i)),
                (Some(c), None) => Some((b, c, i)),
                _ => None,
            },
            BinaryOp::Div => {
                let c = scalar_const(self.g, b)?;
                (c != 0.0 && scalar_const(self.g, a).is_none()).then_some((a, 1.0 / c, i))
            }
            _ => None,
        }
    }
}

impl Walk<'_> {
    /// Whether `v` is `x * s` or `x / s` with `s` a one-element value that is not (yet) a
    /// constant.
    fn scaled_by_unknown(&self, v: ValueId) -> bool {
        let Some(i) = self.producers[v.0] else { return false };
        let n = &self.g.nodes[i];
        let (&[a, b], Op::Binary(BinaryOp::Mul | BinaryOp::Div)) = (&n.inputs[..], &n.op) else {
            return false;
        };
        let unknown_scalar = |x: ValueId| {
            let one = self
                .g
                .value(x)
                .shape
                .as_ref()
                .is_some_and(|s| s.len() <= 1 && s.iter().all(|d| d.known() == Some(1)));
            one && scalar_const(self.g, x).is_none()
        };
        unknown_scalar(a) || unknown_scalar(b)
    }
}

/// Whether NaN-guarded chains of element type `dt` are fused (`MPSRT_ATTENTION_NAN_GUARD`, read
/// at each plan: unset or `1` always, `0` never, `f16` f16 chains only — the default before
/// the eleventh session). f16 chains run on the matrix-unit kernel
/// (`mpsrt_kernels::attention_coop`) where the device has one (9th session); f32 ones, on GPUs,
/// as two GEMMs around a one-pass masked softmax (the engine's `Attention`, 11th session) —
/// the scalar fused kernel had been slower than the unfused chain (H200, session 13 call 3:
/// 243 against ~160 us per BERT-base layer at batch 8).
fn nan_guard_on(dt: DType) -> bool {
    match std::env::var("MPSRT_ATTENTION_NAN_GUARD").as_deref().map(str::trim) {
        Ok("0") => false,
        Ok("f16") => dt == DType::F16,
        _ => true,
    }
}

impl Walk<'_> {
    /// The NaN guard torch's SDPA export puts after the softmax `s`: `Where(IsNaN(s), 0, s)`,
    /// or with precision=f16 (an f32 softmax) `Where(IsNaN(s), 0, Cast(s, f16))`, when those
    /// are `s`'s only uses and private: `(nodes, the Where's output, whether the f16 cast was
    /// among them)` (otherwise a `Cast(f16)` may follow the Where).
    fn nan_guard(&self, s: ValueId) -> Option<(Vec<usize>, ValueId, bool)> {
        let g = self.g;
        if self.uses[s.0] != 2 || g.outputs.contains(&s) {
            return None;
        }
        let users = &self.consumers[s.0];
        let is_nan = *users.iter().find(|&&i| g.nodes[i].op == Op::Unary(UnaryOp::IsNaN))?;
        let other = *users.iter().find(|&&i| i != is_nan)?;
        let mut nodes = vec![is_nan];
        let flag = g.nodes[is_nan].outputs[0];
        let sel = self.only_consumer(flag)?;
        let cast = matches!(g.nodes[other].op, Op::Cast { to: DType::F16 });
        let x = if cast {
            nodes.push(other);
            let x = g.nodes[other].outputs[0];
            (self.only_consumer(x) == Some(sel)).then_some(x)?
        } else {
            (other == sel).then_some(s)?
        };
        let n = &g.nodes[sel];
        match (&n.op, &n.inputs[..], &n.outputs[..]) {
            (Op::Where, &[c, zero, y], &[out])
                if c == flag && y == x && scalar_const(g, zero) == Some(0.0) =>
            {
                nodes.push(sel);
                Some((nodes, out, cast))
            }
            _ => None,
        }
    }
}

/// One match: the nodes to remove and the replacement's parts.
struct Found {
    nodes: Vec<usize>,
    q: ValueId,
    kt: ValueId,
    v: ValueId,
    mask: Option<ValueId>,
    scale: f64,
    out: ValueId,
}

fn match_at(w: &Walk, first: usize) -> Option<Found> {
    let g = w.g;
    let n = &g.nodes[first];
    let (Op::MatMul, &[a, b], &[s0]) = (&n.op, &n.inputs[..], &n.outputs[..]) else {
        return None;
    };
    let dt = g.value(s0).dtype;
    if !matches!(dt, DType::F32 | DType::F16) {
        return None;
    }
    // q or kᵀ scaled by a one-element value not known yet (SDPA's scale from `Shape(q)` with
    // a symbolic batch): leave the pattern to the plan, where the shapes make it constant.
    if [a, b].iter().any(|&x| w.scaled_by_unknown(x)) {
        return None;
    }
    let mut nodes = vec![first];
    let mut scale = 1.0;
    let (mut q, mut kt) = (a, b);
    if let Some((x, c, i)) = w.scaled(a) {
        (q, scale) = (x, scale * c);
        nodes.push(i);
    }
    if let Some((x, c, i)) = w.scaled(b) {
        (kt, scale) = (x, scale * c);
        nodes.push(i);
    }
    // Walk the private chain after the scores.
    let mut cur = s0;
    let mut mask = None;
    let mut next = w.only_consumer(cur)?;
    let node = |i: usize| &g.nodes[i];
    if let Op::Binary(op @ (BinaryOp::Mul | BinaryOp::Div)) = node(next).op {
        let ins = &node(next).inputs;
        let c = match (op, ins.iter().position(|&v| v == cur)) {
            (BinaryOp::Mul, Some(p)) => scalar_const(g, ins[1 - p])?,
            (BinaryOp::Div, Some(0)) => 1.0 / scalar_const(g, ins[1]).filter(|&c| c != 0.0)?,
            _ => return None,
        };
        scale *= c;
        nodes.push(next);
        cur = node(next).outputs[0];
        next = w.only_consumer(cur)?;
    }
    if let (Op::Binary(BinaryOp::Add), &[x, y]) = (&node(next).op, &node(next).inputs[..]) {
        let m = if x == cur { y } else { x };
        let rank_ok = g.value(m).shape.as_ref().is_some_and(|s| s.len() <= 4);
        if m == cur || g.value(m).dtype != dt || !rank_ok {
            return None;
        }
        mask = Some(m);
        nodes.push(next);
        cur = node(next).outputs[0];
        next = w.only_consumer(cur)?;
    }
    // `precision=f16` keeps the softmax in f32 between two casts; the fused kernel's softmax
    // is f32 anyway, so the casts go with the chain.
    let cast_to = |i: usize, to: DType| matches!(node(i).op, Op::Cast { to: t } if t == to);
    let widened = dt == DType::F16 && cast_to(next, DType::F32);
    if widened {
        nodes.push(next);
        cur = node(next).outputs[0];
        next = w.only_consumer(cur)?;
    }
    let last_axis = |axis: i64| axis == -1 || axis == 3;
    match node(next).op {
        Op::Softmax { axis } if last_axis(axis) => {}
        Op::SoftmaxFlat { axis, log: false } if last_axis(axis) => {}
        _ => return None,
    }
    nodes.push(next);
    let mut p = node(next).outputs[0];
    let mut narrowed = false;
    if let Some((guard, out, cast)) = nan_guard_on(dt).then(|| w.nan_guard(p)).flatten() {
        // torch's SDPA export zeroes fully masked rows (`Where(IsNaN(p), 0, p)`): the fused
        // kernel's rule for such rows, so the guard goes with the chain (casts included).
        nodes.extend(guard);
        (p, narrowed) = (out, cast);
    }
    let mut fin = w.only_consumer(p)?;
    if widened && !narrowed {
        if !cast_to(fin, DType::F16) {
            return None;
        }
        nodes.push(fin);
        p = node(fin).outputs[0];
        fin = w.only_consumer(p)?;
    }
    let (Op::MatMul, &[pa, v], &[out]) =
        (&node(fin).op, &node(fin).inputs[..], &node(fin).outputs[..])
    else {
        return None;
    };
    if pa != p || v == p {
        return None;
    }
    nodes.push(fin);
    // Shapes: q [b, h, sq, d], kᵀ [b, h, d, skv], v [b, h, skv, dv], one dtype.
    let (sq, sk, sv) = (shape4(g, q)?, shape4(g, kt)?, shape4(g, v)?);
    let same = |x: &Dim, y: &Dim, z: &Dim| compatible(x, y) && compatible(y, z) && compatible(x, z);
    let dims_ok = same(&sq[0], &sk[0], &sv[0])
        && same(&sq[1], &sk[1], &sv[1])
        && compatible(&sq[3], &sk[2])
        && compatible(&sk[3], &sv[2]);
    let types_ok = [q, kt, v].iter().all(|&x| g.value(x).dtype == dt);
    if !dims_ok || !types_ok || !scale.is_finite() {
        return None;
    }
    Some(Found { nodes, q, kt, v, mask, scale, out })
}

/// Replaces every attention pattern by a `Transpose` view and an `Attention` node, after the
/// other transformer patterns (GELU, decomposed LayerNorm: `transformer.rs`, which runs from
/// here so the planner's one transformer hook covers both). Returns how many patterns were
/// replaced (attention and the others), so the caller knows dead nodes are left.
pub fn fuse_attention(g: &mut Graph) -> usize {
    let others = super::transformer::fuse_transformer_patterns(g);
    others + fuse_attention_only(g)
}

fn fuse_attention_only(g: &mut Graph) -> usize {
    let producers = g.producers();
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); g.values.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for v in &n.inputs {
            consumers[v.0].push(i);
        }
    }
    let w = Walk { g, uses: g.use_counts(), producers, consumers };
    let mut found: Vec<Found> = Vec::new();
    let mut taken = vec![false; g.nodes.len()];
    for i in 0..g.nodes.len() {
        if let Some(f) = match_at(&w, i) {
            if f.nodes.iter().all(|&n| !taken[n]) {
                f.nodes.iter().for_each(|&n| taken[n] = true);
                found.push(f);
            }
        }
    }
    if found.is_empty() {
        return 0;
    }
    let mut removed = Vec::new();
    let mut inserted = Vec::new();
    for f in &found {
        let fin = *f.nodes.last().unwrap_or(&0);
        let dt = g.value(f.q).dtype;
        let k = g.add_temp("attention_k", dt);
        if let Some(s) = g.value(f.kt).shape.clone() {
            if let [a, b, c, d] = &s[..] {
                g.value_mut(k).shape = Some(vec![a.clone(), b.clone(), d.clone(), c.clone()]);
            }
        }
        let name = g.nodes[fin].name.clone();
        inserted.push((
            fin,
            Node {
                op: Op::Transpose { perm: Some(vec![0, 1, 3, 2]) },
                inputs: vec![f.kt],
                outputs: vec![k],
                name: format!("{name}/k"),
            },
        ));
        let attrs = AttentionAttrs {
            is_causal: false,
            q_num_heads: None,
            kv_num_heads: None,
            qk_matmul_output_mode: 0,
            scale: Some(f.scale as f32),
            softcap: 0.0,
            softmax_precision: Some(DType::F32),
            left_window_size: -1,
            right_window_size: -1,
            has_mask: f.mask.is_some(),
            has_past: false,
            has_nonpad: false,
        };
        let mut inputs = vec![f.q, k, f.v];
        inputs.extend(f.mask);
        inserted.push((
            fin,
            Node {
                op: Op::Attention(attrs),
                inputs,
                outputs: vec![f.out],
                name: format!("{name}/attention"),
            },
        ));
        removed.extend_from_slice(&f.nodes);
    }
    rebuild(g, &removed, inserted);
    found.len()
}
