//! General pooling for what the tensor library's 2-D pools do not take directly: 3-D windows and
//! dilated average pooling (plus any padding / ceil_mode combination).
//!
//! A box window is separable: its max is the max over D of the max over (H, W), and its sum is the
//! sum over D of the sum over (H, W). The input is padded explicitly to exactly the extent the
//! planned output needs (-inf for max, zeros for sums; ceil_mode's extra reach included), then:
//! - max: `max_pool2d` over (H, W) on `[N, C·D, H, W]`, then over D with a `[kd, 1]` window;
//! - average: window *sums* by depthwise `conv2d` with a ones kernel (dilation works there), done
//!   for the data and for a 0/1 mask of the positions that count (the input, plus the explicit
//!   pads when `count_include_pad`), and `y = Σx / Σmask` — the exact divisor for every window,
//!   partial ceil windows included.

use mpsrt_core::Result;
use mpsrt_tensor::{self as t, Conv2dOptions, ConvPadding, Pool2dOptions, Tensor};

/// One spatial axis of a pooling window.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Axis {
    pub kernel: usize,
    pub stride: usize,
    pub dilation: usize,
    pub pad_begin: usize,
    /// Declared end padding (counted by `count_include_pad`; the extent itself comes from `out`).
    pub pad_end: usize,
    pub out: usize,
}

/// What is pooled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Kind {
    Max,
    Avg { count_include_pad: bool },
}

/// Pads (or crops) every spatial axis of `x` ([N, C, *spatial]) so that a floor-mode window pass
/// with padding 0 gives exactly `out`, filling with `fill`.
fn extend(x: &Tensor, axes: &[Axis], fill: f64) -> Result<Tensor> {
    let r = x.ndim();
    let mut pads = vec![(0isize, 0isize); r];
    let mut y = x.clone();
    for (i, a) in axes.iter().enumerate() {
        let len = x.shape()[2 + i] as isize;
        let need = ((a.out.max(1) - 1) * a.stride + (a.kernel - 1) * a.dilation + 1) as isize;
        let end = need - len - a.pad_begin as isize;
        pads[2 + i] = (a.pad_begin as isize, end.max(0));
        if end < 0 {
            // The last input elements are never read: crop them.
            y = y.slice(2 + i as isize, Some(0), Some(len + end), 1)?;
        }
    }
    t::pad(&y, &pads, t::PadMode::Constant(fill))
}

/// Window reduction of the last two dims of a 4-D tensor, padding 0, floor mode.
fn window2d(x: &Tensor, k: [usize; 2], s: [usize; 2], d: [usize; 2], kind: Kind) -> Result<Tensor> {
    match kind {
        Kind::Max => t::max_pool2d(
            x,
            &Pool2dOptions {
                kernel: k,
                stride: Some(s),
                padding: [0, 0],
                dilation: d,
                ceil_mode: false,
                count_include_pad: true,
            },
        ),
        Kind::Avg { .. } => {
            // Window sums: depthwise conv with a ones kernel.
            let c = x.shape()[1];
            let w = t::ones(&[c, 1, k[0], k[1]], x.dtype(), x.place())?;
            let o = Conv2dOptions {
                stride: s,
                padding: ConvPadding::Explicit([0; 4]),
                dilation: d,
                groups: c,
            };
            t::conv2d(x, &w, None, &o)
        }
    }
}

/// Separable window pass over 1, 2 or 3 spatial axes of an already extended tensor.
fn windows(x: &Tensor, axes: &[Axis], kind: Kind) -> Result<Tensor> {
    let s = x.shape().to_vec();
    let (n, c) = (s[0] as isize, s[1] as isize);
    let ax = |i: usize| axes[i];
    match axes.len() {
        1 => {
            let x4 = x.unsqueeze(2)?;
            let a = ax(0);
            window2d(&x4, [1, a.kernel], [1, a.stride], [1, a.dilation], kind)?.squeeze(Some(2))
        }
        2 => {
            let (a, b) = (ax(0), ax(1));
            window2d(x, [a.kernel, b.kernel], [a.stride, b.stride], [a.dilation, b.dilation], kind)
        }
        3 => {
            let (dd, h, w) = (ax(0), ax(1), ax(2));
            let x4 =
                x.contiguous()?.reshape(&[n, c * s[2] as isize, s[3] as isize, s[4] as isize])?;
            let hw = window2d(
                &x4,
                [h.kernel, w.kernel],
                [h.stride, w.stride],
                [h.dilation, w.dilation],
                kind,
            )?;
            let (oh, ow) = (hw.shape()[2], hw.shape()[3]);
            let hw = hw.reshape(&[n, c, s[2] as isize, (oh * ow) as isize])?;
            let y = window2d(&hw, [dd.kernel, 1], [dd.stride, 1], [dd.dilation, 1], kind)?;
            let od = y.shape()[2];
            y.reshape(&[n, c, od as isize, oh as isize, ow as isize])
        }
        k => Err(mpsrt_core::Error::unsupported(
            "pool",
            format!("{k} spatial dims (1, 2 or 3 are supported)"),
        )),
    }
}

/// Pools `x` ([N, C, *spatial], float) over `axes` to exactly `axes[i].out` positions each.
pub(crate) fn pool_nd(x: &Tensor, axes: &[Axis], kind: Kind) -> Result<Tensor> {
    match kind {
        Kind::Max => windows(&extend(x, axes, f64::NEG_INFINITY)?, axes, kind),
        Kind::Avg { count_include_pad } => {
            let num = windows(&extend(x, axes, 0.0)?, axes, kind)?;
            // The mask: ones over what counts (the input, plus the declared pads when
            // count_include_pad), zeros over ceil_mode's extra reach, on the same extent as x.
            let mut mshape = vec![1usize, 1];
            mshape.extend_from_slice(&x.shape()[2..]);
            let ones = t::ones(&mshape, x.dtype(), x.place())?;
            let mask = if count_include_pad {
                let mut pads = vec![(0isize, 0isize); mshape.len()];
                for (i, a) in axes.iter().enumerate() {
                    pads[2 + i] = (a.pad_begin as isize, a.pad_end as isize);
                }
                let counted = t::pad(&ones, &pads, t::PadMode::Constant(1.0))?;
                let from_zero: Vec<Axis> =
                    axes.iter().map(|a| Axis { pad_begin: 0, ..*a }).collect();
                extend(&counted, &from_zero, 0.0)?
            } else {
                extend(&ones, axes, 0.0)?
            };
            let den = windows(&mask, axes, kind)?;
            t::divide(&num, &den)
        }
    }
}
