//! Layer ops of `mpsrt.nn.functional`: the normalizations (`_C.batch_norm`,
//! `_C.batch_norm_train`, `_C.layer_norm`, `_C.group_norm`, `_C.instance_norm`), `_C.linear`,
//! `_C.addmm` (ONNX Gemm), `_C.conv1d`, `_C.conv_transpose2d` and `_C.global_pool2d`. Python
//! normalizes Paddle's arguments (ints or lists, `'same'`/`'valid'`) before calling these.

use crate::tensor::{wrap, PyTensor};
use crate::{IntoPy, PyRes};
use mpsrt_core::{Error, Result};
use mpsrt_tensor::{self as mt, Conv1dPadding, ConvTranspose2dOptions, Tensor};
use pyo3::prelude::*;

fn run(py: Python<'_>, op: &str, f: impl FnOnce() -> Result<Tensor> + Send) -> PyRes<PyTensor> {
    Ok(wrap(crate::guard::detach(py, op, f).py_err()?))
}

fn opt(t: Option<&PyTensor>) -> Option<Tensor> {
    t.map(|t| t.inner.clone())
}

/// Inference batch norm over dim 1 with running statistics.
#[pyfunction]
#[pyo3(signature = (x, running_mean, running_var, weight, bias, eps))]
fn batch_norm(
    py: Python<'_>,
    x: &PyTensor,
    running_mean: &PyTensor,
    running_var: &PyTensor,
    weight: Option<&PyTensor>,
    bias: Option<&PyTensor>,
    eps: f64,
) -> PyRes<PyTensor> {
    let (x, m, v) = (x.inner.clone(), running_mean.inner.clone(), running_var.inner.clone());
    let (w, b) = (opt(weight), opt(bias));
    run(py, "batch_norm", move || mt::batch_norm(&x, &m, &v, w.as_ref(), b.as_ref(), eps))
}

/// Training batch norm: `(y, batch mean [C], biased batch variance [C])`.
#[pyfunction]
#[pyo3(signature = (x, weight, bias, eps))]
fn batch_norm_train(
    py: Python<'_>,
    x: &PyTensor,
    weight: Option<&PyTensor>,
    bias: Option<&PyTensor>,
    eps: f64,
) -> PyRes<(PyTensor, PyTensor, PyTensor)> {
    let (x, w, b) = (x.inner.clone(), opt(weight), opt(bias));
    let (y, m, v) = crate::guard::detach(py, "batch_norm", move || {
        mt::batch_norm_train(&x, w.as_ref(), b.as_ref(), eps)
    })
    .py_err()?;
    Ok((wrap(y), wrap(m), wrap(v)))
}

/// Layer norm over the trailing `normalized_shape` dims.
#[pyfunction]
#[pyo3(signature = (x, normalized_shape, weight, bias, eps))]
fn layer_norm(
    py: Python<'_>,
    x: &PyTensor,
    normalized_shape: Vec<usize>,
    weight: Option<&PyTensor>,
    bias: Option<&PyTensor>,
    eps: f64,
) -> PyRes<PyTensor> {
    let (x, w, b) = (x.inner.clone(), opt(weight), opt(bias));
    run(py, "layer_norm", move || {
        mt::layer_norm(&x, &normalized_shape, w.as_ref(), b.as_ref(), eps)
    })
}

/// Group norm with per-channel weight/bias.
#[pyfunction]
#[pyo3(signature = (x, num_groups, weight, bias, eps))]
fn group_norm(
    py: Python<'_>,
    x: &PyTensor,
    num_groups: usize,
    weight: Option<&PyTensor>,
    bias: Option<&PyTensor>,
    eps: f64,
) -> PyRes<PyTensor> {
    let (x, w, b) = (x.inner.clone(), opt(weight), opt(bias));
    run(py, "group_norm", move || mt::group_norm(&x, num_groups, w.as_ref(), b.as_ref(), eps))
}

/// Instance norm: statistics per (sample, channel).
#[pyfunction]
#[pyo3(signature = (x, weight, bias, eps))]
fn instance_norm(
    py: Python<'_>,
    x: &PyTensor,
    weight: Option<&PyTensor>,
    bias: Option<&PyTensor>,
    eps: f64,
) -> PyRes<PyTensor> {
    let (x, w, b) = (x.inner.clone(), opt(weight), opt(bias));
    run(py, "instance_norm", move || mt::instance_norm(&x, w.as_ref(), b.as_ref(), eps))
}

/// `x @ W^T + bias` with `weight` `[out, in]` (PyTorch), or `x @ W + bias` with `weight`
/// `[in, out]` when `weight_in_out` (Paddle); the shape check names the layout the caller used.
#[pyfunction]
#[pyo3(signature = (x, weight, bias, weight_in_out))]
fn linear(
    py: Python<'_>,
    x: &PyTensor,
    weight: &PyTensor,
    bias: Option<&PyTensor>,
    weight_in_out: bool,
) -> PyRes<PyTensor> {
    let (x, w, b) = (x.inner.clone(), weight.inner.clone(), opt(bias));
    run(py, "linear", move || {
        if !weight_in_out {
            return mt::linear(&x, &w, b.as_ref());
        }
        let inf = x.shape().last().copied();
        if w.ndim() != 2 || inf != Some(w.shape()[0]) {
            return Err(Error::shape(
                "linear",
                format!(
                    "expected x [..., in_features] and weight [in_features, out_features], got \
                     x {:?} and weight {:?}",
                    x.shape(),
                    w.shape()
                ),
            ));
        }
        mt::linear(&x, &w.transpose(0, 1)?, b.as_ref())
    })
}

/// `beta * input + alpha * (x @ y)` for 2-D `x`, `y` (the library's ONNX `gemm`).
#[pyfunction]
#[pyo3(signature = (input, x, y, beta, alpha))]
fn addmm(
    py: Python<'_>,
    input: &PyTensor,
    x: &PyTensor,
    y: &PyTensor,
    beta: f64,
    alpha: f64,
) -> PyRes<PyTensor> {
    let (c, a, b) = (input.inner.clone(), x.inner.clone(), y.inner.clone());
    run(py, "addmm", move || mt::gemm(&a, &b, Some(&c), alpha, beta, false, false))
}

/// 1-D convolution; `padding` is `(left, right)` unless `same`.
#[pyfunction]
#[pyo3(signature = (x, w, bias, stride, padding, same, dilation, groups))]
#[allow(clippy::too_many_arguments)]
fn conv1d(
    py: Python<'_>,
    x: &PyTensor,
    w: &PyTensor,
    bias: Option<&PyTensor>,
    stride: usize,
    padding: (usize, usize),
    same: bool,
    dilation: usize,
    groups: usize,
) -> PyRes<PyTensor> {
    let pad =
        if same { Conv1dPadding::SameUpper } else { Conv1dPadding::Explicit(padding.0, padding.1) };
    let (x, w, b) = (x.inner.clone(), w.inner.clone(), opt(bias));
    run(py, "conv1d", move || mt::conv1d(&x, &w, b.as_ref(), stride, pad, dilation, groups))
}

/// Transposed 2-D convolution with `padding` `(top, left, bottom, right)`. The library takes
/// symmetric padding; padding only crops the full output, so an asymmetric one runs with the
/// smaller amount per axis and the rest is cropped as a view.
#[pyfunction]
#[pyo3(signature = (x, w, bias, stride, padding, output_padding, dilation, groups))]
#[allow(clippy::too_many_arguments)]
fn conv_transpose2d(
    py: Python<'_>,
    x: &PyTensor,
    w: &PyTensor,
    bias: Option<&PyTensor>,
    stride: [usize; 2],
    padding: [usize; 4],
    output_padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
) -> PyRes<PyTensor> {
    let [t, l, b, r] = padding;
    let sym = [t.min(b), l.min(r)];
    let opts = ConvTranspose2dOptions { stride, padding: sym, output_padding, dilation, groups };
    let (x, w, bias) = (x.inner.clone(), w.inner.clone(), opt(bias));
    run(py, "conv_transpose2d", move || {
        let y = mt::conv_transpose2d(&x, &w, bias.as_ref(), &opts)?;
        if t == b && l == r {
            return Ok(y);
        }
        let (oh, ow) = (y.shape()[2], y.shape()[3]);
        let (ct, cb, cl, cr) = (t - sym[0], b - sym[0], l - sym[1], r - sym[1]);
        if ct + cb >= oh || cl + cr >= ow {
            return Err(Error::shape(
                "conv_transpose2d",
                format!("padding {padding:?} leaves no output for input {:?}", x.shape()),
            ));
        }
        let y = y.slice(2, Some(ct as isize), Some((oh - cb) as isize), 1)?;
        y.slice(3, Some(cl as isize), Some((ow - cr) as isize), 1)?.contiguous()
    })
}

/// Global `"avg"` / `"max"` pooling of NCHW to `[N, C, 1, 1]`.
#[pyfunction]
fn global_pool2d(py: Python<'_>, kind: &str, x: &PyTensor) -> PyRes<PyTensor> {
    let f = match kind {
        "avg" => mt::global_avg_pool2d,
        "max" => mt::global_max_pool2d,
        _ => {
            return Err(crate::to_py(Error::invalid(
                "global_pool2d",
                format!("unknown pooling {kind:?}; expected 'avg' or 'max'"),
            )))
        }
    };
    let x = x.inner.clone();
    run(py, "global_pool2d", move || f(&x))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(batch_norm, m)?)?;
    m.add_function(wrap_pyfunction!(batch_norm_train, m)?)?;
    m.add_function(wrap_pyfunction!(layer_norm, m)?)?;
    m.add_function(wrap_pyfunction!(group_norm, m)?)?;
    m.add_function(wrap_pyfunction!(instance_norm, m)?)?;
    m.add_function(wrap_pyfunction!(linear, m)?)?;
    m.add_function(wrap_pyfunction!(addmm, m)?)?;
    m.add_function(wrap_pyfunction!(conv1d, m)?)?;
    m.add_function(wrap_pyfunction!(conv_transpose2d, m)?)?;
    m.add_function(wrap_pyfunction!(global_pool2d, m)?)?;
    Ok(())
}
