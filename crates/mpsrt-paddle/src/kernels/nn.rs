//! Convolution, pooling and normalization kernels with their backward passes, composed from
//! mpsrt-tensor ops (mpsrt has no backward kernels of its own):
//! - `conv2d_grad`: the input gradient is a transposed convolution of `dout` with the filter;
//!   the filter gradient is a convolution of the (channel ↔ batch swapped) input with the
//!   (swapped) `dout` as filter, stride and dilation exchanged, one per group.
//! - `pool2d_grad`: a transposed depthwise convolution scatters `dout` back over each window
//!   (one-hot filters for max pooling, whose masks mark the first maximum of each window like
//!   Paddle's CPU kernel; a filter of ones for average pooling, `dout` divided by the window's
//!   element count first); adaptive average pooling by two averaging matrices.
//! - batch / layer norm: the closed-form gradients over the saved statistics.
//!
//! Layouts: NCHW, and NHWC by permuting around the NCHW computation.

use super::grad::{isz, place};
use super::{kernel, vty, Call, KernelDef};
use mpsrt_core::{DType, Error, Result};
use mpsrt_tensor::{self as mt, Tensor};
use std::ffi::c_void;

const F: &[DType] = &[DType::F32, DType::F16];

pub(super) fn nhwc(c: &Call, i: usize) -> Result<bool> {
    match c.string(i) {
        "NCHW" | "AnyLayout" | "" => Ok(false),
        "NHWC" => Ok(true),
        other => Err(Error::unsupported(c.name, format!("data format {other:?}"))),
    }
}

pub(super) fn to_nchw(t: Tensor, nhwc: bool) -> Result<Tensor> {
    if nhwc {
        t.permute(&[0, 3, 1, 2])
    } else {
        Ok(t)
    }
}

pub(super) fn from_nchw(t: Tensor, nhwc: bool) -> Result<Tensor> {
    if nhwc {
        t.permute(&[0, 2, 3, 1])
    } else {
        Ok(t)
    }
}

pub(super) fn pair(v: &[i64], what: &str, op: &str) -> Result<[usize; 2]> {
    match v {
        [a] => Ok([*a as usize; 2]),
        [a, b] => Ok([*a as usize, *b as usize]),
        _ => Err(Error::invalid(op, format!("{what} {v:?}: expected 1 or 2 values"))),
    }
}

/// Paddle's padding rules (`UpdatePaddingAndDilation`): 2 values (h, w) or 4 (top, bottom,
/// left, right); "SAME" pads to ceil(in / stride) outputs (and dilation becomes 1), "VALID"
/// pads nothing. Returns (top, bottom, left, right) and the dilation.
pub(super) fn paddings(
    op: &str,
    pads: &[i64],
    algo: &str,
    input: [usize; 2],
    kernel: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
) -> Result<([usize; 4], [usize; 2])> {
    match algo {
        "SAME" => {
            let mut p = [0; 4];
            for d in 0..2 {
                let out = input[d].div_ceil(stride[d].max(1));
                let need = ((out.max(1) - 1) * stride[d] + kernel[d]).saturating_sub(input[d]);
                p[2 * d] = need / 2;
                p[2 * d + 1] = need - need / 2;
            }
            Ok((p, [1, 1]))
        }
        "VALID" => Ok(([0; 4], dilation)),
        _ => {
            let p: Vec<usize> = pads.iter().map(|&v| v.max(0) as usize).collect();
            let p = match p.as_slice() {
                [h, w] => [*h, *h, *w, *w],
                [t, b, l, r] => [*t, *b, *l, *r],
                _ => {
                    return Err(Error::invalid(
                        op,
                        format!("paddings {pads:?}: expected 2 or 4 values"),
                    ))
                }
            };
            Ok((p, dilation))
        }
    }
}

/// Convolution geometry from Paddle's attributes.
struct ConvGeo {
    stride: [usize; 2],
    pad: [usize; 4],
    dilation: [usize; 2],
    groups: usize,
    nhwc: bool,
}

/// `attrs`: index of strides; Paddle's conv2d has (strides, paddings, algo, dilations, groups,
/// format), depthwise_conv2d (strides, paddings, algo, groups, dilations, format).
fn conv_geo(c: &Call, x: &Tensor, w: &Tensor, depthwise: bool) -> Result<ConvGeo> {
    let (di, gi) = if depthwise { (4, 3) } else { (3, 4) };
    let nhwc = nhwc(c, 5)?;
    let stride = pair(&c.ints(0), "strides", c.name)?;
    let dilation = pair(&c.ints(di), "dilations", c.name)?;
    let hw = if nhwc { [x.shape()[1], x.shape()[2]] } else { [x.shape()[2], x.shape()[3]] };
    let k = [w.shape()[2], w.shape()[3]];
    let (pad, dilation) = paddings(c.name, &c.ints(1), c.string(2), hw, k, stride, dilation)?;
    Ok(ConvGeo { stride, pad, dilation, groups: c.int(gi).max(1) as usize, nhwc })
}

pub(super) fn check4(op: &str, t: &Tensor, what: &str) -> Result<()> {
    if t.ndim() != 4 {
        return Err(Error::shape(op, format!("{what} must be 4-D, got {:?}", t.shape())));
    }
    Ok(())
}

fn conv_fwd(c: &Call, depthwise: bool) -> Result<()> {
    let (x, w) = (c.input(0)?, c.input(1)?);
    check4(c.name, &x, "input")?;
    check4(c.name, &w, "filter")?;
    let g = conv_geo(c, &x, &w, depthwise)?;
    let p = g.pad;
    let opts = mt::Conv2dOptions {
        stride: g.stride,
        padding: mt::ConvPadding::Explicit([p[0], p[2], p[1], p[3]]),
        dilation: g.dilation,
        groups: g.groups,
    };
    let y = mt::conv2d(&to_nchw(x, g.nhwc)?, &w, None, &opts)?;
    c.store(0, &from_nchw(y, g.nhwc)?)
}

fn conv2d(c: &Call) -> Result<()> {
    conv_fwd(c, false)
}
fn depthwise_conv2d(c: &Call) -> Result<()> {
    conv_fwd(c, true)
}

/// `conv2d_grad(input, filter, out_grad, ...) -> (input_grad, filter_grad)`.
fn conv_bwd(c: &Call, depthwise: bool) -> Result<()> {
    let (x, w, dy) = (c.input(0)?, c.input(1)?, c.input(2)?);
    check4(c.name, &x, "input")?;
    check4(c.name, &w, "filter")?;
    let geo = conv_geo(c, &x, &w, depthwise)?;
    let (x, dy) = (to_nchw(x, geo.nhwc)?, to_nchw(dy, geo.nhwc)?);
    let [pt, pb, pl, pr] = geo.pad;
    let (s, d, g) = (geo.stride, geo.dilation, geo.groups);
    let (h, wd) = (x.shape()[2], x.shape()[3]);
    let (hp, wp) = (h + pt + pb, wd + pl + pr);
    let (oh, ow) = (dy.shape()[2], dy.shape()[3]);
    let (kh, kw) = (w.shape()[2], w.shape()[3]);
    if c.wants(0) {
        // Scatter dout over the padded input, then crop the padding.
        let cov = |o: usize, s: usize, d: usize, k: usize| (o - 1) * s + d * (k - 1) + 1;
        let (ch, cw) = (cov(oh, s[0], d[0], kh), cov(ow, s[1], d[1], kw));
        let opts = mt::ConvTranspose2dOptions {
            stride: s,
            padding: [0, 0],
            output_padding: [0, 0],
            dilation: d,
            groups: g,
        };
        let canvas = mt::conv_transpose2d(&dy, &w, None, &opts)?;
        let dx = mt::pad(
            &canvas,
            &[
                (0, 0),
                (0, 0),
                (-(pt as isize), hp as isize - pb as isize - ch as isize),
                (-(pl as isize), wp as isize - pr as isize - cw as isize),
            ],
            mt::PadMode::Constant(0.0),
        )?;
        c.store(0, &from_nchw(dx, geo.nhwc)?)?;
    }
    if c.wants(1) {
        let xp = if geo.pad == [0; 4] {
            x.clone()
        } else {
            mt::pad(
                &x,
                &[(0, 0), (0, 0), (pt as isize, pb as isize), (pl as isize, pr as isize)],
                mt::PadMode::Constant(0.0),
            )?
        };
        let dw = if std::env::var("MPSRT_PADDLE_WGRAD").is_ok_and(|v| v == "unfold") {
            wgrad_unfold(&xp, &dy, [kh, kw], s, d, g)?
        } else {
            wgrad_conv(&xp, &dy, [kh, kw], s, d, g)?
        };
        c.store(1, &dw)?;
    }
    Ok(())
}

/// Filter gradient as a convolution: the channel↔batch-swapped padded input `[Cg, N, Hp, Wp]`
/// convolved with the swapped `dout` `[OCg, N, OH, OW]` as filter, stride and dilation
/// exchanged, cropped to the kernel size; one per group.
fn wgrad_conv(
    xp: &Tensor,
    dy: &Tensor,
    [kh, kw]: [usize; 2],
    s: [usize; 2],
    d: [usize; 2],
    g: usize,
) -> Result<Tensor> {
    let (cin, oc) = (xp.shape()[1], dy.shape()[1]);
    let (cg, ocg) = (cin / g, oc / g);
    let opts = mt::Conv2dOptions {
        stride: d,
        padding: mt::ConvPadding::Explicit([0; 4]),
        dilation: s,
        groups: 1,
    };
    let mut parts = Vec::with_capacity(g);
    for gi in 0..g {
        let xg = xp.slice(1, Some((gi * cg) as isize), Some(((gi + 1) * cg) as isize), 1)?;
        let dg = dy.slice(1, Some((gi * ocg) as isize), Some(((gi + 1) * ocg) as isize), 1)?;
        // [Cg, N, Hp, Wp] ⋆ [OCg, N, OH, OW] -> [Cg, OCg, KH', KW'] (KH' >= KH).
        let r = mt::conv2d(
            &xg.permute(&[1, 0, 2, 3])?.contiguous()?,
            &dg.permute(&[1, 0, 2, 3])?.contiguous()?,
            None,
            &opts,
        )?;
        let r =
            r.slice(2, Some(0), Some(kh as isize), 1)?.slice(3, Some(0), Some(kw as isize), 1)?;
        parts.push(r.permute(&[1, 0, 2, 3])?);
    }
    if parts.len() == 1 {
        Ok(parts.pop().expect("one group"))
    } else {
        mt::concat(&parts.iter().collect::<Vec<_>>(), 0)
    }
}

/// Filter gradient through im2col (`MPSRT_PADDLE_WGRAD=unfold`): the window columns come from a
/// depthwise convolution with one-hot filters, then one batched product per group,
/// `Σₙ dout[n] · colsᵀ[n]` — N-fold more parallel work than [`wgrad_conv`]'s single
/// convolution with a long reduction, for the GPU comparison.
fn wgrad_unfold(
    xp: &Tensor,
    dy: &Tensor,
    [kh, kw]: [usize; 2],
    s: [usize; 2],
    d: [usize; 2],
    g: usize,
) -> Result<Tensor> {
    let (n, cin, oc) = (xp.shape()[0], xp.shape()[1], dy.shape()[1]);
    let (cg, ocg, k) = (cin / g, oc / g, kh * kw);
    let p = (dy.shape()[2] * dy.shape()[3]) as isize;
    let opts = mt::Conv2dOptions { stride: s, dilation: d, groups: cin, ..Default::default() };
    let cols = mt::conv2d(xp, &one_hot_filter(cin, kh, kw, xp.dtype())?, None, &opts)?;
    let cols = cols.reshape(&[n as isize, (cin * k) as isize, p])?;
    let dy = dy.contiguous()?.reshape(&[n as isize, oc as isize, p])?;
    let mut parts = Vec::with_capacity(g);
    for gi in 0..g {
        let cgk =
            cols.slice(1, Some((gi * cg * k) as isize), Some(((gi + 1) * cg * k) as isize), 1)?;
        let dg = dy.slice(1, Some((gi * ocg) as isize), Some(((gi + 1) * ocg) as isize), 1)?;
        let prod = mt::matmul(&dg, &cgk.transpose(-1, -2)?)?;
        let r = mt::sum(&prod, Some(&[0]), false)?;
        parts.push(r.reshape(&[ocg as isize, cg as isize, kh as isize, kw as isize])?);
    }
    if parts.len() == 1 {
        Ok(parts.pop().expect("one group"))
    } else {
        mt::concat(&parts.iter().collect::<Vec<_>>(), 0)
    }
}

/// The backward scatter of a 2-D pool: `src` (`[N, C·F, OH, OW]`) through the depthwise
/// transposed conv with `filt` (`[C·F, 1, KH, KW]`, `ch` groups) onto the padded canvas, then
/// cropped back to the input's `[h, w]` (the leading padding `[pt, pl]` cut off).
pub(super) fn scatter_to_input(
    src: &Tensor,
    filt: &Tensor,
    ch: usize,
    [h, w]: [usize; 2],
    [kh, kw]: [usize; 2],
    [sh, sw]: [usize; 2],
    [pt, pl]: [usize; 2],
) -> Result<Tensor> {
    let (oh, ow) = (src.shape()[2], src.shape()[3]);
    let opts = mt::ConvTranspose2dOptions {
        stride: [sh, sw],
        padding: [0, 0],
        output_padding: [0, 0],
        dilation: [1, 1],
        groups: ch,
    };
    let canvas = mt::conv_transpose2d(src, filt, None, &opts)?;
    let (ch_, cw_) = ((oh - 1) * sh + kh, (ow - 1) * sw + kw);
    mt::pad(
        &canvas,
        &[
            (0, 0),
            (0, 0),
            (-(pt as isize), (h + pt) as isize - ch_ as isize),
            (-(pl as isize), (w + pl) as isize - cw_ as isize),
        ],
        mt::PadMode::Constant(0.0),
    )
}

/// Depthwise filters `[C·K, 1, KH, KW]` (K = KH·KW): channel `c·K + t` picks window offset `t`.
pub(super) fn one_hot_filter(ch: usize, kh: usize, kw: usize, dt: DType) -> Result<Tensor> {
    let k = kh * kw;
    let mut f = vec![0f32; ch * k * k];
    for cc in 0..ch {
        for t in 0..k {
            f[(cc * k + t) * k + t] = 1.0;
        }
    }
    Tensor::from_slice(&f, &[ch * k, 1, kh, kw], place())?.astype(dt)
}

fn conv2d_grad(c: &Call) -> Result<()> {
    conv_bwd(c, false)
}
fn depthwise_conv2d_grad(c: &Call) -> Result<()> {
    conv_bwd(c, true)
}

// --- pooling ----------------------------------------------------------------------------

/// Pool geometry: attributes (kernel_size, strides, paddings, ceil_mode, exclusive,
/// data_format, pooling_type, global_pooling, adaptive, padding_algorithm).
struct PoolGeo {
    max: bool,
    kernel: [usize; 2],
    stride: [usize; 2],
    pad: [usize; 4],
    ceil: bool,
    exclusive: bool,
    /// Adaptive pooling to `kernel` outputs.
    adaptive: bool,
    nhwc: bool,
}

fn pool_geo(c: &Call, x: &Tensor) -> Result<PoolGeo> {
    let nhwc = nhwc(c, 5)?;
    let max = match c.string(6) {
        "max" => true,
        "avg" => false,
        other => return Err(Error::unsupported(c.name, format!("pooling_type {other:?}"))),
    };
    let hw = if nhwc { [x.shape()[1], x.shape()[2]] } else { [x.shape()[2], x.shape()[3]] };
    if c.bool(7) {
        // Global pooling: one window over the whole plane.
        return Ok(PoolGeo {
            max,
            kernel: hw,
            stride: hw,
            pad: [0; 4],
            ceil: false,
            exclusive: true,
            adaptive: false,
            nhwc,
        });
    }
    let kernel = pair(&c.ints(0), "kernel_size", c.name)?;
    let stride = pair(&c.ints(1), "strides", c.name)?;
    let (pad, _) = paddings(c.name, &c.ints(2), c.string(9), hw, kernel, stride, [1, 1])?;
    Ok(PoolGeo {
        max,
        kernel,
        stride,
        pad,
        ceil: c.bool(3),
        exclusive: c.bool(4),
        adaptive: c.bool(8),
        nhwc,
    })
}

fn pool2d(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    check4(c.name, &x, "input")?;
    let g = pool_geo(c, &x)?;
    let x = to_nchw(x, g.nhwc)?;
    let y = if g.adaptive {
        if g.max {
            mt::adaptive_max_pool2d(&x, g.kernel)?
        } else {
            mt::adaptive_avg_pool2d(&x, g.kernel)?
        }
    } else {
        let [pt, pb, pl, pr] = g.pad;
        if pt != pb || pl != pr {
            return Err(Error::unsupported(
                c.name,
                format!("asymmetric pool paddings {:?}", g.pad),
            ));
        }
        let opts = mt::Pool2dOptions {
            kernel: g.kernel,
            stride: Some(g.stride),
            padding: [pt, pl],
            dilation: [1, 1],
            ceil_mode: g.ceil,
            count_include_pad: !g.exclusive,
        };
        if g.max {
            mt::max_pool2d(&x, &opts)?
        } else {
            mt::avg_pool2d(&x, &opts)?
        }
    };
    c.store(0, &from_nchw(y, g.nhwc)?)
}

/// Adaptive average pooling as a matrix: row `o` averages input `[floor(o·n/m), ceil((o+1)·n/m))`.
fn adaptive_matrix(n: usize, m: usize, dt: DType) -> Result<Tensor> {
    let mut a = vec![0f32; m * n];
    for o in 0..m {
        let (s, e) = (o * n / m, ((o + 1) * n).div_ceil(m));
        for i in s..e {
            a[o * n + i] = 1.0 / (e - s) as f32;
        }
    }
    Tensor::from_slice(&a, &[m, n], place())?.astype(dt)
}

/// `pool2d_grad(x, out, dout, <pool2d attributes>) -> dx`.
fn pool2d_grad(c: &Call) -> Result<()> {
    let (x, out, dy) = (c.input(0)?, c.input(1)?, c.input(2)?);
    check4(c.name, &x, "input")?;
    let mut g = pool_geo(c, &x)?;
    let (x, out, dy) = (to_nchw(x, g.nhwc)?, to_nchw(out, g.nhwc)?, to_nchw(dy, g.nhwc)?);
    let (n, ch, h, w) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let (oh, ow) = (dy.shape()[2], dy.shape()[3]);
    let dt = x.dtype();
    if g.adaptive {
        if !g.max {
            // dx = Ahᵀ · dout · Aw.
            let ah = adaptive_matrix(h, oh, dt)?;
            let aw = adaptive_matrix(w, ow, dt)?;
            let t = mt::matmul(&dy, &aw)?;
            let dx = mt::matmul(&ah.transpose(0, 1)?, &t)?;
            return c.store(0, &from_nchw(dx, g.nhwc)?);
        }
        if h % oh != 0 || w % ow != 0 {
            return Err(Error::unsupported(
                c.name,
                format!(
                    "adaptive max pooling backward from {h}x{w} to {oh}x{ow} (sizes must divide)"
                ),
            ));
        }
        g.kernel = [h / oh, w / ow];
        g.stride = g.kernel;
        g.pad = [0; 4];
    }
    let [kh, kw] = g.kernel;
    let [sh, sw] = g.stride;
    let [pt, _, pl, _] = g.pad;
    // The canvas the windows cover (padding included), and how it maps onto x.
    let (ch_, cw_) = ((oh - 1) * sh + kh, (ow - 1) * sw + kw);
    let scatter = |src: &Tensor, filt: &Tensor| {
        scatter_to_input(src, filt, ch, [h, w], [kh, kw], [sh, sw], [pt, pl])
    };
    let dx = if g.max {
        // x on the canvas (padding = -inf never wins), one window offset at a time.
        let xp = mt::pad(
            &x,
            &[
                (0, 0),
                (0, 0),
                (pt as isize, ch_ as isize - (h + pt) as isize),
                (pl as isize, cw_ as isize - (w + pl) as isize),
            ],
            mt::PadMode::Constant(f64::NEG_INFINITY),
        )?;
        let k = kh * kw;
        let mut taken = mt::zeros(&[n, ch, oh, ow], dt, place())?;
        let mut parts = Vec::with_capacity(k);
        for i in 0..kh {
            for j in 0..kw {
                let win = xp
                    .slice(
                        2,
                        Some(i as isize),
                        Some((i + (oh - 1) * sh + 1) as isize),
                        sh as isize,
                    )?
                    .slice(
                        3,
                        Some(j as isize),
                        Some((j + (ow - 1) * sw + 1) as isize),
                        sw as isize,
                    )?;
                let hit = mt::equal(&win, &out)?.astype(dt)?;
                // The first maximum of each window only (Paddle's CPU kernel stops there).
                let first = mt::multiply(&hit, &mt::rsubtract_scalar(1.0, &taken)?)?;
                taken = mt::add(&taken, &first)?;
                parts.push(mt::multiply(&first, &dy)?);
            }
        }
        let stacked = mt::stack(&parts.iter().collect::<Vec<_>>(), 2)?;
        let src = stacked.reshape(&[n as isize, (ch * k) as isize, oh as isize, ow as isize])?;
        let filt = one_hot_filter(ch, kh, kw, dt)?;
        scatter(&src, &filt)?
    } else {
        // Each output's gradient is spread evenly over its window's counted elements.
        let count = if g.exclusive {
            // In-bounds elements of each window: a window sum over a mask of the input.
            let ones = mt::ones(&[1, 1, h, w], dt, place())?;
            let mask = mt::pad(
                &ones,
                &[
                    (0, 0),
                    (0, 0),
                    (pt as isize, ch_ as isize - (h + pt) as isize),
                    (pl as isize, cw_ as isize - (w + pl) as isize),
                ],
                mt::PadMode::Constant(0.0),
            )?;
            let opts = mt::Conv2dOptions { stride: [sh, sw], ..Default::default() };
            mt::conv2d(&mask, &mt::ones(&[1, 1, kh, kw], dt, place())?, None, &opts)?
        } else {
            mt::full(&[1, 1, oh, ow], (kh * kw) as f64, dt, place())?
        };
        let src = mt::divide(&dy, &count)?;
        let filt = mt::ones(&[ch, 1, kh, kw], dt, place())?;
        scatter(&src, &filt)?
    };
    c.store(0, &from_nchw(dx, g.nhwc)?)
}

// --- batch norm -------------------------------------------------------------------------

/// Channel axis and the axes reduced over, and the shape that broadcasts a `[C]` vector.
fn bn_axes(c: &Call, x: &Tensor, attr: usize) -> Result<(usize, Vec<isize>, Vec<isize>)> {
    let nd = x.ndim();
    if nd < 2 {
        return Err(Error::shape(
            c.name,
            format!("input must have at least 2 dims, got {:?}", x.shape()),
        ));
    }
    let ch = if nhwc(c, attr)? || c.string(attr) == "NLC" { nd - 1 } else { 1 };
    let axes = (0..nd).filter(|&d| d != ch).map(|d| d as isize).collect();
    let mut shape = vec![1isize; nd];
    shape[ch] = x.shape()[ch] as isize;
    Ok((ch, axes, shape))
}

/// `scale` / `bias` (or 1 / 0 when absent) shaped to broadcast.
fn affine(t: Option<Tensor>, shape: &[isize], v: f64, dt: DType) -> Result<Tensor> {
    match t {
        Some(t) => t.astype(dt)?.reshape(shape),
        None => mt::full(&[1], v, dt, place())?.reshape(&vec![1; shape.len()]),
    }
}

/// `batch_norm(x, mean, variance, scale?, bias?, is_test, momentum, epsilon, data_layout,
/// use_global_stats, trainable_statistics) -> (y, mean_out, variance_out, saved_mean,
/// saved_variance, reserve_space)`. `saved_variance` holds 1/sqrt(var + eps), as Paddle's.
fn batch_norm(c: &Call) -> Result<()> {
    let (x, rm, rv) = (c.input(0)?, c.input(1)?, c.input(2)?);
    let (scale, bias) = (c.opt_input(3)?, c.opt_input(4)?);
    let (is_test, momentum, eps) = (c.bool(0), c.float(1), c.float(2));
    let (global, trainable) = (c.bool(4), c.bool(5));
    let (_, axes, bshape) = bn_axes(c, &x, 3)?;
    let dt = x.dtype();
    let batch_stats = !global && (!is_test || trainable);
    let (mean, var) = if batch_stats {
        let xf = x.astype(DType::F32)?;
        let mean = mt::mean(&xf, Some(&axes), true)?;
        let d = mt::subtract(&xf, &mean)?;
        (mean, mt::mean(&mt::multiply(&d, &d)?, Some(&axes), true)?)
    } else {
        (rm.astype(DType::F32)?.reshape(&bshape)?, rv.astype(DType::F32)?.reshape(&bshape)?)
    };
    let inv = mt::reciprocal(&mt::sqrt(&mt::add_scalar(&var, eps)?)?)?;
    let w = mt::multiply(&inv, &affine(scale, &bshape, 1.0, DType::F32)?)?;
    let y = mt::add(
        &mt::multiply(&mt::subtract(&x.astype(DType::F32)?, &mean)?, &w)?,
        &affine(bias, &bshape, 0.0, DType::F32)?,
    )?;
    c.store(0, &y.astype(dt)?)?;
    let flat = |t: &Tensor| t.reshape(&[-1]);
    if batch_stats {
        let upd = |r: &Tensor, b: &Tensor| -> Result<Tensor> {
            mt::add(
                &mt::multiply_scalar(r, momentum)?,
                &mt::multiply_scalar(&flat(b)?, 1.0 - momentum)?,
            )
        };
        c.store(1, &upd(&rm.astype(DType::F32)?, &mean)?)?;
        c.store(2, &upd(&rv.astype(DType::F32)?, &var)?)?;
    } else {
        c.store(1, &rm)?;
        c.store(2, &rv)?;
    }
    if c.outs.len() > 3 {
        c.store(3, &flat(&mean)?)?;
        c.store(4, &flat(&inv)?)?;
    }
    Ok(())
}

/// `batch_norm_grad(x, scale?, bias?, mean?, variance?, saved_mean, saved_variance,
/// reserve_space?, y_grad, momentum, epsilon, data_layout, is_test, use_global_stats,
/// trainable_statistics) -> (x_grad, scale_grad, bias_grad)`.
fn batch_norm_grad(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    let scale = c.opt_input(1)?;
    let (rm, rv) = (c.opt_input(3)?, c.opt_input(4)?);
    let (sm, sinv, dy) = (c.input(5)?, c.input(6)?, c.input(8)?);
    let eps = c.float(1);
    let (is_test, global) = (c.bool(3), c.bool(4));
    let (_, axes, bshape) = bn_axes(c, &x, 2)?;
    let dt = x.dtype();
    let use_running = global || (is_test && !c.bool(5));
    let (mean, inv) = match (use_running, rm, rv) {
        (true, Some(m), Some(v)) => (
            m.astype(DType::F32)?.reshape(&bshape)?,
            mt::reciprocal(&mt::sqrt(&mt::add_scalar(&v.astype(DType::F32)?, eps)?)?)?
                .reshape(&bshape)?,
        ),
        _ => (sm.astype(DType::F32)?.reshape(&bshape)?, sinv.astype(DType::F32)?.reshape(&bshape)?),
    };
    let (xf, dyf) = (x.astype(DType::F32)?, dy.astype(DType::F32)?);
    let xhat = mt::multiply(&mt::subtract(&xf, &mean)?, &inv)?;
    let dbias = mt::sum(&dyf, Some(&axes), true)?;
    let dscale = mt::sum(&mt::multiply(&dyf, &xhat)?, Some(&axes), true)?;
    let w = affine(scale, &bshape, 1.0, DType::F32)?;
    if c.wants(0) {
        let dx = if use_running {
            mt::multiply(&dyf, &mt::multiply(&w, &inv)?)?
        } else {
            let m = (x.numel() / x.shape()[bn_axes(c, &x, 2)?.0].max(1)).max(1) as f64;
            // dx = w·inv/M · (M·dy - Σdy - x̂·Σ(dy·x̂))
            let inner = mt::subtract(
                &mt::subtract(&mt::multiply_scalar(&dyf, m)?, &dbias)?,
                &mt::multiply(&xhat, &dscale)?,
            )?;
            mt::multiply(&inner, &mt::multiply_scalar(&mt::multiply(&w, &inv)?, 1.0 / m)?)?
        };
        c.store(0, &dx.astype(dt)?)?;
    }
    if c.wants(1) {
        c.store(1, &dscale.reshape(&[-1])?)?;
    }
    if c.wants(2) {
        c.store(2, &dbias.reshape(&[-1])?)?;
    }
    Ok(())
}

/// `batch_norm_infer(x, mean, variance, scale, bias, momentum, epsilon, data_layout)`.
fn batch_norm_infer(c: &Call) -> Result<()> {
    let (x, rm, rv, scale, bias) =
        (c.input(0)?, c.input(1)?, c.input(2)?, c.input(3)?, c.input(4)?);
    let _ = bn_axes(c, &x, 2)?;
    let y = mt::batch_norm(&to_nchw_if(c, x, 2)?, &rm, &rv, Some(&scale), Some(&bias), c.float(1))?;
    c.store(0, &from_nchw_if(c, y, 2)?)?;
    c.store(1, &rm)?;
    c.store(2, &rv)
}

fn to_nchw_if(c: &Call, x: Tensor, attr: usize) -> Result<Tensor> {
    if nhwc(c, attr)? {
        let nd = x.ndim() as isize;
        let mut p: Vec<isize> = vec![0, nd - 1];
        p.extend(1..nd - 1);
        x.permute(&p)
    } else {
        Ok(x)
    }
}

fn from_nchw_if(c: &Call, y: Tensor, attr: usize) -> Result<Tensor> {
    if nhwc(c, attr)? {
        let nd = y.ndim() as isize;
        let mut p: Vec<isize> = vec![0];
        p.extend(2..nd);
        p.push(1);
        y.permute(&p)
    } else {
        Ok(y)
    }
}

// --- layer norm -------------------------------------------------------------------------

/// `x` as `[left, right]` split at `begin_norm_axis`.
fn ln_split(c: &Call, x: &Tensor, axis_attr: usize) -> Result<(usize, usize)> {
    let b = c.int(axis_attr);
    let b = if b < 0 { b + x.ndim() as i64 } else { b };
    if b < 0 || b as usize > x.ndim() {
        return Err(Error::invalid(c.name, format!("begin_norm_axis {b} for {:?}", x.shape())));
    }
    let left: usize = x.shape()[..b as usize].iter().product();
    Ok((left, x.numel() / left.max(1)))
}

/// `layer_norm(x, scale?, bias?, epsilon, begin_norm_axis) -> (out, mean, variance)`.
fn layer_norm(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    let (scale, bias) = (c.opt_input(1)?, c.opt_input(2)?);
    let eps = c.float(0);
    let (left, right) = ln_split(c, &x, 1)?;
    let x2 = x.astype(DType::F32)?.reshape(&[left as isize, right as isize])?;
    let mean = mt::mean(&x2, Some(&[1]), true)?;
    let d = mt::subtract(&x2, &mean)?;
    let var = mt::mean(&mt::multiply(&d, &d)?, Some(&[1]), true)?;
    let inv = mt::reciprocal(&mt::sqrt(&mt::add_scalar(&var, eps)?)?)?;
    let row = [1, right as isize];
    let mut y = mt::multiply(&d, &inv)?;
    if let Some(s) = scale {
        y = mt::multiply(&y, &s.astype(DType::F32)?.reshape(&row)?)?;
    }
    if let Some(b) = bias {
        y = mt::add(&y, &b.astype(DType::F32)?.reshape(&row)?)?;
    }
    c.store(0, &y.astype(x.dtype())?.reshape(&isz(x.shape()))?)?;
    c.store(1, &mean.reshape(&[-1])?)?;
    c.store(2, &var.reshape(&[-1])?)
}

/// `layer_norm_grad(x, scale?, bias?, mean, variance, out_grad, epsilon, begin_norm_axis)
/// -> (x_grad, scale_grad, bias_grad)`.
fn layer_norm_grad(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    let scale = c.opt_input(1)?;
    let (mean, var, dy) = (c.input(3)?, c.input(4)?, c.input(5)?);
    let eps = c.float(0);
    let (left, right) = ln_split(c, &x, 1)?;
    let (l, r) = (left as isize, right as isize);
    let x2 = x.astype(DType::F32)?.reshape(&[l, r])?;
    let dy2 = dy.astype(DType::F32)?.reshape(&[l, r])?;
    let mean = mean.astype(DType::F32)?.reshape(&[l, 1])?;
    let inv = mt::reciprocal(&mt::sqrt(&mt::add_scalar(
        &var.astype(DType::F32)?.reshape(&[l, 1])?,
        eps,
    )?)?)?;
    let xhat = mt::multiply(&mt::subtract(&x2, &mean)?, &inv)?;
    if c.wants(2) {
        c.store(2, &mt::sum(&dy2, Some(&[0]), false)?)?;
    }
    if c.wants(1) {
        c.store(1, &mt::sum(&mt::multiply(&dy2, &xhat)?, Some(&[0]), false)?)?;
    }
    if c.wants(0) {
        let gy = match scale {
            Some(s) => mt::multiply(&dy2, &s.astype(DType::F32)?.reshape(&[1, r])?)?,
            None => dy2,
        };
        // dx = inv/R · (R·g - Σg - x̂·Σ(g·x̂)) per row.
        let sg = mt::sum(&gy, Some(&[1]), true)?;
        let sgx = mt::sum(&mt::multiply(&gy, &xhat)?, Some(&[1]), true)?;
        let inner = mt::subtract(
            &mt::subtract(&mt::multiply_scalar(&gy, right as f64)?, &sg)?,
            &mt::multiply(&xhat, &sgx)?,
        )?;
        let dx = mt::multiply(&inner, &mt::multiply_scalar(&inv, 1.0 / right as f64)?)?;
        c.store(0, &dx.astype(x.dtype())?.reshape(&isz(x.shape()))?)?;
    }
    Ok(())
}

/// Convolution, pooling and normalization kernels.
pub fn all() -> Vec<KernelDef> {
    vec![
        kernel!("conv2d", conv2d, F, [x: In, w: In, strides: VecI32, pads: VecI32, algo: Str, dil: VecI32, groups: I32, fmt: Str, out: Out]),
        kernel!("conv2d_grad", conv2d_grad, F, [x: In, w: In, dy: In, strides: VecI32, pads: VecI32, algo: Str, dil: VecI32, groups: I32, fmt: Str, dx: Out, dw: Out]),
        kernel!("depthwise_conv2d", depthwise_conv2d, F, [x: In, w: In, strides: VecI32, pads: VecI32, algo: Str, groups: I32, dil: VecI32, fmt: Str, out: Out]),
        kernel!("depthwise_conv2d_grad", depthwise_conv2d_grad, F, [x: In, w: In, dy: In, strides: VecI32, pads: VecI32, algo: Str, groups: I32, dil: VecI32, fmt: Str, dx: Out, dw: Out]),
        kernel!("pool2d", pool2d, F, [x: In, ksize: IntArray, strides: VecI64, pads: VecI64, ceil: Bool, excl: Bool, fmt: Str, kind: Str, global: Bool, adaptive: Bool, algo: Str, out: Out]),
        kernel!("pool2d_grad", pool2d_grad, F, [x: In, out: In, dout: In, ksize: IntArray, strides: VecI64, pads: VecI64, ceil: Bool, excl: Bool, fmt: Str, kind: Str, global: Bool, adaptive: Bool, algo: Str, dx: Out]),
        kernel!("batch_norm", batch_norm, F, [x: In, mean: In, var: In, scale: OptIn, bias: OptIn, is_test: Bool, momentum: F32, eps: F32, layout: Str, global: Bool, trainable: Bool,
            y: Out, mean_out: Out, var_out: Out, saved_mean: Out, saved_var: Out, reserve: Out]),
        kernel!("batch_norm_grad", batch_norm_grad, F, [x: In, scale: OptIn, bias: OptIn, mean: OptIn, var: OptIn, saved_mean: In, saved_var: In, reserve: OptIn, dy: In,
            momentum: F32, eps: F32, layout: Str, is_test: Bool, global: Bool, trainable: Bool, dx: Out, dscale: Out, dbias: Out]),
        kernel!("batch_norm_infer", batch_norm_infer, F, [x: In, mean: In, var: In, scale: In, bias: In, momentum: F32, eps: F32, layout: Str, y: Out, mean_out: Out, var_out: Out]),
        kernel!("layer_norm", layer_norm, F, [x: In, scale: OptIn, bias: OptIn, eps: F32, begin: I32, out: Out, mean: Out, var: Out]),
        kernel!("layer_norm_grad", layer_norm_grad, F, [x: In, scale: OptIn, bias: OptIn, mean: In, var: In, dy: In, eps: F32, begin: I32, dx: Out, dscale: Out, dbias: Out]),
    ]
}
