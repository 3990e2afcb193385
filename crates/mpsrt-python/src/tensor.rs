//! The `_C.Tensor` class (a handle on `mpsrt_tensor::Tensor`: shared storage + layout + dtype)
//! and the creation functions. Views (reshape, permute, slice, select, expand...) share storage.

use crate::guard::{detach, guarded};
use crate::{parse_dtype, parse_place, place_str, IntoPy, PyRes};
use mpsrt_core::Place;
use mpsrt_tensor::{Scalar, Tensor};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt};

/// A tensor handle. The pure-Python `mpsrt.Tensor` wraps it and adds operators.
#[pyclass(name = "Tensor", module = "mpsrt._C", frozen)]
pub struct PyTensor {
    pub(crate) inner: Tensor,
}

pub(crate) fn wrap(t: Tensor) -> PyTensor {
    PyTensor { inner: t }
}

/// A Python bool / int / float as an mpsrt scalar.
pub(crate) fn scalar(v: &Bound<'_, PyAny>) -> PyRes<Scalar> {
    if v.is_instance_of::<PyBool>() {
        return Ok(Scalar::B(v.extract::<bool>()?));
    }
    if v.is_instance_of::<PyInt>() {
        return Ok(Scalar::I(v.extract::<i64>()?));
    }
    if v.is_instance_of::<PyFloat>() {
        return Ok(Scalar::F(v.extract::<f64>()?));
    }
    // NumPy scalars and other number-likes.
    if let Ok(i) = v.call_method0("__index__") {
        return Ok(Scalar::I(i.extract::<i64>()?));
    }
    if let Ok(f) = v.call_method0("__float__") {
        return Ok(Scalar::F(f.extract::<f64>()?));
    }
    Err(PyTypeError::new_err(format!(
        "expected a tensor or a Python number, got {}",
        v.get_type().name()?
    )))
}

#[pymethods]
impl PyTensor {
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.inner.shape().to_vec()
    }
    #[getter]
    fn strides(&self) -> Vec<isize> {
        self.inner.strides().to_vec()
    }
    #[getter]
    fn offset(&self) -> usize {
        self.inner.layout().offset
    }
    #[getter]
    fn dtype(&self) -> &'static str {
        self.inner.dtype().name()
    }
    #[getter]
    fn place(&self) -> String {
        place_str(self.inner.place())
    }
    #[getter]
    fn ndim(&self) -> usize {
        self.inner.ndim()
    }
    fn numel(&self) -> usize {
        self.inner.numel()
    }
    fn is_contiguous(&self) -> bool {
        self.inner.is_contiguous()
    }
    /// Identity of the underlying storage (views of one tensor share it).
    fn storage_id(&self) -> usize {
        match self.inner.storage() {
            mpsrt_runtime::Storage::Cpu(b) => std::sync::Arc::as_ptr(b) as usize,
            mpsrt_runtime::Storage::Gpu(b) => std::sync::Arc::as_ptr(b) as usize,
        }
    }
    /// Row-major element bytes (little-endian; bool as 0/1 bytes). Waits for the GPU.
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyRes<Bound<'py, PyBytes>> {
        let t = self.inner.clone();
        let bytes = detach(py, "to_bytes", move || t.to_bytes()).py_err()?;
        Ok(PyBytes::new(py, &bytes))
    }
    fn to(&self, py: Python<'_>, place: &str) -> PyRes<PyTensor> {
        let p = parse_place(place)?;
        let t = self.inner.clone();
        Ok(wrap(detach(py, "to", move || t.to(p)).py_err()?))
    }
    fn astype(&self, py: Python<'_>, dtype: &str) -> PyRes<PyTensor> {
        let d = parse_dtype(dtype)?;
        let t = self.inner.clone();
        Ok(wrap(detach(py, "astype", move || t.astype(d)).py_err()?))
    }
    fn contiguous(&self, py: Python<'_>) -> PyRes<PyTensor> {
        let t = self.inner.clone();
        Ok(wrap(detach(py, "contiguous", move || t.contiguous()).py_err()?))
    }
    fn reshape(&self, py: Python<'_>, shape: Vec<isize>) -> PyRes<PyTensor> {
        let t = self.inner.clone();
        Ok(wrap(detach(py, "reshape", move || t.reshape(&shape)).py_err()?))
    }
    fn permute(&self, perm: Vec<isize>) -> PyRes<PyTensor> {
        Ok(wrap(guarded("permute", || self.inner.permute(&perm)).py_err()?))
    }
    fn transpose(&self, a: isize, b: isize) -> PyRes<PyTensor> {
        Ok(wrap(guarded("transpose", || self.inner.transpose(a, b)).py_err()?))
    }
    #[pyo3(signature = (axis, start, stop, step))]
    fn slice(
        &self,
        axis: isize,
        start: Option<isize>,
        stop: Option<isize>,
        step: isize,
    ) -> PyRes<PyTensor> {
        Ok(wrap(guarded("slice", || self.inner.slice(axis, start, stop, step)).py_err()?))
    }
    fn select(&self, axis: isize, index: isize) -> PyRes<PyTensor> {
        Ok(wrap(guarded("select", || self.inner.select(axis, index)).py_err()?))
    }
    fn expand(&self, shape: Vec<usize>) -> PyRes<PyTensor> {
        Ok(wrap(guarded("expand", || self.inner.expand(&shape)).py_err()?))
    }
    fn unsqueeze(&self, axis: isize) -> PyRes<PyTensor> {
        Ok(wrap(guarded("unsqueeze", || self.inner.unsqueeze(axis)).py_err()?))
    }
    #[pyo3(signature = (axis=None))]
    fn squeeze(&self, axis: Option<isize>) -> PyRes<PyTensor> {
        Ok(wrap(guarded("squeeze", || self.inner.squeeze(axis)).py_err()?))
    }
    fn flatten(&self, py: Python<'_>, start: isize, end: isize) -> PyRes<PyTensor> {
        let t = self.inner.clone();
        Ok(wrap(detach(py, "flatten", move || t.flatten(start, end)).py_err()?))
    }
    fn __repr__(&self) -> String {
        format!("{:?}", self.inner)
    }
}

/// Builds a tensor from row-major little-endian bytes.
#[pyfunction]
fn from_bytes(
    py: Python<'_>,
    data: &[u8],
    dtype: &str,
    shape: Vec<usize>,
    place: &str,
) -> PyRes<PyTensor> {
    let (d, p) = (parse_dtype(dtype)?, parse_place(place)?);
    // `data` borrows the caller's immutable `bytes` object, alive for this call: no copy.
    Ok(wrap(detach(py, "from_bytes", move || Tensor::from_bytes(data, d, &shape, p)).py_err()?))
}

#[pyfunction]
fn full(
    py: Python<'_>,
    shape: Vec<usize>,
    value: &Bound<'_, PyAny>,
    dtype: &str,
    place: &str,
) -> PyRes<PyTensor> {
    let (s, d, p) = (scalar(value)?, parse_dtype(dtype)?, parse_place(place)?);
    Ok(wrap(detach(py, "full", move || mpsrt_tensor::full(&shape, s, d, p)).py_err()?))
}

/// Uninitialised on the GPU (see `mpsrt_tensor::empty`).
#[pyfunction]
fn empty(py: Python<'_>, shape: Vec<usize>, dtype: &str, place: &str) -> PyRes<PyTensor> {
    let (d, p) = (parse_dtype(dtype)?, parse_place(place)?);
    Ok(wrap(detach(py, "empty", move || mpsrt_tensor::empty(&shape, d, p)).py_err()?))
}

#[pyfunction]
fn arange(
    py: Python<'_>,
    start: f64,
    end: f64,
    step: f64,
    dtype: &str,
    place: &str,
) -> PyRes<PyTensor> {
    let (d, p) = (parse_dtype(dtype)?, parse_place(place)?);
    Ok(wrap(detach(py, "arange", move || mpsrt_tensor::arange(start, end, step, d, p)).py_err()?))
}

#[pyfunction]
fn rand(py: Python<'_>, shape: Vec<usize>, dtype: &str, place: &str) -> PyRes<PyTensor> {
    let (d, p) = (parse_dtype(dtype)?, parse_place(place)?);
    Ok(wrap(detach(py, "rand", move || mpsrt_tensor::rand(&shape, d, p)).py_err()?))
}

#[pyfunction]
fn randn(py: Python<'_>, shape: Vec<usize>, dtype: &str, place: &str) -> PyRes<PyTensor> {
    let (d, p) = (parse_dtype(dtype)?, parse_place(place)?);
    Ok(wrap(detach(py, "randn", move || mpsrt_tensor::randn(&shape, d, p)).py_err()?))
}

/// Reseeds the generator behind `rand` / `randn` (one generator for every place).
#[pyfunction]
fn manual_seed(seed: u64) {
    mpsrt_tensor::manual_seed(seed);
}

/// Normalizes a place string (`"mps"` → `"mps:<current>"`), checking that the device exists.
#[pyfunction]
fn canonical_place(place: &str) -> PyRes<String> {
    Ok(place_str(parse_place(place)?))
}

#[pyfunction]
fn default_place() -> String {
    place_str(mpsrt_runtime::default_place())
}

#[pyfunction]
fn set_default_place(place: &str) -> PyRes<()> {
    let p: Place = parse_place(place)?;
    mpsrt_runtime::set_default_place(p).py_err()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(from_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(full, m)?)?;
    m.add_function(wrap_pyfunction!(empty, m)?)?;
    m.add_function(wrap_pyfunction!(arange, m)?)?;
    m.add_function(wrap_pyfunction!(rand, m)?)?;
    m.add_function(wrap_pyfunction!(randn, m)?)?;
    m.add_function(wrap_pyfunction!(manual_seed, m)?)?;
    m.add_function(wrap_pyfunction!(canonical_place, m)?)?;
    m.add_function(wrap_pyfunction!(default_place, m)?)?;
    m.add_function(wrap_pyfunction!(set_default_place, m)?)?;
    Ok(())
}
