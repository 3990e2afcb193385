//! The eager `Tensor` API of mpsrt.
//!
//! Op families live in their own modules (`binary`, `unary`, ...) and define semantics once, as
//! an elementwise expression or an op description; `cpu/` evaluates them as the reference and
//! `gpu/` launches the WGSL kernels, file for file (`cpu/elementwise.rs` ↔ `gpu/elementwise.rs`).

mod activation;
mod attention;
mod binary;
mod conv;
mod cpu;
mod create;
mod elementwise;
mod gpu;
pub mod layernorm;
mod matmul;
mod norm;
mod pool;
mod reduce;
mod scalar;
mod shape;
mod softmax;
mod softmax_masked;
mod tensor;
mod unary;

pub use activation::Activation;
pub use attention::{
    scaled_dot_product_attention, sdpa_fusable, sdpa_on_matrix_units, SdpaOptions,
};
pub use binary::*;
pub use conv::{
    conv1d, conv2d, conv2d_act, conv2d_fused, conv_transpose2d, Conv1dPadding, Conv2dOptions,
    ConvPadding, ConvTranspose2dOptions,
};
pub use cpu::on_cpu_workers;
pub use create::{arange, empty, full, manual_seed, ones, rand, randn, zeros};
pub use elementwise::{fused_elementwise, with_destination};
pub use gpu::attention::coop_plan as sdpa_coop_plan;
pub use gpu::conv_coop::{conv_coop_direct_launches, conv_coop_launches, plan_f16_conv};
pub use gpu::conv_gemm::{
    input_scale_pending, with_conv_destination, with_conv_input_affine_relu, with_conv_input_scale,
};
pub use gpu::conv_se::{conv1x1_vec, depthwise_conv_pool, se_gate};
pub use gpu::matmul::{
    matmul_kernel_name, plan_coop_splitk, plan_f16_gemm, plan_gemm, small_m_prefers_tiled, GemmPlan,
};
pub use gpu::matmul_plan::{plan_gemm_tuned, set_gemm_override, GemmOverride};
pub use matmul::{gemm, gemm_act, linear, matmul, matmul_fused, matmul_seq_major};
pub use mpsrt_kernels::GemmTune;
pub use mpsrt_kernels::{BinaryFn, Expr, UnaryFn, VType};
pub use norm::{batch_norm, batch_norm_train, group_norm, instance_norm, layer_norm};
pub use pool::{
    adaptive_avg_pool2d, adaptive_max_pool2d, adaptive_max_pool2d_with_indices, avg_pool2d,
    global_avg_pool2d, global_max_pool2d, max_pool2d, max_pool2d_with_indices, Pool2dOptions,
};
pub use reduce::{argmax, argmin, logsumexp, max, mean, min, norm, prod, std, sum, var};
pub use scalar::Scalar;
pub use shape::{
    concat, gather, index_select, pad, split, split_into, stack, tile, write_into, PadMode,
};
pub use softmax::{log_softmax, softmax};
pub use softmax_masked::masked_softmax;
pub use tensor::Tensor;
pub use unary::*;

pub use mpsrt_core::{DType, Error, ErrorKind, Layout, Place, Result};
