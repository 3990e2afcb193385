//! Convolutions whose input, weight, residual or output is larger than one storage binding
//! (`max_storage_buffer_binding_size`: 128 MiB on lavapipe, 2 GiB on NVIDIA;
//! `MPSRT_MAX_BINDING_BYTES` lowers it for tests): the conv is cut into pieces that each fit,
//! each piece runs through the ordinary GPU conv (which plans its own algorithm), and the
//! results are concatenated (concat is windowed, so the whole output may exceed a binding).
//!
//! Cuts, in order: over the batch (images are independent); over output channels, whole groups
//! at a time for grouped convs (a weight past the limit, or one image's output); over output
//! rows (one image whose input or output is past the limit: each band of output rows reads the
//! input rows its windows touch, with the band's own top padding). Each piece's operands are
//! copied into buffers of their own (a view into a big buffer would bind the whole buffer).
//! What no cut can bring under the limit (one output row of one channel, one filter) is left
//! to the ordinary path, whose dispatch refuses it naming the limit.

use super::conv::Epi;
use crate::conv::ConvGeom;
use crate::{elementwise, Tensor};
use mpsrt_core::Result;
use mpsrt_kernels::Expr;

/// The ordinary conv on one piece (f32 operands, the residual already widened).
pub(crate) type ConvFn<'a> =
    &'a dyn Fn(&Tensor, &Tensor, Option<&Tensor>, &ConvGeom, Epi<'_>) -> Result<Tensor>;

/// `t`'s values in a buffer of their own.
fn own(t: &Tensor) -> Result<Tensor> {
    elementwise::map("conv2d", &[t], t.dtype(), Expr::input(0), &[])
}

fn i(v: usize) -> isize {
    v as isize
}

/// Floats bound when `t`'s buffer is bound whole.
fn bound_floats(op: &str, t: &Tensor) -> Result<usize> {
    Ok(super::conv::buffer(op, t)?.size() as usize / 4)
}

/// The conv cut into pieces that fit `limit_bytes`, or `None` when it already fits (or no cut
/// helps: the ordinary path then names the limit).
#[allow(clippy::too_many_arguments)]
pub(crate) fn split(
    op: &str,
    limit_bytes: u64,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    g: &ConvGeom,
    transposed: bool,
    (res, act): Epi<'_>,
    run: ConvFn<'_>,
) -> Result<Option<Tensor>> {
    let lim = (limit_bytes / 4) as usize;
    let out = g.n * g.oc * g.oh * g.ow;
    let x_big = bound_floats(op, x)? > lim;
    let w_big = bound_floats(op, w)? > lim;
    let r_big = match res {
        Some(r) => bound_floats(op, r)? > lim,
        None => false,
    };
    let out_big = out > lim;
    if !(x_big || w_big || r_big || out_big) {
        return Ok(None);
    }
    let x_img = g.c * g.h * g.w;
    let o_img = g.oc * g.oh * g.ow;
    // 1. Over the batch.
    if g.n > 1 && (x_big || r_big || out_big) {
        let per = (lim / x_img.max(o_img).max(1)).clamp(1, g.n - 1);
        let mut parts = Vec::new();
        for n0 in (0..g.n).step_by(per) {
            let n1 = (n0 + per).min(g.n);
            let cut = |t: &Tensor| own(&t.slice(0, Some(i(n0)), Some(i(n1)), 1)?);
            let xs = cut(x)?;
            let rs = res.map(cut).transpose()?;
            let sub = ConvGeom { n: n1 - n0, ..*g };
            parts.push(run(&xs, w, b, &sub, (rs.as_ref(), act))?);
        }
        return concat(parts, 0).map(Some);
    }
    if transposed {
        return Ok(None);
    }
    // 2./3. Over output channels (whole groups) when the weight is past the limit, else over
    // output rows first (the input is then read once, not once per channel block).
    let by_channels = || -> Result<Option<Tensor>> {
        let (icg, ocg) = (g.c / g.groups, g.oc / g.groups);
        // Groups per piece (groups == 1: output channels per piece, as one-channel "groups").
        let (units, unit_oc, unit_ic) =
            if g.groups == 1 { (g.oc, 1, g.c) } else { (g.groups, ocg, icg) };
        let unit_w = unit_oc * icg * g.kh * g.kw;
        let unit_out = unit_oc * g.n * g.oh * g.ow;
        let per = (lim / unit_w.max(unit_out).max(1)).clamp(1, units);
        if per >= units {
            return Ok(None);
        }
        let mut parts = Vec::new();
        for u0 in (0..units).step_by(per) {
            let u1 = (u0 + per).min(units);
            let (o0, o1) = (u0 * unit_oc, u1 * unit_oc);
            let ws = own(&w.slice(0, Some(i(o0)), Some(i(o1)), 1)?)?;
            let bs = b.map(|b| own(&b.slice(0, Some(i(o0)), Some(i(o1)), 1)?)).transpose()?;
            let rs = res.map(|r| own(&r.slice(1, Some(i(o0)), Some(i(o1)), 1)?)).transpose()?;
            let (xs, sub) = if g.groups == 1 {
                (x.clone(), ConvGeom { oc: o1 - o0, ..*g })
            } else {
                let (c0, c1) = (u0 * unit_ic, u1 * unit_ic);
                let xs = own(&x.slice(1, Some(i(c0)), Some(i(c1)), 1)?)?;
                (xs, ConvGeom { c: c1 - c0, oc: o1 - o0, groups: u1 - u0, ..*g })
            };
            parts.push(run(&xs, &ws, bs.as_ref(), &sub, (rs.as_ref(), act))?);
        }
        concat(parts, 1).map(Some)
    };
    let by_rows = || -> Result<Option<Tensor>> {
        if g.oh < 2 {
            return Ok(None);
        }
        let ekh = (g.kh - 1) * g.dh + 1;
        let in_rows = lim / (g.c * g.w).max(1);
        let by_in = if in_rows >= ekh { (in_rows - ekh) / g.sh + 1 } else { 0 };
        let by_out = lim / (g.oc * g.ow).max(1);
        let per = by_in.min(by_out).min(g.oh - 1);
        if per == 0 {
            return Ok(None);
        }
        // Input rows each band's windows touch, in input coordinates (may start above 0).
        let bands: Vec<_> = (0..g.oh)
            .step_by(per)
            .map(|r0| {
                let r1 = (r0 + per).min(g.oh);
                let lo = (r0 * g.sh) as isize - g.pt as isize;
                let hi = ((r1 - 1) * g.sh + ekh) as isize - g.pt as isize;
                (r0, r1, lo, lo.max(0), hi.min(g.h as isize))
            })
            .collect();
        // A band entirely in the padding reads no row: not worth a special case.
        if bands.iter().any(|&(_, _, _, a, b)| b <= a) {
            return Ok(None);
        }
        let mut parts = Vec::new();
        for (r0, r1, lo, in_lo, in_hi) in bands {
            let sub = ConvGeom {
                h: (in_hi - in_lo) as usize,
                oh: r1 - r0,
                pt: (in_lo - lo) as usize,
                ..*g
            };
            let xs = own(&x.slice(2, Some(in_lo), Some(in_hi), 1)?)?;
            let rs = res.map(|r| own(&r.slice(2, Some(i(r0)), Some(i(r1)), 1)?)).transpose()?;
            parts.push(run(&xs, w, b, &sub, (rs.as_ref(), act))?);
        }
        concat(parts, 2).map(Some)
    };
    if w_big {
        if let Some(y) = by_channels()? {
            return Ok(Some(y));
        }
        return by_rows();
    }
    match by_rows()? {
        Some(y) => Ok(Some(y)),
        None => by_channels(),
    }
}

fn concat(parts: Vec<Tensor>, axis: isize) -> Result<Tensor> {
    let refs: Vec<&Tensor> = parts.iter().collect();
    crate::concat(&refs, axis)
}
