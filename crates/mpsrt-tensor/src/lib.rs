//! The eager `Tensor` API of mpsrt.
//!
//! Op families live in their own modules (`binary`, `unary`, ...) and define semantics once, as
//! an elementwise expression or an op description; `cpu/` evaluates them as the reference and
//! `gpu/` launches the WGSL kernels, file for file (`cpu/elementwise.rs` ↔ `gpu/elementwise.rs`).

mod binary;
mod cpu;
mod create;
mod elementwise;
mod gpu;
mod scalar;
mod tensor;
mod unary;

pub use binary::*;
pub use create::{arange, full, manual_seed, ones, rand, randn, zeros};
pub use elementwise::fused_elementwise;
pub use mpsrt_kernels::{BinaryFn, Expr, UnaryFn, VType};
pub use scalar::Scalar;
pub use tensor::Tensor;
pub use unary::*;

pub use mpsrt_core::{DType, Error, ErrorKind, Layout, Place, Result};
