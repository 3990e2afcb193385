//! Op tables: every eager op of `mpsrt-tensor`, looked up by name from Python
//! (`_C.unary("exp", x)`, `_C.binary("add", a, b)`, `_C.binary_scalar("add", a, 2.0, False)`).
//! Adding an op is one line in a table; the Python package maps Paddle/PyTorch names onto these.
//! Every binding module runs its work through `guard::detach` (GIL released, a panic becomes a
//! `RuntimeError` naming the op).

use crate::tensor::{scalar, wrap, PyTensor};
use crate::{parse_dtype, IntoPy, PyRes};
use mpsrt_core::Result;
use mpsrt_tensor::{self as mt, Scalar, Tensor};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

type Unary = fn(&Tensor) -> Result<Tensor>;
type Binary = fn(&Tensor, &Tensor) -> Result<Tensor>;
type WithScalar = fn(&Tensor, Scalar) -> Result<Tensor>;

const UNARY: &[(&str, Unary)] = &[
    ("exp", mt::exp),
    ("log", mt::log),
    ("sqrt", mt::sqrt),
    ("sigmoid", mt::sigmoid),
    ("tanh", mt::tanh),
    ("erf", mt::erf),
    ("sin", mt::sin),
    ("cos", mt::cos),
    ("reciprocal", mt::reciprocal),
    ("neg", mt::neg),
    ("abs", mt::abs),
    ("sign", mt::sign),
    ("relu", mt::relu),
    ("floor", mt::floor),
    ("ceil", mt::ceil),
    ("round", mt::round),
    ("logical_not", mt::logical_not),
    ("isnan", mt::isnan),
    ("silu", mt::silu),
    ("hardswish", mt::hardswish),
];

const BINARY: &[(&str, Binary)] = &[
    ("add", mt::add),
    ("subtract", mt::subtract),
    ("multiply", mt::multiply),
    ("divide", mt::divide),
    ("pow", mt::pow),
    ("maximum", mt::maximum),
    ("minimum", mt::minimum),
    ("logical_and", mt::logical_and),
    ("logical_or", mt::logical_or),
    ("equal", mt::equal),
    ("not_equal", mt::not_equal),
    ("less", mt::less),
    ("less_equal", mt::less_equal),
    ("greater", mt::greater),
    ("greater_equal", mt::greater_equal),
];

/// `(name, tensor <op> scalar, scalar <op> tensor)`; comparisons have no reflected form
/// (Python flips them: `2 < x` is `x > 2`).
const SCALAR: &[(&str, WithScalar, Option<WithScalar>)] = &[
    ("add", |a, s| mt::add_scalar(a, s), Some(|a, s| mt::radd_scalar(s, a))),
    ("subtract", |a, s| mt::subtract_scalar(a, s), Some(|a, s| mt::rsubtract_scalar(s, a))),
    ("multiply", |a, s| mt::multiply_scalar(a, s), Some(|a, s| mt::rmultiply_scalar(s, a))),
    ("divide", |a, s| mt::divide_scalar(a, s), Some(|a, s| mt::rdivide_scalar(s, a))),
    ("pow", |a, s| mt::pow_scalar(a, s), Some(|a, s| mt::rpow_scalar(s, a))),
    ("maximum", |a, s| mt::maximum_scalar(a, s), Some(|a, s| mt::rmaximum_scalar(s, a))),
    ("minimum", |a, s| mt::minimum_scalar(a, s), Some(|a, s| mt::rminimum_scalar(s, a))),
    (
        "logical_and",
        |a, s| mt::logical_and_scalar(a, s),
        Some(|a, s| mt::rlogical_and_scalar(s, a)),
    ),
    ("logical_or", |a, s| mt::logical_or_scalar(a, s), Some(|a, s| mt::rlogical_or_scalar(s, a))),
    ("equal", |a, s| mt::equal_scalar(a, s), None),
    ("not_equal", |a, s| mt::not_equal_scalar(a, s), None),
    ("less", |a, s| mt::less_scalar(a, s), None),
    ("less_equal", |a, s| mt::less_equal_scalar(a, s), None),
    ("greater", |a, s| mt::greater_scalar(a, s), None),
    ("greater_equal", |a, s| mt::greater_equal_scalar(a, s), None),
];

fn unknown(kind: &str, name: &str, names: Vec<&str>) -> PyErr {
    PyValueError::new_err(format!("[{name}] unknown {kind} op; known: {}", names.join(", ")))
}

/// Runs `f` with the GIL released (ops may wait on GPU backpressure).
fn run(py: Python<'_>, op: &str, f: impl FnOnce() -> Result<Tensor> + Send) -> PyRes<PyTensor> {
    Ok(wrap(crate::guard::detach(py, op, f).py_err()?))
}

#[pyfunction]
fn unary(py: Python<'_>, name: &str, x: &PyTensor) -> PyRes<PyTensor> {
    let f = UNARY
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| unknown("unary", name, UNARY.iter().map(|e| e.0).collect()))?
        .1;
    let x = x.inner.clone();
    run(py, name, move || f(&x))
}

#[pyfunction]
fn binary(py: Python<'_>, name: &str, a: &PyTensor, b: &PyTensor) -> PyRes<PyTensor> {
    let f = BINARY
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| unknown("binary", name, BINARY.iter().map(|e| e.0).collect()))?
        .1;
    let (a, b) = (a.inner.clone(), b.inner.clone());
    run(py, name, move || f(&a, &b))
}

/// `a <name> s`, or `s <name> a` when `reverse`.
#[pyfunction]
fn binary_scalar(
    py: Python<'_>,
    name: &str,
    a: &PyTensor,
    s: &Bound<'_, PyAny>,
    reverse: bool,
) -> PyRes<PyTensor> {
    let entry = SCALAR
        .iter()
        .find(|e| e.0 == name)
        .ok_or_else(|| unknown("scalar", name, SCALAR.iter().map(|e| e.0).collect()))?;
    let f = if reverse {
        entry.2.ok_or_else(|| {
            PyValueError::new_err(format!("[{name}] has no reflected scalar form"))
        })?
    } else {
        entry.1
    };
    let (a, s) = (a.inner.clone(), scalar(s)?);
    run(py, name, move || f(&a, s))
}

#[pyfunction]
fn gelu(py: Python<'_>, x: &PyTensor, approximate_tanh: bool) -> PyRes<PyTensor> {
    let x = x.inner.clone();
    run(py, "gelu", move || mt::gelu(&x, approximate_tanh))
}

#[pyfunction]
fn leaky_relu(py: Python<'_>, x: &PyTensor, slope: f64) -> PyRes<PyTensor> {
    let x = x.inner.clone();
    run(py, "leaky_relu", move || mt::leaky_relu(&x, slope))
}

#[pyfunction]
fn elu(py: Python<'_>, x: &PyTensor, alpha: f64) -> PyRes<PyTensor> {
    let x = x.inner.clone();
    run(py, "elu", move || mt::elu(&x, alpha))
}

#[pyfunction]
fn hardsigmoid(py: Python<'_>, x: &PyTensor, alpha: f64, beta: f64) -> PyRes<PyTensor> {
    let x = x.inner.clone();
    run(py, "hardsigmoid", move || mt::hardsigmoid(&x, alpha, beta))
}

#[pyfunction]
fn softplus(py: Python<'_>, x: &PyTensor, beta: f64, threshold: f64) -> PyRes<PyTensor> {
    let x = x.inner.clone();
    run(py, "softplus", move || mt::softplus(&x, beta, threshold))
}

#[pyfunction]
#[pyo3(signature = (x, min=None, max=None))]
fn clip(py: Python<'_>, x: &PyTensor, min: Option<f64>, max: Option<f64>) -> PyRes<PyTensor> {
    let x = x.inner.clone();
    run(py, "clip", move || mt::clip(&x, min, max))
}

/// `where(cond, a, b)` with tensors for both branches.
#[pyfunction]
fn where_(py: Python<'_>, cond: &PyTensor, a: &PyTensor, b: &PyTensor) -> PyRes<PyTensor> {
    let (c, a, b) = (cond.inner.clone(), a.inner.clone(), b.inner.clone());
    run(py, "where", move || mt::where_(&c, &a, &b))
}

/// `where(cond, a, b)` with host scalars for both branches, producing `dtype`.
#[pyfunction]
fn where_scalar(
    py: Python<'_>,
    cond: &PyTensor,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    dtype: &str,
) -> PyRes<PyTensor> {
    let (c, a, b, d) = (cond.inner.clone(), scalar(a)?, scalar(b)?, parse_dtype(dtype)?);
    run(py, "where", move || mt::where_scalar(&c, a, b, d))
}

/// Names of the table ops, for the Python package's introspection and tests.
#[pyfunction]
fn op_names() -> (Vec<&'static str>, Vec<&'static str>) {
    (UNARY.iter().map(|e| e.0).collect(), BINARY.iter().map(|e| e.0).collect())
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(unary, m)?)?;
    m.add_function(wrap_pyfunction!(binary, m)?)?;
    m.add_function(wrap_pyfunction!(binary_scalar, m)?)?;
    m.add_function(wrap_pyfunction!(gelu, m)?)?;
    m.add_function(wrap_pyfunction!(leaky_relu, m)?)?;
    m.add_function(wrap_pyfunction!(elu, m)?)?;
    m.add_function(wrap_pyfunction!(hardsigmoid, m)?)?;
    m.add_function(wrap_pyfunction!(softplus, m)?)?;
    m.add_function(wrap_pyfunction!(clip, m)?)?;
    m.add_function(wrap_pyfunction!(where_, m)?)?;
    m.add_function(wrap_pyfunction!(where_scalar, m)?)?;
    m.add_function(wrap_pyfunction!(op_names, m)?)?;
    Ok(())
}
