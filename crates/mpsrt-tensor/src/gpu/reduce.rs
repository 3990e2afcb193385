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
/// matrix), the row is split along the reduced axis of largest stride into two halves reduced
/// separately and combined ([`split_row`]).
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
    let split_axis = axes
        .iter()
        .copied()
        .filter(|&a| l.shape[a] > 1)
        .max_by_key(|&a| l.strides[a].unsigned_abs());
    match split_axis {
        Some(a) if row_bytes > limit && !window::fits(gpu_buffer(op_name, x)?, limit) => {
            split_row(op_name, device, x, op, axes, param, a)
        }
        _ => reduce_rows(op_name, &dev, x, op, axes, param),
    }
}

/// `a * x + b * y` for two same-shape f32 tensors (host scalars `a`, `b`).
fn lin2(op: &str, x: &Tensor, a: f64, y: &Tensor, b: f64) -> Result<Tensor> {
    let e = Expr::binary(
        BinaryFn::Add,
        Expr::binary(BinaryFn::Mul, Expr::input(0), Expr::Scalar(0, VType::Float)),
        Expr::binary(BinaryFn::Mul, Expr::input(1), Expr::Scalar(1, VType::Float)),
    );
    crate::elementwise::map(op, &[x, y], DType::F32, e, &[Scalar::F(a), Scalar::F(b)])
}

/// A row longer than one binding: reduce the two halves of axis `a` separately (each may split
/// again) and combine the partial results — sums/extrema by the op itself, variances by Chan's
/// pairwise update of (count, mean, M2), arg ops by (value, index) pairs, softmax as
/// `exp(x - logsumexp)` with the (itself split) logsumexp and an elementwise (windowed) pass.
#[allow(clippy::too_many_arguments)]
fn split_row(
    op_name: &str,
    device: usize,
    x: &Tensor,
    op: ReduceOp,
    axes: &[usize],
    param: f32,
    a: usize,
) -> Result<Tensor> {
    let l = x.layout();
    let len = l.shape[a];
    let count: usize = axes.iter().map(|&d| l.shape[d]).product();
    let halves = [
        x.slice(a as isize, Some(0), Some((len / 2) as isize), 1)?,
        x.slice(a as isize, Some((len / 2) as isize), Some(len as isize), 1)?,
    ];
    let part = |o: ReduceOp| -> Result<[Tensor; 2]> {
        Ok([
            reduce(op_name, device, &halves[0], o, axes, param)?,
            reduce(op_name, device, &halves[1], o, axes, param)?,
        ])
    };
    match op {
        ReduceOp::Sum
        | ReduceOp::Mean
        | ReduceOp::Max
        | ReduceOp::Min
        | ReduceOp::Prod
        | ReduceOp::Norm2
        | ReduceOp::LogSumExp => {
            let comb = if op == ReduceOp::Mean { ReduceOp::Sum } else { op };
            let p = part(comb)?;
            let both = crate::stack(&[&p[0], &p[1]], 0)?;
            let r = reduce(op_name, device, &both, comb, &[0], param)?;
            if op != ReduceOp::Mean {
                return Ok(r);
            }
            crate::multiply_scalar(&r, 1.0 / count as f64)
        }
        ReduceOp::Var | ReduceOp::Std | ReduceOp::Moments => {
            // Chan et al.: with weights c0 = n0/n, c1 = n1/n of the halves,
            // mean = c0·m0 + c1·m1 and M2/n = c0·v0 + c1·v1 + c0·c1·(m1 − m0)² (v: biased).
            let p = part(ReduceOp::Moments)?;
            let n0 = (count / len * (len / 2)) as f64;
            let c0 = n0 / count as f64;
            let c1 = 1.0 - c0;
            let (m0, v0) = (p[0].select(0, 0)?, p[0].select(0, 1)?);
            let (m1, v1) = (p[1].select(0, 0)?, p[1].select(0, 1)?);
            let mean = lin2(op_name, &m0, c0, &m1, c1)?;
            let d = crate::subtract(&m1, &m0)?;
            let dd = crate::multiply_scalar(&crate::multiply(&d, &d)?, c0 * c1)?;
            let vb = crate::add(&lin2(op_name, &v0, c0, &v1, c1)?, &dd)?;
            if op == ReduceOp::Moments {
                return crate::stack(&[&mean, &vb], 0);
            }
            // var = M2 / max(n − correction, 0); the CPU's 0-denominator rule: NaN for M2 = 0
            // (or NaN), else inf.
            let den = (count as f64 - param as f64).max(0.0);
            let var = if den > 0.0 {
                crate::multiply_scalar(&vb, count as f64 / den)?
            } else {
                let zero = crate::logical_or(&crate::equal_scalar(&vb, 0.0)?, &crate::isnan(&vb)?)?;
                crate::where_scalar(
                    &zero,
                    Scalar::F(f64::NAN),
                    Scalar::F(f64::INFINITY),
                    DType::F32,
                )?
            };
            if op == ReduceOp::Std {
                crate::sqrt(&var)
            } else {
                Ok(var)
            }
        }
        ReduceOp::ArgMax | ReduceOp::ArgMin => {
            // (value, index) per half; the second half wins on a strictly better value or on
            // the first NaN (NaN counts as the extreme; ties and earlier NaNs keep the first).
            let vop = if op == ReduceOp::ArgMax { ReduceOp::Max } else { ReduceOp::Min };
            let v = part(vop)?;
            let i = part(op)?;
            let better = if op == ReduceOp::ArgMax {
                crate::greater(&v[1], &v[0])?
            } else {
                crate::less(&v[1], &v[0])?
            };
            let second = if v[0].dtype().is_float() {
                let nan1 = crate::logical_and(
                    &crate::isnan(&v[1])?,
                    &crate::logical_not(&crate::isnan(&v[0])?)?,
                )?;
                let keep0 = crate::isnan(&v[0])?;
                crate::logical_and(
                    &crate::logical_or(&better, &nan1)?,
                    &crate::logical_not(&keep0)?,
                )?
            } else {
                better
            };
            let i1 = crate::add_scalar(&i[1], (len / 2) as i64)?;
            crate::where_(&second, &i1, &i[0])?.astype(DType::I32)
        }
        ReduceOp::Softmax | ReduceOp::LogSoftmax => {
            let lse = reduce(op_name, device, x, ReduceOp::LogSumExp, axes, param)?;
            let keep: Vec<isize> = l
                .shape
                .iter()
                .enumerate()
                .map(|(d, &s)| if axes.contains(&d) { 1 } else { s as isize })
                .collect();
            let shifted = crate::subtract(&x.astype(DType::F32)?, &lse.reshape(&keep)?)?;
            let y = if op == ReduceOp::Softmax { crate::exp(&shifted)? } else { shifted };
            y.contiguous()
        }
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
    // Threads per register row: a short softmax row shares its workgroup with others.
    let seg = |units: usize| -> usize {
        if op.writes_rows() && short_rows() {
            units.next_power_of_two().clamp(32, wg)
        } else {
            wg
        }
    };
    let mode = if (op.writes_rows() || sum_like)
        && contiguous_rows
        && aligned
        && r <= 4 * wg * softmax::MAX_VEC4_CHUNKS as usize
    {
        let seg = seg(r / 4);
        ReduceMode::RowRegs { vec4: true, chunks: (r / 4).div_ceil(seg) as u8, seg: seg as u16 }
    } else if op.writes_rows()
        && r <= wg * softmax::MAX_CHUNKS as usize
        && ((contiguous_rows && r >= 64) || n_out < 256)
    {
        let seg = seg(r);
        ReduceMode::RowRegs { vec4: false, chunks: r.div_ceil(seg) as u8, seg: seg as u16 }
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
            ReduceMode::RowRegs { seg, .. } => {
                grid((w.len as u64).div_ceil(REDUCE_WG as u64 / seg as u64), maxd)
            }
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

/// Whether short softmax rows share workgroups (`ReduceMode::RowRegs`'s `seg` below 256;
/// `MPSRT_SOFTMAX_SHORT_ROWS=0` gives every row its own workgroup, the A/B switch).
fn short_rows() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MPSRT_SOFTMAX_SHORT_ROWS").map_or(true, |v| v.trim() != "0"))
}
