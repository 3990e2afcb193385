//! Neural-network ops mapped onto the tensor library: convolution, pooling, softmax, batch and
//! layer normalization (as one fused elementwise kernel over per-channel parameters), matmul
//! and gemm, concat/gather/pad/tile.

use crate::ops::{Ctx, OpEntry, OpFn};
use crate::reduce::to_out;
use crate::value::host_i64;
use mpsrt_core::{Error, Result};
use mpsrt_graph::{AutoPad, ConvAttrs, Node, Op, PadMode, PoolAttrs, UnaryOp};
use mpsrt_tensor::{
    self as t, BinaryFn as B, Conv2dOptions, ConvPadding, Expr, Pool2dOptions, Scalar, Tensor,
    UnaryFn as U, VType,
};

/// The op table entries of this family.
pub(crate) fn entries() -> Vec<OpEntry> {
    let e = |name: &'static str, run: OpFn, host_from: usize| OpEntry { name, run, host_from };
    vec![
        e("Conv", conv, usize::MAX),
        e("ConvTranspose", conv_transpose, usize::MAX),
        e("MaxPool", pool, usize::MAX),
        e("AveragePool", pool, usize::MAX),
        e("LpPool", pool, usize::MAX),
        e("GlobalAveragePool", global_pool, usize::MAX),
        e("GlobalMaxPool", global_pool, usize::MAX),
        e("Softmax", softmax, usize::MAX),
        e("LogSoftmax", softmax, usize::MAX),
        e("SoftmaxFlat", softmax, usize::MAX),
        e("BatchNormalization", batch_norm, usize::MAX),
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
    Ok(vec![conv_act(ctx, node, inputs, None, None)?])
}

/// Whether 1×1 convs on 1×1 maps run as one GEMV dispatch on GPUs
/// (`mpsrt_tensor::conv1x1_vec`; `MPSRT_CONV_VEC`: `0` off, unset or `1` on — H200,
/// EfficientNet-B0 batch 1: 1.15 ms against 1.32–1.34 with the GEMM route). Read per conv (a
/// replay does not run this) so one test process covers both routes.
fn conv_vec_enabled() -> bool {
    const DEFAULT_ON: bool = true;
    std::env::var("MPSRT_CONV_VEC").map_or(DEFAULT_ON, |v| v.trim() != "0")
}

/// The activation `node` (Relu, LeakyRelu, Clip with both bounds) as a kernel epilogue.
pub(crate) fn epilogue_activation(node: &Node) -> Option<t::Activation> {
    match node.op {
        Op::Unary(UnaryOp::Relu) => Some(t::Activation::Relu),
        Op::LeakyRelu { alpha } => Some(t::Activation::LeakyRelu(alpha)),
        Op::Clip { min: Some(lo), max: Some(hi) } if lo <= hi => Some(t::Activation::Clip(lo, hi)),
        Op::HardSigmoid { alpha, beta } => Some(t::Activation::HardSigmoid(alpha, beta)),
        Op::Unary(UnaryOp::HardSwish) => Some(t::Activation::HardSwish),
        Op::Unary(UnaryOp::Sigmoid) => Some(t::Activation::Sigmoid),
        Op::Swish { alpha: 1.0 } => Some(t::Activation::Silu),
        Op::Gelu { approximate_tanh: false } => Some(t::Activation::Gelu),
        Op::Gelu { approximate_tanh: true } => Some(t::Activation::GeluTanh),
        _ => None,
    }
}

/// The extra operands of a `Step::Epilogue`: a MatMul's constant bias, a Conv's or MatMul's
/// residual.
#[derive(Clone, Copy, Default)]
pub(crate) struct EpilogueArgs<'a> {
    pub bias: Option<&'a Tensor>,
    pub residual: Option<&'a Tensor>,
}

/// A Conv, Gemm or MatMul `node` with a bias (MatMul only) and a residual (Conv, MatMul)
/// added and the activation node `act` applied in its epilogue (`Step::Epilogue`): one kernel
/// on the GPU instead of two or three.
pub(crate) fn run_epilogue(
    ctx: &Ctx<'_>,
    node: &Node,
    extra: EpilogueArgs<'_>,
    act: Option<&Node>,
    inputs: &[Tensor],
) -> Result<Tensor> {
    let a = match act {
        Some(n) => Some(epilogue_activation(n).ok_or_else(|| {
            ctx.err(n, "internal: not an activation the conv/gemm epilogue runs")
        })?),
        None => None,
    };
    let EpilogueArgs { bias, residual } = extra;
    match node.op {
        Op::Conv(_) if bias.is_none() => conv_act(ctx, node, inputs, residual, a),
        Op::Gemm { .. } if residual.is_none() && bias.is_none() => gemm_act(ctx, node, inputs, a),
        Op::MatMul => {
            let x = ctx.input(node, inputs, 0)?;
            let w = ctx.input(node, inputs, 1)?;
            t::matmul_fused(x, w, bias, residual, a).map_err(|e| ctx.wrap(node, e))
        }
        _ => Err(
            ctx.err(node, "internal: epilogues anchor on Conv, Gemm without a residual, or MatMul")
        ),
    }
}

fn conv_act(
    ctx: &Ctx<'_>,
    node: &Node,
    inputs: &[Tensor],
    residual: Option<&Tensor>,
    act: Option<t::Activation>,
) -> Result<Tensor> {
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
    // A 1×1 conv on a 1×1 map (squeeze-excitation's): one GEMV dispatch (`conv1x1_vec`)
    // instead of a 64×64 GEMM tile over one pixel and, for long K, a split-K pass. Not when
    // a folded input operation waits for this conv (`gate_fold.rs`): the GEMM conv takes it.
    let unpadded = matches!(opts.padding, ConvPadding::Explicit(p) if p == [0; 4]);
    if residual.is_none()
        && conv_vec_enabled()
        && x.place().is_gpu()
        && !one_d
        && opts.groups == 1
        && unpadded
        && x.shape().get(2..) == Some(&[1, 1][..])
        && w.shape().get(2..) == Some(&[1, 1][..])
        && !t::input_scale_pending()
    {
        if let Some(y) =
            t::conv1x1_vec(&x, &w, inputs.get(2), act).map_err(|e| ctx.wrap(node, e))?
        {
            return Ok(y);
        }
    }
    let res = match residual {
        Some(r) if one_d => Some(r.unsqueeze(2)?),
        r => r.cloned(),
    };
    let y = t::conv2d_fused(&x, &w, inputs.get(2), &opts, res.as_ref(), act)
        .map_err(|e| ctx.wrap(node, e))?;
    Ok(if one_d { y.squeeze(Some(2))? } else { y })
}

/// Transposed convolution: the full (unpadded) result from the tensor library, then the ONNX
/// output window cut out of it (pads, `output_padding`, `output_shape`, SAME_*), then the bias.
fn conv_transpose(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::ConvTranspose(a) = &node.op else {
        return Err(ctx.err(node, "not a ConvTranspose"));
    };
    let ConvAttrs { strides, pads, dilations, group, auto_pad, .. } = &a.conv;
    let wrap = |e| ctx.wrap(node, e);
    let (x, one_d) = as_2d(ctx.input(node, inputs, 0)?)?;
    let w = ctx.input(node, inputs, 1)?;
    let w = if one_d { w.unsqueeze(2)? } else { w.clone() };
    if x.ndim() != 4 {
        return Err(Error::unsupported(
            ctx.label(node),
            "only 1-D and 2-D transposed convolutions are supported",
        ));
    }
    let lift = |v: &[usize], d: usize| {
        if one_d {
            vec![d, v.first().copied().unwrap_or(d)]
        } else {
            v.to_vec()
        }
    };
    let s = two(&lift(strides, 1), 1);
    let d = two(&lift(dilations, 1), 1);
    let opad = two(&lift(&a.output_padding, 0), 0);
    let opts = t::ConvTranspose2dOptions {
        stride: s,
        padding: [0, 0],
        output_padding: [0, 0],
        dilation: d,
        groups: (*group).max(1),
    };
    let full = t::conv_transpose2d(&x, &w, None, &opts).map_err(wrap)?;
    let out = ctx.out_shape(node, 0)?;
    let out: Vec<usize> = if one_d { vec![1, out[2]] } else { out[2..].to_vec() };
    let p = pads4(pads, one_d);
    let mut y = full;
    for i in 0..2 {
        let have = y.shape()[2 + i];
        let total = (have + opad[i]) as isize - out[i] as isize;
        let begin = if !a.output_shape.is_empty() || *auto_pad != AutoPad::NotSet {
            if *auto_pad == AutoPad::SameUpper {
                total.div_euclid(2)
            } else {
                total - total.div_euclid(2)
            }
        } else {
            p[i] as isize
        };
        // Windows reaching past the computed result (negative padding, output_padding) see
        // zeros there: only the bias lands on those positions.
        let need_end = begin + out[i] as isize;
        let (pre, post) = ((-begin).max(0), (need_end - have as isize).max(0));
        if pre > 0 || post > 0 {
            let mut pp = [(0isize, 0isize); 4];
            pp[2 + i] = (pre, post);
            y = t::pad(&y, &pp, t::PadMode::Constant(0.0)).map_err(wrap)?;
        }
        let (begin, need_end) = (begin + pre, need_end + pre);
        y = y.slice(2 + i as isize, Some(begin), Some(need_end), 1).map_err(wrap)?;
    }
    if let Some(b) = inputs.get(2) {
        y = t::add(&y, &b.reshape(&[1, -1, 1, 1]).map_err(wrap)?).map_err(wrap)?;
    }
    let y = if one_d { y.squeeze(Some(2))? } else { y.contiguous()? };
    Ok(vec![y])
}

fn pool(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let sc = |k| Expr::Scalar(k, VType::Float);
    let (attrs, is_max, lp) = match &node.op {
        Op::MaxPool(a) => (a, true, None),
        Op::AveragePool(a) => (a, false, None),
        Op::LpPool { attrs, p } => (attrs, false, Some(*p as f64)),
        _ => return Err(ctx.err(node, "not a pool")),
    };
    if node.outputs.len() > 1 {
        return Err(Error::unsupported(ctx.label(node), "MaxPool indices output is not supported"));
    }
    let PoolAttrs { kernel, strides, pads, dilations, auto_pad, ceil_mode, count_include_pad } =
        attrs;
    let x0 = ctx.input(node, inputs, 0)?;
    if x0.ndim() == 5 || (!is_max && dilations.iter().any(|&d| d > 1)) {
        return pool_general(ctx, node, x0, attrs, is_max, lp);
    }
    let (x, one_d) = as_2d(x0)?;
    if x.ndim() != 4 {
        return Err(Error::unsupported(ctx.label(node), "only 1-D and 2-D pooling is supported"));
    }
    // Integer inputs (uint8 images) pool in f32, exact for 8/16-bit values; cast back at the end.
    let x = if x.dtype().is_float() { x } else { x.astype(mpsrt_core::DType::F32)? };
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
    let wrap = |e| ctx.wrap(node, e);
    let opts = |padding: [usize; 2], count_include_pad: bool| Pool2dOptions {
        kernel: k,
        stride: Some(s),
        padding,
        dilation: d,
        ceil_mode: *ceil_mode,
        count_include_pad,
    };
    // LpPool: (Σ |x|^p)^(1/p) = (window mean of |x|^p with zero padding · window size)^(1/p).
    let x = match lp {
        Some(pw) => {
            let e = Expr::binary(B::Pow, Expr::unary(U::Abs, Expr::input(0)), sc(0));
            t::fused_elementwise(&ctx.label(node), &[&x], x.dtype(), e, &[Scalar::F(pw)])?
        }
        None => x,
    };
    // The tensor library takes symmetric padding up to half the kernel (PyTorch's rule); any
    // other padding is applied explicitly first.
    let symmetric = p[0] == p[2] && p[1] == p[3] && p[0] <= k[0] / 2 && p[1] <= k[1] / 2;
    let y = if symmetric {
        let o = opts([p[0], p[1]], *count_include_pad || lp.is_some());
        if is_max { t::max_pool2d(&x, &o) } else { t::avg_pool2d(&x, &o) }.map_err(wrap)?
    } else {
        let pads = [(0, 0), (0, 0), (p[0] as isize, p[2] as isize), (p[1] as isize, p[3] as isize)];
        let fill = if is_max { f64::NEG_INFINITY } else { 0.0 };
        let xp = t::pad(&x, &pads, t::PadMode::Constant(fill)).map_err(wrap)?;
        let o = opts([0, 0], true);
        if is_max {
            t::max_pool2d(&xp, &o).map_err(wrap)?
        } else if *count_include_pad || lp.is_some() {
            t::avg_pool2d(&xp, &o).map_err(wrap)?
        } else {
            // Mean over the real elements only: window sums of x over window sums of a 0/1 mask.
            let ones = t::ones(&[1, 1, x.shape()[2], x.shape()[3]], x.dtype(), x.place())?;
            let mask = t::pad(&ones, &pads, t::PadMode::Constant(0.0)).map_err(wrap)?;
            let num = t::avg_pool2d(&xp, &o).map_err(wrap)?;
            let den = t::avg_pool2d(&mask, &o).map_err(wrap)?;
            t::divide(&num, &den).map_err(wrap)?
        }
    };
    let y = match lp {
        Some(pw) => {
            let e = Expr::binary(B::Pow, Expr::binary(B::Mul, Expr::input(0), sc(0)), sc(1));
            let n = (k[0] * k[1]) as f64;
            t::fused_elementwise(
                &ctx.label(node),
                &[&y],
                y.dtype(),
                e,
                &[Scalar::F(n), Scalar::F(1.0 / pw)],
            )?
        }
        None => y,
    };
    let y = if one_d { y.squeeze(Some(2))? } else { y };
    Ok(vec![to_out(ctx, node, 0, y)?])
}

/// 3-D pools and dilated average pools through the separable general path (`pool.rs`).
fn pool_general(
    ctx: &Ctx<'_>,
    node: &Node,
    x: &Tensor,
    attrs: &PoolAttrs,
    is_max: bool,
    lp: Option<f64>,
) -> Result<Vec<Tensor>> {
    let label = ctx.label(node);
    let wrap = |e| ctx.wrap(node, e);
    let r = x.ndim().saturating_sub(2);
    let out = ctx.out_shape(node, 0)?;
    let get = |v: &[usize], i: usize, d: usize| v.get(i).copied().unwrap_or(d);
    let mut axes = Vec::with_capacity(r);
    for i in 0..r {
        let (k, s, d) =
            (get(&attrs.kernel, i, 1), get(&attrs.strides, i, 1), get(&attrs.dilations, i, 1));
        let (pb, pe) = match attrs.auto_pad {
            AutoPad::NotSet => (get(&attrs.pads, i, 0), get(&attrs.pads, r + i, 0)),
            AutoPad::Valid => (0, 0),
            AutoPad::SameUpper | AutoPad::SameLower => {
                let need = (out[2 + i].saturating_sub(1)) * s + (k - 1) * d + 1;
                let total = need.saturating_sub(x.shape()[2 + i]);
                let (small, big) = (total / 2, total - total / 2);
                if attrs.auto_pad == AutoPad::SameUpper {
                    (small, big)
                } else {
                    (big, small)
                }
            }
        };
        axes.push(crate::pool::Axis {
            kernel: k,
            stride: s,
            dilation: d,
            pad_begin: pb,
            pad_end: pe,
            out: out[2 + i],
        });
    }
    let xf = if x.dtype().is_float() { x.clone() } else { x.astype(mpsrt_core::DType::F32)? };
    let sc = |k| Expr::Scalar(k, VType::Float);
    let xf = match lp {
        Some(pw) => {
            let e = Expr::binary(B::Pow, Expr::unary(U::Abs, Expr::input(0)), sc(0));
            t::fused_elementwise(&label, &[&xf], xf.dtype(), e, &[Scalar::F(pw)])?
        }
        None => xf,
    };
    let kind = if is_max {
        crate::pool::Kind::Max
    } else {
        crate::pool::Kind::Avg { count_include_pad: attrs.count_include_pad || lp.is_some() }
    };
    let y = crate::pool::pool_nd(&xf, &axes, kind).map_err(wrap)?;
    let y = match lp {
        Some(pw) => {
            let vol: usize = axes.iter().map(|a| a.kernel).product();
            let e = Expr::binary(B::Pow, Expr::binary(B::Mul, Expr::input(0), sc(0)), sc(1));
            let s = [Scalar::F(vol as f64), Scalar::F(1.0 / pw)];
            t::fused_elementwise(&label, &[&y], y.dtype(), e, &s)?
        }
        None => y,
    };
    Ok(vec![to_out(ctx, node, 0, y)?])
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
    // Per-channel scale and shift from the statistics, then one fused pass (mpsrt-tensor).
    let y = t::batch_norm(
        x,
        &inputs[3],
        &inputs[4],
        Some(&inputs[1]),
        Some(&inputs[2]),
        *epsilon as f64,
    )
    .map_err(|e| ctx.wrap(node, e))?
    .astype(x.dtype())?;
    Ok(vec![y])
}

fn matmul(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let a = ctx.input(node, inputs, 0)?;
    let b = ctx.input(node, inputs, 1)?;
    let y = t::matmul(a, b).map_err(|e| ctx.wrap(node, e))?;
    Ok(vec![to_out(ctx, node, 0, y)?])
}

fn gemm(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![gemm_act(ctx, node, inputs, None)?])
}

fn gemm_act(
    ctx: &Ctx<'_>,
    node: &Node,
    inputs: &[Tensor],
    act: Option<t::Activation>,
) -> Result<Tensor> {
    let Op::Gemm { alpha, beta, trans_a, trans_b } = &node.op else {
        return Err(ctx.err(node, "not Gemm"));
    };
    let a = ctx.input(node, inputs, 0)?;
    let b = ctx.input(node, inputs, 1)?;
    let (al, be) = (*alpha as f64, *beta as f64);
    let y = t::gemm_act(a, b, inputs.get(2), al, be, *trans_a, *trans_b, act)
        .map_err(|e| ctx.wrap(node, e))?;
    to_out(ctx, node, 0, y)
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
    if let Some(y) = identity_gather(ctx, node, x, idx, *axis)? {
        return Ok(vec![y]);
    }
    Ok(vec![t::gather(x, idx, *axis as isize).map_err(|e| ctx.wrap(node, e))?])
}

/// A gather along the first axis at a constant index `[0, 1, …, n-1]` over all `n` rows is
/// `x` reshaped (a view, no dispatch): transformers' index-built padding mask gathers the
/// flattened mask at `b·S + s` (BERT-base b8: a bool gather as three dispatches, 36 us on the
/// H100 in call A). Constants only, so a replayed plan never depends on this run's indices;
/// `MPSRT_GATHER_IDENTITY_VIEW=0` off.
fn identity_gather(
    ctx: &Ctx<'_>,
    node: &Node,
    x: &Tensor,
    idx: &Tensor,
    axis: i64,
) -> Result<Option<Tensor>> {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| {
        std::env::var("MPSRT_GATHER_IDENTITY_VIEW").map_or(true, |v| v.trim() != "0")
    });
    let constant = node.inputs.get(1).is_some_and(|v| ctx.plan.graph.initializers.contains_key(v));
    let first = axis == 0 || (x.ndim() > 0 && axis == -(x.ndim() as i64));
    if !on || !constant || !first || x.ndim() == 0 || idx.place().is_gpu() {
        return Ok(None);
    }
    let n = x.shape()[0];
    if idx.numel() != n || !matches!(idx.dtype(), t::DType::I32 | t::DType::I64) {
        return Ok(None);
    }
    if !host_i64(idx)?.iter().enumerate().all(|(i, &v)| v == i as i64) {
        return Ok(None);
    }
    let shape: Vec<isize> =
        idx.shape().iter().chain(&x.shape()[1..]).map(|&d| d as isize).collect();
    x.reshape(&shape).map(Some).map_err(|e| ctx.wrap(node, e))
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
