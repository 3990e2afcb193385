//! Core vocabulary shared by every mpsrt crate: element types, shapes/layouts with NumPy
//! broadcasting, device places and the op-prefixed error type. Knows nothing of wgpu,
//! Python or ONNX, so every other crate can depend on it cheaply.

mod dtype;
mod error;
mod layout;
mod place;

pub use dtype::{DType, Element};
pub use error::{Error, ErrorKind, Result};
pub use layout::{
    broadcast_shapes, checked_add, checked_mul, checked_nbytes, checked_numel, contiguous_strides,
    normalize_axis, numel, Layout, MAX_SIZE,
};
pub use place::Place;
