//! Scalar scales moved past a MatMul (issue 23, BERT's attention): torch's SDPA export scales
//! both operands of `q·kᵀ` by `√scale` — `MatMul(Mul(q, c₁), Mul(kᵀ, c₂))`, two elementwise
//! passes over strided head views (≈13 µs each per BERT-base layer at batch 8 on the H200) —
//! which is `MatMul(q, kᵀ) · (c₁·c₂)`. After the rewrite the one scalar `Mul` follows the
//! product, where the elementwise fusion merges it into the mask `Add` that reads the scores:
//! two dispatches fewer per attention. Runs after the attention pass (a chain it fuses into one
//! `Attention` node keeps its scale there), only when the products are not fused.
//!
//! Under `precision=f16` the stored product is `1 / (c₁·c₂)` times larger than the scaled one
//! (8× for 64-wide heads) before the fused kernel scales it; scores stay far from f16's range
//! limit in practice (BERT's are O(10)).

use crate::ir::{Graph, HostTensor, ValueId};
use crate::op::{BinaryOp, Op};
use mpsrt_core::DType;

/// Rewrites every `MatMul` whose operands are private `Mul`s by scalar float constants (one or
/// both); returns how many. Leaves the graph topologically sorted, dead nodes removed.
pub fn hoist_matmul_scales(g: &mut Graph) -> usize {
    let uses = g.use_counts();
    let producers = g.producers();
    let scalar = |g: &Graph, v: ValueId| -> Option<f64> {
        let t = g.initializers.get(&v)?;
        (t.numel() == 1 && t.dtype.is_float()).then(|| t.to_f64_vec()[0])
    };
    // (Mul node, unscaled operand, scale) when `v` is a private scalar-constant product.
    let scaled = |g: &Graph, v: ValueId| -> Option<(usize, ValueId, f64)> {
        let i = producers[v.0]?;
        let n = &g.nodes[i];
        if n.op != Op::Binary(BinaryOp::Mul)
            || n.inputs.len() != 2
            || uses[v.0] != 1
            || g.outputs.contains(&v)
            || g.value(n.inputs[0]).dtype != g.value(v).dtype
        {
            return None;
        }
        let (x, c) = match (scalar(g, n.inputs[0]), scalar(g, n.inputs[1])) {
            (None, Some(c)) => (n.inputs[0], c),
            (Some(c), None) => (n.inputs[1], c),
            _ => return None,
        };
        (c.is_finite() && g.value(x).shape == g.value(v).shape).then_some((i, x, c))
    };
    let mut count = 0;
    for j in 0..g.nodes.len() {
        let n = &g.nodes[j];
        if n.op != Op::MatMul || n.inputs.len() != 2 || n.outputs.len() != 1 {
            continue;
        }
        let z = n.outputs[0];
        let dt = g.value(z).dtype;
        if !matches!(dt, DType::F32 | DType::F16) {
            continue;
        }
        let (sa, sb) = (scaled(g, n.inputs[0]), scaled(g, n.inputs[1]));
        let Some(&(host, _, _)) = sa.as_ref().or(sb.as_ref()) else { continue };
        let s = sa.map_or(1.0, |a| a.2) * sb.map_or(1.0, |b| b.2);
        let base = g.value(z).name.clone();
        let (Ok(c), Ok(z0)) = (
            g.add_initializer(format!("{base}/scale"), HostTensor::from_f64(dt, vec![], &[s])),
            g.add_value(format!("{base}/unscaled"), dt, g.value(z).shape.clone()),
        ) else {
            continue;
        };
        let ins =
            [sa.map_or(g.nodes[j].inputs[0], |a| a.1), sb.map_or(g.nodes[j].inputs[1], |b| b.1)];
        g.nodes[j].inputs = ins.to_vec();
        g.nodes[j].outputs = vec![z0];
        // The first scaling Mul becomes the product's scale (the other is left dead).
        let m = &mut g.nodes[host];
        m.inputs = vec![z0, c];
        m.outputs = vec![z];
        count += 1;
    }
    if count > 0 && g.toposort().is_ok() {
        super::dce::eliminate_dead_nodes(g);
    }
    count
}
