//! GPU launch for reductions and softmax: split the view into kept/reduced dims, coalesce each
//! group, choose `Row`/`RowVec4`/`Col`/`RowRegs` mode (softmax rows that fit in registers take
//! `RowRegs`), and record one dispatch of the rendered kernel.

use super::grid;
use super::window::{self, Access};
use crate::{Scalar, Tensor};
use mpsrt_core::{contiguous_strides, DType, Error, Layout, Result};
use mpsrt_kernels::{
    coalesce, softmax, BinaryFn, Expr, ReduceMode, ReduceOp, ReduceSpec, VType, REDUCE_WG,
};
use mpsrt_runtime::{Binding, GpuBuffer, GpuDevice, Kernel, Pipeline, Storage};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

type Cache = Mutex<HashMap<(usize, ReduceSpec), Arc<Pipeline>>>;

fn pipeline(dev: &GpuDevice, op: &str, spec: ReduceSpec) -> Result<Arc<Pipeline>> {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    let key = (dev.index(), spec);
    if let Some(p) = cache.lock().get(&key) {
        return Ok(p.clone());
    }
    let src =
        spec.render().map_err(|e| Error::dtype(op, format!("cannot generate kernel: {e}")))?;
    let p = dev.pipeline(Kernel { source: &src, entry: "main" })?;
    cache.lock().insert(key, p.clone());
    Ok(p)
}

pub(crate) fn gpu_buffer<'a>(op: &str, t: &'a Tensor) -> Result<&'a Arc<GpuBuffer>> {
    match t.storage() {
        Storage::Gpu(b) => Ok(b),
        Storage::Cpu(_) => Err(Error::device(op, "internal: CPU tensor reached the GPU backend")),
    }
}

/// Reduce `axes` of `x` (f32/f16/i32). Result: flat `[n_out]` f32 (i32 for ints and arg ops),
/// `[2, n_out]` for `Moments`, or `x`'s shape (contiguous f32) for softmax ops.
///
/// Launches are windowed by kept rows ([`reduce_rows`]); when one row's reduced span does not
/// fit a storage binding (`x.sum()` of a tensor past the limit, a column sum of a large
/// matrix), ops that compose with themselves are split along the reduced axis of largest
/// stride into two halves reduced separately and combined by a second reduction. The others
/// (variance, arg ops, softmax) are refused with the binding limit named.
pub(crate) fn reduce(
    op_name: &str,
    device: usize,
    x: &Tensor,
    op: ReduceOp,
    axes: &[usize],
    param: f32,
) -> Result<Tensor> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    let (limit, align) = window::limits(&dev);
    let l = x.layout();
    let row_span: usize =
        axes.iter().map(|&a| (l.shape[a].max(1) - 1) * l.strides[a].unsigned_abs()).sum();
    let row_bytes = ((row_span + 1) * x.dtype().size()) as u64 + align;
    let combine = match op {
        ReduceOp::Sum | ReduceOp::Mean => Some(ReduceOp::Sum),
        ReduceOp::Max | ReduceOp::Min | ReduceOp::Prod | ReduceOp::Norm2 | ReduceOp::LogSumExp => {
            Some(op)
        }
        _ => None,
    };
    let split_axis = axes
        .iter()
        .copied()
        .filter(|&a| l.shape[a] > 1)
        .max_by_key(|&a| l.strides[a].unsigned_abs());
    match (combine, split_axis) {
        (Some(comb), Some(a))
            if row_bytes > limit && !window::fits(gpu_buffer(op_name, x)?, limit) =>
        {
            let len = l.shape[a] as isize;
            let halves = [
                x.slice(a as isize, Some(0), Some(len / 2), 1)?,
                x.slice(a as isize, Some(len / 2), Some(len), 1)?,
            ];
            let parts = halves
                .iter()
                .map(|h| reduce(op_name, device, h, comb, axes, param))
                .collect::<Result<Vec<_>>>()?;
            let both = crate::stack(&[&parts[0], &parts[1]], 0)?;
            let r = reduce(op_name, device, &both, comb, &[0], param)?;
            if op != ReduceOp::Mean {
                return Ok(r);
            }
            let count: usize = axes.iter().map(|&a| l.shape[a]).product();
            let scale = Expr::binary(BinaryFn::Mul, Expr::input(0), Expr::Scalar(0, VType::Float));
            crate::elementwise::map(
                op_name,
                &[&r],
                DType::F32,
                scale,
                &[Scalar::F(1.0 / count as f64)],
            )
        }
        _ => reduce_rows(op_name, &dev, x, op, axes, param),
    }
}

/// One launch (one dispatch per window of kept rows): see [`reduce`].
fn reduce_rows(
    op_name: &str,
    dev: &Arc<GpuDevice>,
    x: &Tensor,
    op: ReduceOp,
    axes: &[usize],
    param: f32,
) -> Result<Tensor> {
    let dev = dev.clone();
    let l = x.layout();
    let out_strides = contiguous_strides(&l.shape);
    let kept: Vec<usize> = (0..l.ndim()).filter(|d| !axes.contains(d)).collect();
    let kshape: Vec<usize> = kept.iter().map(|&d| l.shape[d]).collect();
    let (ks, kst) = coalesce(
        &kshape,
        &[
            kept.iter().map(|&d| l.strides[d]).collect(),
            kept.iter().map(|&d| out_strides[d]).collect(),
        ],
    );
    let rshape: Vec<usize> = axes.iter().map(|&d| l.shape[d]).collect();
    let (mut rs, rst) = coalesce(&rshape, &[axes.iter().map(|&d| l.strides[d]).collect()]);
    let mut rstr = rst.into_iter().next().unwrap_or_default();
    if rs.is_empty() {
        rs.push(1);
        rstr.push(0);
    }
    let n_out: usize = ks.iter().product();
    let r: usize = rshape.iter().product();
    let int = x.dtype() == DType::I32;
    let out_elem = if int || op.is_arg() { DType::I32 } else { DType::F32 };
    let (out_numel, out_shape) = if op.writes_rows() {
        (l.numel(), l.shape.clone())
    } else if op == ReduceOp::Moments {
        (2 * n_out, vec![2, n_out])
    } else {
        (n_out, vec![n_out])
    };
    let out = dev.alloc(op_name, (out_numel * 4) as u64)?;
    let result =
        Tensor::from_parts(Storage::Gpu(Arc::new(out)), Layout::contiguous(&out_shape), out_elem);
    if n_out == 0 || (op.writes_rows() && r == 0) {
        return Ok(result);
    }
    // Softmax output rows: the reduced axis's stride in the contiguous output.
    let out_rs = if op.writes_rows() { out_strides[axes[0]] as usize } else { 0 };
    let contiguous_rows = rs.len() == 1 && rstr[0] == 1;
    let aligned = x.dtype() == DType::F32
        && r.is_multiple_of(4)
        && l.offset.is_multiple_of(4)
        && kst[0].iter().all(|s| s % 4 == 0)
        && (!op.writes_rows() || out_rs == 1);
    let wg = REDUCE_WG as usize;
    // Sums over many rows also take the register rows (vec4 only; long rows keep streaming).
    let sum_like = matches!(op, ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Norm2)
        && x.dtype() != DType::I32
        && n_out >= 64;
    let mode = if (op.writes_rows() || sum_like)
        && contiguous_rows
        && aligned
        && r <= 4 * wg * softmax::MAX_VEC4_CHUNKS as usize
    {
        ReduceMode::RowRegs { vec4: true, chunks: (r / 4).div_ceil(wg) as u8 }
    } else if op.writes_rows()
        && r <= wg * softmax::MAX_CHUNKS as usize
        && ((contiguous_rows && r >= 64) || n_out < 256)
    {
        ReduceMode::RowRegs { vec4: false, chunks: r.div_ceil(wg) as u8 }
    } else if contiguous_rows && aligned {
        ReduceMode::RowVec4
    } else if (contiguous_rows && r >= 64) || n_out < 256 {
        ReduceMode::Row
    } else {
        ReduceMode::Col
    };
    let spec = ReduceSpec { op, input: x.dtype(), kept: ks.len(), red: rs.len(), mode };
    let p = pipeline(&dev, op_name, spec)?;
    let meta = spec.meta(n_out, r, l.offset, param, out_rs, (&ks, &kst[0], &kst[1]), (&rs, &rstr));
    let maxd = dev.properties().max_compute_workgroups_per_dimension;
    let inp = gpu_buffer(op_name, x)?;
    let outb = gpu_buffer(op_name, &result)?;
    // Window by kept rows (every row needs its whole reduced span): points are rows over the
    // kept dims; the input touches each row's reduced span, the output its value(s) or row.
    let (limit, _) = window::limits(&dev);
    let windows = if window::fits(inp, limit) && window::fits(outb, limit) {
        vec![window::Window { start: 0, len: n_out, base: vec![None, None] }]
    } else {
        let pdims: Vec<usize> = if ks.is_empty() { vec![1] } else { ks.clone() };
        let span = |shape: &[usize], st: &[isize]| {
            shape.iter().zip(st).fold((0isize, 0isize), |(lo, hi), (&d, &s)| {
                let t = (d as isize - 1) * s;
                (lo + t.min(0), hi + t.max(0))
            })
        };
        let kst_or = |k: usize| if ks.is_empty() { vec![0] } else { kst[k].clone() };
        let input = Access {
            buffer: inp,
            elem_bytes: x.dtype().size(),
            offset: l.offset as isize,
            strides: kst_or(0),
            extent: span(&rs, &rstr),
        };
        let output = if op.writes_rows() {
            let ors = out_rs as isize;
            let ext = (((r as isize - 1) * ors).min(0), ((r as isize - 1) * ors).max(0));
            Access { buffer: outb, elem_bytes: 4, offset: 0, strides: kst_or(1), extent: ext }
        } else {
            let mut a = Access::dense(outb, 4, 0, &pdims);
            if op == ReduceOp::Moments {
                a.extent = (0, n_out as isize);
            }
            a
        };
        window::plan(op_name, &dev, &pdims, 1, u32::MAX as usize, &[input, output])?
    };
    for w in &windows {
        let mut m = meta.clone();
        let (ib, ob) = (w.base[0], w.base[1]);
        m[0] = w.len as u32;
        m[2] = w.rel(0, l.offset as isize) as i32 as u32;
        m[5] = w.start as u32;
        m[6] = ob.map_or(0, |b| b.0) as u32;
        let wg = match mode {
            ReduceMode::Col => grid((w.len as u64).div_ceil(REDUCE_WG as u64), maxd),
            _ => grid(w.len as u64, maxd),
        };
        dev.dispatch(
            op_name,
            &p,
            &[bind(inp, ib, x.dtype().size()), bind(outb, ob, 4)],
            bytemuck::cast_slice(&m),
            wg,
        )?;
    }
    Ok(result)
}

/// `b` bound whole, or from element `e` (of `eb` bytes) for `bytes`.
fn bind(b: &GpuBuffer, win: Option<(usize, u64)>, eb: usize) -> Binding<'_> {
    match win {
        None => Binding::from(b),
        Some((e, bytes)) => Binding::window(b, (e * eb) as u64, bytes),
    }
}
