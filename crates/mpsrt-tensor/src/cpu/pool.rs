//! CPU reference for 2-D pooling: every window scanned in f64 with PyTorch's index and divisor
//! rules (see `pool.rs`), NaN-propagating max.

use crate::pool::PoolGeom;
use crate::Tensor;
use mpsrt_core::Result;

/// Pool `x` (N, C, H, W) into `shape` (N, C, OH, OW).
pub(crate) fn pool2d(x: &Tensor, shape: &[usize], g: &PoolGeom) -> Result<Tensor> {
    let xv = x.to_f64_vec()?;
    let (h, w) = (g.h as isize, g.w as isize);
    let mut out = Vec::with_capacity(g.nc * g.oh * g.ow);
    for nc in 0..g.nc {
        let plane = &xv[nc * g.h * g.w..(nc + 1) * g.h * g.w];
        for oh in 0..g.oh {
            for ow in 0..g.ow {
                let (rows, cols, divisor) = window(g, oh, ow, h, w);
                let mut best = f64::NEG_INFINITY;
                let mut sum = 0.0;
                let mut nan = false;
                for &r in &rows {
                    for &c in &cols {
                        let v = plane[(r * w + c) as usize];
                        nan |= v.is_nan();
                        best = best.max(v);
                        sum += v;
                    }
                }
                out.push(if !g.max {
                    sum / divisor
                } else if nan {
                    f64::NAN
                } else {
                    best
                });
            }
        }
    }
    Ok(super::conv::from_f64(&out, shape, x.dtype()))
}

/// The in-bounds rows and columns of output (oh, ow)'s window, and the avg divisor.
fn window(g: &PoolGeom, oh: usize, ow: usize, h: isize, w: isize) -> (Vec<isize>, Vec<isize>, f64) {
    if g.adaptive {
        let span = |o: usize, len: usize, out: usize| {
            let lo = o * len / out;
            let hi = ((o + 1) * len).div_ceil(out);
            (lo as isize..hi as isize).collect::<Vec<_>>()
        };
        let rows = span(oh, g.h, g.oh);
        let cols = span(ow, g.w, g.ow);
        let d = (rows.len() * cols.len()) as f64;
        return (rows, cols, d);
    }
    let start = |o: usize, i: usize| (o * g.s[i]) as isize - g.p[i] as isize;
    if g.max {
        let axis = |o: usize, i: usize, len: isize| {
            (0..g.k[i])
                .map(|k| start(o, i) + (k * g.d[i]) as isize)
                .filter(|&v| v >= 0 && v < len)
                .collect::<Vec<_>>()
        };
        return (axis(oh, 0, h), axis(ow, 1, w), 1.0);
    }
    // avg: PyTorch clips the window to input + padding for the padded count, then to the input.
    let axis = |o: usize, i: usize, len: isize| {
        let lo = start(o, i);
        let hi = (lo + g.k[i] as isize).min(len + g.p[i] as isize);
        let padded = hi - lo;
        ((lo.max(0)..hi.min(len)).collect::<Vec<_>>(), padded)
    };
    let (rows, ph) = axis(oh, 0, h);
    let (cols, pw) = axis(ow, 1, w);
    let d = if g.count_include_pad { (ph * pw) as f64 } else { (rows.len() * cols.len()) as f64 };
    (rows, cols, d)
}
