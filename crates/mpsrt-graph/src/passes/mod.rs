//! Graph-to-graph passes (attention patterns into one `Attention` node, GELU and decomposed
//! LayerNorm chains into one op in `transformer.rs`, dead-node elimination, identity removal, BatchNorm-into-Conv folding,
//! per-channel affine chains merged and folded into convs, `precision=f16` in `precision.rs`,
//! scalar scales moved past a MatMul in `matmul_scale.rs`)
//! and analyses (elementwise
//! fusion groups, conv/matmul epilogue candidates). Each pass keeps nodes topologically ordered.

pub mod affine;
pub mod attention;
pub mod dce;
pub mod fold_bn;
pub mod fusion;
pub mod matmul_scale;
pub mod precision;
pub mod simplify;
pub mod transformer;
