//! Canonicalization of front-end op forms: parameters an importer could only pass as tensor
//! inputs (Reduce axes, Split sizes, Clip bounds, Pad pads, CastLike's target type...) become
//! typed attributes as soon as their values or types are known. Inference runs it on every node,
//! so the executor only ever sees canonical ops; a node whose parameters are still unknown is
//! "pending" and its outputs stay unshaped until specialization binds the values.

use crate::ir::{Graph, HostTensor, Node};
use crate::op::Op;
use mpsrt_core::{Error, Result};

/// Rewrites `node` in place when its parameter inputs are available.
pub fn canonicalize(node: &mut Node, g: &Graph) -> Result<()> {
    let konst = |k: usize| -> Option<&HostTensor> {
        node.inputs.get(k).and_then(|v| g.initializers.get(v))
    };
    let ints = |k: usize| konst(k).map(HostTensor::to_i64_vec);
    let usizes = |k: usize| -> Result<Option<Vec<usize>>> {
        match ints(k) {
            Some(v) => v
                .iter()
                .map(|&x| {
                    usize::try_from(x).map_err(|_| {
                        Error::invalid(node.op.name(), format!("{v:?} has a negative entry"))
                    })
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
            None => Ok(None),
        }
    };
    let n = node.inputs.len();
    let (op, keep) = match (&node.op, n) {
        (Op::CastLike, 2) => match g.value(node.inputs[1]).shape {
            Some(_) => (Op::Cast { to: g.value(node.inputs[1]).dtype }, 1),
            None => return Ok(()),
        },
        (Op::Reduce { kind, axes: None, keepdims, noop_with_empty_axes }, 2) => match ints(1) {
            Some(a) => (
                Op::Reduce {
                    kind: *kind,
                    axes: Some(a),
                    keepdims: *keepdims,
                    noop_with_empty_axes: *noop_with_empty_axes,
                },
                1,
            ),
            None => return Ok(()),
        },
        (Op::Unsqueeze { .. }, 2) => match ints(1) {
            Some(a) => (Op::Unsqueeze { axes: a }, 1),
            None => return Ok(()),
        },
        (Op::Squeeze { .. }, 2) => match ints(1) {
            Some(a) => (Op::Squeeze { axes: Some(a).filter(|a| !a.is_empty()) }, 1),
            None => return Ok(()),
        },
        (Op::Split { axis, .. }, 2) => match usizes(1)? {
            Some(s) => (Op::Split { axis: *axis, splits: Some(s).filter(|s| !s.is_empty()) }, 1),
            None => return Ok(()),
        },
        (Op::Clip { min, max }, 2..=3) => {
            let scalar = |k: usize| konst(k).map(|t| t.to_f64_vec().first().map(|&v| v as f32));
            match (scalar(1), if n == 3 { scalar(2) } else { Some(*max) }) {
                (Some(lo), Some(hi)) => (Op::Clip { min: lo.or(*min), max: hi }, 1),
                _ => return Ok(()),
            }
        }
        (Op::Pad { mode, value, .. }, 2..=3) => {
            let v = if n == 3 {
                konst(2).map(|t| t.to_f64_vec().first().copied().unwrap_or(0.0) as f32)
            } else {
                Some(*value)
            };
            match (ints(1), v) {
                (Some(pads), Some(value)) => (Op::Pad { mode: *mode, pads, value }, 1),
                _ => return Ok(()),
            }
        }
        (Op::TopK { axis, largest, sorted, .. }, 2) => {
            match usizes(1)?.and_then(|k| k.first().copied()) {
                Some(k) => (Op::TopK { axis: *axis, k, largest: *largest, sorted: *sorted }, 1),
                None => return Ok(()),
            }
        }
        (Op::OneHot { axis, .. }, 3) => {
            // Depth may be any numeric type (float in the ONNX tests); ONNX truncates it.
            match ints(2).and_then(|d| d.first().copied()) {
                Some(d) => match usize::try_from(d) {
                    Ok(depth) if depth > 0 => (Op::OneHot { axis: *axis, depth }, 2),
                    _ => {
                        return Err(Error::invalid(
                            node.op.name(),
                            format!("depth must be a positive integer, got {d}"),
                        ))
                    }
                },
                None => return Ok(()),
            }
        }
        (Op::Resize(r), 2) => {
            let Some(t) = konst(1) else { return Ok(()) };
            let mut r = r.clone();
            if r.sizes_input {
                r.sizes = usizes(1)?.unwrap_or_default();
            } else {
                r.scales = t.to_f64_vec().iter().map(|&v| v as f32).collect();
            }
            (Op::Resize(r), 1)
        }
        _ => return Ok(()),
    };
    node.op = op;
    node.inputs.truncate(keep);
    Ok(())
}

/// Whether the node still waits for parameter values (see module docs).
pub fn is_pending(node: &Node) -> bool {
    match node.op {
        Op::CastLike => true,
        Op::Reduce { axes: None, .. }
        | Op::Unsqueeze { .. }
        | Op::Squeeze { .. }
        | Op::Split { .. } => node.inputs.len() > 1,
        Op::Clip { .. } | Op::Pad { .. } | Op::Resize(_) | Op::TopK { .. } => node.inputs.len() > 1,
        Op::OneHot { .. } => node.inputs.len() > 2,
        _ => false,
    }
}

/// Parameter-input positions per op: their values are needed before the node can run.
pub fn param_inputs(op: &Op) -> &'static [usize] {
    match op {
        Op::Reduce { axes: None, .. }
        | Op::Unsqueeze { .. }
        | Op::Squeeze { .. }
        | Op::Split { .. }
        | Op::Resize(_)
        | Op::TopK { .. } => &[1],
        Op::Clip { .. } | Op::Pad { .. } => &[1, 2],
        Op::OneHot { .. } => &[2],
        _ => &[],
    }
}
