//! Shape and data-movement ops. Output shapes come from the specialized plan, so reshape-like ops
//! are views and never read their shape inputs; ops whose parameters are tensors (Slice bounds,
//! Range) read them on the host, where int64 values are kept.

use crate::ops::{Ctx, OpEntry, OpFn};
use crate::value::{bytes_to_tensor, host_f64, host_i64, host_to_tensor};
use mpsrt_core::{DType, Result};
use mpsrt_graph::{HostTensor, Node, Op};
use mpsrt_tensor::Tensor;

/// The op table entries of this family.
pub(crate) fn entries() -> Vec<OpEntry> {
    let e = |name: &'static str, run: OpFn, host_from: usize| OpEntry { name, run, host_from };
    vec![
        e("Reshape", reshape_like, 1),
        e("Flatten", reshape_like, 1),
        e("Squeeze", reshape_like, 1),
        e("Unsqueeze", reshape_like, 1),
        e("Expand", expand, 1),
        e("Transpose", transpose, 1),
        e("Dropout", dropout, 1),
        e("Slice", slice, 1),
        e("Split", split, 1),
        e("Shape", shape_op, 0),
        e("Size", size_op, 0),
        e("Constant", constant, 0),
        e("ConstantOfShape", constant_of_shape, 0),
        e("Range", range, 0),
        e("DepthToSpace", depth_to_space, 1),
        e("SpaceToDepth", space_to_depth, 1),
    ]
}

fn isz(v: &[usize]) -> Vec<isize> {
    v.iter().map(|&d| d as isize).collect()
}

fn reshape_like(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = ctx.input(node, inputs, 0)?;
    let shape = ctx.out_shape(node, 0)?;
    Ok(vec![x.reshape(&isz(&shape)).map_err(|e| ctx.wrap(node, e))?])
}

fn expand(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = ctx.input(node, inputs, 0)?;
    let shape = ctx.out_shape(node, 0)?;
    Ok(vec![x.expand(&shape).map_err(|e| ctx.wrap(node, e))?])
}

fn transpose(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = ctx.input(node, inputs, 0)?;
    let perm: Vec<isize> = match &node.op {
        Op::Transpose { perm: Some(p) } => isz(p),
        _ => (0..x.ndim() as isize).rev().collect(),
    };
    Ok(vec![x.permute(&perm).map_err(|e| ctx.wrap(node, e))?])
}

fn dropout(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = ctx.input(node, inputs, 0)?.clone();
    let mut out = vec![x.clone()];
    if node.outputs.len() > 1 {
        let n = x.numel();
        out.push(Tensor::from_bytes(&vec![1u8; n], DType::Bool, x.shape(), ctx.place)?);
    }
    Ok(out)
}

/// ONNX Slice: `(data, starts, ends, axes?, steps?)`, bounds clamped as ONNX specifies.
fn slice(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = ctx.input(node, inputs, 0)?;
    let starts = host_i64(ctx.input(node, inputs, 1)?)?;
    let ends = host_i64(ctx.input(node, inputs, 2)?)?;
    let rank = x.ndim() as i64;
    let axes = match inputs.get(3) {
        Some(t) => host_i64(t)?,
        None => (0..starts.len() as i64).collect(),
    };
    let steps = match inputs.get(4) {
        Some(t) => host_i64(t)?,
        None => vec![1; starts.len()],
    };
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(ctx.err(node, "starts, ends, axes and steps must have equal lengths"));
    }
    let mut y = x.clone();
    for k in 0..starts.len() {
        let axis = if axes[k] < 0 { axes[k] + rank } else { axes[k] };
        if !(0..rank).contains(&axis) {
            return Err(ctx.err(node, format!("axis {} out of range for rank {rank}", axes[k])));
        }
        let d = x.shape()[axis as usize] as i64;
        let step = steps[k];
        if step == 0 {
            return Err(ctx.err(node, "step 0 is not allowed"));
        }
        let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
        let (s, e) = (norm(starts[k]), norm(ends[k]));
        let (s, e) = if step > 0 {
            (s.clamp(0, d), e.clamp(0, d))
        } else {
            (s.clamp(0, (d - 1).max(0)), e.clamp(-1, d - 1))
        };
        let stop = if e < 0 { None } else { Some(e as isize) };
        y = if d == 0 {
            y
        } else {
            y.slice(axis as isize, Some(s as isize), stop, step as isize)
                .map_err(|err| ctx.wrap(node, err))?
        };
    }
    Ok(vec![y])
}

fn split(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = ctx.input(node, inputs, 0)?;
    let Op::Split { axis, .. } = &node.op else {
        return Err(ctx.err(node, "not a Split"));
    };
    let a = mpsrt_core::normalize_axis(&ctx.label(node), *axis as isize, x.ndim())?;
    let mut start = 0usize;
    let mut out = Vec::with_capacity(node.outputs.len());
    for i in 0..node.outputs.len() {
        let len = ctx.out_shape(node, i)?.get(a).copied().unwrap_or(0);
        let end = start + len;
        out.push(
            x.slice(a as isize, Some(start as isize), Some(end as isize), 1)
                .map_err(|e| ctx.wrap(node, e))?,
        );
        start = end;
    }
    Ok(out)
}

fn i64_tensor(ctx: &Ctx<'_>, node: &Node, shape: Vec<usize>, vals: &[i64]) -> Result<Tensor> {
    host_to_tensor(&ctx.label(node), &HostTensor::from_i64(shape, vals), ctx.place)
}

fn shape_op(ctx: &Ctx<'_>, node: &Node, _inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let input = node.inputs.first().ok_or_else(|| ctx.err(node, "has no input"))?;
    let dims: Vec<i64> = ctx.shape(*input).iter().map(|&d| d as i64).collect();
    let Op::Shape { start, end } = &node.op else {
        return Err(ctx.err(node, "not a Shape"));
    };
    let r = dims.len() as i64;
    let clampi = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let (s, e) = (clampi(*start), clampi(end.unwrap_or(r)));
    let v: Vec<i64> = if s < e { dims[s..e].to_vec() } else { Vec::new() };
    Ok(vec![i64_tensor(ctx, node, vec![v.len()], &v)?])
}

fn size_op(ctx: &Ctx<'_>, node: &Node, _inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let input = node.inputs.first().ok_or_else(|| ctx.err(node, "has no input"))?;
    let n = ctx.shape(*input).iter().product::<usize>() as i64;
    Ok(vec![i64_tensor(ctx, node, vec![], &[n])?])
}

fn constant(ctx: &Ctx<'_>, node: &Node, _inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::Constant(h) = &node.op else {
        return Err(ctx.err(node, "not a Constant"));
    };
    Ok(vec![host_to_tensor(&ctx.label(node), h, ctx.place)?])
}

fn constant_of_shape(ctx: &Ctx<'_>, node: &Node, _inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::ConstantOfShape(h) = &node.op else {
        return Err(ctx.err(node, "not a ConstantOfShape"));
    };
    let shape = ctx.out_shape(node, 0)?;
    // Built on the host for every place: checked, and the bytes (plus the tensor's copy) must
    // fit under the host memory limit.
    let nbytes = mpsrt_core::checked_nbytes(&ctx.label(node), &shape, h.dtype.size())?;
    mpsrt_runtime::check_host_alloc(&ctx.label(node), nbytes.saturating_mul(2))?;
    let n = nbytes / h.dtype.size().max(1);
    let elem = if h.bytes.is_empty() { vec![0u8; h.dtype.size()] } else { h.bytes.clone() };
    let bytes = elem.repeat(n);
    Ok(vec![bytes_to_tensor(&ctx.label(node), &bytes, h.dtype, &shape, ctx.place)?])
}

fn range(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let get = |i: usize| -> Result<f64> {
        host_f64(ctx.input(node, inputs, i)?)?
            .first()
            .copied()
            .ok_or_else(|| ctx.err(node, format!("input {i} is empty")))
    };
    let (start, limit, delta) = (get(0)?, get(1)?, get(2)?);
    // onnxruntime refuses these too ("delta in Range operator can not be zero"; a NaN or
    // infinite bound has no element count).
    if !(start.is_finite() && limit.is_finite() && delta.is_finite()) || delta == 0.0 {
        return Err(ctx.err(
            node,
            format!("needs finite start, limit and a non-zero finite delta, got ({start}, {limit}, {delta})"),
        ));
    }
    let out = node.outputs.first().copied().ok_or_else(|| ctx.err(node, "no output"))?;
    let n = ctx.shape(out).first().copied().unwrap_or(0);
    // The f64 values, their encoding and the tensor: host memory on every place.
    mpsrt_runtime::check_host_alloc(&ctx.label(node), n.saturating_mul(24))?;
    let vals: Vec<f64> = (0..n).map(|i| start + i as f64 * delta).collect();
    let h = HostTensor::from_f64(ctx.dtype(out), vec![n], &vals);
    Ok(vec![host_to_tensor(&ctx.label(node), &h, ctx.place)?])
}

fn depth_to_space(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = ctx.input(node, inputs, 0)?;
    let Op::DepthToSpace { blocksize, crd } = &node.op else {
        return Err(ctx.err(node, "not DepthToSpace"));
    };
    let s = x.shape();
    if s.len() != 4 {
        return Err(ctx.err(node, format!("expects a 4-D input, got {s:?}")));
    }
    let (b, c, h, w, bs) = (s[0], s[1], s[2], s[3], *blocksize);
    let c2 = c / (bs * bs).max(1);
    let (shape6, perm) = if *crd {
        ([b, c2, bs, bs, h, w], [0, 1, 4, 2, 5, 3])
    } else {
        ([b, bs, bs, c2, h, w], [0, 3, 4, 1, 5, 2])
    };
    let y = x
        .reshape(&isz(&shape6))
        .and_then(|t| t.permute(&perm))
        .and_then(|t| t.reshape(&isz(&[b, c2, h * bs, w * bs])))
        .map_err(|e| ctx.wrap(node, e))?;
    Ok(vec![y])
}

fn space_to_depth(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = ctx.input(node, inputs, 0)?;
    let Op::SpaceToDepth { blocksize } = &node.op else {
        return Err(ctx.err(node, "not SpaceToDepth"));
    };
    let s = x.shape();
    if s.len() != 4 {
        return Err(ctx.err(node, format!("expects a 4-D input, got {s:?}")));
    }
    let (b, c, h, w, bs) = (s[0], s[1], s[2], s[3], (*blocksize).max(1));
    let y = x
        .reshape(&isz(&[b, c, h / bs, bs, w / bs, bs]))
        .and_then(|t| t.permute(&[0, 3, 5, 1, 2, 4]))
        .and_then(|t| t.reshape(&isz(&[b, c * bs * bs, h / bs, w / bs])))
        .map_err(|e| ctx.wrap(node, e))?;
    Ok(vec![y])
}
