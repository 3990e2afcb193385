//! Importers for the loss ops NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: both take
//! `(scores, target, weight?)`, a `reduction` string and an optional `ignore_index`.

use super::Importer;
use crate::ctx::Ctx;
use mpsrt_core::Result;
use mpsrt_graph::op::LossReduction;
use mpsrt_graph::Op;

pub const OPS: &[(&str, Importer)] =
    &[("NegativeLogLikelihoodLoss", nll_loss), ("SoftmaxCrossEntropyLoss", sce_loss)];

/// The shared attributes: `reduction` (default "mean") and `ignore_index` (absent means none;
/// it has no default value, so absence must stay distinguishable from any index).
fn attrs(cx: &Ctx) -> Result<(LossReduction, Option<i64>)> {
    let reduction = match cx.string("reduction", "mean")?.as_str() {
        "none" => LossReduction::None,
        "sum" => LossReduction::Sum,
        "mean" => LossReduction::Mean,
        other => {
            return Err(cx.invalid(format!(
                "reduction must be \"none\", \"sum\" or \"mean\", got {other:?}"
            )))
        }
    };
    let ignore_index =
        if cx.node.attribute.iter().any(|a| a.name.as_deref() == Some("ignore_index")) {
            Some(cx.req_int("ignore_index")?)
        } else {
            None
        };
    Ok((reduction, ignore_index))
}

fn inputs(cx: &Ctx) -> Result<Vec<mpsrt_graph::ValueId>> {
    let mut ins = vec![cx.input(0)?, cx.input(1)?];
    ins.extend(cx.opt_input(2)?);
    Ok(ins)
}

fn nll_loss(cx: &mut Ctx) -> Result<()> {
    cx.only_outputs(1, "a second NegativeLogLikelihoodLoss")?;
    let (reduction, ignore_index) = attrs(cx)?;
    let ins = inputs(cx)?;
    cx.emit(Op::NegativeLogLikelihoodLoss { reduction, ignore_index }, ins)
}

fn sce_loss(cx: &mut Ctx) -> Result<()> {
    cx.only_outputs(2, "a third SoftmaxCrossEntropyLoss")?;
    let (reduction, ignore_index) = attrs(cx)?;
    let ins = inputs(cx)?;
    cx.emit(Op::SoftmaxCrossEntropyLoss { reduction, ignore_index }, ins)
}
