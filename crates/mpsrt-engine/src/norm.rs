//! Normalizations over a set of axes: LayerNormalization (with its Mean/InvStdDev outputs),
//! RMSNormalization, LpNormalization, MeanVarianceNormalization, InstanceNormalization and
//! GroupNormalization. Statistics come from the tensor library's reductions; the normalization
//! itself is one fused elementwise kernel, so each op is a handful of device dispatches.

use crate::ops::{Ctx, OpEntry, OpFn};
use crate::reduce::to_out;
use mpsrt_core::{normalize_axis, DType, Result};
use mpsrt_graph::{Node, Op};
use mpsrt_tensor::{self as t, BinaryFn as B, Expr, Scalar, Tensor, UnaryFn as U, VType};

/// The op table entries of this family.
pub(crate) fn entries() -> Vec<OpEntry> {
    let e = |name: &'static str, run: OpFn| OpEntry { name, run, host_from: usize::MAX };
    vec![
        e("LayerNormalization", layer_norm),
        e("RmsNormalization", rms_norm),
        e("LpNormalization", lp_norm),
        e("MeanVarianceNormalization", mvn),
        e("InstanceNormalization", instance_norm),
        e("GroupNormalization", group_norm),
    ]
}

fn i(k: usize) -> Expr {
    Expr::input(k)
}
fn f(k: usize) -> Expr {
    Expr::Scalar(k, VType::Float)
}
fn bin(op: B, a: Expr, b: Expr) -> Expr {
    Expr::binary(op, a, b)
}

/// The float dtype statistics are computed in (f32 unless the input is f64 on the CPU).
fn stat_dtype(x: &Tensor) -> DType {
    if x.dtype() == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// Axes `a..rank` as isize.
fn tail_axes(a: usize, rank: usize) -> Vec<isize> {
    (a as isize..rank as isize).collect()
}

/// `y = (x - mean) * inv_std * scale (+ bias)` over axes `axis..`; outputs 1 and 2 (optional)
/// are the mean and `1 / sqrt(var + eps)` with the reduced axes kept as 1s.
fn layer_norm(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::LayerNormalization { axis, epsilon } = &node.op else {
        return Err(ctx.err(node, "not LayerNormalization"));
    };
    let x = ctx.input(node, inputs, 0)?;
    let label = ctx.label(node);
    let wrap = |e| ctx.wrap(node, e);
    let a = normalize_axis(&label, *axis as isize, x.ndim())?;
    if let Some(y) = one_kernel(ctx, node, inputs, a, *epsilon, None)? {
        return Ok(vec![y]);
    }
    let axes = tail_axes(a, x.ndim());
    let xf = x.astype(stat_dtype(x)).map_err(wrap)?;
    let mu = t::mean(&xf, Some(&axes), true).map_err(wrap)?;
    let d = t::subtract(&xf, &mu).map_err(wrap)?;
    let var = t::mean(&t::multiply(&d, &d).map_err(wrap)?, Some(&axes), true).map_err(wrap)?;
    let eps = [Scalar::F(*epsilon as f64)];
    let inv = t::fused_elementwise(
        &label,
        &[&var],
        xf.dtype(),
        Expr::unary(U::Recip, Expr::unary(U::Sqrt, bin(B::Add, i(0), f(0)))),
        &eps,
    )?;
    let scale = ctx.input(node, inputs, 1)?.astype(xf.dtype())?;
    let mut refs = vec![&d, &inv, &scale];
    let bias;
    let mut e = bin(B::Mul, bin(B::Mul, i(0), i(1)), i(2));
    if let Some(b) = inputs.get(2) {
        bias = b.astype(xf.dtype())?;
        refs.push(&bias);
        e = bin(B::Add, e, i(3));
    }
    let y = t::fused_elementwise(&label, &refs, xf.dtype(), e, &[])?;
    let mut out = vec![to_out(ctx, node, 0, y)?];
    if node.outputs.len() > 1 {
        out.push(to_out(ctx, node, 1, mu)?);
    }
    if node.outputs.len() > 2 {
        out.push(to_out(ctx, node, 2, inv)?);
    }
    Ok(out)
}

/// A GPU layer norm over the last axis whose only output is `y`, f32 in and out (or f16, as
/// `precision=f16` leaves it: statistics in f32 inside the kernel), as the one-kernel
/// `layer_norm_last` (one dispatch instead of six; the composition above stays the CPU's and
/// the general path). `residual` is added to `x` first (SkipLayerNormalization).
pub(crate) fn one_kernel(
    ctx: &Ctx<'_>,
    node: &Node,
    inputs: &[Tensor],
    axis: usize,
    epsilon: f32,
    residual: Option<&Tensor>,
) -> Result<Option<Tensor>> {
    let x = ctx.input(node, inputs, 0)?;
    let last = axis + 1 == x.ndim();
    let dt = x.dtype();
    let float = matches!(dt, DType::F32 | DType::F16);
    if !x.place().is_gpu() || !float || !last || node.outputs.len() > 1 {
        return Ok(None);
    }
    let wrap = |e| ctx.wrap(node, e);
    // Scale and bias in the input's dtype (the kernel reads one dtype).
    let f32c = |t: &Tensor| t.astype(dt).and_then(|t| t.contiguous()).map_err(wrap);
    let n = x.shape()[axis];
    let scale = f32c(ctx.input(node, inputs, 1)?)?;
    let bias = inputs.get(2).map(f32c).transpose()?;
    // ONNX broadcasts scale/bias to the normalized shape: only full [n] vectors go here.
    if scale.numel() != n || bias.as_ref().is_some_and(|b| b.numel() != n) {
        return Ok(None);
    }
    let xc = x.contiguous().map_err(wrap)?;
    let r = residual.map(|r| r.contiguous()).transpose().map_err(wrap)?;
    let (y, _) = t::layernorm::layer_norm_last(
        &xc,
        r.as_ref(),
        &scale,
        bias.as_ref(),
        epsilon as f64,
        false,
    )
    .map_err(wrap)?;
    Ok(Some(to_out(ctx, node, 0, y)?))
}

/// `y = x / sqrt(mean(x^2) + eps) * scale` over axes `axis..`.
fn rms_norm(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::RmsNormalization { axis, epsilon } = &node.op else {
        return Err(ctx.err(node, "not RMSNormalization"));
    };
    let x = ctx.input(node, inputs, 0)?;
    let label = ctx.label(node);
    let wrap = |e| ctx.wrap(node, e);
    let a = normalize_axis(&label, *axis as isize, x.ndim())?;
    let xf = x.astype(stat_dtype(x)).map_err(wrap)?;
    let ms = t::multiply(&xf, &xf)
        .and_then(|sq| t::mean(&sq, Some(&tail_axes(a, x.ndim())), true))
        .map_err(wrap)?;
    let scale = ctx.input(node, inputs, 1)?.astype(xf.dtype())?;
    let e = bin(B::Mul, bin(B::Div, i(0), Expr::unary(U::Sqrt, bin(B::Add, i(1), f(0)))), i(2));
    let y = t::fused_elementwise(
        &label,
        &[&xf, &ms, &scale],
        xf.dtype(),
        e,
        &[Scalar::F(*epsilon as f64)],
    )?;
    Ok(vec![to_out(ctx, node, 0, y)?])
}

/// `x / ||x||_p` along one axis (0 where the norm is 0, like the reference).
fn lp_norm(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::LpNormalization { axis, p } = &node.op else {
        return Err(ctx.err(node, "not LpNormalization"));
    };
    let x = ctx.input(node, inputs, 0)?;
    let label = ctx.label(node);
    let wrap = |e| ctx.wrap(node, e);
    let a = normalize_axis(&label, *axis as isize, x.ndim())? as isize;
    let xf = x.astype(stat_dtype(x)).map_err(wrap)?;
    let norm = match p {
        1 => t::abs(&xf).and_then(|v| t::sum(&v, Some(&[a]), true)),
        2 => t::norm(&xf, Some(&[a]), true),
        _ => return Err(ctx.err(node, format!("p must be 1 or 2, got {p}"))),
    }
    .map_err(wrap)?;
    let zero = bin(B::Eq, i(1), f(0));
    let e = Expr::select(zero, f(0), bin(B::Div, i(0), i(1)));
    let y = t::fused_elementwise(&label, &[&xf, &norm], xf.dtype(), e, &[Scalar::F(0.0)])?;
    Ok(vec![to_out(ctx, node, 0, y)?])
}

/// `(x - mean) / (std + 1e-9)` over `axes` (ONNX's reference adds the epsilon to the std).
fn mvn(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::MeanVarianceNormalization { axes } = &node.op else {
        return Err(ctx.err(node, "not MeanVarianceNormalization"));
    };
    let x = ctx.input(node, inputs, 0)?;
    let label = ctx.label(node);
    let wrap = |e| ctx.wrap(node, e);
    let axes = axes
        .iter()
        .map(|&a| normalize_axis(&label, a as isize, x.ndim()).map(|v| v as isize))
        .collect::<Result<Vec<_>>>()?;
    let xf = x.astype(stat_dtype(x)).map_err(wrap)?;
    let mu = t::mean(&xf, Some(&axes), true).map_err(wrap)?;
    let d = t::subtract(&xf, &mu).map_err(wrap)?;
    let var = t::mean(&t::multiply(&d, &d).map_err(wrap)?, Some(&axes), true).map_err(wrap)?;
    let e = bin(B::Div, i(0), bin(B::Add, Expr::unary(U::Sqrt, i(1)), f(0)));
    let y = t::fused_elementwise(&label, &[&d, &var], xf.dtype(), e, &[Scalar::F(1e-9)])?;
    Ok(vec![to_out(ctx, node, 0, y)?])
}

fn instance_norm(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::InstanceNormalization { epsilon } = &node.op else {
        return Err(ctx.err(node, "not InstanceNormalization"));
    };
    let wrap = |e| ctx.wrap(node, e);
    let x = ctx.input(node, inputs, 0)?;
    let xf = x.astype(DType::F32).map_err(wrap)?;
    let scale = ctx.input(node, inputs, 1)?.astype(DType::F32).map_err(wrap)?;
    let bias = ctx.input(node, inputs, 2)?.astype(DType::F32).map_err(wrap)?;
    let y = t::instance_norm(&xf, Some(&scale), Some(&bias), *epsilon as f64).map_err(wrap)?;
    Ok(vec![to_out(ctx, node, 0, y)?])
}

/// Group norm; opset 18's per-group scale/bias (`[num_groups]`) are repeated per channel.
fn group_norm(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::GroupNormalization { num_groups, epsilon } = &node.op else {
        return Err(ctx.err(node, "not GroupNormalization"));
    };
    let wrap = |e| ctx.wrap(node, e);
    let x = ctx.input(node, inputs, 0)?;
    let c = x.shape().get(1).copied().unwrap_or(0);
    let g = *num_groups;
    let per_channel = |t: &Tensor| -> Result<Tensor> {
        let t = t.astype(DType::F32)?;
        if t.numel() == g && g != c && g > 0 && c % g == 0 {
            let idx: Vec<i64> = (0..c as i64).map(|ch| ch / (c / g) as i64).collect();
            let idx = Tensor::from_slice(&idx, &[c], mpsrt_core::Place::Cpu)?;
            t::index_select(&t.reshape(&[-1])?, 0, &idx)
        } else {
            Ok(t)
        }
    };
    let xf = x.astype(DType::F32).map_err(wrap)?;
    let scale = per_channel(ctx.input(node, inputs, 1)?).map_err(wrap)?;
    let bias = per_channel(ctx.input(node, inputs, 2)?).map_err(wrap)?;
    let y = t::group_norm(&xf, g, Some(&scale), Some(&bias), *epsilon as f64).map_err(wrap)?;
    Ok(vec![to_out(ctx, node, 0, y)?])
}
