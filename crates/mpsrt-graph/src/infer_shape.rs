//! Shape inference for shape-manipulation and data-movement ops (Reshape, Concat, Slice, Gather,
//! Shape, Expand, ...). Many take their target shape from a tensor input, so they read the
//! input's constant value when inference has one and fall back to fresh symbols otherwise.

use crate::infer::{broadcast, Cx, InferIn, OutInfo};
use crate::ir::{dims, shape_str, Dim};
use crate::op::Op;
use mpsrt_core::{DType, Result};

/// Clamps ONNX Slice parameters for one axis of size `dim`; returns (first index, count).
pub fn slice_range(dim: usize, start: i64, end: i64, step: i64) -> (i64, usize) {
    let d = dim as i64;
    let clamp = |v: i64, lo: i64, hi: i64| v.max(lo).min(hi);
    let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
    if step > 0 {
        let s = clamp(norm(start), 0, d);
        let e = clamp(norm(end), 0, d);
        let n = if e > s { (e - s + step - 1) / step } else { 0 };
        (s, n as usize)
    } else {
        let s = clamp(norm(start), -1, d - 1);
        let e = clamp(norm(end), -1, d - 1);
        let st = -step;
        let n = if s > e { (s - e + st - 1) / st } else { 0 };
        (s, n as usize)
    }
}

/// One resolved Slice axis: (axis, start, end, step).
pub type SliceAxis = (usize, i64, i64, i64);

/// Resolved Slice parameters per axis; `None` when starts/ends/axes/steps are not constants.
pub fn slice_params(cx: &Cx, ins: &[InferIn], rank: usize) -> Result<Option<Vec<SliceAxis>>> {
    let val = |i: usize| ins.get(i).map(|x| x.value.map(|v| v.to_i64_vec()));
    let (Some(Some(starts)), Some(Some(ends))) = (val(1), val(2)) else { return Ok(None) };
    let axes = match val(3) {
        Some(Some(a)) => a,
        Some(None) => return Ok(None),
        None => (0..starts.len() as i64).collect(),
    };
    let steps = match val(4) {
        Some(Some(s)) => s,
        Some(None) => return Ok(None),
        None => vec![1; starts.len()],
    };
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(cx.invalid(format!(
            "starts {starts:?}, ends {ends:?}, axes {axes:?} and steps {steps:?} must have equal lengths"
        )));
    }
    let mut out = Vec::new();
    for i in 0..starts.len() {
        if steps[i] == 0 {
            return Err(cx.invalid("slice step must not be 0"));
        }
        out.push((cx.axis(axes[i], rank)?, starts[i], ends[i], steps[i]));
    }
    Ok(Some(out))
}

/// Resolves a Reshape target (`0` copies, `-1` infers) against the input shape.
pub fn reshape_target(cx: &mut Cx, x: &[Dim], target: &[i64], allowzero: bool) -> Result<Vec<Dim>> {
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, &t) in target.iter().enumerate() {
        out.push(match t {
            -1 => {
                if infer_at.replace(i).is_some() {
                    return Err(cx.invalid(format!("shape {target:?} has more than one -1")));
                }
                Dim::Known(1)
            }
            0 if !allowzero => x.get(i).cloned().ok_or_else(|| {
                cx.invalid(format!("shape {target:?} copies dim {i} of a rank-{} input", x.len()))
            })?,
            t if t < 0 => return Err(cx.invalid(format!("shape {target:?} has a negative entry"))),
            t => Dim::Known(t as usize),
        });
    }
    let total: Option<usize> =
        x.iter().map(Dim::known).try_fold(1usize, |a, d| d.and_then(|d| a.checked_mul(d)));
    let known_out: Option<usize> =
        out.iter().map(Dim::known).try_fold(1usize, |a, d| d.and_then(|d| a.checked_mul(d)));
    match (infer_at, total, known_out) {
        (Some(i), Some(t), Some(k)) => {
            if k == 0 || t % k != 0 {
                return Err(cx.shape_err(format!(
                    "cannot reshape {} ({t} elements) to {target:?}",
                    shape_str(x)
                )));
            }
            out[i] = Dim::Known(t / k);
        }
        (Some(i), _, _) => {
            // Symbolic input: the idioms [0, -1] / [0, 0, -1] copy the symbolic dims, so -1 is
            // the product of the remaining (known) input dims over the known output dims.
            let copied = |k: usize| !allowzero && target.get(k) == Some(&0);
            let rest_in: Option<usize> = x
                .iter()
                .enumerate()
                .filter(|(k, _)| !copied(*k))
                .try_fold(1usize, |a, (_, d)| d.known().and_then(|d| a.checked_mul(d)));
            let rest_out: Option<usize> = out
                .iter()
                .enumerate()
                .filter(|(k, _)| !copied(*k) && *k != i)
                .try_fold(1usize, |a, (_, d)| d.known().and_then(|d| a.checked_mul(d)));
            out[i] = match (rest_in, rest_out) {
                (Some(a), Some(b)) if b > 0 && a % b == 0 => Dim::Known(a / b),
                _ => cx.fresh(),
            };
        }
        (None, Some(t), Some(k)) if t != k => {
            return Err(cx.shape_err(format!(
                "cannot reshape {} ({t} elements) to {target:?} ({k} elements)",
                shape_str(x)
            )))
        }
        _ => {}
    }
    Ok(out)
}

/// Inference for every op not handled in `infer`.
pub fn infer_data_movement(cx: &mut Cx, ins: &[InferIn]) -> Result<Vec<OutInfo>> {
    let node = cx.node;
    let one = |d: DType, s: Vec<Dim>| Ok(vec![(d, s)]);
    match &node.op {
        Op::Reshape { allowzero } => {
            cx.arity(ins, 2)?;
            match ins[1].value {
                Some(v) => one(
                    ins[0].dtype,
                    reshape_target(cx, ins[0].shape, &v.to_i64_vec(), *allowzero)?,
                ),
                None => {
                    let r = rank_of_1d(cx, &ins[1])?;
                    one(ins[0].dtype, (0..r).map(|_| cx.fresh()).collect())
                }
            }
        }
        Op::Transpose { perm } => {
            cx.arity(ins, 1)?;
            let x = ins[0].shape;
            let perm: Vec<usize> = perm.clone().unwrap_or_else(|| (0..x.len()).rev().collect());
            let mut seen = vec![false; x.len()];
            if perm.len() != x.len()
                || perm.iter().any(|&p| p >= x.len() || std::mem::replace(&mut seen[p], true))
            {
                return Err(
                    cx.invalid(format!("perm {perm:?} is not a permutation of {} axes", x.len()))
                );
            }
            one(ins[0].dtype, perm.iter().map(|&p| x[p].clone()).collect())
        }
        Op::Concat { axis } => {
            cx.arity(ins, 1)?;
            let rank = ins[0].shape.len();
            let ax = cx.axis(*axis, rank)?;
            let mut out = ins[0].shape.to_vec();
            let mut total = Some(0usize);
            for x in ins {
                if x.shape.len() != rank {
                    return Err(
                        cx.shape_err(format!("inputs have ranks {rank} and {}", x.shape.len()))
                    );
                }
                for (i, d) in x.shape.iter().enumerate() {
                    if i != ax {
                        if let (Dim::Known(a), Dim::Known(b)) = (&out[i], d) {
                            if a != b {
                                return Err(cx.shape_err(format!(
                                    "inputs {} and {} differ outside axis {ax}",
                                    shape_str(ins[0].shape),
                                    shape_str(x.shape)
                                )));
                            }
                        }
                        if out[i].known().is_none() && d.known().is_some() {
                            out[i] = d.clone();
                        }
                    }
                }
                total = total.and_then(|t| x.shape[ax].known().and_then(|d| t.checked_add(d)));
            }
            out[ax] = total.map(Dim::Known).unwrap_or_else(|| cx.fresh());
            one(ins[0].dtype, out)
        }
        Op::Split { axis, splits } => {
            cx.arity(ins, 1)?;
            let x = ins[0].shape;
            let ax = cx.axis(*axis, x.len())?;
            let n = node.outputs.len();
            let sizes: Vec<Dim> = match (splits, x[ax].known()) {
                (Some(s), d) => {
                    if s.len() != n
                        || d.is_some_and(|d| {
                            s.iter().try_fold(0usize, |a, &b| a.checked_add(b)) != Some(d)
                        })
                    {
                        return Err(cx.invalid(format!(
                            "split sizes {s:?} do not fit {n} outputs of axis size {}",
                            x[ax]
                        )));
                    }
                    dims(s)
                }
                (None, Some(d)) => {
                    // ONNX 18: uneven splits put the remainder in the last chunk.
                    let chunk = d.div_ceil(n.max(1));
                    (0..n).map(|i| Dim::Known(chunk.min(d.saturating_sub(i * chunk)))).collect()
                }
                (None, None) => (0..n).map(|_| cx.fresh()).collect(),
            };
            Ok(sizes
                .into_iter()
                .map(|s| {
                    let mut o = x.to_vec();
                    o[ax] = s;
                    (ins[0].dtype, o)
                })
                .collect())
        }
        Op::Slice => {
            cx.arity(ins, 3)?;
            let x = ins[0].shape;
            let mut out = x.to_vec();
            match slice_params(cx, ins, x.len())? {
                Some(params) => {
                    for (ax, s, e, st) in params {
                        out[ax] = match x[ax].known() {
                            Some(d) => Dim::Known(slice_range(d, s, e, st).1),
                            // Slicing a symbolic dim from 0 to "infinity" keeps it.
                            None if s == 0 && st == 1 && e >= i32::MAX as i64 => x[ax].clone(),
                            None => cx.fresh(),
                        };
                    }
                }
                None => out = (0..x.len()).map(|_| cx.fresh()).collect(),
            }
            one(ins[0].dtype, out)
        }
        Op::Gather { axis } => {
            cx.arity(ins, 2)?;
            let x = ins[0].shape;
            let ax = cx.axis(*axis, x.len())?;
            let mut out = x[..ax].to_vec();
            out.extend_from_slice(ins[1].shape);
            out.extend_from_slice(&x[ax + 1..]);
            one(ins[0].dtype, out)
        }
        Op::GatherElements { .. } => {
            cx.arity(ins, 2)?;
            one(ins[0].dtype, ins[1].shape.to_vec())
        }
        Op::Unsqueeze { axes } => {
            cx.arity(ins, 1)?;
            let x = ins[0].shape;
            let r = x.len() + axes.len();
            let mut ax: Vec<usize> = axes.iter().map(|&a| cx.axis(a, r)).collect::<Result<_>>()?;
            ax.sort_unstable();
            if ax.windows(2).any(|w| w[0] == w[1]) {
                return Err(cx.invalid(format!("axes {axes:?} repeat")));
            }
            let mut it = x.iter();
            let out = (0..r)
                .map(|i| {
                    if ax.contains(&i) {
                        Dim::Known(1)
                    } else {
                        it.next().cloned().unwrap_or(Dim::Known(1))
                    }
                })
                .collect();
            one(ins[0].dtype, out)
        }
        Op::Squeeze { axes } => {
            cx.arity(ins, 1)?;
            let x = ins[0].shape;
            let out = match axes {
                Some(a) => {
                    let ax: Vec<usize> =
                        a.iter().map(|&a| cx.axis(a, x.len())).collect::<Result<_>>()?;
                    for &i in &ax {
                        if let Dim::Known(d) = x[i] {
                            if d != 1 {
                                return Err(
                                    cx.shape_err(format!("cannot squeeze axis {i} of size {d}"))
                                );
                            }
                        }
                    }
                    x.iter()
                        .enumerate()
                        .filter(|(i, _)| !ax.contains(i))
                        .map(|(_, d)| d.clone())
                        .collect()
                }
                None => x.iter().filter(|d| **d != Dim::Known(1)).cloned().collect(),
            };
            one(ins[0].dtype, out)
        }
        Op::Flatten { axis } => {
            cx.arity(ins, 1)?;
            let x = ins[0].shape;
            let a = if *axis < 0 { *axis + x.len() as i64 } else { *axis };
            if a < 0 || a as usize > x.len() {
                return Err(cx.invalid(format!("axis {axis} out of range for rank {}", x.len())));
            }
            let a = a as usize;
            let prod = |s: &[Dim], cx: &mut Cx| -> Dim {
                s.iter()
                    .map(Dim::known)
                    .try_fold(1usize, |p, d| d.and_then(|d| p.checked_mul(d)))
                    .map(Dim::Known)
                    .unwrap_or_else(|| if s.len() == 1 { s[0].clone() } else { cx.fresh() })
            };
            let (l, r) = (prod(&x[..a], cx), prod(&x[a..], cx));
            one(ins[0].dtype, vec![l, r])
        }
        Op::Expand => {
            cx.arity(ins, 2)?;
            let target = match ins[1].value {
                Some(v) => {
                    dims(&v.to_i64_vec().iter().map(|&d| d.max(0) as usize).collect::<Vec<_>>())
                }
                None => {
                    let r = rank_of_1d(cx, &ins[1])?;
                    (0..r).map(|_| cx.fresh()).collect()
                }
            };
            one(ins[0].dtype, broadcast(cx, ins[0].shape, &target)?)
        }
        Op::Shape { start, end } => {
            cx.arity(ins, 1)?;
            let r = ins[0].shape.len() as i64;
            let cl = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r);
            let (s, e) = (cl(*start), cl(end.unwrap_or(r)));
            one(DType::I64, vec![Dim::Known((e - s).max(0) as usize)])
        }
        Op::Size => one(DType::I64, vec![]),
        Op::Pad { pads, .. } => {
            cx.arity(ins, 1)?;
            let x = ins[0].shape;
            if pads.len() != 2 * x.len() {
                return Err(cx.invalid(format!(
                    "pads {pads:?} must have 2 entries per axis of {}",
                    shape_str(x)
                )));
            }
            let mut out = Vec::new();
            for (i, d) in x.iter().enumerate() {
                out.push(match d.known() {
                    Some(d) => {
                        let n =
                            (d as i64).saturating_add(pads[i]).saturating_add(pads[i + x.len()]);
                        if n < 0 {
                            return Err(
                                cx.shape_err(format!("pads {pads:?} make axis {i} negative"))
                            );
                        }
                        Dim::Known(n as usize)
                    }
                    None if pads[i] == 0 && pads[i + x.len()] == 0 => d.clone(),
                    None => cx.fresh(),
                });
            }
            one(ins[0].dtype, out)
        }
        Op::Tile => {
            cx.arity(ins, 2)?;
            let x = ins[0].shape;
            let out = match ins[1].value {
                Some(v) => {
                    let reps = v.to_i64_vec();
                    if reps.len() != x.len() || reps.iter().any(|&r| r < 0) {
                        return Err(
                            cx.invalid(format!("repeats {reps:?} do not fit {}", shape_str(x)))
                        );
                    }
                    x.iter()
                        .zip(&reps)
                        .map(|(d, &r)| match d.known() {
                            Some(d) => Dim::Known(d.saturating_mul(r as usize)),
                            None if r == 1 => d.clone(),
                            None => cx.fresh(),
                        })
                        .collect()
                }
                None => (0..x.len()).map(|_| cx.fresh()).collect(),
            };
            one(ins[0].dtype, out)
        }
        Op::Constant(t) => one(t.dtype, dims(&t.shape)),
        Op::ConstantOfShape(fill) => {
            cx.arity(ins, 1)?;
            let out = match ins[0].value {
                Some(v) => {
                    let s = v.to_i64_vec();
                    if s.iter().any(|&d| d < 0) {
                        return Err(cx.invalid(format!("shape {s:?} has a negative entry")));
                    }
                    dims(&s.iter().map(|&d| d as usize).collect::<Vec<_>>())
                }
                None => {
                    let r = rank_of_1d(cx, &ins[0])?;
                    (0..r).map(|_| cx.fresh()).collect()
                }
            };
            one(fill.dtype, out)
        }
        Op::Range => {
            cx.arity(ins, 3)?;
            let n = match (ins[0].value, ins[1].value, ins[2].value) {
                (Some(s), Some(l), Some(d)) => {
                    let (s, l, d) = (first(s), first(l), first(d));
                    if d == 0.0 {
                        return Err(cx.invalid("Range delta must not be 0"));
                    }
                    // As onnxruntime: a NaN or infinite bound has no element count (the cast
                    // would make NaN 0 elements and infinity usize::MAX).
                    let count = ((l - s) / d).ceil();
                    if !count.is_finite() {
                        return Err(cx.invalid(format!(
                            "Range({s}, {l}, {d}): the number of elements is not finite"
                        )));
                    }
                    Dim::Known(count.max(0.0) as usize)
                }
                _ => cx.fresh(),
            };
            one(ins[0].dtype, vec![n])
        }
        Op::DepthToSpace { blocksize, .. } | Op::SpaceToDepth { blocksize } => {
            cx.arity(ins, 1)?;
            let x = ins[0].shape;
            let b = *blocksize;
            if x.len() != 4 || b == 0 {
                return Err(cx.shape_err(format!(
                    "input must be 4-D with blocksize > 0, got {}",
                    shape_str(x)
                )));
            }
            let to_space = matches!(node.op, Op::DepthToSpace { .. });
            // DepthToSpace: C/(b*b), H*b, W*b; SpaceToDepth the inverse.
            let scale = |d: &Dim, f: usize, mul: bool, cx: &mut Cx| match d.known() {
                Some(v) if mul => Dim::Known(v.saturating_mul(f)),
                Some(v) => Dim::Known(v / f),
                None => cx.fresh(),
            };
            let c = scale(&x[1], b.saturating_mul(b), !to_space, cx);
            let h = scale(&x[2], b, to_space, cx);
            let w = scale(&x[3], b, to_space, cx);
            one(ins[0].dtype, vec![x[0].clone(), c, h, w])
        }
        Op::Resize(r) => {
            cx.arity(ins, 1)?;
            let x = ins[0].shape;
            if let Some(known) = crate::ir::concrete(x) {
                let plan = r.plan(&known).map_err(|e| cx.invalid(e.to_string()))?;
                let out: Vec<usize> = plan.iter().map(|p| p.out).collect();
                return one(ins[0].dtype, dims(&out));
            }
            if !r.axes.is_empty() || r.keep_aspect != crate::op::KeepAspect::Stretch {
                return Err(cx.invalid(
                    "Resize with axes or keep_aspect_ratio_policy needs a static input shape",
                ));
            }
            let out = if !r.sizes.is_empty() {
                if r.sizes.len() != x.len() {
                    return Err(cx.invalid(format!(
                        "sizes {:?} do not match input {}",
                        r.sizes,
                        shape_str(x)
                    )));
                }
                dims(&r.sizes)
            } else {
                if r.scales.len() != x.len()
                    || r.scales.iter().any(|s| !(s.is_finite() && *s > 0.0))
                {
                    return Err(cx.invalid(format!(
                        "scales {:?} must be positive, one per axis of {}",
                        r.scales,
                        shape_str(x)
                    )));
                }
                let mut out = Vec::new();
                for (d, &s) in x.iter().zip(&r.scales) {
                    out.push(match d.known() {
                        Some(n) => {
                            Dim::Known((n as f64 * s as f64).floor().min(u32::MAX as f64) as usize)
                        }
                        None if s == 1.0 => d.clone(),
                        None => cx.fresh(),
                    });
                }
                out
            };
            one(ins[0].dtype, out)
        }
        other => Err(cx.invalid(format!("no shape inference for {}", other.name()))),
    }
}

fn first(t: &crate::ir::HostTensor) -> f64 {
    t.to_f64_vec().first().copied().unwrap_or(0.0)
}

/// The length of a 1-D shape-like input, needed to know the output rank.
fn rank_of_1d(cx: &Cx, x: &InferIn) -> Result<usize> {
    match x.shape {
        [Dim::Known(n)] => Ok(*n),
        s => Err(cx.shape_err(format!(
            "shape input must be 1-D with a known length, got {}",
            shape_str(s)
        ))),
    }
}
