//! Backward kernels of elementwise ops, activations, matmul, softmax, reductions and
//! `cross_entropy_with_softmax` (what `loss.backward()` of an MLP launches). mpsrt has no
//! autograd of its own, so each gradient is composed from the forward ops of mpsrt-tensor (the
//! same GPU kernels as the rest of mpsrt); the formulas follow Paddle's CPU kernels, against
//! which `python/tests/test_paddle_train.py` checks them. Signatures follow Paddle 3.3's
//! `paddle/phi/kernels/*_grad_kernel.h` exactly (the variadic entry point depends on it).

use super::{kernel, vty, Call, KernelDef};
use mpsrt_core::{DType, Error, Place, Result};
use mpsrt_tensor::{self as mt, Tensor};
use std::ffi::c_void;

const F: &[DType] = &[DType::F32, DType::F16];

pub(super) fn place() -> Place {
    Place::Gpu(mpsrt_runtime::current_device())
}

/// Sum the broadcast gradient `g` down to `shape` (the input's shape before broadcasting):
/// leading dims that the input lacked and dims where the input had size 1.
pub(super) fn reduce_to(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let lead = g.ndim().saturating_sub(shape.len());
    let mut axes: Vec<isize> = (0..lead as isize).collect();
    for (i, &d) in shape.iter().enumerate() {
        if d == 1 && g.shape()[lead + i] != 1 {
            axes.push((lead + i) as isize);
        }
    }
    let r = if axes.is_empty() { g.clone() } else { mt::sum(g, Some(&axes), true)? };
    let dims: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
    r.reshape(&dims)
}

// --- elementwise binary ops: (x, y, dout, axis) -> (dx, dy) ------------------------------

fn check_axis(c: &Call, i: usize) -> Result<()> {
    let axis = c.int(i);
    if axis != -1 {
        let (x, y) = (c.in_shape(0)?, c.in_shape(1)?);
        if x.len() != y.len() && !x.is_empty() && !y.is_empty() {
            return Err(Error::unsupported(
                c.name,
                format!("legacy broadcast axis {axis} (only -1, NumPy broadcasting, is supported)"),
            ));
        }
    }
    Ok(())
}

/// `add_grad` / `subtract_grad`: `x` and `y` come without memory (shapes only).
fn add_sub_grad(c: &Call, sign: f64) -> Result<()> {
    check_axis(c, 0)?;
    let (xs, ys, g) = (c.in_shape(0)?, c.in_shape(1)?, c.input(2)?);
    if c.wants(0) {
        c.store(0, &reduce_to(&g, &xs)?)?;
    }
    if c.wants(1) {
        let dy = reduce_to(&g, &ys)?;
        c.store(1, &if sign < 0.0 { mt::neg(&dy)? } else { dy })?;
    }
    Ok(())
}

fn add_grad(c: &Call) -> Result<()> {
    add_sub_grad(c, 1.0)
}
fn subtract_grad(c: &Call) -> Result<()> {
    add_sub_grad(c, -1.0)
}

fn multiply_grad(c: &Call) -> Result<()> {
    check_axis(c, 0)?;
    let (x, y, g) = (c.input(0)?, c.input(1)?, c.input(2)?);
    if c.wants(0) {
        c.store(0, &reduce_to(&mt::multiply(&g, &y)?, x.shape())?)?;
    }
    if c.wants(1) {
        c.store(1, &reduce_to(&mt::multiply(&g, &x)?, y.shape())?)?;
    }
    Ok(())
}

/// `divide_grad(x, y, out, dout, axis)`: dx = dout / y, dy = -dout · out / y.
fn divide_grad(c: &Call) -> Result<()> {
    check_axis(c, 0)?;
    let (x, y, out, g) = (c.input(0)?, c.input(1)?, c.input(2)?, c.input(3)?);
    let gy = mt::divide(&g, &y)?;
    if c.wants(0) {
        c.store(0, &reduce_to(&gy, x.shape())?)?;
    }
    if c.wants(1) {
        c.store(1, &reduce_to(&mt::neg(&mt::multiply(&gy, &out)?)?, y.shape())?)?;
    }
    Ok(())
}

// --- activations ------------------------------------------------------------------------

/// `relu_grad(out, dout)`: dout where out > 0.
fn relu_grad(c: &Call) -> Result<()> {
    let (out, g) = (c.input(0)?, c.input(1)?);
    let m = mt::greater_scalar(&out, 0.0)?.astype(g.dtype())?;
    c.store(0, &mt::multiply(&g, &m)?)
}

/// `sigmoid_grad(out, dout)`: dout · out · (1 - out).
fn sigmoid_grad(c: &Call) -> Result<()> {
    let (out, g) = (c.input(0)?, c.input(1)?);
    let d = mt::multiply(&out, &mt::rsubtract_scalar(1.0, &out)?)?;
    c.store(0, &mt::multiply(&g, &d)?)
}

/// `tanh_grad(out, dout)`: dout · (1 - out²).
fn tanh_grad(c: &Call) -> Result<()> {
    let (out, g) = (c.input(0)?, c.input(1)?);
    let d = mt::rsubtract_scalar(1.0, &mt::multiply(&out, &out)?)?;
    c.store(0, &mt::multiply(&g, &d)?)
}

/// `gelu_grad(x, dout, approximate)`: exact Φ(x) + x·φ(x), or the derivative of the tanh form.
fn gelu_grad(c: &Call) -> Result<()> {
    let (x, g) = (c.input(0)?, c.input(1)?);
    let d = if c.bool(0) {
        let k = (2.0 / std::f64::consts::PI).sqrt();
        let x2 = mt::multiply(&x, &x)?;
        let u = mt::multiply_scalar(
            &mt::multiply(&x, &mt::add_scalar(&mt::multiply_scalar(&x2, 0.044715)?, 1.0)?)?,
            k,
        )?;
        let t = mt::tanh(&u)?;
        let du = mt::multiply_scalar(
            &mt::add_scalar(&mt::multiply_scalar(&x2, 3.0 * 0.044715)?, 1.0)?,
            k,
        )?;
        let left = mt::multiply_scalar(&mt::add_scalar(&t, 1.0)?, 0.5)?;
        let sech2 = mt::rsubtract_scalar(1.0, &mt::multiply(&t, &t)?)?;
        let right = mt::multiply_scalar(&mt::multiply(&mt::multiply(&x, &sech2)?, &du)?, 0.5)?;
        mt::add(&left, &right)?
    } else {
        let cdf = mt::multiply_scalar(
            &mt::add_scalar(
                &mt::erf(&mt::multiply_scalar(&x, std::f64::consts::FRAC_1_SQRT_2)?)?,
                1.0,
            )?,
            0.5,
        )?;
        let pdf = mt::multiply_scalar(
            &mt::exp(&mt::multiply_scalar(&mt::multiply(&x, &x)?, -0.5)?)?,
            1.0 / (2.0 * std::f64::consts::PI).sqrt(),
        )?;
        mt::add(&cdf, &mt::multiply(&x, &pdf)?)?
    };
    c.store(0, &mt::multiply(&g, &d)?)
}

/// `silu_grad(x, out, dout)`: dout · s · (1 + x · (1 - s)), s = sigmoid(x).
fn silu_grad(c: &Call) -> Result<()> {
    let (x, g) = (c.input(0)?, c.input(2)?);
    let s = mt::sigmoid(&x)?;
    let d = mt::multiply(
        &s,
        &mt::add_scalar(&mt::multiply(&x, &mt::rsubtract_scalar(1.0, &s)?)?, 1.0)?,
    )?;
    c.store(0, &mt::multiply(&g, &d)?)
}

/// `leaky_relu_grad(x, dout, alpha)`.
fn leaky_relu_grad(c: &Call) -> Result<()> {
    let (x, g) = (c.input(0)?, c.input(1)?);
    let pos = mt::greater_scalar(&x, 0.0)?;
    c.store(0, &mt::where_(&pos, &g, &mt::multiply_scalar(&g, c.float(0))?)?)
}

fn square(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    c.store(0, &mt::multiply(&x, &x)?)
}

/// `square_grad(x, dout)`: 2 · x · dout.
fn square_grad(c: &Call) -> Result<()> {
    let (x, g) = (c.input(0)?, c.input(1)?);
    c.store(0, &mt::multiply_scalar(&mt::multiply(&x, &g)?, 2.0)?)
}

/// `exp_grad(out, dout)`.
fn exp_grad(c: &Call) -> Result<()> {
    c.store(0, &mt::multiply(&c.input(0)?, &c.input(1)?)?)
}

/// `log_grad(x, dout)`.
fn log_grad(c: &Call) -> Result<()> {
    c.store(0, &mt::divide(&c.input(1)?, &c.input(0)?)?)
}

/// `sqrt_grad(out, dout)`: dout / (2 · out).
fn sqrt_grad(c: &Call) -> Result<()> {
    let (out, g) = (c.input(0)?, c.input(1)?);
    c.store(0, &mt::divide(&g, &mt::multiply_scalar(&out, 2.0)?)?)
}

/// `abs_grad(x, dout)`: dout · sign(x).
fn abs_grad(c: &Call) -> Result<()> {
    let (x, g) = (c.input(0)?, c.input(1)?);
    c.store(0, &mt::multiply(&g, &mt::sign(&x)?)?)
}

// --- softmax ----------------------------------------------------------------------------

/// `softmax_grad(out, dout, axis)`: out · (dout - Σ dout·out).
fn softmax_grad(c: &Call) -> Result<()> {
    let (out, g) = (c.input(0)?, c.input(1)?);
    if out.ndim() == 0 {
        return c.store(0, &mt::full(&[], 0.0, out.dtype(), place())?);
    }
    let ax = [c.int(0) as isize];
    let s = mt::sum(&mt::multiply(&g, &out)?, Some(&ax), true)?;
    c.store(0, &mt::multiply(&out, &mt::subtract(&g, &s)?)?)
}

/// `log_softmax_grad(out, dout, axis)`: dout - exp(out) · Σ dout.
fn log_softmax_grad(c: &Call) -> Result<()> {
    let (out, g) = (c.input(0)?, c.input(1)?);
    if out.ndim() == 0 {
        return c.store(0, &mt::full(&[], 0.0, out.dtype(), place())?);
    }
    let ax = [c.int(0) as isize];
    let s = mt::sum(&g, Some(&ax), true)?;
    c.store(0, &mt::subtract(&g, &mt::multiply(&mt::exp(&out)?, &s)?)?)
}

// --- matmul -----------------------------------------------------------------------------

/// `matmul_grad(x, y, dout, transpose_x, transpose_y) -> (dx, dy)`, with 1-D operands and
/// batch broadcasting (the batch dims of a broadcast operand are summed).
fn matmul_grad(c: &Call) -> Result<()> {
    let (x0, y0, mut g) = (c.input(0)?, c.input(1)?, c.input(2)?);
    let (tx, ty) = (c.bool(0), c.bool(1));
    let (mut x, mut y) = (x0.clone(), y0.clone());
    if x.ndim() == 1 {
        x = x.unsqueeze(0)?;
        g = g.unsqueeze(if g.ndim() == 0 { 0 } else { -2 })?;
    }
    if y.ndim() == 1 {
        y = y.unsqueeze(-1)?;
        g = g.unsqueeze(-1)?;
    }
    // The operands as multiplied: a = op(x), b = op(y), dout = a @ b.
    let a = if tx && x0.ndim() > 1 { x.transpose(-1, -2)? } else { x.clone() };
    let b = if ty && y0.ndim() > 1 { y.transpose(-1, -2)? } else { y.clone() };
    if c.wants(0) {
        // d(a) = dout @ bᵀ; dx = d(a)ᵀ when x was transposed.
        let da = mt::matmul(&g, &b.transpose(-1, -2)?)?;
        let dx = if tx && x0.ndim() > 1 { da.transpose(-1, -2)? } else { da };
        c.store(0, &reduce_to(&dx, x.shape())?.reshape(&isz(x0.shape()))?)?;
    }
    if c.wants(1) {
        let db = mt::matmul(&a.transpose(-1, -2)?, &g)?;
        let dy = if ty && y0.ndim() > 1 { db.transpose(-1, -2)? } else { db };
        c.store(1, &reduce_to(&dy, y.shape())?.reshape(&isz(y0.shape()))?)?;
    }
    Ok(())
}

pub(super) fn isz(s: &[usize]) -> Vec<isize> {
    s.iter().map(|&d| d as isize).collect()
}

// --- reductions -------------------------------------------------------------------------

/// `mean_all(x)`: the mean of every element (0-d).
fn mean_all(c: &Call) -> Result<()> {
    let x = c.input(0)?;
    c.store(0, &mt::mean(&x, None, false)?)
}

/// `mean_all_grad(x, dout)`: dout / numel everywhere.
fn mean_all_grad(c: &Call) -> Result<()> {
    let (xs, g) = (c.in_shape(0)?, c.input(1)?);
    let n = xs.iter().product::<usize>().max(1) as f64;
    let v = mt::multiply_scalar(&g.reshape(&[])?, 1.0 / n)?;
    c.store(0, &v.expand(&xs)?)
}

/// The reduced axes of `sum`/`mean` (all when `reduce_all` or empty), normalized and sorted.
fn reduced_axes(xs: &[usize], dims: &[i64], all: bool) -> Vec<usize> {
    let n = xs.len() as i64;
    if all || dims.is_empty() {
        return (0..xs.len()).collect();
    }
    let mut v: Vec<usize> = dims
        .iter()
        .map(|&d| (if d < 0 { d + n } else { d }).clamp(0, (n - 1).max(0)) as usize)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The reduction's output gradient broadcast back over `x` (`scale` applied).
fn reduce_grad(c: &Call, mean: bool) -> Result<()> {
    let (xs, g) = (c.in_shape(0)?, c.input(1)?);
    let axes = reduced_axes(&xs, &c.ints(0), c.bool(2));
    let mut shape: Vec<isize> = isz(&xs);
    let mut count = 1usize;
    for &a in &axes {
        count *= xs[a];
        shape[a] = 1;
    }
    let g = g.reshape(&shape)?;
    let g = if mean { mt::multiply_scalar(&g, 1.0 / count.max(1) as f64)? } else { g };
    c.store(0, &g.expand(&xs)?)
}

fn sum_grad(c: &Call) -> Result<()> {
    reduce_grad(c, false)
}
fn mean_grad(c: &Call) -> Result<()> {
    reduce_grad(c, true)
}

// --- cross entropy ----------------------------------------------------------------------

/// Hard labels as int32 (int64 labels are read through their low words: class indices fit).
fn labels_i32(label: &Tensor) -> Result<Tensor> {
    match label.dtype() {
        DType::I32 => Ok(label.clone()),
        DType::I64 => super::ops::as_words(label)?.select(-1, 0),
        d => Err(Error::dtype(
            "cross_entropy_with_softmax",
            format!("hard labels must be int32 or int64, got {d}"),
        )),
    }
}

/// One-hot of `lab` (class dim of size 1 at `axis`) over `n` classes, and the mask of labels
/// that are not `ignore`, both in `dt`.
fn one_hot(
    lab: &Tensor,
    axis: usize,
    n: usize,
    ignore: i64,
    dt: DType,
) -> Result<(Tensor, Tensor)> {
    let mut shape = vec![1isize; lab.ndim()];
    shape[axis] = n as isize;
    let classes = mt::arange(0.0, n as f64, 1.0, DType::I32, place())?.reshape(&shape)?;
    let oh = mt::equal(lab, &classes)?.astype(dt)?;
    let keep = mt::not_equal_scalar(lab, ignore)?.astype(dt)?;
    Ok((oh, keep))
}

struct CeArgs {
    soft: bool,
    use_softmax: bool,
    ignore: i64,
    axis: usize,
}

fn ce_args(c: &Call, logits: &Tensor, first_attr: usize) -> Result<CeArgs> {
    let nd = logits.ndim() as i64;
    let axis = c.int(first_attr + 4);
    let axis = if axis < 0 { axis + nd } else { axis };
    if nd == 0 || axis < 0 || axis >= nd {
        return Err(Error::invalid(c.name, format!("axis {axis} for logits of rank {nd}")));
    }
    Ok(CeArgs {
        soft: c.bool(first_attr),
        use_softmax: c.bool(first_attr + 1),
        ignore: c.int(first_attr + 3),
        axis: axis as usize,
    })
}

/// Labels with the class dim present (Paddle allows it to be dropped).
fn label_rank(label: Tensor, logits: &Tensor, axis: usize) -> Result<Tensor> {
    if label.ndim() + 1 == logits.ndim() {
        label.unsqueeze(axis as isize)
    } else {
        Ok(label)
    }
}

/// `cross_entropy_with_softmax(logits, label, soft_label, use_softmax, numeric_stable_mode,
/// ignore_index, axis) -> (softmax, loss)`.
fn cross_entropy_with_softmax(c: &Call) -> Result<()> {
    let (logits, label) = (c.input(0)?, c.input(1)?);
    let a = ce_args(c, &logits, 0)?;
    let label = label_rank(label, &logits, a.axis)?;
    let ax = [a.axis as isize];
    let (sm, logp) = if a.use_softmax {
        (mt::softmax(&logits, ax[0])?, mt::log_softmax(&logits, ax[0])?)
    } else {
        (logits.clone(), mt::log(&logits)?)
    };
    let loss = if a.soft {
        mt::neg(&mt::sum(&mt::multiply(&label, &logp)?, Some(&ax), true)?)?
    } else {
        let lab = labels_i32(&label)?;
        let (oh, keep) = one_hot(&lab, a.axis, logits.shape()[a.axis], a.ignore, logits.dtype())?;
        let l = mt::neg(&mt::sum(&mt::multiply(&oh, &logp)?, Some(&ax), true)?)?;
        mt::multiply(&l, &keep)?
    };
    c.store(0, &sm)?;
    c.store(1, &loss)
}

/// `cross_entropy_with_softmax_grad(label, softmax, loss_grad, ...) -> logits_grad`.
fn cross_entropy_with_softmax_grad(c: &Call) -> Result<()> {
    let (label, sm, lg) = (c.input(0)?, c.input(1)?, c.input(2)?);
    let a = ce_args(c, &sm, 0)?;
    let label = label_rank(label, &sm, a.axis)?;
    let g = if a.soft {
        if a.use_softmax {
            mt::multiply(&mt::subtract(&sm, &label)?, &lg)?
        } else {
            mt::neg(&mt::multiply(&mt::divide(&label, &sm)?, &lg)?)?
        }
    } else {
        let lab = labels_i32(&label)?;
        let (oh, keep) = one_hot(&lab, a.axis, sm.shape()[a.axis], a.ignore, sm.dtype())?;
        let d =
            if a.use_softmax { mt::subtract(&sm, &oh)? } else { mt::neg(&mt::divide(&oh, &sm)?)? };
        mt::multiply(&mt::multiply(&d, &lg)?, &keep)?
    };
    c.store(0, &g)
}

/// The backward kernels.
pub fn all() -> Vec<KernelDef> {
    vec![
        kernel!("add_grad", add_grad, F, [x: In, y: In, dout: In, axis: I32, dx: Out, dy: Out]),
        kernel!("subtract_grad", subtract_grad, F, [x: In, y: In, dout: In, axis: I32, dx: Out, dy: Out]),
        kernel!("multiply_grad", multiply_grad, F, [x: In, y: In, dout: In, axis: I32, dx: Out, dy: Out]),
        kernel!("divide_grad", divide_grad, F, [x: In, y: In, out: In, dout: In, axis: I32, dx: Out, dy: Out]),
        kernel!(direct "relu_grad", relu_grad, F, [out: In, dout: In, dx: Out]),
        kernel!(direct "sigmoid_grad", sigmoid_grad, F, [out: In, dout: In, dx: Out]),
        kernel!(direct "tanh_grad", tanh_grad, F, [out: In, dout: In, dx: Out]),
        kernel!(direct "gelu_grad", gelu_grad, F, [x: In, dout: In, approximate: Bool, dx: Out]),
        kernel!(direct "silu_grad", silu_grad, F, [x: In, out: In, dout: In, dx: Out]),
        kernel!(direct "leaky_relu_grad", leaky_relu_grad, F, [x: In, dout: In, alpha: F32, dx: Out]),
        kernel!(direct "square", square, F, [x: In, out: Out]),
        kernel!(direct "square_grad", square_grad, F, [x: In, dout: In, dx: Out]),
        kernel!(direct "exp_grad", exp_grad, F, [out: In, dout: In, dx: Out]),
        kernel!(direct "log_grad", log_grad, F, [x: In, dout: In, dx: Out]),
        kernel!(direct "sqrt_grad", sqrt_grad, F, [out: In, dout: In, dx: Out]),
        kernel!(direct "abs_grad", abs_grad, F, [x: In, dout: In, dx: Out]),
        kernel!("softmax_grad", softmax_grad, F, [out: In, dout: In, axis: I32, dx: Out]),
        kernel!("log_softmax_grad", log_softmax_grad, F, [out: In, dout: In, axis: I32, dx: Out]),
        kernel!("matmul_grad", matmul_grad, F, [x: In, y: In, dout: In, tx: Bool, ty: Bool, dx: Out, dy: Out]),
        kernel!("mean_all", mean_all, F, [x: In, out: Out]),
        kernel!("mean_all_grad", mean_all_grad, F, [x: In, dout: In, dx: Out]),
        kernel!("sum_grad", sum_grad, F, [x: In, dout: In, dims: IntArray, keep: Bool, all: Bool, dx: Out]),
        kernel!("mean_grad", mean_grad, F, [x: In, dout: In, dims: IntArray, keep: Bool, all: Bool, dx: Out]),
        kernel!("cross_entropy_with_softmax", cross_entropy_with_softmax, F,
            [logits: In, label: In, soft: Bool, use_softmax: Bool, stable: Bool, ignore: I32, axis: I32, softmax: Out, loss: Out]),
        kernel!("cross_entropy_with_softmax_grad", cross_entropy_with_softmax_grad, F,
            [label: In, softmax: In, loss_grad: In, soft: Bool, use_softmax: Bool, stable: Bool, ignore: I32, axis: I32, dx: Out]),
    ]
}
