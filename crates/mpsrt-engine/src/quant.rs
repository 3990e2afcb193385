//! Linear quantization: QuantizeLinear and DequantizeLinear.
//!
//! The scale and zero point are brought to a shape that broadcasts against `x` (a scalar, a
//! per-axis vector reshaped to `[1.., n, 1..]`, or a blocked tensor repeated `block_size` times
//! along the axis with one device index-select), then each op is one fused elementwise kernel.
//! Quantization clamps in float before the integer cast: integer stores wrap, and ONNX requires
//! saturation to the quantized type's range.

use crate::ops::{Ctx, OpEntry, OpFn};
use crate::reduce::to_out;
use mpsrt_core::{normalize_axis, Place, Result};
use mpsrt_graph::{Node, Op};
use mpsrt_tensor::{self as t, BinaryFn as B, Expr, Scalar, Tensor, UnaryFn as U, VType};

/// The op table entries of this family.
pub(crate) fn entries() -> Vec<OpEntry> {
    let e = |name: &'static str, run: OpFn| OpEntry { name, run, host_from: usize::MAX };
    vec![e("QuantizeLinear", quantize), e("DequantizeLinear", dequantize)]
}

/// Reshapes or repeats a scale / zero point (`what`) so it broadcasts against `x`'s shape.
fn expand_param(
    ctx: &Ctx<'_>,
    node: &Node,
    what: &str,
    p: &Tensor,
    xs: &[usize],
    axis: i64,
    block: usize,
) -> Result<Tensor> {
    let wrap = |e| ctx.wrap(node, e);
    // Per tensor: a scalar or a one-element tensor.
    if p.numel() == 1 && block == 0 {
        return p.reshape(&[]).map_err(wrap);
    }
    let ax = normalize_axis(&ctx.label(node), axis as isize, xs.len().max(1))?;
    if xs.is_empty() {
        return Err(
            ctx.err(node, format!("{what} {:?} is not per-tensor for a scalar input", p.shape()))
        );
    }
    if block == 0 {
        if p.ndim() != 1 || p.shape()[0] != xs[ax] {
            return Err(ctx.err(
                node,
                format!(
                    "per-axis {what} must be 1-D of length {} (axis {ax} of input {xs:?}), got {:?}",
                    xs[ax],
                    p.shape()
                ),
            ));
        }
        let mut shape = vec![1isize; xs.len()];
        shape[ax] = xs[ax] as isize;
        return p.reshape(&shape).map_err(wrap);
    }
    // Blocked: same rank as x, axis `ax` holds ceil(n / block) blocks, other dims equal.
    let ps = p.shape();
    let blocks = xs[ax].div_ceil(block);
    let ok = ps.len() == xs.len()
        && (0..xs.len()).all(|d| if d == ax { ps[d] == blocks } else { ps[d] == xs[d] });
    if !ok {
        return Err(ctx.err(
            node,
            format!(
                "blocked {what} must have shape {xs:?} with axis {ax} reduced to {blocks} blocks of \
                 {block}, got {ps:?}"
            ),
        ));
    }
    let idx: Vec<i64> = (0..xs[ax]).map(|j| (j / block) as i64).collect();
    let idx = Tensor::from_slice(&idx, &[idx.len()], Place::Cpu)?;
    t::index_select(p, ax as isize, &idx).map_err(wrap)
}

/// The scale (input 1) and optional zero point (input 2), expanded against `x`.
fn params(
    ctx: &Ctx<'_>,
    node: &Node,
    inputs: &[Tensor],
    axis: i64,
    block: usize,
) -> Result<(Tensor, Option<Tensor>)> {
    let xs = ctx.input(node, inputs, 0)?.shape().to_vec();
    let scale = ctx.input(node, inputs, 1)?;
    let scale = expand_param(ctx, node, "scale", scale, &xs, axis, block)?;
    let zp = match inputs.get(2) {
        Some(z) => Some(expand_param(ctx, node, "zero point", z, &xs, axis, block)?),
        None => None,
    };
    Ok((scale, zp))
}

fn fl(e: Expr) -> Expr {
    Expr::cast(VType::Float, e)
}

/// `y = clamp(round_half_even(x / scale) + zero_point, lo, hi)`.
fn quantize(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::QuantizeLinear { axis, block_size, lo, hi, .. } = &node.op else {
        return Err(ctx.err(node, "not QuantizeLinear"));
    };
    let x = ctx.input(node, inputs, 0)?;
    if !x.dtype().is_float() {
        return Err(ctx.err(node, format!("input must be a float tensor, got {}", x.dtype())));
    }
    let (scale, zp) = params(ctx, node, inputs, *axis, *block_size)?;
    let mut q = Expr::unary(U::Round, Expr::binary(B::Div, fl(Expr::input(0)), fl(Expr::input(1))));
    let mut refs = vec![x, &scale];
    if let Some(z) = &zp {
        refs.push(z);
        q = Expr::binary(B::Add, q, fl(Expr::input(2)));
    }
    let f = |k| Expr::Scalar(k, VType::Float);
    let q = Expr::binary(B::Min, Expr::binary(B::Max, q, f(0)), f(1));
    let out = node.outputs.first().copied().ok_or_else(|| ctx.err(node, "has no output"))?;
    let dt = ctx.device_dtype(out);
    let scalars = [Scalar::F(*lo as f64), Scalar::F(*hi as f64)];
    let e = Expr::cast(VType::of(dt), q);
    let y = t::fused_elementwise(&ctx.label(node), &refs, dt, e, &scalars)?;
    Ok(vec![y])
}

/// `y = (x - zero_point) * scale`.
fn dequantize(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::DequantizeLinear { axis, block_size, .. } = &node.op else {
        return Err(ctx.err(node, "not DequantizeLinear"));
    };
    let x = ctx.input(node, inputs, 0)?;
    let (scale, zp) = params(ctx, node, inputs, *axis, *block_size)?;
    if !scale.dtype().is_float() {
        return Err(ctx.err(node, format!("scale must be a float tensor, got {}", scale.dtype())));
    }
    let mut d = fl(Expr::input(0));
    let mut refs = vec![x, &scale];
    if let Some(z) = &zp {
        refs.push(z);
        d = Expr::binary(B::Sub, d, fl(Expr::input(2)));
    }
    let e = Expr::binary(B::Mul, d, fl(Expr::input(1)));
    let y = t::fused_elementwise(&ctx.label(node), &refs, scale.dtype(), e, &[])?;
    Ok(vec![to_out(ctx, node, 0, y)?])
}
