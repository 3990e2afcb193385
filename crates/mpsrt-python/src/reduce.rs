//! Reductions and softmax: `_C.reduce("sum", x, axes, keepdim)`, `_C.reduce_arg("argmax", ...)`,
//! `_C.var(...)`, `_C.softmax("softmax", x, axis)`. Adding a reduction is one table line.

use crate::tensor::{wrap, PyTensor};
use crate::{IntoPy, PyRes};
use mpsrt_core::Result;
use mpsrt_tensor::{self as mt, Tensor};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

type Reduce = fn(&Tensor, Option<&[isize]>, bool) -> Result<Tensor>;
type ArgReduce = fn(&Tensor, Option<isize>, bool) -> Result<Tensor>;
type Moment = fn(&Tensor, Option<&[isize]>, f64, bool) -> Result<Tensor>;
type AxisOp = fn(&Tensor, isize) -> Result<Tensor>;

const REDUCE: &[(&str, Reduce)] = &[
    ("sum", mt::sum),
    ("mean", mt::mean),
    ("prod", mt::prod),
    ("max", mt::max),
    ("min", mt::min),
    ("logsumexp", mt::logsumexp),
    ("norm", mt::norm),
];
const ARG: &[(&str, ArgReduce)] = &[("argmax", mt::argmax), ("argmin", mt::argmin)];
const MOMENT: &[(&str, Moment)] = &[("var", mt::var), ("std", mt::std)];
const AXIS: &[(&str, AxisOp)] = &[("softmax", mt::softmax), ("log_softmax", mt::log_softmax)];

fn find<T: Copy>(table: &[(&str, T)], name: &str) -> PyRes<T> {
    table.iter().find(|e| e.0 == name).map(|e| e.1).ok_or_else(|| {
        let known: Vec<&str> = table.iter().map(|e| e.0).collect();
        PyValueError::new_err(format!("[{name}] unknown op; known: {}", known.join(", ")))
    })
}

/// `name(x, axes, keepdim)`; `axes=None` reduces everything.
#[pyfunction]
#[pyo3(signature = (name, x, axes, keepdim))]
fn reduce(
    py: Python<'_>,
    name: &str,
    x: &PyTensor,
    axes: Option<Vec<isize>>,
    keepdim: bool,
) -> PyRes<PyTensor> {
    let f = find(REDUCE, name)?;
    let x = x.inner.clone();
    Ok(wrap(crate::guard::detach(py, name, move || f(&x, axes.as_deref(), keepdim)).py_err()?))
}

#[pyfunction]
#[pyo3(signature = (name, x, axis, keepdim))]
fn reduce_arg(
    py: Python<'_>,
    name: &str,
    x: &PyTensor,
    axis: Option<isize>,
    keepdim: bool,
) -> PyRes<PyTensor> {
    let f = find(ARG, name)?;
    let x = x.inner.clone();
    Ok(wrap(crate::guard::detach(py, name, move || f(&x, axis, keepdim)).py_err()?))
}

/// `var` / `std` with `correction` (ddof).
#[pyfunction]
#[pyo3(signature = (name, x, axes, correction, keepdim))]
fn moment(
    py: Python<'_>,
    name: &str,
    x: &PyTensor,
    axes: Option<Vec<isize>>,
    correction: f64,
    keepdim: bool,
) -> PyRes<PyTensor> {
    let f = find(MOMENT, name)?;
    let x = x.inner.clone();
    Ok(wrap(
        crate::guard::detach(py, name, move || f(&x, axes.as_deref(), correction, keepdim))
            .py_err()?,
    ))
}

/// `softmax` / `log_softmax` along `axis`.
#[pyfunction]
fn axis_op(py: Python<'_>, name: &str, x: &PyTensor, axis: isize) -> PyRes<PyTensor> {
    let f = find(AXIS, name)?;
    let x = x.inner.clone();
    Ok(wrap(crate::guard::detach(py, name, move || f(&x, axis)).py_err()?))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(reduce, m)?)?;
    m.add_function(wrap_pyfunction!(reduce_arg, m)?)?;
    m.add_function(wrap_pyfunction!(moment, m)?)?;
    m.add_function(wrap_pyfunction!(axis_op, m)?)?;
    Ok(())
}
