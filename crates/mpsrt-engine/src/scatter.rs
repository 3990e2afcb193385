//! Index-addressed writes and reads: ScatterElements (and Scatter), ScatterND and GatherND.
//!
//! The indices are read on the host (like Gather's); from them each op builds flat position
//! lists, and the data stay on the device. A scatter maps every update to the flat output
//! position it writes. Several updates may hit one position, so the updates are applied in
//! rounds, each holding at most one update per position: a round is one device gather of the
//! updates plus one fused `select(mask, f(out, update), out)`. With no reduction only the last
//! update of each position matters, so there is exactly one round; with add/mul/max/min the
//! number of rounds is the largest number of updates aimed at one position (usually 1).

use crate::ops::{Ctx, OpEntry, OpFn};
use crate::value::{host_i64, to_device};
use mpsrt_core::{normalize_axis, Place, Result};
use mpsrt_graph::op::ScatterReduction;
use mpsrt_graph::{Node, Op};
use mpsrt_tensor::{self as t, BinaryFn as B, Expr, Tensor};

/// The op table entries of this family.
pub(crate) fn entries() -> Vec<OpEntry> {
    // Input 1 (indices) is read on the host; ScatterElements/ScatterND move their updates
    // (input 2) to the device themselves, since `host_from` covers every later input.
    let e = |name: &'static str, run: OpFn| OpEntry { name, run, host_from: 1 };
    vec![
        e("ScatterElements", scatter_elements),
        e("ScatterND", scatter_nd),
        e("GatherND", gather_nd),
    ]
}

/// Row-major strides of a shape.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Normalizes one index against an axis of size `len`: negative values count from the end,
/// anything outside `[-len, len)` is an error naming the op.
fn norm_index(ctx: &Ctx<'_>, node: &Node, i: i64, axis: usize, len: usize) -> Result<usize> {
    let l = len as i64;
    let j = if i < 0 { i + l } else { i };
    if (0..l).contains(&j) {
        Ok(j as usize)
    } else {
        Err(ctx.err(node, format!("index {i} is out of bounds for axis {axis} with size {len}")))
    }
}

/// The updates (input 2) as a flat device tensor of the data's dtype.
fn flat_updates(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor], data: &Tensor) -> Result<Tensor> {
    let u = ctx.input(node, inputs, 2)?;
    let v = node.inputs.get(2).copied().ok_or_else(|| ctx.err(node, "expects 3 inputs"))?;
    let u = to_device(&ctx.label(node), u, ctx.dtype(v), ctx.place)?;
    if u.dtype() != data.dtype() {
        return Err(
            ctx.err(node, format!("updates have dtype {}, data has {}", u.dtype(), data.dtype()))
        );
    }
    u.contiguous().and_then(|c| c.reshape(&[-1])).map_err(|e| ctx.wrap(node, e))
}

/// Writes `updates_flat[j]` into flat position `pos[j]` of `data`, combining with `reduction`.
fn apply(
    ctx: &Ctx<'_>,
    node: &Node,
    data: &Tensor,
    updates: &Tensor,
    pos: &[usize],
    reduction: ScatterReduction,
) -> Result<Tensor> {
    let wrap = |e| ctx.wrap(node, e);
    let n = data.numel();
    // rounds[r][p] = the update applied to position p in round r (-1: none).
    let mut rounds: Vec<Vec<i64>> = Vec::new();
    if reduction == ScatterReduction::None {
        let mut last = vec![-1i64; n];
        for (j, &p) in pos.iter().enumerate() {
            last[p] = j as i64;
        }
        rounds.push(last);
    } else {
        let mut seen = vec![0usize; n];
        for (j, &p) in pos.iter().enumerate() {
            let r = seen[p];
            seen[p] += 1;
            if rounds.len() <= r {
                rounds.push(vec![-1; n]);
            }
            rounds[r][p] = j as i64;
        }
    }
    let shape: Vec<isize> = data.shape().iter().map(|&d| d as isize).collect();
    let mut out = data.contiguous().and_then(|c| c.reshape(&[-1])).map_err(wrap)?;
    let label = ctx.label(node);
    let (keep, new) = (Expr::input(0), Expr::input(1));
    let combined = match reduction {
        ScatterReduction::None => new,
        ScatterReduction::Add => Expr::binary(B::Add, keep.clone(), new),
        ScatterReduction::Mul => Expr::binary(B::Mul, keep.clone(), new),
        ScatterReduction::Max => Expr::binary(B::Max, keep.clone(), new),
        ScatterReduction::Min => Expr::binary(B::Min, keep.clone(), new),
    };
    let e = Expr::select(Expr::input(2), combined, keep);
    for src in rounds {
        let mask: Vec<bool> = src.iter().map(|&j| j >= 0).collect();
        let idx: Vec<i64> = src.iter().map(|&j| j.max(0)).collect();
        let idx = Tensor::from_slice(&idx, &[n], Place::Cpu)?;
        let gathered = t::gather(updates, &idx, 0).map_err(wrap)?;
        let mask = Tensor::from_bools(&mask, &[n], out.place())?;
        out = t::fused_elementwise(&label, &[&out, &gathered, &mask], out.dtype(), e.clone(), &[])?;
    }
    out.reshape(&shape).map_err(wrap)
}

/// `out[idx with idx[axis] = indices[idx]] = updates[idx]` (combined per `reduction`).
fn scatter_elements(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::ScatterElements { axis, reduction } = &node.op else {
        return Err(ctx.err(node, "not ScatterElements"));
    };
    let data = ctx.input(node, inputs, 0)?;
    let idx_t = ctx.input(node, inputs, 1)?;
    let updates = flat_updates(ctx, node, inputs, data)?;
    let (xs, is) = (data.shape(), idx_t.shape());
    if xs.is_empty() {
        return Err(ctx.err(node, "data must have rank >= 1"));
    }
    let ax = normalize_axis(&ctx.label(node), *axis as isize, xs.len())?;
    let us = ctx.input(node, inputs, 2)?.shape();
    if is != us || is.len() != xs.len() {
        return Err(ctx.err(
            node,
            format!(
                "indices {is:?} and updates {us:?} must have equal shapes of data's rank {}",
                xs.len()
            ),
        ));
    }
    if let Some(d) = (0..xs.len()).find(|&d| d != ax && is[d] > xs[d]) {
        return Err(
            ctx.err(node, format!("indices shape {is:?} exceeds data shape {xs:?} on axis {d}"))
        );
    }
    if updates.numel() == 0 {
        return Ok(vec![data.clone()]);
    }
    let idx = host_i64(idx_t)?;
    let (xst, ist) = (strides(xs), strides(is));
    let mut pos = Vec::with_capacity(idx.len());
    for (p, &i) in idx.iter().enumerate() {
        let j = norm_index(ctx, node, i, ax, xs[ax])?;
        let off: usize =
            (0..is.len()).map(|d| if d == ax { j } else { (p / ist[d]) % is[d] } * xst[d]).sum();
        pos.push(off);
    }
    Ok(vec![apply(ctx, node, data, &updates, &pos, *reduction)?])
}

/// Flat data offsets of the slices addressed by `indices[.., k]` over data dims `b..b + k`,
/// one per index tuple, plus the slice length. `b` leading dims are shared batch dims.
fn nd_offsets(
    ctx: &Ctx<'_>,
    node: &Node,
    xs: &[usize],
    is: &[usize],
    idx: &[i64],
    b: usize,
) -> Result<(Vec<usize>, usize)> {
    let k = *is.last().ok_or_else(|| ctx.err(node, "indices must have rank >= 1"))?;
    if is.len() <= b || xs.len() < b + k || xs[..b] != is[..b] {
        return Err(ctx.err(
            node,
            format!(
                "indices {is:?} (index tuples of length {k}) do not address data {xs:?} with \
                 {b} batch dims"
            ),
        ));
    }
    let xst = strides(xs);
    let slice: usize = xs[b + k..].iter().product();
    let batch_len: usize = xs[b..].iter().product();
    let per_batch: usize = is[b..is.len() - 1].iter().product();
    let mut bases = Vec::with_capacity(idx.len() / k.max(1));
    let tuples = is[..is.len() - 1].iter().product::<usize>();
    for q in 0..tuples {
        let mut off = (q / per_batch.max(1)) * batch_len;
        for d in 0..k {
            off += norm_index(ctx, node, idx[q * k + d], b + d, xs[b + d])? * xst[b + d];
        }
        bases.push(off);
    }
    Ok((bases, slice))
}

/// `out[i..] = updates[i..]` written at the slices `indices[i.., :]` (combined per `reduction`).
fn scatter_nd(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::ScatterND { reduction } = &node.op else {
        return Err(ctx.err(node, "not ScatterND"));
    };
    let data = ctx.input(node, inputs, 0)?;
    let idx_t = ctx.input(node, inputs, 1)?;
    let updates = flat_updates(ctx, node, inputs, data)?;
    let (xs, is) = (data.shape(), idx_t.shape());
    let idx = host_i64(idx_t)?;
    let (bases, slice) = nd_offsets(ctx, node, xs, is, &idx, 0)?;
    let k = is[is.len() - 1];
    let mut want: Vec<usize> = is[..is.len() - 1].to_vec();
    want.extend_from_slice(&xs[k..]);
    let us = ctx.input(node, inputs, 2)?.shape();
    if us != want.as_slice() {
        return Err(ctx.err(node, format!("updates must have shape {want:?}, got {us:?}")));
    }
    if updates.numel() == 0 {
        return Ok(vec![data.clone()]);
    }
    let pos: Vec<usize> = bases.iter().flat_map(|&b| (0..slice).map(move |s| b + s)).collect();
    Ok(vec![apply(ctx, node, data, &updates, &pos, *reduction)?])
}

/// `out[b.., q..] = data[b.., indices[b.., q.., :], ..]`: one device gather of flat offsets.
fn gather_nd(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::GatherND { batch_dims } = &node.op else {
        return Err(ctx.err(node, "not GatherND"));
    };
    let data = ctx.input(node, inputs, 0)?;
    let idx_t = ctx.input(node, inputs, 1)?;
    let (xs, is) = (data.shape(), idx_t.shape());
    let idx = host_i64(idx_t)?;
    let (bases, slice) = nd_offsets(ctx, node, xs, is, &idx, *batch_dims)?;
    let k = is[is.len() - 1];
    let mut shape: Vec<usize> = is[..is.len() - 1].to_vec();
    shape.extend_from_slice(&xs[batch_dims + k..]);
    let offs: Vec<i64> =
        bases.iter().flat_map(|&b| (0..slice).map(move |s| (b + s) as i64)).collect();
    if offs.is_empty() || data.numel() == 0 {
        return Ok(vec![t::zeros(&shape, data.dtype(), data.place())?]);
    }
    let wrap = |e| ctx.wrap(node, e);
    let flat = data.contiguous().and_then(|c| c.reshape(&[-1])).map_err(wrap)?;
    let offs = Tensor::from_slice(&offs, &[offs.len()], Place::Cpu)?;
    let shape: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
    let y = t::gather(&flat, &offs, 0).and_then(|y| y.reshape(&shape)).map_err(wrap)?;
    Ok(vec![y])
}
