//! `Resize` (and `Upsample`) as separable per-axis interpolation, following ONNX's reference
//! implementation tap for tap.
//!
//! Every supported mode (nearest, linear, cubic, with antialias and `exclude_outside`) is a
//! weighted sum of a few source elements along each resized axis, and the source indices and
//! weights depend only on the shapes and attributes. So the host computes, per axis, `T` index
//! vectors and `T` weight vectors (T = 1 for nearest, 2 linear, 4 cubic, more with antialias),
//! and the device does `y = Σ_k index_select(x, axis, idx_k) * w_k`: gathers and fused
//! multiply-adds, axis after axis.

use crate::ops::{Ctx, OpEntry};
use crate::reduce::to_out;
use mpsrt_core::{DType, Place, Result};
use mpsrt_graph::{CoordTransform, NearestRounding, Node, Op, ResizeAttrs, ResizeAxis, ResizeMode};
use mpsrt_tensor::{self as t, BinaryFn as B, Expr, Scalar, Tensor, VType};

/// The op table entries of this family.
pub(crate) fn entries() -> Vec<OpEntry> {
    vec![OpEntry { name: "Resize", run: resize, host_from: usize::MAX }]
}

/// Source taps of one axis: `idx[k][o]` and `w[k][o]` for tap `k` of output position `o`;
/// `outside[o]` marks tf_crop_and_resize points outside the input (extrapolated).
struct Taps {
    idx: Vec<Vec<i64>>,
    w: Vec<Vec<f32>>,
    outside: Vec<bool>,
}

/// Source coordinate of output position `o` (ONNX's `coordinate_transformation_mode`).
fn source_coord(coord: CoordTransform, o: f64, ax: &ResizeAxis, len_in: usize) -> f64 {
    let (scale, len_out) = (ax.scale, ax.out);
    let out_w = scale * len_in as f64;
    let span = len_in as f64 - 1.0;
    match coord {
        CoordTransform::TfCropAndResize => {
            let (r0, r1) = ax.roi;
            let x = if out_w == 1.0 {
                (r1 - r0) * span / 2.0
            } else {
                o * (r1 - r0) * span / (out_w - 1.0)
            };
            x + r0 * span
        }
        CoordTransform::AlignCorners => {
            if out_w == 1.0 {
                0.0
            } else {
                o * (len_in as f64 - 1.0) / (out_w - 1.0)
            }
        }
        CoordTransform::Asymmetric => o / scale,
        CoordTransform::PytorchHalfPixel => {
            if out_w == 1.0 {
                -0.5
            } else {
                (o + 0.5) / scale - 0.5
            }
        }
        CoordTransform::HalfPixel => (o + 0.5) / scale - 0.5,
        CoordTransform::HalfPixelSymmetric => {
            let adjustment = len_out as f64 / out_w;
            let center = len_in as f64 / 2.0;
            center * (1.0 - adjustment) + (o + 0.5) / scale - 0.5
        }
    }
}

/// The interpolation weights for `ratio` in (0, 1] (the reference's `get_coeffs`).
fn coeffs(a: &ResizeAttrs, ratio: f64, scale: f64) -> Vec<f64> {
    let big_a = a.cubic_coeff_a as f64;
    match a.mode {
        ResizeMode::Nearest => {
            if ratio == 1.0 {
                return vec![0.0, 1.0];
            }
            let right = match a.nearest {
                NearestRounding::RoundPreferFloor => ratio > 0.5,
                NearestRounding::RoundPreferCeil => ratio >= 0.5,
                NearestRounding::Floor => false,
                NearestRounding::Ceil => true,
            };
            if right {
                vec![0.0, 1.0]
            } else {
                vec![1.0, 0.0]
            }
        }
        ResizeMode::Linear if a.antialias => {
            let s = scale.min(1.0);
            let start = (-1.0 / s).floor() as i64 + 1;
            let n = 2 - 2 * start;
            let c: Vec<f64> = (start..start + n)
                .map(|i| (1.0 - ((i as f64 - ratio) * s).abs()).clamp(0.0, 1.0))
                .collect();
            let sum: f64 = c.iter().sum();
            c.into_iter().map(|v| v / sum).collect()
        }
        ResizeMode::Linear => vec![1.0 - ratio, ratio],
        ResizeMode::Cubic if a.antialias => {
            let s = scale.min(1.0);
            let cubic = |x: f64| {
                let x = x.abs();
                let (x2, x3) = (x * x, x * x * x);
                if x <= 1.0 {
                    (big_a + 2.0) * x3 - (big_a + 3.0) * x2 + 1.0
                } else if x < 2.0 {
                    big_a * x3 - 5.0 * big_a * x2 + 8.0 * big_a * x - 4.0 * big_a
                } else {
                    0.0
                }
            };
            let start = (-2.0 / s).floor() as i64 + 1;
            let c: Vec<f64> = (start..2 - start).map(|i| cubic(s * (i as f64 - ratio))).collect();
            let sum: f64 = c.iter().sum();
            c.into_iter().map(|v| v / sum).collect()
        }
        ResizeMode::Cubic => {
            let (r, q) = (ratio, 1.0 - ratio);
            let far = |x: f64| {
                ((big_a * (x + 1.0) - 5.0 * big_a) * (x + 1.0) + 8.0 * big_a) * (x + 1.0)
                    - 4.0 * big_a
            };
            let near = |x: f64| ((big_a + 2.0) * x - (big_a + 3.0)) * x * x + 1.0;
            vec![far(r), near(r), near(q), far(q)]
        }
    }
}

/// Taps of one axis resized from `len_in` to `ax.out`.
fn axis_taps(a: &ResizeAttrs, len_in: usize, ax: &ResizeAxis) -> Taps {
    let (len_out, scale) = (ax.out, ax.scale);
    let mut idx: Vec<Vec<i64>> = Vec::new();
    let mut w: Vec<Vec<f32>> = Vec::new();
    let mut outside = vec![false; len_out];
    for o in 0..len_out {
        let x = source_coord(a.coord, o as f64, ax, len_in);
        if a.coord == CoordTransform::TfCropAndResize && (x < 0.0 || x > len_in as f64 - 1.0) {
            outside[o] = true;
        }
        // The reference prefers the neighbour left of x: ratio in (0, 1].
        let base = if x.fract() == 0.0 { x as i64 - 1 } else { x.floor() as i64 };
        let ratio = x - base as f64;
        let mut c = coeffs(a, ratio, scale);
        let n = c.len() as i64;
        // n nearest indices of the edge-padded axis (pad = ceil(n / 2) on each side).
        let pad = (n + 1) / 2;
        let lo = (base - n / 2 + 1).clamp(-pad, len_in as i64 + pad - n);
        let raw: Vec<i64> = (lo..lo + n).collect();
        if a.exclude_outside {
            for (k, &i) in raw.iter().enumerate() {
                if i < 0 || i >= len_in as i64 {
                    c[k] = 0.0;
                }
            }
            let sum: f64 = c.iter().sum();
            if sum != 0.0 {
                c.iter_mut().for_each(|v| *v /= sum);
            }
        }
        let mut taps: Vec<(i64, f64)> =
            raw.iter().map(|&i| i.clamp(0, len_in as i64 - 1)).zip(c).collect();
        if a.mode == ResizeMode::Nearest {
            taps.retain(|&(_, v)| v != 0.0);
        }
        for (k, (i, v)) in taps.into_iter().enumerate() {
            if idx.len() <= k {
                // Positions without this tap read element 0 with weight 0.
                idx.push(vec![0; len_out]);
                w.push(vec![0.0; len_out]);
            }
            idx[k][o] = i;
            w[k][o] = v as f32;
        }
    }
    Taps { idx, w, outside }
}

/// Whether the taps are the identity (one tap, `idx[o] = o`, weight 1).
fn is_identity(t: &Taps, len_in: usize) -> bool {
    !t.outside.contains(&true)
        && t.idx.len() == 1
        && t.idx[0].len() == len_in
        && t.idx[0].iter().enumerate().all(|(o, &i)| i == o as i64)
        && t.w[0].iter().all(|&v| v == 1.0)
}

fn resize(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::Resize(a) = &node.op else {
        return Err(ctx.err(node, "not Resize"));
    };
    let x = ctx.input(node, inputs, 0)?;
    let label = ctx.label(node);
    let wrap = |e| ctx.wrap(node, e);
    let out_shape = ctx.out_shape(node, 0)?;
    if out_shape.len() != x.ndim() {
        return Err(
            ctx.err(node, format!("output rank {} != input rank {}", out_shape.len(), x.ndim()))
        );
    }
    let nearest = a.mode == ResizeMode::Nearest;
    // Nearest keeps the dtype (pure gathers); interpolation computes in f32.
    let mut y = if nearest { x.clone() } else { x.astype(DType::F32).map_err(wrap)? };
    let plan = a.plan(x.shape()).map_err(wrap)?;
    // tf_crop_and_resize: 1 where every axis' source point is inside the input.
    let mut inside: Option<Tensor> = None;
    for ax in 0..x.ndim() {
        let (len_in, len_out) = (x.shape()[ax], out_shape[ax]);
        if len_in == 0 || len_out == 0 {
            return Err(
                ctx.err(node, format!("cannot resize axis {ax} from {len_in} to {len_out}"))
            );
        }
        if plan[ax].out != len_out {
            return Err(
                ctx.err(node, format!("planned size {} != {len_out} on axis {ax}", plan[ax].out))
            );
        }
        let taps = axis_taps(a, len_in, &plan[ax]);
        if is_identity(&taps, len_in) {
            continue;
        }
        let mut wshape = vec![1usize; x.ndim()];
        wshape[ax] = len_out;
        if taps.outside.contains(&true) {
            let v: Vec<f32> = taps.outside.iter().map(|&o| (!o) as u8 as f32).collect();
            let m = Tensor::from_slice(&v, &wshape, y.place())?;
            inside = Some(match inside {
                None => m,
                Some(prev) => t::multiply(&prev, &m).map_err(wrap)?,
            });
        }
        let mut acc: Option<Tensor> = None;
        for (idx, w) in taps.idx.iter().zip(&taps.w) {
            let idx = Tensor::from_slice(idx, &[len_out], Place::Cpu)?;
            let g = t::index_select(&y, ax as isize, &idx).map_err(wrap)?;
            if nearest {
                acc = Some(g);
                continue;
            }
            let wt = Tensor::from_slice(w, &wshape, y.place())?;
            let term = Expr::binary(B::Mul, Expr::input(0), Expr::input(1));
            acc = Some(match acc {
                None => t::fused_elementwise(&label, &[&g, &wt], DType::F32, term, &[])?,
                Some(s) => {
                    let e = Expr::binary(B::Add, Expr::input(2), term);
                    t::fused_elementwise(&label, &[&g, &wt, &s], DType::F32, e, &[])?
                }
            });
        }
        if let Some(v) = acc {
            y = v;
        }
    }
    if let Some(m) = inside {
        // y·m + e·(1 − m): extrapolated points take extrapolation_value.
        let yf = y.astype(DType::F32).map_err(wrap)?;
        let e = Expr::binary(
            B::Add,
            Expr::binary(B::Mul, Expr::input(0), Expr::input(1)),
            Expr::binary(
                B::Mul,
                Expr::Scalar(0, VType::Float),
                Expr::binary(B::Sub, Expr::Scalar(1, VType::Float), Expr::input(1)),
            ),
        );
        let s = [Scalar::F(a.extrapolation_value as f64), Scalar::F(1.0)];
        y = t::fused_elementwise(&label, &[&yf, &m], DType::F32, e, &s)?;
    }
    Ok(vec![to_out(ctx, node, 0, y)?])
}
