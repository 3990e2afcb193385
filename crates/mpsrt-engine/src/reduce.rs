//! Reductions (ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSumExp/SumSquare, ArgMax/ArgMin) mapped onto
//! the tensor library's reductions; results are cast to the dtype the graph declares.

use crate::ops::{Ctx, OpEntry};
use mpsrt_core::{DType, Result};
use mpsrt_graph::{Node, Op, ReduceKind};
use mpsrt_tensor::{self as t, BinaryFn, Expr, Scalar, Tensor, VType};

/// The op table entries of this family.
pub(crate) fn entries() -> Vec<OpEntry> {
    let names = [
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSumExp",
        "ReduceSumSquare",
    ];
    let mut v: Vec<OpEntry> =
        names.iter().map(|&n| OpEntry { name: n, run: reduce, host_from: 1 }).collect();
    v.push(OpEntry { name: "ArgMax", run: arg_reduce, host_from: 1 });
    v.push(OpEntry { name: "ArgMin", run: arg_reduce, host_from: 1 });
    v
}

/// Casts a result to the node output's device dtype.
pub(crate) fn to_out(ctx: &Ctx<'_>, node: &Node, i: usize, r: Tensor) -> Result<Tensor> {
    let v = node.outputs.get(i).copied().ok_or_else(|| ctx.err(node, "missing output"))?;
    r.astype(ctx.device_dtype(v)).map_err(|e| ctx.wrap(node, e))
}

fn reduce(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = ctx.input(node, inputs, 0)?;
    let Op::Reduce { kind, axes, keepdims, noop_with_empty_axes } = &node.op else {
        return Err(ctx.err(node, "not a reduction"));
    };
    let axes: Option<Vec<isize>> = axes.as_ref().map(|a| a.iter().map(|&v| v as isize).collect());
    // noop_with_empty_axes: no (or empty) axes means identity rather than "all axes".
    if *noop_with_empty_axes && axes.as_ref().is_none_or(|a| a.is_empty()) {
        return Ok(vec![to_out(ctx, node, 0, x.clone())?]);
    }
    let ax: Option<&[isize]> = match &axes {
        Some(a) if !a.is_empty() => Some(a),
        _ => None,
    };
    let k = *keepdims;
    // Max/Min over an empty set: ONNX defines them as the identity (-inf / +inf, and the dtype's
    // extremes for integers and bools), which the tensor library refuses (no identity there).
    let reduced: Vec<usize> = match ax {
        Some(a) => a
            .iter()
            .map(|&v| mpsrt_core::normalize_axis(&ctx.label(node), v, x.ndim()))
            .collect::<Result<_>>()?,
        None => (0..x.ndim()).collect(),
    };
    let is_max = matches!(kind, ReduceKind::Max);
    if matches!(kind, ReduceKind::Max | ReduceKind::Min)
        && reduced.iter().any(|&a| x.shape()[a] == 0)
    {
        let d = x.dtype();
        let v: f64 = match (d, is_max) {
            (DType::Bool, m) => (!m) as u8 as f64,
            (d, true) if d.is_float() => f64::NEG_INFINITY,
            (d, false) if d.is_float() => f64::INFINITY,
            (DType::U8, m) => {
                if m {
                    0.0
                } else {
                    255.0
                }
            }
            (DType::I8, m) => {
                if m {
                    -128.0
                } else {
                    127.0
                }
            }
            (DType::I32, m) => {
                if m {
                    i32::MIN as f64
                } else {
                    i32::MAX as f64
                }
            }
            (_, m) => {
                if m {
                    i64::MIN as f64
                } else {
                    i64::MAX as f64
                }
            }
        };
        let shape = ctx.out_shape(node, 0)?;
        let r = t::full(&shape, v, d, x.place()).map_err(|e| ctx.wrap(node, e))?;
        return Ok(vec![to_out(ctx, node, 0, r)?]);
    }
    let r = match kind {
        ReduceKind::Sum => t::sum(x, ax, k),
        ReduceKind::Mean => t::mean(x, ax, k),
        ReduceKind::Max => t::max(x, ax, k),
        ReduceKind::Min => t::min(x, ax, k),
        ReduceKind::Prod => t::prod(x, ax, k),
        ReduceKind::L2 => t::norm(x, ax, k),
        ReduceKind::LogSumExp => t::logsumexp(x, ax, k),
        ReduceKind::L1 => t::abs(x).and_then(|a| t::sum(&a, ax, k)),
        ReduceKind::SumSquare => t::multiply(x, x).and_then(|a| t::sum(&a, ax, k)),
    }
    .map_err(|e| ctx.wrap(node, e))?;
    // Reductions over zero axes of a 0-d tensor etc.: reshape to the planned shape.
    let shape: Vec<isize> = ctx.out_shape(node, 0)?.iter().map(|&d| d as isize).collect();
    let r = r.reshape(&shape).map_err(|e| ctx.wrap(node, e))?;
    Ok(vec![to_out(ctx, node, 0, r)?])
}

fn arg_reduce(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = ctx.input(node, inputs, 0)?;
    let Op::ArgReduce { max, axis, keepdims, select_last_index } = &node.op else {
        return Err(ctx.err(node, "not an arg reduction"));
    };
    let f = if *max { t::argmax } else { t::argmin };
    if !*select_last_index {
        let r = f(x, Some(*axis as isize), *keepdims).map_err(|e| ctx.wrap(node, e))?;
        return Ok(vec![to_out(ctx, node, 0, r)?]);
    }
    // Last occurrence: the first one of the reversed axis, mapped back as `n - 1 - i`.
    let label = ctx.label(node);
    let ax = mpsrt_core::normalize_axis(&label, *axis as isize, x.ndim())?;
    let n = x.shape()[ax] as i64;
    let wrap = |e| ctx.wrap(node, e);
    let rev = x.slice(ax as isize, None, None, -1).map_err(wrap)?;
    let r = f(&rev, Some(ax as isize), *keepdims).map_err(wrap)?;
    let e = Expr::binary(
        BinaryFn::Sub,
        Expr::Scalar(0, VType::Int),
        Expr::cast(VType::Int, Expr::input(0)),
    );
    let r = t::fused_elementwise(&label, &[&r], DType::I32, e, &[Scalar::I(n - 1)])?;
    Ok(vec![to_out(ctx, node, 0, r)?])
}
