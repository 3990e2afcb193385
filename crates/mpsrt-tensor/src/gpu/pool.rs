//! GPU launch for 2-D pooling (`mpsrt-kernels/src/pool.wgsl`): one thread per output element.
//! f16 tensors that fit one binding pool in f16 storage on devices with shader-f16
//! (`mpsrt_kernels::pool_f16_wgsl`: values widened to f32 in registers, so the max and NaN
//! rules are those of the f32 kernel and averages sum in f32); otherwise, and for indices,
//! they are widened to f32 around the kernel (ResNet-50 b32's 3×3/2 max pool on the H200 took
//! 0.23 ms with the casts; `MPSRT_POOL_F16=0` keeps that route, for A/B); f16 max pooling
//! takes a kernel with its geometry baked in (`max_pool_f16_wgsl`; four outputs per thread from
//! vector loads where rows are multiples of 4, `MPSRT_POOL_F16_VEC=0`: one; `MPSRT_POOL_F16_MAX=0`:
//! the generic one). Max pooling can also
//! return the flat `h·W + w` index of each maximum (Paddle's `return_mask`), written after
//! the values.
//!
//! An input past the adapter's `max_storage_buffer_binding_size` is pooled in pieces: blocks
//! of whole N·C planes whose input (and output) fit one binding, or — when one plane alone is
//! too large — bands of output rows per plane, each binding only the input rows its windows
//! read. Each piece writes its own output; the pieces are concatenated.

use super::conv::{as_f32, buffer, meta_bytes};
use super::window::{fits, limits};
use super::{alloc_out, grid};
use crate::pool::PoolGeom;
use crate::Tensor;
use mpsrt_core::{numel, DType, Error, Layout, Result};
use mpsrt_runtime::{Binding, GpuBuffer, GpuDevice, Storage};
use std::sync::Arc;

const SOURCE: &str = include_str!("../../../mpsrt-kernels/src/pool.wgsl");

/// Pooled `x` into `shape` (N, C, OH, OW) in `x`'s dtype.
pub(crate) fn pool2d(
    op: &str,
    device: usize,
    x: &Tensor,
    shape: &[usize],
    g: &PoolGeom,
) -> Result<Tensor> {
    let (y, _) = pool2d_impl(op, device, x, shape, g, false)?;
    y.astype(x.dtype())
}

/// Max pooling with indices: (values in `x`'s dtype, i32 flat indices within each input plane).
pub(crate) fn max_pool2d_indices(
    op: &str,
    device: usize,
    x: &Tensor,
    shape: &[usize],
    g: &PoolGeom,
) -> Result<(Tensor, Tensor)> {
    let (y, i) = pool2d_impl(op, device, x, shape, g, true)?;
    let i = i.ok_or_else(|| Error::device(op, "internal: pooling returned no indices"))?;
    Ok((y.astype(x.dtype())?, i))
}

/// One piece: planes `p0 .. p0 + planes`, output rows `r0 .. r0 + rows` of each.
struct Piece {
    p0: usize,
    planes: usize,
    r0: usize,
    rows: usize,
}

/// Input rows `[lo, hi)` the windows of output rows `r0 .. r1` read.
fn input_rows(g: &PoolGeom, r0: usize, r1: usize) -> (usize, usize) {
    if g.adaptive {
        return (r0 * g.h / g.oh, (r1 * g.h).div_ceil(g.oh));
    }
    let lo = (r0 * g.s[0]).saturating_sub(g.p[0]);
    let hi = ((r1 - 1) * g.s[0] + (g.k[0] - 1) * g.d[0] + 1).saturating_sub(g.p[0]);
    (lo.min(g.h), hi.min(g.h).max(lo.min(g.h)))
}

fn pool2d_impl(
    op: &str,
    device: usize,
    x: &Tensor,
    shape: &[usize],
    g: &PoolGeom,
    with_index: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    let total = numel(shape);
    if x.dtype() == DType::F16
        && !with_index
        && total > 0
        && dev.properties().shader_f16
        && super::env_knob("MPSRT_POOL_F16", 1) != 0
    {
        let xh = x.contiguous()?;
        let (limit, _) = limits(&dev);
        let xbuf = buffer(op, &xh)?;
        if fits(xbuf, limit) && (total * 2) as u64 <= limit {
            if g.max && !g.adaptive && super::env_knob("MPSRT_POOL_F16_MAX", 1) != 0 {
                let y = max_pool_f16(op, &dev, &xh, xbuf, g, total)?;
                let dims: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
                return Ok((y.reshape(&dims)?, None));
            }
            let all = Piece { p0: 0, planes: g.nc, r0: 0, rows: g.oh };
            let (y, _) = launch(op, &dev, &xh, xbuf, None, g, &all, false, true)?;
            let dims: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
            return Ok((y.reshape(&dims)?, None));
        }
    }
    let x = as_f32(x)?;
    let per_out = if with_index { 8 } else { 4 };
    let (limit, align) = limits(&dev);
    let xbuf = buffer(op, &x)?;
    if total == 0 || (fits(xbuf, limit) && (total * per_out) as u64 <= limit) {
        let all = Piece { p0: 0, planes: g.nc, r0: 0, rows: g.oh };
        let (y, i) = launch(op, &dev, &x, xbuf, None, g, &all, with_index, false)?;
        let dims: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
        return Ok((y.reshape(&dims)?, i.map(|i| i.reshape(&dims)).transpose()?));
    }
    // Elements one binding holds after the alignment slack of its start.
    let cap = ((limit - align) / 4) as usize;
    let (plane_in, plane_out) = (g.h * g.w, g.oh * g.ow * per_out / 4);
    let mut pieces = Vec::new();
    if g.adaptive && g.oh == 1 && g.ow == 1 && plane_in > cap {
        // Global pooling of planes past a binding: the reductions, which split long rows.
        let dims: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
        let flat = x.reshape(&[g.nc as isize, -1])?;
        let y = if !g.max {
            crate::mean(&flat, Some(&[1]), false)?
        } else {
            crate::max(&flat, Some(&[1]), false)?
        };
        let i = if with_index { Some(crate::argmax(&flat, Some(1), false)?) } else { None };
        return Ok((y.reshape(&dims)?, i.map(|i| i.reshape(&dims)).transpose()?));
    }
    if plane_in <= cap && plane_out <= cap {
        let per = (cap / plane_in.max(1)).min(cap / plane_out.max(1)).max(1);
        for p0 in (0..g.nc).step_by(per) {
            pieces.push(Piece { p0, planes: per.min(g.nc - p0), r0: 0, rows: g.oh });
        }
    } else {
        let row_out = g.ow * per_out / 4;
        for p0 in 0..g.nc {
            let mut r0 = 0;
            while r0 < g.oh {
                // The most output rows whose input band and output fit one binding.
                let mut rows = (g.oh - r0).min(cap / row_out.max(1));
                while rows > 0 && {
                    let (lo, hi) = input_rows(g, r0, r0 + rows);
                    (hi - lo) * g.w > cap
                } {
                    rows /= 2;
                }
                if rows == 0 {
                    return Err(Error::oom(
                        op,
                        format!(
                            "one output row of this pooling reads input rows of {} elements \
                             ({} columns), more than the adapter's \
                             max_storage_buffer_binding_size of {limit} bytes holds",
                            g.w * g.k[0],
                            g.w
                        ),
                    ));
                }
                pieces.push(Piece { p0, planes: 1, r0, rows });
                r0 += rows;
            }
        }
    }
    let (mut ys, mut is) = (Vec::new(), Vec::new());
    for pc in &pieces {
        let (lo, _) = input_rows(g, pc.r0, pc.r0 + pc.rows);
        let first = if pc.planes == 1 && pc.rows < g.oh { lo * g.w } else { 0 };
        let start = x.layout().offset + pc.p0 * plane_in + first;
        let (y, i) = launch(op, &dev, &x, xbuf, Some(start), g, pc, with_index, false)?;
        ys.push(y);
        is.extend(i);
    }
    let join = |ts: Vec<Tensor>| -> Result<Tensor> {
        let refs: Vec<&Tensor> = ts.iter().collect();
        // Pieces are [planes, rows, OW]: bands of one plane join along rows, then planes.
        let whole_planes = pieces.iter().all(|p| p.rows == g.oh);
        let t = if whole_planes {
            crate::shape::concat(&refs, 0)?
        } else {
            let mut planes = Vec::new();
            let mut k = 0;
            while k < pieces.len() {
                let n = pieces[k..].iter().take_while(|p| p.p0 == pieces[k].p0).count();
                planes.push(crate::shape::concat(&refs[k..k + n], 1)?);
                k += n;
            }
            let prefs: Vec<&Tensor> = planes.iter().collect();
            crate::shape::concat(&prefs, 0)?
        };
        t.reshape(&shape.iter().map(|&d| d as isize).collect::<Vec<_>>())
    };
    let idx = if with_index { Some(join(is)?) } else { None };
    Ok((join(ys)?, idx))
}

/// f16 max pooling with the geometry baked into the kernel (`max_pool_f16_wgsl`;
/// `MPSRT_POOL_F16_MAX=0`: the generic f16 kernel). `x` is contiguous, inside one binding.
fn max_pool_f16(
    op: &str,
    dev: &GpuDevice,
    x: &Tensor,
    xbuf: &GpuBuffer,
    g: &PoolGeom,
    total: usize,
) -> Result<Tensor> {
    use mpsrt_kernels::pool_f16::{max_pool_f16_wgsl, MaxPoolF16, MAX_POOL_F16_WG};
    static CACHE: super::matmul::SpecCache<MaxPoolF16> = std::sync::OnceLock::new();
    let u = |v: usize| v as u32;
    let spec = MaxPoolF16 {
        h: u(g.h),
        w: u(g.w),
        oh: u(g.oh),
        ow: u(g.ow),
        k: [u(g.k[0]), u(g.k[1])],
        s: [u(g.s[0]), u(g.s[1])],
        p: [u(g.p[0]), u(g.p[1])],
        d: [u(g.d[0]), u(g.d[1])],
        vec: false,
    };
    // Four outputs per thread from aligned vector loads (`MPSRT_POOL_F16_VEC=0`: one; H100,
    // this session's call 1: ResNet-50 b32's stem pool 0.046 -> 0.029 ms).
    let vec = super::env_knob("MPSRT_POOL_F16_VEC", 1) != 0
        && spec.vec_ok()
        && x.layout().offset.is_multiple_of(4);
    let spec = MaxPoolF16 { vec, ..spec };
    let threads = if vec { total / 4 } else { total };
    let pipeline = super::matmul::cached(&CACHE, dev, op, spec, |s| Ok(max_pool_f16_wgsl(s)))?;
    let out = alloc_out(dev, op, total, 2)?;
    let wg = grid(
        (threads as u64).div_ceil(u64::from(MAX_POOL_F16_WG)),
        dev.properties().max_compute_workgroups_per_dimension,
    );
    let words = [u(threads), u(x.layout().offset), wg[0] * MAX_POOL_F16_WG, 0];
    let bindings = [Binding::from(xbuf), Binding::from(&out)];
    dev.dispatch(op, &pipeline, &bindings, bytemuck::cast_slice(&words), wg)?;
    let storage = Storage::Gpu(Arc::new(out));
    Ok(Tensor::from_parts(storage, Layout::contiguous(&[total]), DType::F16))
}

/// One dispatch for `pc`; `start`: the input element of the piece's first plane and row, whose
/// aligned window is bound (`None`: the whole buffer). Result pieces are `[planes, rows, OW]`
/// (the whole output when `pc` covers everything); `half`: `x` is f16 and so is the result
/// (no indices, whole buffer only).
#[allow(clippy::too_many_arguments)]
fn launch(
    op: &str,
    dev: &GpuDevice,
    x: &Tensor,
    xbuf: &GpuBuffer,
    start: Option<usize>,
    g: &PoolGeom,
    pc: &Piece,
    with_index: bool,
    half: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let total = pc.planes * pc.rows * g.ow;
    let out = alloc_out(dev, op, total * if with_index { 2 } else { 1 }, if half { 2 } else { 4 })?;
    let (limit, align) = limits(dev);
    // Input binding and the kernel's x_off: the plane base relative to the window (may be
    // "negative" for a band of rows, wrapping in u32; see pool.wgsl).
    let (xbind, x_off) = match start {
        None => (Binding::from(xbuf), x.layout().offset as u32),
        Some(s) => {
            let base = (s * 4) as u64 / align * align;
            let bytes = (limit.min(xbuf.size() - base)).next_multiple_of(4);
            let plane_start = x.layout().offset + pc.p0 * g.h * g.w;
            let rel = plane_start as i64 - (base / 4) as i64;
            (Binding::window(xbuf, base, bytes), rel as i32 as u32)
        }
    };
    if total > 0 {
        let wg = grid(
            (total as u64).div_ceil(256),
            dev.properties().max_compute_workgroups_per_dimension,
        );
        let u = |v: usize| v as u32;
        let words = [
            u(pc.planes),
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
            x_off,
            u(total),
            wg[0] * 256,
            u(pc.r0),
            u(pc.rows),
            with_index as u32,
        ];
        let src = if half { mpsrt_kernels::pool_f16_wgsl() } else { SOURCE };
        let pipeline = dev.static_pipeline(src, "pool2d")?;
        let bindings = [xbind, Binding::from(&out)];
        dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, 6), wg)?;
    }
    let shape = [pc.planes, pc.rows, g.ow];
    let storage = Storage::Gpu(Arc::new(out));
    let dtype = if half { DType::F16 } else { DType::F32 };
    let y = Tensor::from_parts(storage.clone(), Layout::contiguous(&shape), dtype);
    let i = with_index.then(|| {
        let mut l = Layout::contiguous(&shape);
        l.offset = total;
        Tensor::from_parts(storage, l, DType::I32)
    });
    Ok((y, i))
}
