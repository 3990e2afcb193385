//! Shape ops that build new tensors: `_C.concat`, `_C.stack`, `_C.split`, `_C.split_into`,
//! `_C.gather`, `_C.index_select`, `_C.pad`, `_C.tile`. The Python package maps Paddle's names
//! and argument conventions (`num_or_sections`, Paddle's pad order) onto these.

use crate::tensor::{wrap, PyTensor};
use crate::{IntoPy, PyRes};
use mpsrt_core::{Error, Result};
use mpsrt_tensor::{self as mt, PadMode, Tensor};
use pyo3::prelude::*;

fn inners(op: &str, xs: &[PyRef<'_, PyTensor>]) -> PyRes<Vec<Tensor>> {
    if xs.is_empty() {
        // The library indexes the first tensor for its rank; answer an empty list here.
        return Err(crate::to_py(Error::invalid(op, "expected at least one tensor, got none")));
    }
    Ok(xs.iter().map(|t| t.inner.clone()).collect())
}

fn run(py: Python<'_>, op: &str, f: impl FnOnce() -> Result<Tensor> + Send) -> PyRes<PyTensor> {
    Ok(wrap(crate::guard::detach(py, op, f).py_err()?))
}

fn run_many(
    py: Python<'_>,
    op: &str,
    f: impl FnOnce() -> Result<Vec<Tensor>> + Send,
) -> PyRes<Vec<PyTensor>> {
    Ok(crate::guard::detach(py, op, f).py_err()?.into_iter().map(wrap).collect())
}

/// Join along an existing `axis` (dtypes promote).
#[pyfunction]
fn concat(py: Python<'_>, xs: Vec<PyRef<'_, PyTensor>>, axis: isize) -> PyRes<PyTensor> {
    let ts = inners("concat", &xs)?;
    run(py, "concat", move || mt::concat(&ts.iter().collect::<Vec<_>>(), axis))
}

/// Join equal-shaped tensors along a new `axis`.
#[pyfunction]
fn stack(py: Python<'_>, xs: Vec<PyRef<'_, PyTensor>>, axis: isize) -> PyRes<PyTensor> {
    let ts = inners("stack", &xs)?;
    run(py, "stack", move || mt::stack(&ts.iter().collect::<Vec<_>>(), axis))
}

/// Views of `x` along `axis` with the given section sizes (summing to the dim).
#[pyfunction]
fn split(py: Python<'_>, x: &PyTensor, sizes: Vec<usize>, axis: isize) -> PyRes<Vec<PyTensor>> {
    let x = x.inner.clone();
    run_many(py, "split", move || mt::split(&x, &sizes, axis))
}

/// `parts` views of `ceil(dim / parts)` along `axis` (the last may be smaller).
#[pyfunction]
fn split_into(py: Python<'_>, x: &PyTensor, parts: usize, axis: isize) -> PyRes<Vec<PyTensor>> {
    let x = x.inner.clone();
    run_many(py, "split", move || mt::split_into(&x, parts, axis))
}

/// ONNX Gather: indices of any rank (int32/int64) along `axis`.
#[pyfunction]
fn gather(py: Python<'_>, x: &PyTensor, indices: &PyTensor, axis: isize) -> PyRes<PyTensor> {
    let (x, i) = (x.inner.clone(), indices.inner.clone());
    run(py, "gather", move || mt::gather(&x, &i, axis))
}

/// Entries of the 1-D `indices` along `axis`.
#[pyfunction]
fn index_select(py: Python<'_>, x: &PyTensor, axis: isize, indices: &PyTensor) -> PyRes<PyTensor> {
    let (x, i) = (x.inner.clone(), indices.inner.clone());
    run(py, "index_select", move || mt::index_select(&x, axis, &i))
}

/// Circular (wrap-around) padding, one dim at a time: `[x[-b:], x, x[:a]]` joined along the dim.
/// The library's `PadMode` has no wrap mode; two views and a concat per dim compose it.
fn pad_circular(x: &Tensor, pads: &[(isize, isize)]) -> Result<Tensor> {
    let op = "pad";
    if pads.len() != x.ndim() {
        return Err(Error::invalid(
            op,
            format!("need one (before, after) pair per dim of {:?}, got {pads:?}", x.shape()),
        ));
    }
    let mut t = x.clone();
    for (d, &(b, a)) in pads.iter().enumerate() {
        if b == 0 && a == 0 {
            continue;
        }
        let len = t.shape()[d] as isize;
        if b < 0 || a < 0 || b > len || a > len {
            return Err(Error::shape(
                op,
                format!(
                    "circular padding {pads:?} of dim {d} needs 0 <= pads <= {len} (input {:?})",
                    x.shape()
                ),
            ));
        }
        let ax = d as isize;
        let parts = [
            t.slice(ax, Some(len - b), Some(len), 1)?,
            t.clone(),
            t.slice(ax, Some(0), Some(a), 1)?,
        ];
        t = mt::concat(&parts.iter().collect::<Vec<_>>(), ax)?;
    }
    t.contiguous()
}

/// `pads[d] = (before, after)` for every dim; `mode`: `"constant"` (fill `value`; negative
/// amounts crop), `"reflect"`, `"replicate"`/`"edge"` or `"circular"`.
#[pyfunction]
fn pad(
    py: Python<'_>,
    x: &PyTensor,
    pads: Vec<(isize, isize)>,
    mode: &str,
    value: f64,
) -> PyRes<PyTensor> {
    let x = x.inner.clone();
    let mode = match mode {
        "constant" => Some(PadMode::Constant(value)),
        "reflect" => Some(PadMode::Reflect),
        "replicate" | "edge" => Some(PadMode::Edge),
        "circular" => None,
        other => {
            return Err(crate::to_py(Error::invalid(
                "pad",
                format!(
                    "unknown mode {other:?}; expected 'constant', 'reflect', 'replicate' or \
                     'circular'"
                ),
            )))
        }
    };
    run(py, "pad", move || match mode {
        Some(m) => mt::pad(&x, &pads, m),
        None => pad_circular(&x, &pads),
    })
}

/// NumPy `tile`: repeat `reps[d]` times along each dim.
#[pyfunction]
fn tile(py: Python<'_>, x: &PyTensor, reps: Vec<usize>) -> PyRes<PyTensor> {
    let x = x.inner.clone();
    run(py, "tile", move || mt::tile(&x, &reps))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(concat, m)?)?;
    m.add_function(wrap_pyfunction!(stack, m)?)?;
    m.add_function(wrap_pyfunction!(split, m)?)?;
    m.add_function(wrap_pyfunction!(split_into, m)?)?;
    m.add_function(wrap_pyfunction!(gather, m)?)?;
    m.add_function(wrap_pyfunction!(index_select, m)?)?;
    m.add_function(wrap_pyfunction!(pad, m)?)?;
    m.add_function(wrap_pyfunction!(tile, m)?)?;
    Ok(())
}
