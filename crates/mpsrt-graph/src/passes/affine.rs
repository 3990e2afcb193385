//! Per-channel affine chains: consecutive `Mul`/`Add`/`Sub`/`Div` nodes by f32 constants that
//! are per channel (`[C, 1, 1]` against an NCHW value) or scalar compose into one `x * s + t`,
//! and when `x` comes from a private Conv with constant weights the whole chain folds into the
//! conv's weights and bias (`w' = w * s`, `b' = b * s + t`).
//!
//! Exported CNNs are full of these: Caffe-converted models (the ONNX light models among them)
//! follow every BatchNormalization with a `Scale` layer, `Mul(bn_w) -> Add(bn_b)`, so after
//! BatchNorm folding DenseNet-121 still had a `Conv -> Mul -> Add -> Relu` per dense layer (an
//! elementwise pass that hid the Relu from the conv's epilogue) and a five-input
//! `Concat -> Mul -> Add -> Mul -> Add -> Relu` pre-activation. After this pass the first is one
//! Conv + Relu epilogue step and the second a three-input `relu(x * s + t)`.

use super::fold_bn::{constant_values, private_conv, rebuild, scale_conv};
use crate::ir::{Dim, Graph, HostTensor, Node, ValueId};
use crate::op::{BinaryOp, Op};
use mpsrt_core::DType;

/// `y = base * s + t`, `s` and `t` per channel (length `C`) or uniform (length 1).
struct Affine {
    base: ValueId,
    s: Vec<f64>,
    t: Vec<f64>,
    /// The chain's nodes, first to last (the last writes the chain's value).
    nodes: Vec<usize>,
}

/// Elementwise `f` over two per-channel vectors, a length-1 one broadcasting.
fn zip(a: &[f64], b: &[f64], f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    let n = a.len().max(b.len());
    (0..n).map(|i| f(a[i.min(a.len() - 1)], b[i.min(b.len() - 1)])).collect()
}

/// The per-channel values of constant `k` against a variable of shape `x` when `k` broadcasts
/// to `x` without growing it and varies at most along axis 1 (channels): length 1 or `C`.
fn per_channel(g: &Graph, k: ValueId, x: &[Dim]) -> Option<Vec<f64>> {
    let t = g.initializers.get(&k).filter(|t| t.dtype == DType::F32)?;
    if t.shape.len() > x.len() || x.len() < 2 || t.numel() == 0 {
        return None;
    }
    let pad = x.len() - t.shape.len();
    for (i, &d) in t.shape.iter().enumerate() {
        let axis = i + pad;
        if d != 1 && (axis != 1 || x[1] != Dim::Known(d)) {
            return None;
        }
    }
    Some(t.to_f64_vec())
}

/// `(variable input, its per-channel constant, op, constant first)` for an affine node.
fn affine_step(
    g: &Graph,
    n: &Node,
    constant: &[bool],
) -> Option<(ValueId, Vec<f64>, BinaryOp, bool)> {
    let Op::Binary(op @ (BinaryOp::Mul | BinaryOp::Add | BinaryOp::Sub | BinaryOp::Div)) = n.op
    else {
        return None;
    };
    let (&[a, b], &[out]) = (&n.inputs[..], &n.outputs[..]) else { return None };
    let (x, k, k_first) = match (constant[a.0], constant[b.0]) {
        (false, true) => (a, b, false),
        (true, false) => (b, a, true),
        _ => return None,
    };
    let (xv, ov) = (g.value(x), g.value(out));
    if xv.dtype != DType::F32 || ov.dtype != DType::F32 || xv.shape != ov.shape {
        return None;
    }
    let kv = per_channel(g, k, xv.shape.as_deref()?)?;
    // x / k as x * (1 / k) only for finite non-zero k; k / x is not affine.
    if op == BinaryOp::Div && (k_first || kv.iter().any(|&v| v == 0.0 || !v.is_finite())) {
        return None;
    }
    Some((x, kv, op, k_first))
}

/// Composes `(s, t)` with one more step: `y = op(x·s + t, k)` (or `op(k, ·)`).
fn compose(s: &[f64], t: &[f64], k: &[f64], op: BinaryOp, k_first: bool) -> (Vec<f64>, Vec<f64>) {
    match (op, k_first) {
        (BinaryOp::Mul, _) => (zip(s, k, |a, b| a * b), zip(t, k, |a, b| a * b)),
        (BinaryOp::Add, _) => (s.to_vec(), zip(t, k, |a, b| a + b)),
        (BinaryOp::Sub, false) => (s.to_vec(), zip(t, k, |a, b| a - b)),
        (BinaryOp::Sub, true) => (s.iter().map(|v| -v).collect(), zip(k, t, |a, b| a - b)),
        // Div (k_first excluded by `affine_step`).
        _ => (zip(s, k, |a, b| a / b), zip(t, k, |a, b| a / b)),
    }
}

/// Merges affine chains and folds them into producing convs. Returns how many nodes were
/// removed.
pub fn fold_affine(g: &mut Graph) -> usize {
    let uses = g.use_counts();
    let producers = g.producers();
    let constant = constant_values(g);
    let before = g.nodes.len();
    // The chain ending at each value (None: not the end of an affine chain).
    let mut chain: Vec<Option<Affine>> = (0..g.values.len()).map(|_| None).collect();
    let mut ends: Vec<ValueId> = Vec::new();
    for i in 0..g.nodes.len() {
        let Some((x, k, op, k_first)) = affine_step(g, &g.nodes[i], &constant) else { continue };
        let out = g.nodes[i].outputs[0];
        // Extend the chain ending at x when x feeds only this node.
        let prev = (uses[x.0] == 1 && !g.outputs.contains(&x)).then(|| chain[x.0].take()).flatten();
        let mut a = prev.unwrap_or(Affine { base: x, s: vec![1.0], t: vec![0.0], nodes: vec![] });
        (a.s, a.t) = compose(&a.s, &a.t, &k, op, k_first);
        a.nodes.push(i);
        chain[out.0] = Some(a);
        ends.push(out);
    }
    let mut removed: Vec<usize> = Vec::new();
    let mut inserted: Vec<(usize, Node)> = Vec::new();
    for out in ends {
        let Some(a) = chain[out.0].take() else { continue };
        let last = *a.nodes.last().unwrap_or(&0);
        // Into the producing conv: every node of the chain goes.
        if let Some(conv_idx) = private_conv(g, &uses, &producers, a.base) {
            let m = match g.value(a.base).shape.as_deref().map(|s| s.get(1)) {
                Some(Some(Dim::Known(m))) => *m,
                _ => 0,
            };
            // Length-1 (uniform) coefficients repeat over the conv's m output channels.
            let per_oc = |v: &[f64]| (0..m).map(|i| v[i.min(v.len() - 1)]).collect::<Vec<f64>>();
            let (s, t) = (per_oc(&a.s), per_oc(&a.t));
            if m > 0 && [a.s.len(), a.t.len()].iter().all(|&n| n == 1 || n == m) {
                if let Some(mul) = scale_conv(g, conv_idx, &s, &t, &constant) {
                    inserted.extend(mul.map(|n| (conv_idx, n)));
                    g.nodes[conv_idx].outputs[0] = out;
                    removed.extend(&a.nodes);
                    continue;
                }
            }
        }
        if a.nodes.len() < 2 {
            continue;
        }
        // A longer chain: one Mul and one Add (each only when not the identity), the last
        // writing the chain's value, in place of the chain's last node.
        let rank = g.value(a.base).shape.as_ref().map_or(0, Vec::len);
        let name = g.nodes[last].name.clone();
        let (need_s, need_t) = (a.s.iter().any(|&v| v != 1.0), a.t.iter().any(|&v| v != 0.0));
        if !need_s && !need_t {
            continue;
        }
        let mut cur = a.base;
        for (what, vals, op, needed) in
            [("scale", &a.s, BinaryOp::Mul, need_s), ("shift", &a.t, BinaryOp::Add, need_t)]
        {
            if !needed {
                continue;
            }
            let mut shape = vec![vals.len()];
            shape.resize(rank - 1, 1);
            let k = g.add_temp(&format!("{name}_affine_{what}"), DType::F32);
            g.value_mut(k).shape = Some(crate::ir::dims(&shape));
            let f: Vec<f32> = vals.iter().map(|&v| v as f32).collect();
            g.initializers.insert(k, HostTensor::from_f32(shape, &f));
            let last_op = op == BinaryOp::Add || !need_t;
            let dst = if last_op {
                out
            } else {
                let v = g.add_temp(&format!("{name}_affine_scaled"), DType::F32);
                g.value_mut(v).shape = g.value(a.base).shape.clone();
                v
            };
            let n = Node {
                op: Op::Binary(op),
                inputs: vec![cur, k],
                outputs: vec![dst],
                name: format!("{name}/affine_{what}"),
            };
            inserted.push((last, n));
            cur = dst;
        }
        removed.extend(&a.nodes);
    }
    removed.sort_unstable();
    rebuild(g, &removed, inserted);
    before.saturating_sub(g.nodes.len())
}
