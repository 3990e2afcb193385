//! GPU launch for reductions and softmax: split the view into kept/reduced dims, coalesce each
//! group, choose `Row`/`RowVec4`/`Col`/`RowRegs` mode (softmax rows that fit in registers take
//! `RowRegs`), and record one dispatch of the rendered kernel.

use super::grid;
use crate::Tensor;
use mpsrt_core::{contiguous_strides, DType, Error, Layout, Result};
use mpsrt_kernels::{coalesce, softmax, ReduceMode, ReduceOp, ReduceSpec, REDUCE_WG};
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
pub(crate) fn reduce(
    op_name: &str,
    device: usize,
    x: &Tensor,
    op: ReduceOp,
    axes: &[usize],
    param: f32,
) -> Result<Tensor> {
    let dev = mpsrt_runtime::gpu_device(device)?;
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
    let wg = match mode {
        ReduceMode::Col => grid((n_out as u64).div_ceil(REDUCE_WG as u64), maxd),
        _ => grid(n_out as u64, maxd),
    };
    let inp = gpu_buffer(op_name, x)?;
    let outb = gpu_buffer(op_name, &result)?;
    dev.dispatch(
        op_name,
        &p,
        &[Binding::from(&**inp), Binding::from(&**outb)],
        bytemuck::cast_slice(&meta),
        wg,
    )?;
    Ok(result)
}
