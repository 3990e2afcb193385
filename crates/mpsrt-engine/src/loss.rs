//! Loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (log_softmax over the class
//! axis, then the same NLL).
//!
//! The per-element gather `scores[n, target[n, d..], d..]` is done without an index kernel: a
//! one-hot mask `target == class` (an arange over C broadcast along axis 1) selects the picked
//! score in one fused elementwise kernel and a sum over the class axis collapses it; the class
//! weights are gathered the same way. Everything stays in tensor ops, so the CPU and the GPU
//! place run the same code. A target outside `[0, C)` (and not `ignore_index`) matches no class:
//! it contributes a zero loss (and a zero weight when class weights are given) instead of
//! reading out of bounds.

use crate::ops::{Ctx, OpEntry, OpFn};
use crate::reduce::to_out;
use mpsrt_core::{DType, Result};
use mpsrt_graph::op::LossReduction;
use mpsrt_graph::{Node, Op};
use mpsrt_tensor::{self as t, BinaryFn as B, Expr, Scalar, Tensor, UnaryFn as U, VType};

/// The op table entries of this family.
pub(crate) fn entries() -> Vec<OpEntry> {
    let e = |name: &'static str, run: OpFn| OpEntry { name, run, host_from: usize::MAX };
    vec![e("NegativeLogLikelihoodLoss", nll_loss), e("SoftmaxCrossEntropyLoss", sce_loss)]
}

fn nll_loss(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::NegativeLogLikelihoodLoss { reduction, ignore_index } = &node.op else {
        return Err(ctx.err(node, "not NegativeLogLikelihoodLoss"));
    };
    let x = ctx.input(node, inputs, 0)?;
    let loss = nll(ctx, node, x, inputs, *reduction, *ignore_index)?;
    Ok(vec![to_out(ctx, node, 0, loss)?])
}

fn sce_loss(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::SoftmaxCrossEntropyLoss { reduction, ignore_index } = &node.op else {
        return Err(ctx.err(node, "not SoftmaxCrossEntropyLoss"));
    };
    let x = ctx.input(node, inputs, 0)?;
    if x.ndim() < 2 {
        return Err(ctx.err(node, format!("scores must be [N, C, d..], got {:?}", x.shape())));
    }
    let log_prob = t::log_softmax(&float(ctx, node, x)?, 1).map_err(|e| ctx.wrap(node, e))?;
    let loss = nll(ctx, node, &log_prob, inputs, *reduction, *ignore_index)?;
    let mut out = vec![to_out(ctx, node, 0, loss)?];
    if node.outputs.len() > 1 {
        out.push(to_out(ctx, node, 1, log_prob)?);
    }
    Ok(out)
}

/// Scores as a float tensor (ONNX only allows float scores; ints are computed as float32).
fn float(ctx: &Ctx<'_>, node: &Node, x: &Tensor) -> Result<Tensor> {
    x.astype(x.dtype().to_float()).map_err(|e| ctx.wrap(node, e))
}

/// The NLL of log-probabilities `x` [N, C, d..] against `inputs[1]` (target [N, d..]) with the
/// optional class weights `inputs[2]` [C], reduced as asked.
fn nll(
    ctx: &Ctx<'_>,
    node: &Node,
    x: &Tensor,
    inputs: &[Tensor],
    reduction: LossReduction,
    ignore_index: Option<i64>,
) -> Result<Tensor> {
    let label = ctx.label(node);
    let wrap = |e| ctx.wrap(node, e);
    let x = float(ctx, node, x)?;
    let target = ctx.input(node, inputs, 1)?;
    let weight = inputs.get(2);
    let (xs, ts) = (x.shape(), target.shape());
    let r = xs.len();
    if r < 2 || ts.len() != r - 1 || ts[0] != xs[0] || ts[1..] != xs[2..] {
        return Err(ctx.err(
            node,
            format!("scores {xs:?} and target {ts:?} are not [N, C, d..] and [N, d..]"),
        ));
    }
    if !target.dtype().is_int() {
        return Err(ctx.err(node, format!("target must be integer, got {}", target.dtype())));
    }
    let c = xs[1];
    if let Some(w) = weight {
        if w.shape() != [c] {
            return Err(
                ctx.err(node, format!("weight must be [{c}] (one per class), got {:?}", w.shape()))
            );
        }
    }
    let dt = x.dtype();
    let vt = VType::of(dt);
    let i = Expr::input;

    // Class ids [1, C, 1..] in the target's dtype (int32 on the GPU), and the target as
    // [N, 1, d..], so `target == class` broadcasts to the one-hot mask [N, C, d..].
    let mut cshape = vec![1isize, c as isize];
    cshape.extend(std::iter::repeat_n(1, r - 2));
    let classes = t::arange(0.0, c as f64, 1.0, target.dtype(), x.place())
        .and_then(|a| a.reshape(&cshape))
        .map_err(wrap)?;
    let tb = target.unsqueeze(1).map_err(wrap)?;
    // `select` rather than a multiply by the mask: a -inf log-probability times 0 is NaN.
    let pick = || Expr::select(Expr::binary(B::Eq, i(0), i(1)), i(2), Expr::Scalar(0, vt));
    let gather = |v: &Tensor| -> Result<Tensor> {
        let sel = t::fused_elementwise(&label, &[&tb, &classes, v], dt, pick(), &[Scalar::F(0.0)])?;
        t::sum(&sel, Some(&[1]), false)
    };
    let picked = gather(&x).map_err(wrap)?;
    let wsel = match weight {
        Some(w) => Some(
            gather(&w.astype(dt).map_err(wrap)?.reshape(&cshape).map_err(wrap)?).map_err(wrap)?,
        ),
        None => None,
    };

    // On the GPU the target is int32: an ignore_index outside that range matches no target.
    let ignore = ignore_index.filter(|&v| target.dtype() == DType::I64 || i32::try_from(v).is_ok());
    // Per-element weight: weight[target] (or 1), zeroed where the target is ignored.
    let kept = |e: Expr| match ignore {
        Some(_) => Expr::select(
            Expr::binary(B::Ne, i(0), Expr::Scalar(1, VType::Int)),
            e,
            Expr::Scalar(0, vt),
        ),
        None => e,
    };
    // Fused inputs are `(target, weight[target]?, ..)`; scalars are (0, ignore_index, 1).
    let scalars = [Scalar::F(0.0), Scalar::I(ignore.unwrap_or(0)), Scalar::F(1.0)];
    let w_expr = match &wsel {
        Some(_) => i(1),
        None => Expr::Scalar(2, vt),
    };
    let mut ins_w: Vec<&Tensor> = vec![target];
    ins_w.extend(wsel.as_ref());
    let mut ins_loss = ins_w.clone();
    ins_loss.push(&picked);
    let loss_e = kept(Expr::binary(B::Mul, Expr::unary(U::Neg, i(ins_w.len())), w_expr.clone()));
    let loss = t::fused_elementwise(&label, &ins_loss, dt, loss_e, &scalars).map_err(wrap)?;

    match reduction {
        LossReduction::None => Ok(loss),
        LossReduction::Sum => t::sum(&loss, None, false).map_err(wrap),
        LossReduction::Mean if wsel.is_none() && ignore.is_none() => {
            t::mean(&loss, None, false).map_err(wrap)
        }
        LossReduction::Mean => {
            // Weighted mean: divide by the total weight of the elements that were not ignored.
            let w =
                t::fused_elementwise(&label, &ins_w, dt, kept(w_expr), &scalars).map_err(wrap)?;
            let total = t::sum(&w, None, false).map_err(wrap)?;
            let sum = t::sum(&loss, None, false).map_err(wrap)?;
            t::divide(&sum, &total).map_err(wrap)
        }
    }
}
