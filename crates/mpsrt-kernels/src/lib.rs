//! WGSL for mpsrt's GPU kernels, as text: static sources (one file per op family) and the
//! renderer that generates elementwise kernels — including fused chains — from an expression
//! tree. No wgpu here, so every kernel can be validated and translated to MSL by naga in tests
//! without a GPU (we have no Mac: this is how Metal breakage is caught).

pub mod elementwise;
pub mod layout;
#[cfg(feature = "validate")]
pub mod validate;

pub use elementwise::{BinaryFn, ElementwiseSpec, Expr, Mode, Tuning, UnaryFn, VType, VEC4_UNROLL};
pub use layout::coalesce;

/// Every hand-written WGSL file of the crate, as `(name, source)`. Op families add their file
/// here (`("matmul", include_str!("matmul.wgsl"))`) so the naga/MSL test covers it.
pub const STATIC_SOURCES: &[(&str, &str)] = &[];

/// Threads per workgroup for the generated elementwise kernels.
pub const ELEMENTWISE_WG: u32 = 256;
