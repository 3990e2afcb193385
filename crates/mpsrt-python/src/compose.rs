//! `nn.functional` ops the library has no single kernel for, composed here from its tensor ops
//! (so both places run them, the GPU without a host round trip of the data):
//! `_C.embedding` (gather + a padding mask), `_C.dropout` (rand + compare + multiply) and
//! `_C.interpolate` (per spatial axis: index_select for nearest, two index_selects and a lerp for
//! linear, four index_selects weighted by Keys' cubic (a = -0.75) for bicubic). Only small per-axis index/weight tables are built on the host.

use crate::tensor::{wrap, PyTensor};
use crate::{IntoPy, PyRes};
use mpsrt_core::{DType, Error, Place, Result};
use mpsrt_tensor::{self as mt, Tensor};
use pyo3::prelude::*;

fn run(py: Python<'_>, op: &str, f: impl FnOnce() -> Result<Tensor> + Send) -> PyRes<PyTensor> {
    Ok(wrap(crate::guard::detach(py, op, f).py_err()?))
}

/// Rows of `weight` `[num, dim]` at `ids` (any shape, int32/int64); rows whose id equals
/// `padding_idx` (already made non-negative) come out as zeros, as Paddle's forward does.
///
/// With `max_norm`, each looked-up row whose `norm_type`-norm exceeds it is scaled by
/// `max_norm / (norm + 1e-7)` (torch's `embedding_renorm_`, which Paddle follows). The scaling
/// applies to the returned rows; the weight table itself is not rewritten (mpsrt tensors are
/// immutable), so it matches torch/Paddle's output but not their in-place weight update.
fn embedding_impl(
    ids: &Tensor,
    weight: &Tensor,
    padding_idx: Option<i64>,
    max_norm: Option<f64>,
    norm_type: f64,
) -> Result<Tensor> {
    let op = "embedding";
    if weight.ndim() != 2 {
        return Err(Error::shape(
            op,
            format!("weight must be [num_embeddings, embedding_dim], got {:?}", weight.shape()),
        ));
    }
    let mut out = mt::gather(weight, ids, 0).map_err(|e| Error::new(e.kind, op, e.message))?;
    if let Some(max) = max_norm {
        if max.is_nan() || max < 0.0 || norm_type.is_nan() || norm_type <= 0.0 {
            return Err(Error::invalid(
                op,
                format!("max_norm ({max}) must be >= 0 and norm_type ({norm_type}) > 0"),
            ));
        }
        let dt = weight.dtype().to_float();
        let rows = out.astype(DType::F32)?;
        let norm = if norm_type == 2.0 {
            mt::norm(&rows, Some(&[-1]), true)?
        } else if norm_type.is_infinite() {
            mt::max(&mt::abs(&rows)?, Some(&[-1]), true)?
        } else {
            let p = mt::pow_scalar(&mt::abs(&rows)?, norm_type)?;
            mt::pow_scalar(&mt::sum(&p, Some(&[-1]), true)?, 1.0 / norm_type)?
        };
        let scale = mt::rdivide_scalar(max, &mt::add_scalar(&norm, 1e-7)?)?;
        let one = mt::ones(&[1], DType::F32, norm.place())?;
        let scale = mt::where_(&mt::greater_scalar(&norm, max)?, &scale, &one)?;
        out = mt::multiply(&rows, &scale)?.astype(dt)?;
    }
    let Some(p) = padding_idx else { return Ok(out) };
    let keep = mt::not_equal_scalar(&ids.to(weight.place())?, p)?;
    mt::multiply(&out, &keep.unsqueeze(-1)?.astype(weight.dtype())?)
}

#[pyfunction]
#[pyo3(signature = (ids, weight, padding_idx, max_norm=None, norm_type=2.0))]
fn embedding(
    py: Python<'_>,
    ids: &PyTensor,
    weight: &PyTensor,
    padding_idx: Option<i64>,
    max_norm: Option<f64>,
    norm_type: f64,
) -> PyRes<PyTensor> {
    let (i, w) = (ids.inner.clone(), weight.inner.clone());
    run(py, "embedding", move || embedding_impl(&i, &w, padding_idx, max_norm, norm_type))
}

/// Training-mode dropout: zero each element with probability `p` (one mask value per position
/// of `mask_shape`, which broadcasts to `x` — Paddle's `axis`), scaling the kept ones by
/// `1 / (1 - p)` when `upscale`.
fn dropout_impl(x: &Tensor, p: f64, mask_shape: &[usize], upscale: bool) -> Result<Tensor> {
    let op = "dropout";
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::invalid(op, format!("p must be in [0, 1], got {p}")));
    }
    let dt = x.dtype().to_float();
    let x = x.astype(dt)?;
    if p == 1.0 {
        return mt::multiply_scalar(&x, 0.0);
    }
    let u = mt::rand(mask_shape, DType::F32, x.place())?;
    let keep = mt::greater_equal_scalar(&u, p)?.astype(dt)?;
    let y = mt::multiply(&x, &keep).map_err(|e| Error::new(e.kind, op, e.message))?;
    if upscale {
        mt::multiply_scalar(&y, 1.0 / (1.0 - p))?.astype(dt)
    } else {
        Ok(y)
    }
}

#[pyfunction]
#[pyo3(signature = (x, p, mask_shape, upscale))]
fn dropout(
    py: Python<'_>,
    x: &PyTensor,
    p: f64,
    mask_shape: Vec<usize>,
    upscale: bool,
) -> PyRes<PyTensor> {
    let x = x.inner.clone();
    run(py, "dropout", move || dropout_impl(&x, p, &mask_shape, upscale))
}

/// How one spatial axis is resampled.
#[derive(Clone, Copy)]
struct AxisMap {
    len: usize,
    out: usize,
    /// `1 / scale_factor` when the caller gave one (Paddle uses it instead of in/out).
    inv_scale: Option<f64>,
    align_corners: bool,
    align_mode: u32,
}

impl AxisMap {
    fn ratio(self) -> f64 {
        if self.align_corners {
            if self.out > 1 {
                (self.len as f64 - 1.0) / (self.out as f64 - 1.0)
            } else {
                0.0
            }
        } else {
            self.inv_scale.unwrap_or(self.len as f64 / self.out as f64)
        }
    }

    /// Nearest source index per output index (Paddle: floor, or round with align_corners).
    fn nearest(self) -> Vec<i64> {
        let r = self.ratio();
        let last = self.len as i64 - 1;
        (0..self.out)
            .map(|i| {
                let s = r * i as f64;
                let s = if self.align_corners { (s + 0.5).floor() } else { s.floor() };
                (s as i64).clamp(0, last)
            })
            .collect()
    }

    /// Bicubic taps per output index: the four source indices `floor(src) - 1 ..= + 2`
    /// (clamped to the input) and their weights from Keys' cubic convolution with `a = -0.75`
    /// (PyTorch's and Paddle's `upsample_bicubic2d`). The source coordinate is
    /// `i · (len - 1) / (out - 1)` with align_corners, else `(i + 0.5) · ratio - 0.5`, not
    /// clamped at 0 (as both frameworks do for cubic).
    fn cubic(self) -> ([Vec<i64>; 4], [Vec<f32>; 4]) {
        const A: f64 = -0.75;
        let near = |x: f64| ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
        let far = |x: f64| ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
        let r = self.ratio();
        let last = self.len as i64 - 1;
        let mut idx: [Vec<i64>; 4] = Default::default();
        let mut w: [Vec<f32>; 4] = Default::default();
        for i in 0..self.out {
            let src = if self.align_corners { r * i as f64 } else { r * (i as f64 + 0.5) - 0.5 };
            let f = src.floor();
            let t = src - f;
            let ws = [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)];
            for j in 0..4 {
                idx[j].push((f as i64 - 1 + j as i64).clamp(0, last));
                w[j].push(ws[j] as f32);
            }
        }
        (idx, w)
    }

    /// `(i0, i1, lambda)` per output index: the value is `x[i0] + (x[i1] - x[i0]) * lambda`.
    fn linear(self) -> (Vec<i64>, Vec<i64>, Vec<f32>) {
        let r = self.ratio();
        let last = self.len as i64 - 1;
        let half_pixel = !self.align_corners && self.align_mode == 0;
        let mut i0 = Vec::with_capacity(self.out);
        let mut i1 = Vec::with_capacity(self.out);
        let mut w = Vec::with_capacity(self.out);
        for i in 0..self.out {
            let src = if half_pixel { (r * (i as f64 + 0.5) - 0.5).max(0.0) } else { r * i as f64 };
            let a = (src.floor() as i64).clamp(0, last);
            i0.push(a);
            i1.push((a + 1).min(last));
            w.push((src - a as f64).clamp(0.0, 1.0) as f32);
        }
        (i0, i1, w)
    }
}

fn index_tensor(v: &[i64]) -> Result<Tensor> {
    Tensor::from_slice(v, &[v.len()], Place::Cpu)
}

/// Resample the spatial dims (2..) of `x` to `size` with `"nearest"` or `"linear"` (linear,
/// bilinear and trilinear are this one mode over 1, 2 or 3 axes).
fn interpolate_impl(
    x: &Tensor,
    size: &[usize],
    scales: Option<&[f64]>,
    mode: &str,
    align_corners: bool,
    align_mode: u32,
) -> Result<Tensor> {
    let op = "interpolate";
    if x.ndim() < 3 || size.len() != x.ndim() - 2 {
        return Err(Error::shape(
            op,
            format!(
                "expected input [N, C, spatial...] and one output size per spatial dim, got \
                 input {:?} and size {size:?}",
                x.shape()
            ),
        ));
    }
    if let Some(s) = scales {
        if s.len() != size.len() || s.iter().any(|&v| v.is_nan() || v <= 0.0) {
            return Err(Error::invalid(
                op,
                format!("scale_factor {s:?} must be positive, one per spatial dim"),
            ));
        }
    }
    // The per-axis host tables are O(size); a runaway scale_factor must fail here, not abort
    // the process in a huge allocation. 2^24 per spatial dim is far beyond any real image.
    const MAX_DIM: usize = 1 << 24;
    if size.iter().any(|&s| s > MAX_DIM) {
        return Err(Error::invalid(
            op,
            format!("output size {size:?} exceeds {MAX_DIM} along a spatial dim"),
        ));
    }
    if size.contains(&0) || x.shape()[2..].contains(&0) {
        return Err(Error::shape(
            op,
            format!("input {:?} and output size {size:?} must be non-empty", x.shape()),
        ));
    }
    let (linear, cubic) = match mode {
        "nearest" => (false, false),
        "linear" | "bilinear" | "trilinear" => (true, false),
        "bicubic" => (true, true),
        other => {
            return Err(Error::unsupported(
                op,
                format!(
                    "mode {other:?} (supported: nearest, linear, bilinear, trilinear, bicubic, \
                     area)"
                ),
            ))
        }
    };
    let dt = x.dtype();
    let mut t = if linear { x.astype(dt.to_float())? } else { x.clone() };
    for (k, &out) in size.iter().enumerate() {
        let ax = 2 + k;
        let len = t.shape()[ax];
        let inv_scale = scales.map(|s| 1.0 / s[k]);
        let m = AxisMap { len, out, inv_scale, align_corners, align_mode };
        if len == out && inv_scale.is_none_or(|r| r == 1.0) {
            continue;
        }
        let axis = ax as isize;
        if !linear {
            t = mt::index_select(&t, axis, &index_tensor(&m.nearest())?)?;
            continue;
        }
        if cubic {
            // Σ_j x[idx_j] · w_j over the four taps, one index_select per tap.
            let (idx, ws) = m.cubic();
            let mut wshape = vec![1usize; t.ndim()];
            wshape[ax] = out;
            let mut acc: Option<Tensor> = None;
            for (ij, wj) in idx.iter().zip(&ws) {
                let tap = mt::index_select(&t, axis, &index_tensor(ij)?)?;
                let term = mt::multiply(&tap, &Tensor::from_slice(wj, &wshape, t.place())?)?;
                acc = Some(match acc {
                    Some(a) => mt::add(&a, &term)?,
                    None => term,
                });
            }
            t = acc.unwrap_or(t).astype(dt.to_float())?;
            continue;
        }
        let (i0, i1, w) = m.linear();
        let a = mt::index_select(&t, axis, &index_tensor(&i0)?)?;
        let b = mt::index_select(&t, axis, &index_tensor(&i1)?)?;
        let mut wshape = vec![1usize; t.ndim()];
        wshape[ax] = out;
        let w = Tensor::from_slice(&w, &wshape, t.place())?;
        let d = mt::multiply(&mt::subtract(&b, &a)?, &w)?;
        t = mt::add(&a, &d)?.astype(dt.to_float())?;
    }
    Ok(t)
}

#[pyfunction]
#[pyo3(signature = (x, size, scales, mode, align_corners, align_mode))]
fn interpolate(
    py: Python<'_>,
    x: &PyTensor,
    size: Vec<usize>,
    scales: Option<Vec<f64>>,
    mode: &str,
    align_corners: bool,
    align_mode: u32,
) -> PyRes<PyTensor> {
    let (x, mode) = (x.inner.clone(), mode.to_string());
    run(py, "interpolate", move || {
        interpolate_impl(&x, &size, scales.as_deref(), &mode, align_corners, align_mode)
    })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(embedding, m)?)?;
    m.add_function(wrap_pyfunction!(dropout, m)?)?;
    m.add_function(wrap_pyfunction!(interpolate, m)?)?;
    Ok(())
}
