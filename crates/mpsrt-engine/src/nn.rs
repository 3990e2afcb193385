//! Neural-network ops mapped onto the tensor library: convolution, pooling, softmax, batch and
//! layer normalization (as one fused elementwise kernel over per-channel parameters), matmul
//! and gemm, concat/gather/pad/tile.

use crate::ops::{Ctx, OpEntry, OpFn};
use crate::reduce::to_out;
use crate::value::host_i64;
use mpsrt_core::{Error, Result};
use mpsrt_graph::{AutoPad, ConvAttrs, Node, Op, PadMode, PoolAttrs};
use mpsrt_tensor::{
    self as t, BinaryFn as B, Conv2dOptions, ConvPadding, Expr, Pool2dOptions, Scalar, Tensor,
    UnaryFn as U, VType,
};

/// The op table entries of this family.
pub(crate) fn entries() -> Vec<OpEntry> {
    let e = |name: &'static str, run: OpFn, host_from: usize| OpEntry { name, run, host_from };
    vec![
        e("Conv", conv, usize::MAX),
        e("MaxPool", pool, usize::MAX),
        e("AveragePool", pool, usize::MAX),
        e("GlobalAveragePool", global_pool, usize::MAX),
        e("GlobalMaxPool", global_pool, usize::MAX),
        e("Softmax", softmax, usize::MAX),
        e("LogSoftmax", softmax, usize::MAX),
        e("SoftmaxFlat", softmax, usize::MAX),
        e("BatchNormalization", batch_norm, usize::MAX),
        e("LayerNormalization", layer_norm, usize::MAX),
        e("Lrn", lrn, usize::MAX),
        e("MatMul", matmul, usize::MAX),
        e("Gemm", gemm, usize::MAX),
        e("Concat", concat, usize::MAX),
        e("Gather", gather, 1),
        e("Pad", pad, 1),
        e("Tile", tile, 1),
    ]
}

fn two(v: &[usize], d: usize) -> [usize; 2] {
    match v.len() {
        0 => [d, d],
        1 => [v[0], v[0]],
        _ => [v[0], v[1]],
    }
}

/// Runs a 2-D op on a 1-D (N, C, L) input as (N, C, 1, L).
fn as_2d(x: &Tensor) -> Result<(Tensor, bool)> {
    if x.ndim() == 3 {
        Ok((x.unsqueeze(2)?, true))
    } else {
        Ok((x.clone(), false))
    }
}

fn pads4(p: &[usize], one_d: bool) -> [usize; 4] {
    match (p.len(), one_d) {
        (2, true) => [0, p[0], 0, p[1]],
        (4, false) => [p[0], p[1], p[2], p[3]],
        _ => [0; 4],
    }
}

fn conv(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::Conv(ConvAttrs { strides, pads, dilations, group, auto_pad, .. }) = &node.op else {
        return Err(ctx.err(node, "not a Conv"));
    };
    let (x, one_d) = as_2d(ctx.input(node, inputs, 0)?)?;
    let w = ctx.input(node, inputs, 1)?;
    let w = if one_d { w.unsqueeze(2)? } else { w.clone() };
    if x.ndim() != 4 {
        return Err(Error::unsupported(
            ctx.label(node),
            "only 1-D and 2-D convolutions are supported",
        ));
    }
    let pad1 =
        |v: &[usize]| if one_d { vec![1, v.first().copied().unwrap_or(1)] } else { v.to_vec() };
    let padding = match auto_pad {
        AutoPad::SameUpper => ConvPadding::SameUpper,
        AutoPad::SameLower => ConvPadding::SameLower,
        AutoPad::Valid => ConvPadding::Explicit([0; 4]),
        AutoPad::NotSet => ConvPadding::Explicit(pads4(pads, one_d)),
    };
    let opts = Conv2dOptions {
        stride: two(&pad1(strides), 1),
        padding,
        dilation: two(&pad1(dilations), 1),
        groups: (*group).max(1),
    };
    let y = t::conv2d(&x, &w, inputs.get(2), &opts).map_err(|e| ctx.wrap(node, e))?;
    let y = if one_d { y.squeeze(Some(2))? } else { y };
    Ok(vec![y])
}

fn pool(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (attrs, is_max) = match &node.op {
        Op::MaxPool(a) => (a, true),
        Op::AveragePool(a) => (a, false),
        _ => return Err(ctx.err(node, "not a pool")),
    };
    if node.outputs.len() > 1 {
        return Err(Error::unsupported(ctx.label(node), "MaxPool indices output is not supported"));
    }
    let PoolAttrs { kernel, strides, pads, dilations, auto_pad, ceil_mode, count_include_pad } =
        attrs;
    let (x, one_d) = as_2d(ctx.input(node, inputs, 0)?)?;
    if x.ndim() != 4 {
        return Err(Error::unsupported(ctx.label(node), "only 1-D and 2-D pooling is supported"));
    }
    let lift = |v: &[usize], d: usize| {
        if one_d {
            vec![d, v.first().copied().unwrap_or(d)]
        } else {
            v.to_vec()
        }
    };
    let k = two(&lift(kernel, 1), 1);
    let s = two(&lift(strides, 1), 1);
    let d = two(&lift(dilations, 1), 1);
    // Padding as (top, left, bottom, right), derived from the planned output for SAME_*.
    let p: [usize; 4] = match auto_pad {
        AutoPad::NotSet => pads4(pads, one_d),
        AutoPad::Valid => [0; 4],
        AutoPad::SameUpper | AutoPad::SameLower => {
            let out = ctx.out_shape(node, 0)?;
            let out =
                if one_d { vec![1, out.get(2).copied().unwrap_or(1)] } else { out[2..].to_vec() };
            let mut p = [0usize; 4];
            for i in 0..2 {
                let need = (out[i].saturating_sub(1)) * s[i] + (k[i] - 1) * d[i] + 1;
                let total = need.saturating_sub(x.shape()[2 + i]);
                let (small, big) = (total / 2, total - total / 2);
                let (b, e) =
                    if *auto_pad == AutoPad::SameUpper { (small, big) } else { (big, small) };
                p[i] = b;
                p[2 + i] = e;
            }
            p
        }
    };
    let (x, padding) = if p[0] == p[2] && p[1] == p[3] {
        (x, [p[0], p[1]])
    } else if is_max {
        let pads = [(0, 0), (0, 0), (p[0] as isize, p[2] as isize), (p[1] as isize, p[3] as isize)];
        (
            t::pad(&x, &pads, t::PadMode::Constant(f64::NEG_INFINITY))
                .map_err(|e| ctx.wrap(node, e))?,
            [0, 0],
        )
    } else {
        return Err(Error::unsupported(
            ctx.label(node),
            format!("asymmetric average-pool padding {p:?}"),
        ));
    };
    let opts = Pool2dOptions {
        kernel: k,
        stride: Some(s),
        padding,
        dilation: d,
        ceil_mode: *ceil_mode,
        count_include_pad: *count_include_pad,
    };
    let y = if is_max { t::max_pool2d(&x, &opts) } else { t::avg_pool2d(&x, &opts) }
        .map_err(|e| ctx.wrap(node, e))?;
    let y = if one_d { y.squeeze(Some(2))? } else { y };
    Ok(vec![y])
}

fn global_pool(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = ctx.input(node, inputs, 0)?;
    let axes: Vec<isize> = (2..x.ndim() as isize).collect();
    let y = if matches!(node.op, Op::GlobalMaxPool) {
        t::max(x, Some(&axes), true)
    } else {
        t::mean(x, Some(&axes), true)
    }
    .map_err(|e| ctx.wrap(node, e))?;
    Ok(vec![to_out(ctx, node, 0, y)?])
}

fn softmax(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = ctx.input(node, inputs, 0)?;
    let r = match &node.op {
        Op::Softmax { axis } => t::softmax(x, *axis as isize),
        Op::LogSoftmax { axis } => t::log_softmax(x, *axis as isize),
        Op::SoftmaxFlat { axis, log } => {
            let a = mpsrt_core::normalize_axis(&ctx.label(node), *axis as isize, x.ndim().max(1))?;
            let outer: usize = x.shape()[..a].iter().product();
            let flat = x.reshape(&[outer as isize, -1])?;
            let y = if *log { t::log_softmax(&flat, 1) } else { t::softmax(&flat, 1) };
            y.and_then(|y| y.reshape(&x.shape().iter().map(|&d| d as isize).collect::<Vec<_>>()))
        }
        _ => return Err(ctx.err(node, "not a softmax")),
    }
    .map_err(|e| ctx.wrap(node, e))?;
    Ok(vec![r])
}

/// Cross-channel LRN: `x / (bias + alpha / size * sum_{window} x^2) ^ beta`, the window sum as
/// an average pool (zero-padded, so `avg * size` is the sum) over channels of `x^2` viewed as
/// `[N, 1, C, rest]`, then one fused elementwise kernel.
fn lrn(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::Lrn { size, alpha, beta, bias } = &node.op else {
        return Err(ctx.err(node, "not LRN"));
    };
    let wrap = |e| ctx.wrap(node, e);
    let x = ctx.input(node, inputs, 0)?;
    if x.ndim() < 3 || *size == 0 {
        return Err(ctx.err(
            node,
            format!(
                "needs a [N, C, ...] input and size >= 1, got shape {:?} and size {size}",
                x.shape()
            ),
        ));
    }
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let rest: usize = x.shape()[2..].iter().product();
    let sq = t::multiply(x, x).map_err(wrap)?;
    let sq = sq.reshape(&[n as isize, 1, c as isize, rest as isize]).map_err(wrap)?;
    let (lo, hi) = ((size - 1) / 2, size - 1 - (size - 1) / 2);
    let padded = t::pad(
        &sq,
        &[(0, 0), (0, 0), (lo as isize, hi as isize), (0, 0)],
        t::PadMode::Constant(0.0),
    )
    .map_err(wrap)?;
    let opts = Pool2dOptions {
        kernel: [*size, 1],
        stride: Some([1, 1]),
        padding: [0, 0],
        dilation: [1, 1],
        ceil_mode: false,
        count_include_pad: true,
    };
    let avg = t::avg_pool2d(&padded, &opts).map_err(wrap)?;
    let shape: Vec<isize> = x.shape().iter().map(|&d| d as isize).collect();
    let avg = avg.reshape(&shape).map_err(wrap)?;
    let i = Expr::input;
    let sc = |k| Expr::Scalar(k, VType::Float);
    // x / pow(bias + alpha * avg, beta)
    let e = Expr::binary(
        B::Div,
        i(0),
        Expr::binary(B::Pow, Expr::binary(B::Add, sc(0), Expr::binary(B::Mul, sc(1), i(1))), sc(2)),
    );
    let scalars = [Scalar::F(*bias as f64), Scalar::F(*alpha as f64), Scalar::F(*beta as f64)];
    let y = t::fused_elementwise(&ctx.label(node), &[x, &avg], x.dtype(), e, &scalars)?;
    Ok(vec![y])
}

/// Per-channel parameter `p` (shape [C]) viewed as [C, 1, ...] against an input of rank `r`.
fn channel_view(p: &Tensor, r: usize) -> Result<Tensor> {
    let mut shape = vec![-1isize];
    shape.extend(std::iter::repeat_n(1, r.saturating_sub(2)));
    p.reshape(&shape)
}

fn batch_norm(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::BatchNormalization { epsilon } = &node.op else {
        return Err(ctx.err(node, "not BatchNormalization"));
    };
    let x = ctx.input(node, inputs, 0)?;
    if inputs.len() < 5 || node.outputs.len() > 1 {
        return Err(Error::unsupported(
            ctx.label(node),
            "only inference-mode BatchNormalization is supported",
        ));
    }
    let r = x.ndim();
    let p: Vec<Tensor> = inputs[1..5]
        .iter()
        .map(|t| channel_view(&t.astype(x.dtype())?, r))
        .collect::<Result<_>>()?;
    // (x - mean) / sqrt(var + eps) * scale + bias
    let i = Expr::input;
    let e = Expr::binary(
        B::Add,
        Expr::binary(
            B::Mul,
            Expr::binary(
                B::Div,
                Expr::binary(B::Sub, i(0), i(3)),
                Expr::unary(U::Sqrt, Expr::binary(B::Add, i(4), Expr::Scalar(0, VType::Float))),
            ),
            i(1),
        ),
        i(2),
    );
    let refs = [x, &p[0], &p[1], &p[2], &p[3]];
    let y =
        t::fused_elementwise(&ctx.label(node), &refs, x.dtype(), e, &[Scalar::F(*epsilon as f64)])?;
    Ok(vec![y])
}

fn layer_norm(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::LayerNormalization { axis, epsilon } = &node.op else {
        return Err(ctx.err(node, "not LayerNormalization"));
    };
    if node.outputs.len() > 1 {
        return Err(Error::unsupported(
            ctx.label(node),
            "mean/inv_std_dev outputs are not supported",
        ));
    }
    let x = ctx.input(node, inputs, 0)?;
    let a = mpsrt_core::normalize_axis(&ctx.label(node), *axis as isize, x.ndim())?;
    let axes: Vec<isize> = (a as isize..x.ndim() as isize).collect();
    let wrap = |e| ctx.wrap(node, e);
    let xf = x.astype(x.dtype().to_float()).map_err(wrap)?;
    let mu = t::mean(&xf, Some(&axes), true).map_err(wrap)?;
    let d = t::subtract(&xf, &mu).map_err(wrap)?;
    let var = t::mean(&t::multiply(&d, &d).map_err(wrap)?, Some(&axes), true).map_err(wrap)?;
    let scale = ctx.input(node, inputs, 1)?.astype(xf.dtype())?;
    let i = Expr::input;
    let norm = Expr::binary(
        B::Mul,
        Expr::binary(
            B::Div,
            i(0),
            Expr::unary(U::Sqrt, Expr::binary(B::Add, i(1), Expr::Scalar(0, VType::Float))),
        ),
        i(2),
    );
    let mut refs = vec![&d, &var, &scale];
    let bias;
    let e = match inputs.get(2) {
        Some(b) => {
            bias = b.astype(xf.dtype())?;
            refs.push(&bias);
            Expr::binary(B::Add, norm, i(3))
        }
        None => norm,
    };
    let y = t::fused_elementwise(
        &ctx.label(node),
        &refs,
        xf.dtype(),
        e,
        &[Scalar::F(*epsilon as f64)],
    )?;
    Ok(vec![to_out(ctx, node, 0, y)?])
}

fn matmul(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let a = ctx.input(node, inputs, 0)?;
    let b = ctx.input(node, inputs, 1)?;
    let y = t::matmul(a, b).map_err(|e| ctx.wrap(node, e))?;
    Ok(vec![to_out(ctx, node, 0, y)?])
}

fn gemm(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::Gemm { alpha, beta, trans_a, trans_b } = &node.op else {
        return Err(ctx.err(node, "not Gemm"));
    };
    let a = ctx.input(node, inputs, 0)?;
    let b = ctx.input(node, inputs, 1)?;
    let y = t::gemm(a, b, inputs.get(2), *alpha as f64, *beta as f64, *trans_a, *trans_b)
        .map_err(|e| ctx.wrap(node, e))?;
    Ok(vec![to_out(ctx, node, 0, y)?])
}

fn concat(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::Concat { axis } = &node.op else {
        return Err(ctx.err(node, "not Concat"));
    };
    let refs: Vec<&Tensor> = inputs.iter().collect();
    Ok(vec![t::concat(&refs, *axis as isize).map_err(|e| ctx.wrap(node, e))?])
}

fn gather(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::Gather { axis } = &node.op else {
        return Err(ctx.err(node, "not Gather"));
    };
    let x = ctx.input(node, inputs, 0)?;
    let idx = ctx.input(node, inputs, 1)?;
    Ok(vec![t::gather(x, idx, *axis as isize).map_err(|e| ctx.wrap(node, e))?])
}

fn pad(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::Pad { mode, pads, value } = &node.op else {
        return Err(ctx.err(node, "not Pad"));
    };
    let x = ctx.input(node, inputs, 0)?;
    let r = x.ndim();
    if pads.len() != 2 * r {
        return Err(ctx.err(node, format!("pads {pads:?} do not match rank {r}")));
    }
    let pp: Vec<(isize, isize)> =
        (0..r).map(|i| (pads[i] as isize, pads[r + i] as isize)).collect();
    let m = match mode {
        PadMode::Constant => t::PadMode::Constant(*value as f64),
        PadMode::Reflect => t::PadMode::Reflect,
        PadMode::Edge => t::PadMode::Edge,
        PadMode::Wrap => return Err(Error::unsupported(ctx.label(node), "wrap padding")),
    };
    Ok(vec![t::pad(x, &pp, m).map_err(|e| ctx.wrap(node, e))?])
}

fn tile(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = ctx.input(node, inputs, 0)?;
    let reps: Vec<usize> =
        host_i64(ctx.input(node, inputs, 1)?)?.into_iter().map(|v| v.max(0) as usize).collect();
    Ok(vec![t::tile(x, &reps).map_err(|e| ctx.wrap(node, e))?])
}
