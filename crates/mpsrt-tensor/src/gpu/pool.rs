//! GPU launch for 2-D pooling (`mpsrt-kernels/src/pool.wgsl`): one thread per output element;
//! f16 tensors are widened to f32 around the kernel.

use super::conv::{as_f32, buffer, meta_bytes};
use super::{alloc_out, grid};
use crate::pool::PoolGeom;
use crate::Tensor;
use mpsrt_core::{numel, DType, Layout, Result};
use mpsrt_runtime::{Binding, Storage};
use std::sync::Arc;

const SOURCE: &str = include_str!("../../../mpsrt-kernels/src/pool.wgsl");

pub(crate) fn pool2d(
    op: &str,
    device: usize,
    x: &Tensor,
    shape: &[usize],
    g: &PoolGeom,
) -> Result<Tensor> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    let dtype = x.dtype();
    let x = as_f32(x)?;
    let total = numel(shape);
    let out = alloc_out(&dev, op, total, 4)?;
    if total > 0 {
        let wg = grid(
            (total as u64).div_ceil(256),
            dev.properties().max_compute_workgroups_per_dimension,
        );
        let u = |v: usize| v as u32;
        let words = [
            u(g.nc),
            u(g.h),
            u(g.w),
            u(g.oh),
            u(g.ow),
            u(g.k[0]),
            u(g.k[1]),
            u(g.s[0]),
            u(g.s[1]),
            u(g.p[0]),
            u(g.p[1]),
            u(g.d[0]),
            u(g.d[1]),
            (!g.max) as u32,
            g.count_include_pad as u32,
            g.adaptive as u32,
            u(x.layout().offset),
            u(total),
            wg[0] * 256,
        ];
        let pipeline = dev.static_pipeline(SOURCE, "pool2d")?;
        let bindings = [Binding::from(&**buffer(op, &x)?), Binding::from(&out)];
        dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, 5), wg)?;
    }
    let y = Tensor::from_parts(Storage::Gpu(Arc::new(out)), Layout::contiguous(shape), DType::F32);
    y.astype(dtype)
}
