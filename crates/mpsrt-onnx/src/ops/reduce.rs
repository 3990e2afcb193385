//! Importers for reductions: Reduce* (axes moved from attribute to input in opset 13 for
//! ReduceSum and opset 18 for the rest), ArgMax/ArgMin and CumSum.

use super::Importer;
use crate::ctx::Ctx;
use mpsrt_core::Result;
use mpsrt_graph::{Op, ReduceKind};

pub const OPS: &[(&str, Importer)] = &[
    ("ReduceSum", reduce),
    ("ReduceMean", reduce),
    ("ReduceMax", reduce),
    ("ReduceMin", reduce),
    ("ReduceProd", reduce),
    ("ReduceL1", reduce),
    ("ReduceL2", reduce),
    ("ReduceLogSumExp", reduce),
    ("ReduceSumSquare", reduce),
    ("ReduceLogSum", reduce),
    ("ArgMax", arg_reduce),
    ("ArgMin", arg_reduce),
    ("CumSum", cumsum),
    ("TopK", top_k),
];

const KINDS: &[(&str, ReduceKind)] = &[
    ("ReduceSum", ReduceKind::Sum),
    ("ReduceMean", ReduceKind::Mean),
    ("ReduceMax", ReduceKind::Max),
    ("ReduceMin", ReduceKind::Min),
    ("ReduceProd", ReduceKind::Prod),
    ("ReduceL1", ReduceKind::L1),
    ("ReduceL2", ReduceKind::L2),
    ("ReduceLogSumExp", ReduceKind::LogSumExp),
    ("ReduceSumSquare", ReduceKind::SumSquare),
    // log(sum(x)): a Sum node followed by a Log node.
    ("ReduceLogSum", ReduceKind::Sum),
];

fn reduce(cx: &mut Ctx) -> Result<()> {
    let kind = KINDS
        .iter()
        .find(|(n, _)| *n == cx.op_type())
        .map(|(_, k)| *k)
        .ok_or_else(|| cx.invalid("not a reduction"))?;
    let axes_as_input = if kind == ReduceKind::Sum { cx.opset >= 13 } else { cx.opset >= 18 };
    // Axes given as a computed (or runtime) input stay an input; the graph canonicalizes them
    // into the attribute once their value is known.
    let mut ins = vec![cx.input(0)?];
    let axes = if axes_as_input {
        match cx.const_input(1)? {
            Some(t) => Some(t.to_i64_vec()),
            None => {
                ins.extend(cx.opt_input(1)?);
                None
            }
        }
    } else {
        cx.ints("axes")?
    };
    let op = Op::Reduce {
        kind,
        axes,
        keepdims: cx.int("keepdims", 1)? != 0,
        noop_with_empty_axes: cx.int("noop_with_empty_axes", 0)? != 0,
    };
    if cx.op_type() == "ReduceLogSum" {
        let sum = cx.emit_tmp(op, ins);
        return cx.emit(Op::Unary(mpsrt_graph::UnaryOp::Log), vec![sum]);
    }
    cx.emit(op, ins)
}

fn arg_reduce(cx: &mut Ctx) -> Result<()> {
    let op = Op::ArgReduce {
        max: cx.op_type() == "ArgMax",
        axis: cx.int("axis", 0)?,
        keepdims: cx.int("keepdims", 1)? != 0,
        select_last_index: cx.int("select_last_index", 0)? != 0,
    };
    let x = cx.input(0)?;
    cx.emit(op, vec![x])
}

fn cumsum(cx: &mut Ctx) -> Result<()> {
    let op =
        Op::CumSum { exclusive: cx.int("exclusive", 0)? != 0, reverse: cx.int("reverse", 0)? != 0 };
    let ins = vec![cx.input(0)?, cx.input(1)?];
    cx.emit(op, ins)
}

/// `k` is an attribute before opset 10 and a (constant) input after.
fn top_k(cx: &mut Ctx) -> Result<()> {
    let mut ins = vec![cx.input(0)?];
    let k = if cx.opset < 10 {
        Some(cx.req_int("k")?)
    } else {
        match cx.const_input(1)? {
            Some(t) => {
                Some(t.to_i64_vec().first().copied().ok_or_else(|| cx.invalid("k is empty"))?)
            }
            None => {
                // Runtime k: canonicalized by the graph once its value is bound.
                ins.push(cx.input(1)?);
                None
            }
        }
    };
    let k = match k {
        Some(k) => {
            usize::try_from(k).map_err(|_| cx.invalid(format!("k must be >= 0, got {k}")))?
        }
        None => 0,
    };
    let op = Op::TopK {
        axis: cx.int("axis", -1)?,
        k,
        largest: cx.int("largest", 1)? != 0,
        sorted: cx.int("sorted", 1)? != 0,
    };
    cx.emit(op, ins)
}
