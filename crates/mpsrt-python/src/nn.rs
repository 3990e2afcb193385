//! Matrix products, convolution and pooling: `_C.matmul`, `_C.conv2d`,
//! `_C.pool2d("max"|"avg", ...)`, `_C.adaptive_pool2d`, `_C.max_pool2d_mask`.
//! Python passes PyTorch-style arguments already normalized to pairs.

use crate::tensor::{wrap, PyTensor};
use crate::{IntoPy, PyRes};
use mpsrt_tensor::{self as mt, Conv2dOptions, ConvPadding, Pool2dOptions};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// `x @ y` with NumPy's batching rules (1-D operands promoted, batch dims broadcast).
#[pyfunction]
fn matmul(py: Python<'_>, x: &PyTensor, y: &PyTensor) -> PyRes<PyTensor> {
    let (x, y) = (x.inner.clone(), y.inner.clone());
    Ok(wrap(crate::guard::detach(py, "matmul", move || mt::matmul(&x, &y)).py_err()?))
}

/// `padding`: `"same"`, or `(top, left, bottom, right)`.
#[pyfunction]
#[pyo3(signature = (x, w, bias, stride, padding, same, dilation, groups))]
#[allow(clippy::too_many_arguments)]
fn conv2d(
    py: Python<'_>,
    x: &PyTensor,
    w: &PyTensor,
    bias: Option<&PyTensor>,
    stride: [usize; 2],
    padding: [usize; 4],
    same: bool,
    dilation: [usize; 2],
    groups: usize,
) -> PyRes<PyTensor> {
    let opts = Conv2dOptions {
        stride,
        padding: if same { ConvPadding::SameUpper } else { ConvPadding::Explicit(padding) },
        dilation,
        groups,
    };
    let (x, w, b) = (x.inner.clone(), w.inner.clone(), bias.map(|b| b.inner.clone()));
    Ok(wrap(
        crate::guard::detach(py, "conv2d", move || mt::conv2d(&x, &w, b.as_ref(), &opts))
            .py_err()?,
    ))
}

#[pyfunction]
#[pyo3(signature = (kind, x, kernel, stride, padding, dilation, ceil_mode, count_include_pad))]
#[allow(clippy::too_many_arguments)]
fn pool2d(
    py: Python<'_>,
    kind: &str,
    x: &PyTensor,
    kernel: [usize; 2],
    stride: Option<[usize; 2]>,
    padding: [usize; 2],
    dilation: [usize; 2],
    ceil_mode: bool,
    count_include_pad: bool,
) -> PyRes<PyTensor> {
    let mut opts = Pool2dOptions::new(kernel[0], kernel[1]);
    opts.stride = stride;
    opts.padding = padding;
    opts.dilation = dilation;
    opts.ceil_mode = ceil_mode;
    opts.count_include_pad = count_include_pad;
    let f = match kind {
        "max" => mt::max_pool2d,
        "avg" => mt::avg_pool2d,
        _ => return Err(PyValueError::new_err(format!("[pool2d] unknown pooling {kind:?}"))),
    };
    let x = x.inner.clone();
    Ok(wrap(crate::guard::detach(py, "pool2d", move || f(&x, &opts)).py_err()?))
}

#[pyfunction]
fn adaptive_pool2d(py: Python<'_>, kind: &str, x: &PyTensor, size: [usize; 2]) -> PyRes<PyTensor> {
    let f = match kind {
        "max" => mt::adaptive_max_pool2d,
        "avg" => mt::adaptive_avg_pool2d,
        _ => return Err(PyValueError::new_err(format!("[pool2d] unknown pooling {kind:?}"))),
    };
    let x = x.inner.clone();
    Ok(wrap(crate::guard::detach(py, "adaptive_pool2d", move || f(&x, size)).py_err()?))
}

/// Max pooling returning `(values, mask)`: the mask holds each maximum's flat `h·W + w` index
/// in its input plane (int32), Paddle's `return_mask=True`. `size`: adaptive output size
/// (kernel, stride, padding, dilation and ceil_mode are then ignored).
#[pyfunction]
#[pyo3(signature = (x, kernel, stride, padding, dilation, ceil_mode, size=None))]
#[allow(clippy::too_many_arguments)]
fn max_pool2d_mask(
    py: Python<'_>,
    x: &PyTensor,
    kernel: [usize; 2],
    stride: Option<[usize; 2]>,
    padding: [usize; 2],
    dilation: [usize; 2],
    ceil_mode: bool,
    size: Option<[usize; 2]>,
) -> PyRes<(PyTensor, PyTensor)> {
    let mut opts = Pool2dOptions::new(kernel[0], kernel[1]);
    opts.stride = stride;
    opts.padding = padding;
    opts.dilation = dilation;
    opts.ceil_mode = ceil_mode;
    let x = x.inner.clone();
    let (y, i) = crate::guard::detach(py, "max_pool2d", move || match size {
        Some(s) => mt::adaptive_max_pool2d_with_indices(&x, s),
        None => mt::max_pool2d_with_indices(&x, &opts),
    })
    .py_err()?;
    Ok((wrap(y), wrap(i)))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(max_pool2d_mask, m)?)?;
    m.add_function(wrap_pyfunction!(matmul, m)?)?;
    m.add_function(wrap_pyfunction!(conv2d, m)?)?;
    m.add_function(wrap_pyfunction!(pool2d, m)?)?;
    m.add_function(wrap_pyfunction!(adaptive_pool2d, m)?)?;
    Ok(())
}
