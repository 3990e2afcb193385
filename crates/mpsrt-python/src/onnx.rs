//! `_C.OnnxSession`: a handle on `mpsrt_engine::Session` behind `mpsrt.onnx.InferenceSession`.
//!
//! The Rust side only loads, describes and runs; NumPy conversion stays in the Python package
//! (`mpsrt.to_tensor` / `Tensor.numpy`), so feeds and results cross as `_C.Tensor` handles.
//! Loading (import + graph compilation) and running release the GIL: both can take seconds.
//!
//! Inputs and outputs are described the way onnxruntime describes them, from the engine's
//! `IoInfo`: the element type the model *declares* (the importer stores `int16`/`uint16` values
//! as `int32` and `uint32`/`uint64` as `int64`) and, for outputs, the declared shape merged with
//! the inferred one as onnxruntime merges them.

use crate::tensor::{wrap, PyTensor};
use crate::{parse_place, place_str, IntoPy, PyRes};
use mpsrt_core::DType;
use mpsrt_engine::{IoInfo, Precision, Session, SessionOptions};
use mpsrt_graph::{Dim, ElemType};
use mpsrt_tensor::Tensor;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

/// One dim as Python sees it: an int, a `dim_param` name, or `None` for an unnamed dynamic dim.
#[derive(IntoPyObject, Debug, Clone, PartialEq)]
enum PyDim {
    Known(usize),
    Named(String),
    /// Always `None` (the derive needs a payload; `None` converts to Python's `None`).
    Unknown(Option<usize>),
}

const UNKNOWN: PyDim = PyDim::Unknown(None);

/// `(name, declared dtype, stored dtype, shape)` of a graph input or output. The declared dtype
/// is the NumPy name of the model's element type (`'uint16'`); the stored one is the dtype the
/// engine holds the value in (`'int32'`) and expects in feeds / returns in results.
type PyIo = (String, &'static str, &'static str, Vec<PyDim>);

/// The declared dtype of a value the engine stores as `stored`: the model's element type when
/// the model declares one that is stored that way, else the stored dtype itself.
fn declared_dtype(stored: DType, decl: Option<ElemType>) -> &'static str {
    match decl {
        Some(e) if e.stored() == stored => e.name(),
        _ => stored.name(),
    }
}

/// A declared dim: a value, a `dim_param` name, or unknown (`None`).
fn declared_dim(d: &Option<Dim>) -> PyDim {
    match d {
        Some(Dim::Known(n)) => PyDim::Known(*n),
        Some(Dim::Sym(s)) => PyDim::Named(s.clone()),
        None => UNKNOWN,
    }
}

/// The importer names unnamed dynamic input dims `"<value>:<axis>"` so that error messages can
/// point at them; onnxruntime reports such dims as `None`, and so do we.
fn input_dim(value: &str, axis: usize, d: &Dim) -> PyDim {
    match d {
        Dim::Known(n) => PyDim::Known(*n),
        Dim::Sym(s) if *s == format!("{value}:{axis}") => UNKNOWN,
        Dim::Sym(s) => PyDim::Named(s.clone()),
    }
}

/// An inferred output dim: symbols that are the inputs' `dim_param`s keep their name; the
/// others (unnamed input dims, and the fresh symbols inference mints for dims it cannot derive,
/// `"Reshape?1"`) are unknown, as onnxruntime shows them.
fn output_dim(d: &Dim, params: &HashSet<&str>) -> PyDim {
    match d {
        Dim::Known(n) => PyDim::Known(*n),
        Dim::Sym(s) if params.contains(s.as_str()) => PyDim::Named(s.clone()),
        Dim::Sym(_) => UNKNOWN,
    }
}

/// onnxruntime's shape of a graph output: the declared shape merged with the inferred one as
/// ONNX merges shape information, per dim: an inferred value wins, then a declared value, then
/// a declared name, then an inferred name. A declared value that contradicts the inferred one
/// becomes unknown, and ranks that disagree leave the rank unknown (`[]`), as onnxruntime's
/// lenient merge does. No shape on either side is also `[]`: the rank is unknown.
///
/// `inferred` is `None` when the engine reports no dims: its `IoInfo` shows an output whose
/// shape inference leaves for specialization (`mpsrt_graph` holds `None`) and a scalar output
/// alike as `[]`, so an empty inferred shape defers to the declared one.
fn merge_output_shape(inferred: Option<Vec<PyDim>>, declared: Option<Vec<PyDim>>) -> Vec<PyDim> {
    match (inferred, declared) {
        (None, None) => Vec::new(),
        (Some(s), None) | (None, Some(s)) => s,
        (Some(inf), Some(dec)) if inf.len() != dec.len() => Vec::new(),
        (Some(inf), Some(dec)) => inf
            .into_iter()
            .zip(dec)
            .map(|(i, d)| match (i, d) {
                (PyDim::Known(a), PyDim::Known(b)) if a != b => UNKNOWN,
                (i @ PyDim::Known(_), _) => i,
                (_, d @ (PyDim::Known(_) | PyDim::Named(_))) => d,
                (i, _) => i,
            })
            .collect(),
    }
}

/// Describes the graph inputs and outputs as onnxruntime does.
fn describe(session: &Session) -> (Vec<PyIo>, Vec<PyIo>) {
    let inputs: Vec<PyIo> = session
        .inputs()
        .iter()
        .map(|i| {
            let shape = i.shape.iter().enumerate().map(|(k, d)| input_dim(&i.name, k, d)).collect();
            let dtype = declared_dtype(i.dtype, i.declared.elem);
            (i.name.clone(), dtype, i.dtype.name(), shape)
        })
        .collect();
    let params: HashSet<&str> = inputs
        .iter()
        .flat_map(|i| &i.3)
        .filter_map(|d| match d {
            PyDim::Named(s) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    let outputs = session
        .outputs()
        .iter()
        .map(|o| {
            let inferred = (!o.shape.is_empty())
                .then(|| o.shape.iter().map(|x| output_dim(x, &params)).collect());
            let declared = o.declared.shape.as_ref().map(|s| s.iter().map(declared_dim).collect());
            let shape = merge_output_shape(inferred, declared);
            (o.name.clone(), declared_dtype(o.dtype, o.declared.elem), o.dtype.name(), shape)
        })
        .collect();
    (inputs, outputs)
}

/// A loaded ONNX model bound to one place.
#[pyclass(name = "OnnxSession", module = "mpsrt._C", frozen)]
pub struct PyOnnxSession {
    // Arc: `run` moves a handle into the GIL-free closure while Python may drop the object.
    inner: Arc<Session>,
    inputs: Vec<PyIo>,
    outputs: Vec<PyIo>,
}

#[pymethods]
impl PyOnnxSession {
    /// Loads `model` (a path as `str`/`os.PathLike`, or the serialized bytes) for `place`.
    /// `fusion` and `memory_planning` are the engine's `SessionOptions` (both on by default);
    /// `precision` is `"f32"` (as the model says) or `"f16"` (heavy ops of an f32 model in f16).
    #[new]
    #[pyo3(signature = (model, place="mps", fusion=true, memory_planning=true, precision="f32"))]
    fn new(
        py: Python<'_>,
        model: &Bound<'_, PyAny>,
        place: &str,
        fusion: bool,
        memory_planning: bool,
        precision: &str,
    ) -> PyRes<Self> {
        let p = parse_place(place)?;
        let prec: Precision = precision.parse().py_err()?;
        let opts = SessionOptions { fusion, memory_planning };
        let session = if let Ok(b) = model.cast::<PyBytes>() {
            let bytes = b.as_bytes().to_vec();
            crate::guard::detach(py, "InferenceSession", move || {
                Session::load_bytes_with_precision(&bytes, p, opts, prec)
            })
        } else if model.is_instance_of::<PyString>() || model.hasattr("__fspath__")? {
            let path: PathBuf = model.extract()?;
            crate::guard::detach(py, "InferenceSession", move || {
                Session::load_with_precision(&path, p, opts, prec)
            })
        } else {
            return Err(PyTypeError::new_err(format!(
                "[onnx] expected a model path or bytes, got {}",
                model.get_type().name()?
            )));
        }
        .py_err()?;
        let (inputs, outputs) = describe(&session);
        Ok(PyOnnxSession { inner: Arc::new(session), inputs, outputs })
    }

    #[getter]
    fn place(&self) -> String {
        place_str(self.inner.place())
    }

    /// `(fusion, memory_planning)`: the engine options the session was compiled with.
    #[getter]
    fn options(&self) -> (bool, bool) {
        let o = self.inner.options();
        (o.fusion, o.memory_planning)
    }

    /// `[(name, declared dtype, stored dtype, shape)]` of the graph inputs, in graph order.
    fn inputs(&self) -> Vec<PyIo> {
        self.inputs.clone()
    }

    /// `[(name, declared dtype, stored dtype, shape)]` of the graph outputs, in graph order.
    fn outputs(&self) -> Vec<PyIo> {
        self.outputs.clone()
    }

    /// Runs the model on `{name: Tensor}` (tensors of the stored dtypes); returns every output
    /// as `(name, Tensor)` in graph order (the engine computes all outputs anyway, so selection
    /// is left to the caller).
    fn run(
        &self,
        py: Python<'_>,
        feeds: HashMap<String, PyRef<'_, PyTensor>>,
    ) -> PyRes<Vec<(String, PyTensor)>> {
        let feeds: HashMap<String, Tensor> =
            feeds.into_iter().map(|(k, t)| (k, t.inner.clone())).collect();
        let session = self.inner.clone();
        let outs = crate::guard::detach(py, "InferenceSession.run", move || session.run(&feeds))
            .py_err()?;
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
