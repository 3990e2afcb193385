//! Convolutions: `conv2d` (NCHW × OIHW, explicit/asymmetric/SAME padding, stride, dilation,
//! groups, bias), `conv1d` (conv2d over a unit H dim) and `conv_transpose2d`. Arguments are
//! validated here; the CPU reference is `cpu/conv.rs`, the GPU launch `gpu/conv.rs`.

use crate::activation::Activation;
use crate::elementwise::same_place;
use crate::matmul::epilogue_after;
use crate::{cpu, gpu, Tensor};
use mpsrt_core::{checked_add, checked_mul, checked_numel, Error, Place, Result};

/// Padding of a 2-D convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvPadding {
    /// `(top, left, bottom, right)`; symmetric padding is `(ph, pw, ph, pw)`.
    Explicit([usize; 4]),
    /// ONNX `SAME_UPPER` (PyTorch `padding="same"`): output = ceil(input / stride), the odd
    /// extra pad goes at the end (bottom/right).
    SameUpper,
    /// ONNX `SAME_LOWER`: like `SameUpper` with the odd extra pad at the beginning.
    SameLower,
}

impl ConvPadding {
    /// Symmetric padding `ph` rows top and bottom, `pw` columns left and right.
    pub fn symmetric(ph: usize, pw: usize) -> Self {
        ConvPadding::Explicit([ph, pw, ph, pw])
    }
}

/// Options of `conv2d`; the default is stride 1, no padding, dilation 1, one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dOptions {
    pub stride: [usize; 2],
    pub padding: ConvPadding,
    pub dilation: [usize; 2],
    pub groups: usize,
}

impl Default for Conv2dOptions {
    fn default() -> Self {
        Conv2dOptions {
            stride: [1, 1],
            padding: ConvPadding::Explicit([0; 4]),
            dilation: [1, 1],
            groups: 1,
        }
    }
}

/// Options of `conv_transpose2d` (PyTorch's meaning of each field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvTranspose2dOptions {
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub output_padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
}

impl Default for ConvTranspose2dOptions {
    fn default() -> Self {
        ConvTranspose2dOptions {
            stride: [1, 1],
            padding: [0, 0],
            output_padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

/// Resolved geometry of one convolution (shared by the CPU reference and the GPU launch).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConvGeom {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub oc: usize,
    pub oh: usize,
    pub ow: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub pt: usize,
    pub pl: usize,
    pub dh: usize,
    pub dw: usize,
    pub groups: usize,
}

fn check_common(
    op: &str,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    stride: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
) -> Result<Place> {
    let mut all = vec![x, w];
    all.extend(b);
    let place = same_place(op, &all)?;
    if x.ndim() != 4 || w.ndim() != 4 {
        return Err(Error::shape(
            op,
            format!(
                "expected a 4-D input (N, C, H, W) and a 4-D weight, got input {:?} and weight {:?}",
                x.shape(),
                w.shape()
            ),
        ));
    }
    if !x.dtype().is_float() || w.dtype() != x.dtype() || b.is_some_and(|b| b.dtype() != x.dtype())
    {
        return Err(Error::dtype(
            op,
            format!(
                "expected float input, weight and bias of one dtype, got {}, {}{}",
                x.dtype(),
                w.dtype(),
                b.map_or(String::new(), |b| format!(" and {}", b.dtype()))
            ),
        ));
    }
    if stride.contains(&0) || dilation.contains(&0) || groups == 0 {
        return Err(Error::invalid(
            op,
            format!(
                "stride {stride:?}, dilation {dilation:?} and groups {groups} must all be positive"
            ),
        ));
    }
    Ok(place)
}

/// `(k - 1) * dilation + 1`, checked: the extent of a dilated kernel.
fn dilated(op: &str, k: usize, d: usize) -> Result<usize> {
    checked_add(
        op,
        "the dilated kernel extent",
        checked_mul(op, "the dilated kernel extent", k - 1, d)?,
        1,
    )
}

/// Refuses geometries whose output (or GPU im2col matrix) cannot be addressed: padding 2**31
/// asks for 2**64 output elements, which must be an error naming the sizes, not a wrap.
fn check_sizes(op: &str, g: &ConvGeom) -> Result<()> {
    checked_numel(op, &[g.n, g.oc, g.oh, g.ow])?;
    checked_numel(op, &[g.n, g.c / g.groups.max(1), g.kh, g.kw, g.oh, g.ow])?;
    Ok(())
}

fn check_bias(op: &str, b: Option<&Tensor>, oc: usize) -> Result<()> {
    if let Some(b) = b {
        if b.shape() != [oc] {
            return Err(Error::shape(
                op,
                format!("bias has shape {:?}, expected [{oc}] (one per output channel)", b.shape()),
            ));
        }
    }
    Ok(())
}

/// 2-D convolution of `x` (N, C, H, W) with `w` (OC, C/groups, KH, KW), plus `bias` (OC).
pub fn conv2d(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    opts: &Conv2dOptions,
) -> Result<Tensor> {
    conv2d_act(x, w, bias, opts, None)
}

/// [`conv2d`] followed by `act`: on the GPU the activation runs in the GEMM's epilogue (with
/// the bias), so a Conv + Relu pair costs one kernel instead of two passes over the output.
pub fn conv2d_act(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    opts: &Conv2dOptions,
    act: Option<Activation>,
) -> Result<Tensor> {
    conv2d_fused(x, w, bias, opts, None, act)
}

/// `act(conv2d(x, w, bias) + residual)`: ResNet's `Conv -> Add -> Relu` as one GPU kernel where
/// the conv lowers to a single GEMM (the residual is read in its epilogue); other paths add and
/// activate after. `residual` must have the conv output's shape.
pub fn conv2d_fused(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    opts: &Conv2dOptions,
    residual: Option<&Tensor>,
    act: Option<Activation>,
) -> Result<Tensor> {
    let op = "conv2d";
    let place = check_common(op, x, w, bias, opts.stride, opts.dilation, opts.groups)?;
    let (s, ws) = (x.shape(), w.shape());
    let (n, c, h, wi) = (s[0], s[1], s[2], s[3]);
    let (oc, icg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    let g = opts.groups;
    if c % g != 0 || oc % g != 0 || icg * g != c {
        return Err(Error::shape(
            op,
            format!(
                "input {s:?} and weight {ws:?} with groups={g}: need in_channels ({c}) and \
                 out_channels ({oc}) divisible by groups, and weight dim 1 = in_channels / groups \
                 ({}), got {icg}",
                c / g
            ),
        ));
    }
    if kh == 0 || kw == 0 {
        return Err(Error::shape(op, format!("weight {ws:?} has an empty kernel")));
    }
    check_bias(op, bias, oc)?;
    let (sh, sw) = (opts.stride[0], opts.stride[1]);
    let (dh, dw) = (opts.dilation[0], opts.dilation[1]);
    let (ekh, ekw) = (dilated(op, kh, dh)?, dilated(op, kw, dw)?);
    let [pt, pl, pb, pr] = match opts.padding {
        ConvPadding::Explicit(p) => p,
        same => {
            let upper = same == ConvPadding::SameUpper;
            let split = |len: usize, st: usize, ek: usize| {
                let out = len.div_ceil(st);
                let total = ((out.max(1) - 1) * st + ek).saturating_sub(len);
                let small = total / 2;
                if upper {
                    (small, total - small)
                } else {
                    (total - small, small)
                }
            };
            let (t, b) = split(h, sh, ekh);
            let (l, r) = split(wi, sw, ekw);
            [t, l, b, r]
        }
    };
    let padded = |len: usize, a: usize, b: usize| {
        checked_add(
            op,
            "the padded input size",
            checked_add(op, "the padded input size", len, a)?,
            b,
        )
    };
    let (hp, wp) = (padded(h, pt, pb)?, padded(wi, pl, pr)?);
    if hp < ekh || wp < ekw {
        return Err(Error::shape(
            op,
            format!(
                "kernel {kh}x{kw} (dilated {ekh}x{ekw}) is larger than the padded input \
                 {hp}x{wp} (input {s:?}, padding {:?})",
                [pt, pl, pb, pr]
            ),
        ));
    }
    let geom = ConvGeom {
        n,
        c,
        h,
        w: wi,
        oc,
        oh: (hp - ekh) / sh + 1,
        ow: (wp - ekw) / sw + 1,
        kh,
        kw,
        sh,
        sw,
        pt,
        pl,
        dh,
        dw,
        groups: g,
    };
    check_sizes(op, &geom)?;
    if let Some(r) = residual {
        let want = [geom.n, geom.oc, geom.oh, geom.ow];
        if r.shape() != want || r.place() != place {
            return Err(Error::shape(
                op,
                format!(
                    "residual {:?} on {} does not match the output {want:?} on {place}",
                    r.shape(),
                    r.place()
                ),
            ));
        }
    }
    match place {
        Place::Cpu => {
            // The fast path applies the residual and activation to each block as it is stored.
            match cpu::gemm::conv2d(x, w, bias, &geom, (residual, act))? {
                Some(t) => Ok(t),
                None => epilogue_after(cpu::conv::conv2d(x, w, bias, &geom)?, residual, act),
            }
        }
        Place::Gpu(d) => gpu::conv::conv(op, d, x, w, bias, &geom, false, (residual, act)),
    }
}

/// Padding of `conv1d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conv1dPadding {
    /// `(left, right)`.
    Explicit(usize, usize),
    SameUpper,
    SameLower,
}

/// 1-D convolution of `x` (N, C, L) with `w` (OC, C/groups, K): conv2d over a unit H dim.
pub fn conv1d(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    stride: usize,
    padding: Conv1dPadding,
    dilation: usize,
    groups: usize,
) -> Result<Tensor> {
    if x.ndim() != 3 || w.ndim() != 3 {
        return Err(Error::shape(
            "conv1d",
            format!(
                "expected a 3-D input (N, C, L) and a 3-D weight, got input {:?} and weight {:?}",
                x.shape(),
                w.shape()
            ),
        ));
    }
    let padding = match padding {
        Conv1dPadding::Explicit(l, r) => ConvPadding::Explicit([0, l, 0, r]),
        Conv1dPadding::SameUpper => ConvPadding::SameUpper,
        Conv1dPadding::SameLower => ConvPadding::SameLower,
    };
    let opts = Conv2dOptions { stride: [1, stride], padding, dilation: [1, dilation], groups };
    conv2d(&x.unsqueeze(2)?, &w.unsqueeze(2)?, bias, &opts)
        .map_err(|e| Error::new(e.kind, "conv1d", e.message))?
        .squeeze(Some(2))
}

/// Transposed 2-D convolution of `x` (N, C, H, W) with `w` (C, OC/groups, KH, KW), plus
/// `bias` (OC). Output size `(H-1)·stride - 2·padding + dilation·(K-1) + output_padding + 1`.
pub fn conv_transpose2d(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    opts: &ConvTranspose2dOptions,
) -> Result<Tensor> {
    let op = "conv_transpose2d";
    let place = check_common(op, x, w, bias, opts.stride, opts.dilation, opts.groups)?;
    let (s, ws) = (x.shape(), w.shape());
    let (n, c, h, wi) = (s[0], s[1], s[2], s[3]);
    let (ocg, kh, kw) = (ws[1], ws[2], ws[3]);
    let g = opts.groups;
    if c % g != 0 || ws[0] != c {
        return Err(Error::shape(
            op,
            format!(
                "input {s:?} and weight {ws:?} with groups={g}: need weight dim 0 = in_channels \
                 ({c}) and in_channels divisible by groups"
            ),
        ));
    }
    if kh == 0 || kw == 0 {
        return Err(Error::shape(op, format!("weight {ws:?} has an empty kernel")));
    }
    let oc = ocg * g;
    check_bias(op, bias, oc)?;
    for d in 0..2 {
        let op_ = opts.output_padding[d];
        if op_ >= opts.stride[d] && op_ >= opts.dilation[d] {
            return Err(Error::invalid(
                op,
                format!(
                    "output_padding {:?} must be smaller than stride {:?} or dilation {:?}",
                    opts.output_padding, opts.stride, opts.dilation
                ),
            ));
        }
    }
    let size = |len: usize, d: usize, k: usize| -> Result<Option<usize>> {
        let what = "the output size";
        let spread = checked_mul(op, what, len.max(1) - 1, opts.stride[d])?;
        let full = checked_add(op, what, spread, dilated(op, k, opts.dilation[d])?)?;
        let full = if len == 0 { 0 } else { full };
        let pad = checked_mul(op, "the padding", 2, opts.padding[d])?;
        Ok(checked_add(op, what, full, opts.output_padding[d])?.checked_sub(pad))
    };
    let (Some(oh), Some(ow)) = (size(h, 0, kh)?, size(wi, 1, kw)?) else {
        return Err(Error::shape(
            op,
            format!(
                "padding {:?} leaves no output for input {s:?} and weight {ws:?}",
                opts.padding
            ),
        ));
    };
    let geom = ConvGeom {
        n,
        c,
        h,
        w: wi,
        oc,
        oh,
        ow,
        kh,
        kw,
        sh: opts.stride[0],
        sw: opts.stride[1],
        pt: opts.padding[0],
        pl: opts.padding[1],
        dh: opts.dilation[0],
        dw: opts.dilation[1],
        groups: g,
    };
    check_sizes(op, &geom)?;
    match place {
        Place::Cpu => cpu::conv::conv_transpose2d(x, w, bias, &geom),
        Place::Gpu(d) => gpu::conv::conv(op, d, x, w, bias, &geom, true, (None, None)),
    }
}
