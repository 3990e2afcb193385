//! A small CPU evaluator for the shape/index ops, used by constant folding so exported
//! `Shape -> Gather -> Concat -> Reshape` chains become constants once shapes are known.
//!
//! Data movement works on raw element bytes (so int64 sentinels like `INT64_MAX` survive exactly);
//! arithmetic goes through i64 for integer types and f64 for floats. This is not the executor:
//! it only ever sees small tensors (the folder bounds the output size).

use crate::infer::{Cx, InferIn};
use crate::infer_shape::{slice_params, slice_range};
use crate::ir::{HostTensor, Node};
use crate::op::{BinaryOp, Op, ReduceKind, UnaryOp};
use mpsrt_core::{contiguous_strides, DType, Result};

/// Evaluates `node` on constant inputs. `out_shapes` are the already inferred (concrete) output
/// shapes. Returns `Ok(None)` when the op/dtype combination is not handled here.
pub fn eval(
    node: &Node,
    ins: &[&HostTensor],
    out: &[(DType, Vec<usize>)],
) -> Result<Option<Vec<HostTensor>>> {
    let cx = Cx::new(node);
    let Some((odt, oshape)) = out.first().cloned() else { return Ok(None) };
    let n_out: usize = oshape.iter().product();
    let single = |t: HostTensor| Ok(Some(vec![t]));
    let x = ins.first().copied();
    match &node.op {
        Op::Constant(t) => single(t.clone()),
        Op::Identity
        | Op::Reshape { .. }
        | Op::Flatten { .. }
        | Op::Unsqueeze { .. }
        | Op::Squeeze { .. } => {
            let Some(x) = x else { return Ok(None) };
            single(HostTensor { dtype: x.dtype, shape: oshape, bytes: x.bytes.clone() })
        }
        Op::ConstantOfShape(fill) => {
            let bytes = fill
                .bytes
                .iter()
                .copied()
                .cycle()
                .take(fill.dtype.size() * n_out)
                .collect::<Vec<u8>>();
            if fill.bytes.is_empty() && n_out > 0 {
                return Ok(None);
            }
            single(HostTensor { dtype: fill.dtype, shape: oshape, bytes })
        }
        Op::Gather { axis } => {
            let (Some(x), Some(idx)) = (x, ins.get(1)) else { return Ok(None) };
            let ax = cx.axis(*axis, x.shape.len())?;
            let outer: usize = x.shape[..ax].iter().product();
            let inner: usize = x.shape[ax + 1..].iter().product();
            let d = x.shape[ax] as i64;
            let mut src = Vec::with_capacity(n_out);
            for o in 0..outer {
                for &i in &idx.to_i64_vec() {
                    let i = if i < 0 { i + d } else { i };
                    if i < 0 || i >= d {
                        return Err(
                            cx.invalid(format!("index {i} is out of range for axis size {d}"))
                        );
                    }
                    for k in 0..inner {
                        src.push((o * d as usize + i as usize) * inner + k);
                    }
                }
            }
            single(take(x, &src, oshape))
        }
        Op::Concat { .. } => {
            // Concat along an axis = interleave blocks of each input.
            let Some(x0) = x else { return Ok(None) };
            if ins.iter().any(|t| t.dtype != x0.dtype || t.shape.len() != x0.shape.len()) {
                return Ok(None);
            }
            let ax = node_axis(node, x0.shape.len(), &cx)?;
            let outer: usize = oshape[..ax].iter().product();
            let mut bytes = Vec::with_capacity(n_out * x0.dtype.size());
            for o in 0..outer {
                for t in ins {
                    let blk: usize = t.shape[ax..].iter().product::<usize>() * t.dtype.size();
                    bytes.extend_from_slice(&t.bytes[o * blk..(o + 1) * blk]);
                }
            }
            single(HostTensor { dtype: x0.dtype, shape: oshape, bytes })
        }
        Op::Slice => {
            let Some(x) = x else { return Ok(None) };
            let infer_ins: Vec<InferIn> = ins
                .iter()
                .map(|t| InferIn { dtype: t.dtype, shape: &[], value: Some(t) })
                .collect();
            let Some(params) = slice_params(&cx, &infer_ins, x.shape.len())? else {
                return Ok(None);
            };
            let mut start = vec![0i64; x.shape.len()];
            let mut step = vec![1i64; x.shape.len()];
            for (ax, s, e, st) in params {
                start[ax] = slice_range(x.shape[ax], s, e, st).0;
                step[ax] = st;
            }
            let strides = contiguous_strides(&x.shape);
            let src = index_map(&oshape, |pos| {
                pos.iter()
                    .enumerate()
                    .map(|(a, &p)| (start[a] + p as i64 * step[a]) as isize * strides[a])
                    .sum::<isize>() as usize
            });
            single(take(x, &src, oshape))
        }
        Op::Expand => {
            let Some(x) = x else { return Ok(None) };
            single(take(x, &broadcast_src(&x.shape, &oshape), oshape))
        }
        Op::Cast { to } => {
            let Some(x) = x else { return Ok(None) };
            if x.dtype.is_float() || to.is_float() {
                single(HostTensor::from_f64(*to, oshape, &x.to_f64_vec()))
            } else {
                single(from_i64(*to, oshape, &x.to_i64_vec()))
            }
        }
        Op::Range => {
            if ins.len() < 3 {
                return Ok(None);
            }
            let dt = ins[0].dtype;
            let v = |i: usize| ins[i].to_f64_vec().first().copied().unwrap_or(0.0);
            let (s, d) = (v(0), v(2));
            let vals: Vec<f64> = (0..n_out).map(|i| s + d * i as f64).collect();
            single(HostTensor::from_f64(dt, oshape, &vals))
        }
        Op::Where => {
            if ins.len() < 3 || ins[1].dtype != ins[2].dtype {
                return Ok(None);
            }
            let (c, a, b) = (
                broadcast_src(&ins[0].shape, &oshape),
                broadcast_src(&ins[1].shape, &oshape),
                broadcast_src(&ins[2].shape, &oshape),
            );
            let cond = ins[0].to_f64_vec();
            let sz = ins[1].dtype.size();
            let mut bytes = Vec::with_capacity(n_out * sz);
            for i in 0..n_out {
                let (t, j) = if cond[c[i]] != 0.0 { (ins[1], a[i]) } else { (ins[2], b[i]) };
                bytes.extend_from_slice(&t.bytes[j * sz..(j + 1) * sz]);
            }
            single(HostTensor { dtype: ins[1].dtype, shape: oshape, bytes })
        }
        Op::Binary(op) => {
            if ins.len() < 2 {
                return Ok(None);
            }
            let (ia, ib) =
                (broadcast_src(&ins[0].shape, &oshape), broadcast_src(&ins[1].shape, &oshape));
            let float = ins[0].dtype.is_float() || ins[1].dtype.is_float();
            if float || matches!(op, BinaryOp::Pow) {
                let (a, b) = (ins[0].to_f64_vec(), ins[1].to_f64_vec());
                let vals: Vec<f64> =
                    (0..n_out).map(|i| binary_f64(*op, a[ia[i]], b[ib[i]])).collect();
                single(HostTensor::from_f64(odt, oshape, &vals))
            } else {
                let (a, b) = (ins[0].to_i64_vec(), ins[1].to_i64_vec());
                let mut vals = Vec::with_capacity(n_out);
                for i in 0..n_out {
                    match binary_i64(*op, a[ia[i]], b[ib[i]]) {
                        Some(v) => vals.push(v),
                        None => {
                            return Err(
                                cx.invalid("integer division by zero while folding constants")
                            )
                        }
                    }
                }
                single(from_i64(odt, oshape, &vals))
            }
        }
        Op::Unary(u) => {
            let Some(x) = x else { return Ok(None) };
            let f = |v: f64| match u {
                UnaryOp::Neg => -v,
                UnaryOp::Abs => v.abs(),
                UnaryOp::Not => (v == 0.0) as i64 as f64,
                UnaryOp::Sign => v.signum() * (v != 0.0) as i64 as f64,
                _ => f64::NAN,
            };
            if x.dtype.is_float() {
                single(HostTensor::from_f64(
                    odt,
                    oshape,
                    &x.to_f64_vec().into_iter().map(f).collect::<Vec<_>>(),
                ))
            } else {
                let vals: Vec<i64> =
                    x.to_i64_vec().into_iter().map(|v| f(v as f64) as i64).collect();
                single(from_i64(odt, oshape, &vals))
            }
        }
        Op::Reduce { kind, axes, keepdims: _, noop_with_empty_axes } => {
            let Some(x) = x else { return Ok(None) };
            let rank = x.shape.len();
            let axes: Vec<usize> = match axes {
                Some(a) if !a.is_empty() => {
                    a.iter().map(|&a| cx.axis(a, rank)).collect::<Result<_>>()?
                }
                _ if *noop_with_empty_axes => {
                    return single(HostTensor { shape: oshape, ..x.clone() })
                }
                _ => (0..rank).collect(),
            };
            let kept: Vec<usize> = x
                .shape
                .iter()
                .enumerate()
                .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
                .collect();
            let kst = contiguous_strides(&kept);
            let vals = x.to_f64_vec();
            let init = match kind {
                ReduceKind::Prod => 1.0,
                ReduceKind::Max => f64::NEG_INFINITY,
                ReduceKind::Min => f64::INFINITY,
                _ => 0.0,
            };
            let mut acc = vec![init; kept.iter().product()];
            let all = index_map(&x.shape, |pos| {
                pos.iter()
                    .enumerate()
                    .map(|(a, &p)| if axes.contains(&a) { 0 } else { p as isize * kst[a] })
                    .sum::<isize>() as usize
            });
            for (flat, &dst) in all.iter().enumerate() {
                let v = vals[flat];
                acc[dst] = match kind {
                    ReduceKind::Prod => acc[dst] * v,
                    ReduceKind::Max => acc[dst].max(v),
                    ReduceKind::Min => acc[dst].min(v),
                    _ => acc[dst] + v,
                };
            }
            single(HostTensor::from_f64(odt, oshape, &acc))
        }
        _ => Ok(None),
    }
}

fn node_axis(node: &Node, rank: usize, cx: &Cx) -> Result<usize> {
    match &node.op {
        Op::Concat { axis } => cx.axis(*axis, rank),
        _ => Ok(0),
    }
}

fn binary_f64(op: BinaryOp, a: f64, b: f64) -> f64 {
    use BinaryOp::*;
    let t = |c: bool| c as i64 as f64;
    match op {
        Add => a + b,
        Sub => a - b,
        Mul => a * b,
        Div => a / b,
        Pow => a.powf(b),
        Max => a.max(b),
        Min => a.min(b),
        Mod => a % b,
        Equal => t(a == b),
        Less => t(a < b),
        Greater => t(a > b),
        LessOrEqual => t(a <= b),
        GreaterOrEqual => t(a >= b),
        And => t(a != 0.0 && b != 0.0),
        Or => t(a != 0.0 || b != 0.0),
        Xor => t((a != 0.0) != (b != 0.0)),
        PRelu => {
            if a < 0.0 {
                a * b
            } else {
                a
            }
        }
        Fmod => a % b,
        // Bit ops only make sense on integers; floats are not folded through them.
        BitShiftLeft | BitShiftRight | BitwiseAnd | BitwiseOr | BitwiseXor => f64::NAN,
    }
}

/// Integer arithmetic with wrapping (int64 shape math never relies on overflow); `None` on /0.
fn binary_i64(op: BinaryOp, a: i64, b: i64) -> Option<i64> {
    use BinaryOp::*;
    Some(match op {
        Add => a.wrapping_add(b),
        Sub => a.wrapping_sub(b),
        Mul => a.wrapping_mul(b),
        Div => a.checked_div(b)?,
        // ONNX integer Mod with fmod=0 takes the divisor's sign, like Python.
        Mod => {
            let r = a.checked_rem(b)?;
            if r != 0 && ((r < 0) != (b < 0)) {
                r + b
            } else {
                r
            }
        }
        Max => a.max(b),
        Min => a.min(b),
        Pow => (a as f64).powf(b as f64) as i64,
        PRelu => {
            if a < 0 {
                a.wrapping_mul(b)
            } else {
                a
            }
        }
        Equal => (a == b) as i64,
        Less => (a < b) as i64,
        Greater => (a > b) as i64,
        LessOrEqual => (a <= b) as i64,
        GreaterOrEqual => (a >= b) as i64,
        And => (a != 0 && b != 0) as i64,
        Or => (a != 0 || b != 0) as i64,
        Xor => ((a != 0) != (b != 0)) as i64,
        Fmod => a.checked_rem(b)?,
        BitShiftLeft => a.checked_shl(u32::try_from(b).ok()?).unwrap_or(0),
        BitShiftRight => a.checked_shr(u32::try_from(b).ok()?).unwrap_or(0),
        BitwiseAnd => a & b,
        BitwiseOr => a | b,
        BitwiseXor => a ^ b,
    })
}

fn from_i64(dt: DType, shape: Vec<usize>, vals: &[i64]) -> HostTensor {
    match dt {
        DType::I64 => HostTensor::from_i64(shape, vals),
        DType::I32 => HostTensor {
            dtype: dt,
            shape,
            bytes: vals.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect(),
        },
        _ => HostTensor::from_f64(dt, shape, &vals.iter().map(|&v| v as f64).collect::<Vec<_>>()),
    }
}

/// Copies the elements at flat indices `src` into a new tensor of `shape`.
fn take(x: &HostTensor, src: &[usize], shape: Vec<usize>) -> HostTensor {
    let sz = x.dtype.size();
    let mut bytes = Vec::with_capacity(src.len() * sz);
    for &i in src {
        bytes.extend_from_slice(&x.bytes[i * sz..(i + 1) * sz]);
    }
    HostTensor { dtype: x.dtype, shape, bytes }
}

/// For every position of `shape` (row-major), `f(position)`.
fn index_map(shape: &[usize], f: impl Fn(&[usize]) -> usize) -> Vec<usize> {
    let n: usize = shape.iter().product();
    let mut pos = vec![0usize; shape.len()];
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(f(&pos));
        for a in (0..shape.len()).rev() {
            pos[a] += 1;
            if pos[a] < shape[a] {
                break;
            }
            pos[a] = 0;
        }
    }
    out
}

/// Flat source index in `in_shape` for each element of the broadcast `out_shape`.
fn broadcast_src(in_shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let lead = out_shape.len().saturating_sub(in_shape.len());
    let st = contiguous_strides(in_shape);
    index_map(out_shape, |pos| {
        in_shape
            .iter()
            .enumerate()
            .map(|(a, &d)| if d == 1 { 0 } else { pos[a + lead] as isize * st[a] })
            .sum::<isize>() as usize
    })
}
