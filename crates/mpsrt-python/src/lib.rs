//! `mpsrt._C`: the PyO3 extension module behind the `mpsrt` Python package.
//!
//! The Rust side stays thin: a `Tensor` class over `mpsrt_tensor::Tensor`, op tables keyed by
//! name (`ops.rs`), device and memory functions (`device.rs`) and the Triton-language / raw WGSL
//! kernel launcher (`jit.rs`), ONNX sessions (`onnx.rs`). Conversions to and from NumPy,
//! operator overloading and the Paddle/PyTorch naming live in the pure-Python package. Every wait
//! on the GPU releases the GIL.

mod compose;
mod device;
mod guard;
mod jit;
mod layers;
mod nn;
mod onnx;
mod ops;
mod reduce;
mod shape_ops;
mod tensor;
mod triton_knobs;

// Linked for its exported C symbols (`InitPlugin`, `mpsrt_paddle_*`): Paddle loads this
// library as its 'mps' CustomDevice plugin.
use mpsrt_core::{DType, Error, ErrorKind, Place};
pub use mpsrt_paddle;
use pyo3::exceptions::{
    PyMemoryError, PyNotImplementedError, PyOSError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;

/// Turns an mpsrt error into the Python exception of its kind, keeping the `[op] message` text.
pub(crate) fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e.kind {
        ErrorKind::InvalidArgument | ErrorKind::Shape => PyValueError::new_err(msg),
        ErrorKind::DType => PyTypeError::new_err(msg),
        ErrorKind::OutOfMemory => PyMemoryError::new_err(msg),
        ErrorKind::Device => PyRuntimeError::new_err(msg),
        ErrorKind::Unsupported => PyNotImplementedError::new_err(msg),
        ErrorKind::Io => PyOSError::new_err(msg),
    }
}

/// `Result` with the error already converted.
pub(crate) type PyRes<T> = PyResult<T>;

pub(crate) trait IntoPy<T> {
    fn py_err(self) -> PyRes<T>;
}

impl<T> IntoPy<T> for mpsrt_core::Result<T> {
    fn py_err(self) -> PyRes<T> {
        self.map_err(to_py)
    }
}

/// Parses a dtype name (`"float32"`, `"float16"`, `"int32"`, `"bool"`, ...).
pub(crate) fn parse_dtype(s: &str) -> PyRes<DType> {
    s.parse::<DType>().py_err()
}

/// Parses a place (`"cpu"`, `"mps"`, `"mps:N"`, `"gpu:N"`); bare `mps` means the current device.
pub(crate) fn parse_place(s: &str) -> PyRes<Place> {
    let p = s.parse::<Place>().py_err()?;
    let bare = !s.contains(':') && p.is_gpu();
    let p = if bare { Place::Gpu(mpsrt_runtime::current_device()) } else { p };
    mpsrt_runtime::validate_place(p).py_err()
}

pub(crate) fn place_str(p: Place) -> String {
    p.to_string()
}

#[pymodule]
#[pyo3(name = "_C")]
fn mpsrt_c(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<tensor::PyTensor>()?;
    tensor::register(m)?;
    ops::register(m)?;
    reduce::register(m)?;
    nn::register(m)?;
    shape_ops::register(m)?;
    layers::register(m)?;
    compose::register(m)?;
    device::register(m)?;
    jit::register(m)?;
    onnx::register(m)?;
    // Keep the ONNX Runtime plugin entry points (mpsrt-ort) in this library's dynamic symbols:
    // `mpsrt.ort.get_library_path()` hands this file to onnxruntime.
    std::hint::black_box(mpsrt_ort::entry_points());
    Ok(())
}
