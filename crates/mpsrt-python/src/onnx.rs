//! `_C.OnnxSession`: a handle on `mpsrt_engine::Session` behind `mpsrt.onnx.InferenceSession`.
//!
//! The Rust side only loads, describes and runs; NumPy conversion stays in the Python package
//! (`mpsrt.to_tensor` / `Tensor.numpy`), so feeds and results cross as `_C.Tensor` handles.
//! Loading (import + graph compilation) and running release the GIL: both can take seconds.

use crate::tensor::{wrap, PyTensor};
use crate::{parse_place, place_str, IntoPy, PyRes};
use mpsrt_engine::{IoInfo, Session, SessionOptions};
use mpsrt_graph::Dim;
use mpsrt_tensor::Tensor;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// One dim as Python sees it: an int, a `dim_param` name, or `None` for an unnamed dynamic dim.
#[derive(IntoPyObject)]
enum PyDim {
    Known(usize),
    Named(String),
    /// Always `None` (the derive needs a payload; `None` converts to Python's `None`).
    Unknown(Option<usize>),
}

/// The importer names unnamed dynamic dims `"<value>:<axis>"` so that error messages can point
/// at them; onnxruntime reports such dims as `None`, and so do we.
fn py_dim(value: &str, axis: usize, d: &Dim) -> PyDim {
    match d {
        Dim::Known(n) => PyDim::Known(*n),
        Dim::Sym(s) if *s == format!("{value}:{axis}") => PyDim::Unknown(None),
        Dim::Sym(s) => PyDim::Named(s.clone()),
    }
}

/// `(name, dtype name, shape)` of each graph input or output.
fn describe(io: &[IoInfo]) -> Vec<(String, &'static str, Vec<PyDim>)> {
    io.iter()
        .map(|i| {
            let shape = i.shape.iter().enumerate().map(|(k, d)| py_dim(&i.name, k, d)).collect();
            (i.name.clone(), i.dtype.name(), shape)
        })
        .collect()
}

/// A loaded ONNX model bound to one place.
#[pyclass(name = "OnnxSession", module = "mpsrt._C", frozen)]
pub struct PyOnnxSession {
    // Arc: `run` moves a handle into the GIL-free closure while Python may drop the object.
    inner: Arc<Session>,
}

#[pymethods]
impl PyOnnxSession {
    /// Loads `model` (a path as `str`/`os.PathLike`, or the serialized bytes) for `place`.
    #[new]
    #[pyo3(signature = (model, place="mps"))]
    fn new(py: Python<'_>, model: &Bound<'_, PyAny>, place: &str) -> PyRes<Self> {
        let p = parse_place(place)?;
        let opts = SessionOptions::default();
        let session = if let Ok(b) = model.cast::<PyBytes>() {
            let bytes = b.as_bytes().to_vec();
            py.detach(move || Session::load_bytes(&bytes, p, opts))
        } else if model.is_instance_of::<PyString>() || model.hasattr("__fspath__")? {
            let path: PathBuf = model.extract()?;
            py.detach(move || Session::load(path, p, opts))
        } else {
            return Err(PyTypeError::new_err(format!(
                "[onnx] expected a model path or bytes, got {}",
                model.get_type().name()?
            )));
        };
        Ok(PyOnnxSession { inner: Arc::new(session.py_err()?) })
    }

    #[getter]
    fn place(&self) -> String {
        place_str(self.inner.place())
    }

    /// `[(name, dtype, shape)]` of the graph inputs, in graph order.
    fn inputs(&self) -> Vec<(String, &'static str, Vec<PyDim>)> {
        describe(self.inner.inputs())
    }

    /// `[(name, dtype, shape)]` of the graph outputs, in graph order.
    fn outputs(&self) -> Vec<(String, &'static str, Vec<PyDim>)> {
        describe(self.inner.outputs())
    }

    /// Runs the model on `{name: Tensor}`; returns every output as `(name, Tensor)` in graph
    /// order (the engine computes all outputs anyway, so selection is left to the caller).
    fn run(
        &self,
        py: Python<'_>,
        feeds: HashMap<String, PyRef<'_, PyTensor>>,
    ) -> PyRes<Vec<(String, PyTensor)>> {
        let feeds: HashMap<String, Tensor> =
            feeds.into_iter().map(|(k, t)| (k, t.inner.clone())).collect();
        let session = self.inner.clone();
        let outs = py.detach(move || session.run(&feeds)).py_err()?;
        Ok(outs.into_iter().map(|(n, t)| (n, wrap(t))).collect())
    }

    fn __repr__(&self) -> String {
        let names = |io: &[IoInfo]| io.iter().map(|i| i.name.clone()).collect::<Vec<_>>();
        format!(
            "OnnxSession(place={}, inputs={:?}, outputs={:?})",
            self.place(),
            names(self.inner.inputs()),
            names(self.inner.outputs())
        )
    }
}

/// The ONNX op types the engine can run (sorted).
#[pyfunction]
fn onnx_supported_ops() -> Vec<String> {
    mpsrt_engine::supported_ops().into_iter().map(Into::into).collect()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyOnnxSession>()?;
    m.add_function(wrap_pyfunction!(onnx_supported_ops, m)?)?;
    Ok(())
}
