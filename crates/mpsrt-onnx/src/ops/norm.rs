//! Importers for normalizations and softmax: BatchNormalization (inference), LayerNormalization,
//! InstanceNormalization, LRN, Softmax/LogSoftmax (whose axis semantics changed in opset 13).

use super::Importer;
use crate::ctx::Ctx;
use mpsrt_core::Result;
use mpsrt_graph::Op;

pub const OPS: &[(&str, Importer)] = &[
    ("BatchNormalization", batch_norm),
    ("LayerNormalization", layer_norm),
    ("InstanceNormalization", instance_norm),
    ("LRN", lrn),
    ("GroupNormalization", group_norm),
    ("RMSNormalization", rms_norm),
    ("LpNormalization", lp_norm),
    ("MeanVarianceNormalization", mvn),
    ("Hardmax", hardmax),
    ("Softmax", softmax),
    ("LogSoftmax", log_softmax),
];

fn batch_norm(cx: &mut Ctx) -> Result<()> {
    cx.only_outputs(1, "training-mode BatchNormalization (running statistics)")?;
    if cx.int("training_mode", 0)? != 0 {
        return Err(cx.unsupported("training_mode=1 is not supported (inference only)"));
    }
    let epsilon = cx.float("epsilon", 1e-5)?;
    let ins = (0..5).map(|i| cx.input(i)).collect::<Result<Vec<_>>>()?;
    cx.emit(Op::BatchNormalization { epsilon }, ins)
}

fn layer_norm(cx: &mut Ctx) -> Result<()> {
    if cx.int("stash_type", 1)? != 1 {
        return Err(cx.unsupported("stash_type other than float32 is not supported"));
    }
    let op =
        Op::LayerNormalization { axis: cx.int("axis", -1)?, epsilon: cx.float("epsilon", 1e-5)? };
    let mut ins = vec![cx.input(0)?, cx.input(1)?];
    ins.extend(cx.opt_input(2)?);
    cx.emit(op, ins)
}

fn stash_f32(cx: &Ctx) -> Result<()> {
    if cx.int("stash_type", 1)? != 1 {
        return Err(cx.unsupported("stash_type other than float32 is not supported"));
    }
    Ok(())
}

fn group_norm(cx: &mut Ctx) -> Result<()> {
    stash_f32(cx)?;
    let groups = cx.req_int("num_groups")?;
    let num_groups = usize::try_from(groups)
        .ok()
        .filter(|&g| g > 0)
        .ok_or_else(|| cx.invalid(format!("num_groups must be positive, got {groups}")))?;
    let op = Op::GroupNormalization { num_groups, epsilon: cx.float("epsilon", 1e-5)? };
    let ins = vec![cx.input(0)?, cx.input(1)?, cx.input(2)?];
    cx.emit(op, ins)
}

fn rms_norm(cx: &mut Ctx) -> Result<()> {
    stash_f32(cx)?;
    let op =
        Op::RmsNormalization { axis: cx.int("axis", -1)?, epsilon: cx.float("epsilon", 1e-5)? };
    let ins = vec![cx.input(0)?, cx.input(1)?];
    cx.emit(op, ins)
}

fn lp_norm(cx: &mut Ctx) -> Result<()> {
    let p = cx.int("p", 2)?;
    if p != 1 && p != 2 {
        return Err(cx.invalid(format!("p must be 1 or 2, got {p}")));
    }
    let op = Op::LpNormalization { axis: cx.int("axis", -1)?, p };
    let x = cx.input(0)?;
    cx.emit(op, vec![x])
}

fn mvn(cx: &mut Ctx) -> Result<()> {
    let axes = cx.ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    let x = cx.input(0)?;
    cx.emit(Op::MeanVarianceNormalization { axes }, vec![x])
}

/// Like softmax, Hardmax's axis semantics changed in opset 13.
fn hardmax(cx: &mut Ctx) -> Result<()> {
    let flat = cx.opset < 13;
    let op = Op::Hardmax { axis: cx.int("axis", if flat { 1 } else { -1 })?, flat };
    let x = cx.input(0)?;
    cx.emit(op, vec![x])
}

fn instance_norm(cx: &mut Ctx) -> Result<()> {
    let epsilon = cx.float("epsilon", 1e-5)?;
    let ins = vec![cx.input(0)?, cx.input(1)?, cx.input(2)?];
    cx.emit(Op::InstanceNormalization { epsilon }, ins)
}

fn lrn(cx: &mut Ctx) -> Result<()> {
    let size = cx.req_int("size")?;
    if size < 1 {
        return Err(cx.invalid(format!("size must be >= 1, got {size}")));
    }
    let op = Op::Lrn {
        size: size as usize,
        alpha: cx.float("alpha", 1e-4)?,
        beta: cx.float("beta", 0.75)?,
        bias: cx.float("bias", 1.0)?,
    };
    let x = cx.input(0)?;
    cx.emit(op, vec![x])
}

/// Before opset 13 softmax flattens to 2-D at `axis` (default 1); from 13 it normalizes along
/// one axis (default -1).
fn softmax_like(cx: &mut Ctx, log: bool) -> Result<()> {
    let op = if cx.opset < 13 {
        Op::SoftmaxFlat { axis: cx.int("axis", 1)?, log }
    } else {
        let axis = cx.int("axis", -1)?;
        if log {
            Op::LogSoftmax { axis }
        } else {
            Op::Softmax { axis }
        }
    };
    let x = cx.input(0)?;
    cx.emit(op, vec![x])
}

fn softmax(cx: &mut Ctx) -> Result<()> {
    softmax_like(cx, false)
}

fn log_softmax(cx: &mut Ctx) -> Result<()> {
    softmax_like(cx, true)
}
