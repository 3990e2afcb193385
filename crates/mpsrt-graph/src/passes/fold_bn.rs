//! Folds inference-mode BatchNormalization into the preceding Conv when the BN parameters are
//! float32 constants and the conv weights are too — an initializer, scaled here, or values
//! computed from constants only, scaled by an inserted `Mul` that the planner runs once:
//! `w' = w * s`, `b' = (b - mean) * s + beta` with `s = gamma / sqrt(var + eps)` per output
//! channel. Saves one full pass over the activation per
//! conv, which exported CNNs (ResNet, MobileNet...) have dozens of.
//!
//! The BatchNormalizations left (not after a private conv: DenseNet's pre-activation
//! `Concat -> BN -> Relu`) become `x * s + t` with constant per-channel `s`, `t` when their
//! parameters are f32 constants: plain elementwise Mul/Add, which the elementwise fusion merges
//! with the following Relu into one kernel (two steps per dense layer become one).

use crate::ir::{Graph, HostTensor, ValueId};
use crate::op::{BinaryOp, Op};
use mpsrt_core::DType;

/// Returns how many BatchNormalization nodes were folded away.
pub fn fold_batchnorm_into_conv(g: &mut Graph) -> usize {
    let uses = g.use_counts();
    let producers = g.producers();
    let constant = constant_values(g);
    let mut removed: Vec<usize> = Vec::new();
    // Convs whose weight is computed (from constants only) get `Mul(w, scale)` inserted before
    // them: (conv index, the Mul node).
    let mut scaled: Vec<(usize, crate::ir::Node)> = Vec::new();
    for bn_idx in 0..g.nodes.len() {
        let Op::BatchNormalization { epsilon } = g.nodes[bn_idx].op else { continue };
        let bn = &g.nodes[bn_idx];
        if bn.inputs.len() != 5 || bn.outputs.len() != 1 {
            continue;
        }
        let Some(conv_idx) = private_conv(g, &uses, &producers, bn.inputs[0]) else { continue };
        let f32s = |v: ValueId| {
            g.initializers.get(&v).filter(|t| t.dtype == DType::F32).map(HostTensor::to_f64_vec)
        };
        let (Some(gamma), Some(beta), Some(mean), Some(var)) =
            (f32s(bn.inputs[1]), f32s(bn.inputs[2]), f32s(bn.inputs[3]), f32s(bn.inputs[4]))
        else {
            continue;
        };
        let m = gamma.len();
        if [&beta, &mean, &var].iter().any(|p| p.len() != m) {
            continue;
        }
        let scale: Vec<f64> = (0..m).map(|c| gamma[c] / (var[c] + epsilon as f64).sqrt()).collect();
        let shift: Vec<f64> = (0..m).map(|c| beta[c] - mean[c] * scale[c]).collect();
        let bn_out = bn.outputs[0];
        let Some(mul) = scale_conv(g, conv_idx, &scale, &shift, &constant) else { continue };
        scaled.extend(mul.map(|n| (conv_idx, n)));
        // The conv now writes the BN's output value directly.
        g.nodes[conv_idx].outputs[0] = bn_out;
        removed.push(bn_idx);
    }
    rebuild(g, &removed, scaled);
    removed.len()
}

/// The Conv producing `v` when `v` is its only output, used once and not a graph output (so
/// the conv may be rewritten to compute something else in its place).
pub(crate) fn private_conv(
    g: &Graph,
    uses: &[usize],
    producers: &[Option<usize>],
    v: ValueId,
) -> Option<usize> {
    let conv_idx = producers[v.0]?;
    let conv = &g.nodes[conv_idx];
    (matches!(conv.op, Op::Conv(_))
        && conv.outputs.len() == 1
        && conv.inputs.len() >= 2
        && uses[v.0] == 1
        && !g.outputs.contains(&v))
    .then_some(conv_idx)
}

/// Rewrites Conv `conv_idx` to compute `conv(x) * scale[c] + shift[c]` per output channel `c`:
/// `w' = w * scale`, `b' = b * scale + shift`. The weight must be f32 and constant: an
/// initializer (scaled here) or values computed from constants only (scaled by the returned
/// `Mul` node, which the caller inserts before the conv and the planner hoists into the init
/// steps); the bias, if any, an f32 initializer. `None` (the graph untouched) when it does not
/// apply; `Some(mul)` once rewritten.
pub(crate) fn scale_conv(
    g: &mut Graph,
    conv_idx: usize,
    scale: &[f64],
    shift: &[f64],
    constant: &[bool],
) -> Option<Option<crate::ir::Node>> {
    let conv = &g.nodes[conv_idx];
    let f32s = |v: ValueId| {
        g.initializers.get(&v).filter(|t| t.dtype == DType::F32).map(HostTensor::to_f64_vec)
    };
    let wid = conv.inputs[1];
    let w = f32s(wid);
    let w_shape: Vec<usize> = match &w {
        Some(_) => g.initializers[&wid].shape.clone(),
        None if constant[wid.0] && g.value(wid).dtype == DType::F32 => {
            g.value(wid).shape.as_deref().and_then(crate::ir::concrete)?
        }
        None => return None,
    };
    let m = w_shape.first().copied().unwrap_or(0);
    let per = w_shape.iter().skip(1).product::<usize>();
    if m == 0 || scale.len() != m || shift.len() != m {
        return None;
    }
    let bias = match conv.inputs.get(2) {
        Some(&b) => match f32s(b) {
            Some(b) if b.len() == m => b,
            _ => return None,
        },
        None => vec![0.0; m],
    };
    let new_b: Vec<f32> = (0..m).map(|c| (bias[c] * scale[c] + shift[c]) as f32).collect();
    let conv_name = conv.name.clone();
    // Fresh values: the originals may be shared with other nodes.
    let wv = g.add_temp(&format!("{conv_name}_bnfolded_w"), DType::F32);
    let bv = g.add_temp(&format!("{conv_name}_bnfolded_b"), DType::F32);
    g.value_mut(wv).shape = Some(crate::ir::dims(&w_shape));
    g.value_mut(bv).shape = Some(crate::ir::dims(&[m]));
    let mut mul = None;
    match w {
        Some(w) => {
            let new_w: Vec<f32> =
                w.iter().enumerate().map(|(i, &x)| (x * scale[i / per]) as f32).collect();
            g.initializers.insert(wv, HostTensor::from_f32(w_shape, &new_w));
        }
        None => {
            let mut s_shape = vec![1; w_shape.len()];
            s_shape[0] = m;
            let sv = g.add_temp(&format!("{conv_name}_bnfolded_scale"), DType::F32);
            g.value_mut(sv).shape = Some(crate::ir::dims(&s_shape));
            let sc: Vec<f32> = scale.iter().map(|&v| v as f32).collect();
            g.initializers.insert(sv, HostTensor::from_f32(s_shape, &sc));
            mul = Some(crate::ir::Node {
                op: Op::Binary(BinaryOp::Mul),
                inputs: vec![wid, sv],
                outputs: vec![wv],
                name: format!("{conv_name}/bnfolded_w"),
            });
        }
    }
    g.initializers.insert(bv, HostTensor::from_f32(vec![m], &new_b));
    let conv = &mut g.nodes[conv_idx];
    conv.inputs.truncate(1);
    conv.inputs.extend([wv, bv]);
    Some(mul)
}

/// Drops the nodes at indices `removed` and inserts each `(i, node)` of `before` right before
/// node `i`, keeping the order topological.
pub(crate) fn rebuild(g: &mut Graph, removed: &[usize], mut before: Vec<(usize, crate::ir::Node)>) {
    let nodes = std::mem::take(&mut g.nodes);
    for (i, n) in nodes.into_iter().enumerate() {
        while let Some(k) = before.iter().position(|(c, _)| *c == i) {
            g.nodes.push(before.remove(k).1);
        }
        if !removed.contains(&i) {
            g.nodes.push(n);
        }
    }
}

/// Values computed from constants only: initializers and the outputs of nodes whose inputs all
/// are such values (never a graph input).
pub(crate) fn constant_values(g: &Graph) -> Vec<bool> {
    let mut c = vec![false; g.values.len()];
    for v in g.initializers.keys() {
        c[v.0] = true;
    }
    for n in &g.nodes {
        if !n.inputs.is_empty() && n.inputs.iter().all(|v| c[v.0]) {
            for o in &n.outputs {
                c[o.0] = true;
            }
        }
    }
    for v in &g.inputs {
        c[v.0] = false;
    }
    c
}

/// Rewrites the remaining inference BatchNormalizations with f32 constant parameters into
/// `Mul(x, s)`, `Add(_, t)` (`s = gamma / sqrt(var + eps)`, `t = beta - mean * s`, shaped
/// `[C, 1, ...]` to broadcast over the channel axis of an input of known rank >= 2). Returns how
/// many were rewritten.
pub fn batchnorm_to_affine(g: &mut Graph) -> usize {
    let mut rewritten = 0;
    let mut i = 0;
    while i < g.nodes.len() {
        let Op::BatchNormalization { epsilon } = g.nodes[i].op else {
            i += 1;
            continue;
        };
        let bn = &g.nodes[i];
        let rank = g.value(bn.inputs[0]).shape.as_ref().map(|s| s.len());
        let f32s = |v: ValueId| {
            g.initializers.get(&v).filter(|t| t.dtype == DType::F32).map(HostTensor::to_f64_vec)
        };
        let params = (bn.inputs.len() == 5 && bn.outputs.len() == 1)
            .then(|| {
                Some((
                    f32s(bn.inputs[1])?,
                    f32s(bn.inputs[2])?,
                    f32s(bn.inputs[3])?,
                    f32s(bn.inputs[4])?,
                ))
            })
            .flatten();
        let (Some((gamma, beta, mean, var)), Some(rank)) = (params, rank) else {
            i += 1;
            continue;
        };
        let c = gamma.len();
        if rank < 2 || c == 0 || [&beta, &mean, &var].iter().any(|p| p.len() != c) {
            i += 1;
            continue;
        }
        let scale: Vec<f64> = (0..c).map(|k| gamma[k] / (var[k] + epsilon as f64).sqrt()).collect();
        let shift: Vec<f32> = (0..c).map(|k| (beta[k] - mean[k] * scale[k]) as f32).collect();
        let scale: Vec<f32> = scale.iter().map(|&v| v as f32).collect();
        let mut shape = vec![c];
        shape.resize(rank - 1, 1);
        let (name, x, y) = (bn.name.clone(), bn.inputs[0], bn.outputs[0]);
        let consts = [("scale", scale), ("shift", shift)].map(|(what, data)| {
            let v = g.add_temp(&format!("{name}_{what}"), DType::F32);
            g.value_mut(v).shape = Some(crate::ir::dims(&shape));
            g.initializers.insert(v, HostTensor::from_f32(shape.clone(), &data));
            v
        });
        let mid = g.add_temp(&format!("{name}_scaled"), DType::F32);
        g.value_mut(mid).shape = g.value(x).shape.clone();
        g.nodes[i] = crate::ir::Node {
            op: Op::Binary(BinaryOp::Mul),
            inputs: vec![x, consts[0]],
            outputs: vec![mid],
            name: format!("{name}/scale"),
        };
        let add = crate::ir::Node {
            op: Op::Binary(BinaryOp::Add),
            inputs: vec![mid, consts[1]],
            outputs: vec![y],
            name: format!("{name}/shift"),
        };
        g.nodes.insert(i + 1, add);
        rewritten += 1;
        i += 2;
    }
    rewritten
}
