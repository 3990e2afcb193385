//! Reductions (ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSumExp/SumSquare, ArgMax/ArgMin) mapped onto
//! the tensor library's reductions; results are cast to the dtype the graph declares.

use crate::ops::{Ctx, OpEntry};
use mpsrt_core::{Error, Result};
use mpsrt_graph::{Node, Op, ReduceKind};
use mpsrt_tensor::{self as t, Tensor};

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
    if axes.as_ref().is_some_and(|a| a.is_empty()) || (axes.is_none() && *noop_with_empty_axes) {
        if *noop_with_empty_axes {
            return Ok(vec![to_out(ctx, node, 0, x.clone())?]);
        }
    }
    let ax: Option<&[isize]> = match &axes {
        Some(a) if !a.is_empty() => Some(a),
        _ => None,
    };
    let k = *keepdims;
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
    if *select_last_index {
        return Err(Error::unsupported(ctx.label(node), "select_last_index=1 is not supported"));
    }
    let f = if *max { t::argmax } else { t::argmin };
    let r = f(x, Some(*axis as isize), *keepdims).map_err(|e| ctx.wrap(node, e))?;
    Ok(vec![to_out(ctx, node, 0, r)?])
}
