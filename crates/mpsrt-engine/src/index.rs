//! Index-pattern ops: GatherElements, Trilu, Hardmax, CumSum and EyeLike.
//!
//! Each one is a data-parallel tensor op (gather, select, matmul) driven by an index pattern that
//! depends only on shapes and host parameters. The pattern is built on the host once per call
//! (a mask, a flat offset list, a triangular matrix) and the data never leave the device.

use crate::ops::{Ctx, OpEntry, OpFn};
use crate::reduce::to_out;
use crate::value::host_i64;
use mpsrt_core::{normalize_axis, DType, Result};
use mpsrt_graph::{Node, Op};
use mpsrt_tensor::{self as t, BinaryFn as B, Expr, Tensor, VType};

/// The op table entries of this family.
pub(crate) fn entries() -> Vec<OpEntry> {
    let e = |name: &'static str, run: OpFn, host_from: usize| OpEntry { name, run, host_from };
    vec![
        e("GatherElements", gather_elements, 1),
        e("Trilu", trilu, 1),
        e("Hardmax", hardmax, usize::MAX),
        e("CumSum", cumsum, 1),
        e("EyeLike", eye_like, 1),
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

/// `out[p] = data[p with p[axis] = indices[p]]`: the flat source offsets are computed on the host
/// from the (host-side) indices, then one device gather reads the data.
fn gather_elements(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::GatherElements { axis } = &node.op else {
        return Err(ctx.err(node, "not GatherElements"));
    };
    let x = ctx.input(node, inputs, 0)?;
    let idx_t = ctx.input(node, inputs, 1)?;
    let label = ctx.label(node);
    let ax = normalize_axis(&label, *axis as isize, x.ndim())?;
    let (xs, is) = (x.shape(), idx_t.shape());
    if is.len() != xs.len() {
        return Err(
            ctx.err(node, format!("indices rank {} must equal data rank {}", is.len(), xs.len()))
        );
    }
    if let Some(d) = (0..xs.len()).find(|&d| d != ax && is[d] > xs[d]) {
        return Err(
            ctx.err(node, format!("indices shape {is:?} exceeds data shape {xs:?} on axis {d}"))
        );
    }
    let idx = host_i64(idx_t)?;
    let (xst, ist) = (strides(xs), strides(is));
    let len = xs[ax] as i64;
    let mut offsets = Vec::with_capacity(idx.len());
    for (p, &i) in idx.iter().enumerate() {
        let j = if i < 0 { i + len } else { i };
        if !(0..len).contains(&j) {
            return Err(
                ctx.err(node, format!("index {i} is out of bounds for axis {ax} with size {len}"))
            );
        }
        let mut off = 0usize;
        for d in 0..is.len() {
            let c = if d == ax { j as usize } else { (p / ist[d]) % is[d] };
            off += c * xst[d];
        }
        offsets.push(off as i64);
    }
    let wrap = |e| ctx.wrap(node, e);
    let flat = x.contiguous().and_then(|c| c.reshape(&[-1])).map_err(wrap)?;
    let offs = Tensor::from_slice(&offsets, &[offsets.len()], mpsrt_core::Place::Cpu)?;
    let shape: Vec<isize> = is.iter().map(|&d| d as isize).collect();
    let y = t::gather(&flat, &offs, 0).and_then(|y| y.reshape(&shape)).map_err(wrap)?;
    Ok(vec![y])
}

/// Keeps the lower or upper triangle (diagonal offset `k`) of the last two dims.
fn trilu(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::Trilu { upper } = &node.op else {
        return Err(ctx.err(node, "not Trilu"));
    };
    let x = ctx.input(node, inputs, 0)?;
    if x.ndim() < 2 {
        return Err(ctx.err(node, format!("input must have rank >= 2, got {:?}", x.shape())));
    }
    let k = match inputs.get(1) {
        Some(k) => host_i64(k)?.first().copied().unwrap_or(0),
        None => 0,
    };
    let (n, m) = (x.shape()[x.ndim() - 2], x.shape()[x.ndim() - 1]);
    let mask: Vec<bool> = (0..n * m)
        .map(|p| {
            let d = (p % m) as i64 - (p / m) as i64;
            if *upper {
                d >= k
            } else {
                d <= k
            }
        })
        .collect();
    let mask = Tensor::from_bools(&mask, &[n, m], x.place())?;
    let vt = VType::of(x.dtype());
    let zero = Expr::cast(vt, Expr::Scalar(0, VType::Int));
    let e = Expr::select(Expr::input(1), Expr::input(0), zero);
    let y = t::fused_elementwise(&ctx.label(node), &[x, &mask], x.dtype(), e, &[t::Scalar::I(0)])?;
    Ok(vec![y])
}

/// An int32 tensor `0..n` shaped to broadcast along `axis` of a rank-`rank` tensor.
fn iota_along(n: usize, axis: usize, rank: usize, place: mpsrt_core::Place) -> Result<Tensor> {
    let v: Vec<i32> = (0..n as i32).collect();
    let mut shape = vec![1; rank];
    shape[axis] = n;
    Tensor::from_slice(&v, &shape, place)
}

/// One-hot of the (first) maximum along the axis.
fn hardmax(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::Hardmax { axis, flat } = &node.op else {
        return Err(ctx.err(node, "not Hardmax"));
    };
    let x = ctx.input(node, inputs, 0)?;
    let label = ctx.label(node);
    let wrap = |e| ctx.wrap(node, e);
    let ax = normalize_axis(&label, *axis as isize, x.ndim().max(1))?;
    // Opset < 13: the trailing block from `axis` on is one flat axis.
    let xv = if *flat {
        let lead: usize = x.shape()[..ax].iter().product();
        x.contiguous().and_then(|c| c.reshape(&[lead as isize, -1])).map_err(wrap)?
    } else {
        x.clone()
    };
    let a = if *flat { 1 } else { ax };
    let n = xv.shape().get(a).copied().unwrap_or(1);
    let am = t::argmax(&xv, Some(a as isize), true).map_err(wrap)?;
    let iota = iota_along(n, a, xv.ndim(), x.place())?;
    let e = Expr::cast(
        VType::Float,
        Expr::binary(
            B::Eq,
            Expr::cast(VType::Int, Expr::input(0)),
            Expr::cast(VType::Int, Expr::input(1)),
        ),
    );
    let y = t::fused_elementwise(&label, &[&iota, &am], xv.dtype(), e, &[])?;
    let shape: Vec<isize> = x.shape().iter().map(|&d| d as isize).collect();
    Ok(vec![y.reshape(&shape).map_err(wrap)?])
}

/// Cumulative sum as a matmul with a 0/1 triangular matrix: one GEMM on the device, exact for
/// integers below 2^24 and accurate to f32 rounding for floats.
fn cumsum(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::CumSum { exclusive, reverse } = &node.op else {
        return Err(ctx.err(node, "not CumSum"));
    };
    let x = ctx.input(node, inputs, 0)?;
    let axis = match inputs.get(1) {
        Some(a) => host_i64(a)?.first().copied().unwrap_or(0),
        None => return Err(ctx.err(node, "expects an axis input")),
    };
    let label = ctx.label(node);
    let wrap = |e| ctx.wrap(node, e);
    if x.ndim() == 0 {
        return Err(ctx.err(node, "input must have rank >= 1"));
    }
    let ax = normalize_axis(&label, axis as isize, x.ndim())?;
    let n = x.shape()[ax];
    // T[j][i] = 1 when element j contributes to output i.
    let tri: Vec<f32> = (0..n * n)
        .map(|p| {
            let (j, i) = (p / n, p % n);
            let keep = match (*reverse, *exclusive) {
                (false, false) => j <= i,
                (false, true) => j < i,
                (true, false) => j >= i,
                (true, true) => j > i,
            };
            keep as u8 as f32
        })
        .collect();
    let tri = Tensor::from_slice(&tri, &[n, n], x.place())?;
    let last = x.ndim() as isize - 1;
    let xf = x.astype(DType::F32).and_then(|v| v.transpose(ax as isize, last)).map_err(wrap)?;
    let y = t::matmul(&xf, &tri).and_then(|y| y.transpose(ax as isize, last)).map_err(wrap)?;
    Ok(vec![to_out(ctx, node, 0, y.contiguous()?)?])
}

/// Ones on diagonal `k` of a 2-D tensor shaped like the input.
fn eye_like(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::EyeLike { k, .. } = &node.op else {
        return Err(ctx.err(node, "not EyeLike"));
    };
    let shape = ctx.out_shape(node, 0)?;
    let [n, m] = shape[..] else {
        return Err(ctx.err(node, format!("input must be 2-D, got {shape:?}")));
    };
    let _ = inputs;
    let v: Vec<f32> =
        (0..n * m).map(|p| ((p % m) as i64 - (p / m) as i64 == *k) as u8 as f32).collect();
    let y = Tensor::from_slice(&v, &[n, m], ctx.place)?;
    Ok(vec![to_out(ctx, node, 0, y)?])
}
