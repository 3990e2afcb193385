//! CPU reference for 2-D pooling with PyTorch's index and divisor rules (see `pool.rs`):
//! average windows scanned and summed in f64; NaN-propagating max reduced separably (window rows
//! into one row, then window columns), which compares the same elements.

use crate::pool::PoolGeom;
use crate::Tensor;
use mpsrt_core::{DType, Layout, Result};
use mpsrt_runtime::{CpuBuffer, Storage};
use std::sync::Arc;

/// Pool `x` (N, C, H, W) into `shape` (N, C, OH, OW). f32 inputs are read in place and pooled
/// straight into an f32 output (max in f32, which is exact; window sums still accumulate in f64
/// and round once, as the f64 route did).
pub(crate) fn pool2d(x: &Tensor, shape: &[usize], g: &PoolGeom) -> Result<Tensor> {
    if x.dtype() == DType::F32 {
        let xc = x.contiguous()?;
        if let Storage::Cpu(b) = xc.storage() {
            let xv = &b.as_slice::<f32>()[xc.layout().offset..][..g.nc * g.h * g.w];
            // Every output element is written by `max_planes` or `avg_planes`.
            let mut buf = CpuBuffer::for_overwrite("pool2d", g.nc * g.oh * g.ow * 4)?;
            pool_values(xv, g, buf.as_mut_slice::<f32>());
            let storage = Storage::Cpu(Arc::new(buf));
            return Ok(Tensor::from_parts(storage, Layout::contiguous(shape), DType::F32));
        }
    }
    let mut out = mpsrt_runtime::host_vec("pool2d", g.nc * g.oh * g.ow, 0.0)?;
    pool_values(&x.to_f64_vec()?, g, &mut out);
    super::conv::from_f64(&out, shape, x.dtype())
}

/// Max pooling with indices (Paddle's `return_mask`): values in `x`'s dtype and i32 flat
/// `h·W + w` indices of each window's first maximum (the first NaN where the window holds one),
/// scanning the window row-major in f64.
pub(crate) fn max_pool2d_indices(
    x: &Tensor,
    shape: &[usize],
    g: &PoolGeom,
) -> Result<(Tensor, Tensor)> {
    let xv = x.to_f64_vec()?;
    let (h, w) = (g.h as isize, g.w as isize);
    let rows: Vec<(Vec<isize>, usize)> = (0..g.oh).map(|o| axis(g, 0, o, h)).collect();
    let cols: Vec<(Vec<isize>, usize)> = (0..g.ow).map(|o| axis(g, 1, o, w)).collect();
    let n = g.nc * g.oh * g.ow;
    let mut vals = mpsrt_runtime::host_vec("max_pool2d", n, 0.0)?;
    let mut idx = mpsrt_runtime::host_vec("max_pool2d", n, 0.0)?;
    let mut k = 0;
    for nc in 0..g.nc {
        let plane = &xv[nc * g.h * g.w..(nc + 1) * g.h * g.w];
        for (rs, _) in &rows {
            for (cs, _) in &cols {
                let (mut best, mut bi, mut nan) = (f64::NEG_INFINITY, -1isize, false);
                for &r in rs {
                    for &c in cs {
                        let v = plane[(r * w + c) as usize];
                        if bi < 0 || (!nan && (v.is_nan() || v > best)) {
                            (best, bi) = (v, r * w + c);
                        }
                        nan |= v.is_nan();
                    }
                }
                (vals[k], idx[k]) = (best, bi as f64);
                k += 1;
            }
        }
    }
    Ok((
        super::conv::from_f64(&vals, shape, x.dtype())?,
        super::conv::from_f64(&idx, shape, DType::I32)?,
    ))
}

/// An element type pooling reads and writes: f64 for the reference route, f32 for f32 tensors.
trait Elem: Copy + Into<f64> + PartialOrd + Send + Sync {
    const NEG_INF: Self;
    fn from_f64(v: f64) -> Self;
    fn is_nan(self) -> bool;
}

impl Elem for f64 {
    const NEG_INF: Self = f64::NEG_INFINITY;
    fn from_f64(v: f64) -> Self {
        v
    }
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
}

impl Elem for f32 {
    const NEG_INF: Self = f32::NEG_INFINITY;
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
}

fn pool_values<T: Elem>(xv: &[T], g: &PoolGeom, out: &mut [T]) {
    let (h, w) = (g.h as isize, g.w as isize);
    // Windows are separable: each output row's input rows and each output column's input
    // columns (with their padded extents) are computed once, not per output element.
    let rows: Vec<(Vec<isize>, usize)> = (0..g.oh).map(|o| axis(g, 0, o, h)).collect();
    let cols: Vec<(Vec<isize>, usize)> = (0..g.ow).map(|o| axis(g, 1, o, w)).collect();
    let per_plane = g.oh * g.ow;
    let out = &mut out[..g.nc * per_plane];
    // Planes are independent: large inputs are split into plane blocks on the worker pool.
    let t = if g.nc * g.h * g.w >= 1 << 16 { super::threads().min(g.nc) } else { 1 };
    let planes_per = g.nc.div_ceil(t.max(1)).max(1);
    let (rows, cols) = (&rows, &cols);
    super::par_chunks(out, planes_per * per_plane.max(1), |i, chunk| {
        if g.max {
            max_planes(xv, g, rows, cols, i * planes_per, chunk)
        } else {
            avg_planes(xv, g, rows, cols, i * planes_per, chunk)
        }
    });
}

/// Average-pools planes `nc0..` into `out` (whole output planes): each window summed in f64.
fn avg_planes<T: Elem>(
    xv: &[T],
    g: &PoolGeom,
    rows: &[(Vec<isize>, usize)],
    cols: &[(Vec<isize>, usize)],
    nc0: usize,
    out: &mut [T],
) {
    let w = g.w as isize;
    let mut k = 0;
    for nc in nc0..nc0 + out.len() / (g.oh * g.ow).max(1) {
        let plane = &xv[nc * g.h * g.w..(nc + 1) * g.h * g.w];
        for (rs, ph) in rows {
            for (cs, pw) in cols {
                let mut sum = 0.0;
                for &r in rs {
                    for &c in cs {
                        sum += plane[(r * w + c) as usize].into();
                    }
                }
                let divisor = if g.adaptive || !g.count_include_pad {
                    (rs.len() * cs.len()) as f64
                } else {
                    (ph * pw) as f64
                };
                out[k] = T::from_f64(sum / divisor);
                k += 1;
            }
        }
    }
}

/// NaN-propagating `max(m, v)`: once `m` is NaN it stays NaN (`v > NaN` is false).
#[inline(always)]
fn max_nan<T: Elem>(m: T, v: T) -> T {
    if v > m || v.is_nan() {
        v
    } else {
        m
    }
}

/// Max-pools planes `nc0..` into `out` (whole output planes, plain or adaptive windows),
/// separably: per output row the window's input rows are
/// reduced to one row first (whole contiguous rows, a loop that vectorizes), then each output
/// column takes the max of its window's columns of that row. Per element the same comparisons
/// as scanning each window, without the per-window bookkeeping (ResNet's and DenseNet's stem max
/// pool on the 2-core VM: 0.92 → 0.54 ms in `mpsrt bench --profile`).
fn max_planes<T: Elem>(
    xv: &[T],
    g: &PoolGeom,
    rows: &[(Vec<isize>, usize)],
    cols: &[(Vec<isize>, usize)],
    nc0: usize,
    out: &mut [T],
) {
    let mut line = vec![T::NEG_INF; g.w];
    let mut k = 0;
    for nc in nc0..nc0 + out.len() / (g.oh * g.ow).max(1) {
        let plane = &xv[nc * g.h * g.w..(nc + 1) * g.h * g.w];
        for (rs, _) in rows {
            line.fill(T::NEG_INF);
            for &r in rs {
                let src = &plane[r as usize * g.w..][..g.w];
                line.iter_mut().zip(src).for_each(|(m, &v)| *m = max_nan(*m, v));
            }
            for (cs, _) in cols {
                out[k] = cs.iter().fold(T::NEG_INF, |m, &c| max_nan(m, line[c as usize]));
                k += 1;
            }
        }
    }
}

/// Output index `o` along axis `i` (0 rows, 1 columns, input length `len`): the in-bounds input
/// indices of its window and, for average pooling, the window's extent clipped to input +
/// padding (PyTorch's `count_include_pad` divisor).
fn axis(g: &PoolGeom, i: usize, o: usize, len: isize) -> (Vec<isize>, usize) {
    let out_len = if i == 0 { g.oh } else { g.ow };
    if g.adaptive {
        let n = len as usize;
        let (lo, hi) = (o * n / out_len, ((o + 1) * n).div_ceil(out_len));
        let v: Vec<isize> = (lo as isize..hi as isize).collect();
        let k = v.len();
        return (v, k);
    }
    let start = (o * g.s[i]) as isize - g.p[i] as isize;
    if g.max {
        let v: Vec<isize> = (0..g.k[i])
            .map(|k| start + (k * g.d[i]) as isize)
            .filter(|&v| v >= 0 && v < len)
            .collect();
        return (v, 1);
    }
    // avg: PyTorch clips the window to input + padding for the padded count, then to the input.
    let hi = (start + g.k[i] as isize).min(len + g.p[i] as isize);
    ((start.max(0)..hi.min(len)).collect(), (hi - start).max(0) as usize)
}
