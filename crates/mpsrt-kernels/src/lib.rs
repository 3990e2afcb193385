//! WGSL for mpsrt's GPU kernels, as text: static sources (one file per op family) and the
//! renderer that generates elementwise kernels — including fused chains — from an expression
//! tree. No wgpu here, so every kernel can be validated and translated to MSL by naga in tests
//! without a GPU (we have no Mac: this is how Metal breakage is caught).

pub mod attention;
pub mod attention_coop;
pub mod attention_tiled;
pub mod concat;
pub mod conv_coop;
pub mod conv_gemm;
pub mod conv_se;
pub mod elementwise;
pub mod layernorm;
pub mod layout;
pub mod matmul;
pub mod matmul_coop;
pub mod matmul_coop_family;
mod matmul_coop_store;
pub mod matmul_coop_tune;
mod matmul_reduce4;
pub mod matmul_sk;
pub mod matmul_tune;
pub mod pool_f16;
pub mod reduce;
pub mod softmax;
pub mod softmax_masked;
#[cfg(feature = "validate")]
pub mod validate;
pub mod winograd;

pub use attention::{AttnSpec, ATTN_META_WORDS, ATTN_ROWS, ATTN_THREADS};
pub use attention_coop::AttnCoopSpec;
pub use attention_tiled::AttnTiledSpec;
pub use concat::{concat_kernel, concat_meta_words, MAX_CONCAT_INPUTS};
pub use conv_coop::{plan_coop_conv, ConvShape, CoopConvDevice, CoopConvRoute, CoopConvSpec};
pub use conv_gemm::{conv_gemm_meta, conv_splitk_reduce_kernel, ConvGemmSpec};
pub use conv_se::{se_gate_kernel, CONV1X1_VEC_WGSL, DW_POOL_WGSL, SE_MAX_C, SE_MAX_C4};
pub use elementwise::{BinaryFn, ElementwiseSpec, Expr, Mode, Tuning, UnaryFn, VType, VEC4_UNROLL};
pub use layernorm::{LayerNormSpec, LAYERNORM_WG};
pub use layout::coalesce;
pub use matmul::{
    gemm_splitk_reduce_kernel, matmul_meta, splitk_reduce_kernel, GemvSpec, MatmulAct, MatmulSpec,
    OperandLoad, MATMUL_META_HEAD,
};
pub use matmul_coop::{
    coop_variant_from_env, deep_coop_variant, default_coop_variant, large_coop_variant,
    plan_coop_matmul, CoopConfig, CoopDecline, CoopMatmulSpec, CoopTune, CoopVariant,
    COOP_LARGE_BLOCKS,
};
pub use matmul_reduce4::gemm_splitk_reduce4_kernel;
pub use matmul_sk::SK_META_WORDS;
pub use matmul_tune::GemmTune;
pub use pool_f16::pool_f16_wgsl;
pub use reduce::{ReduceMode, ReduceOp, ReduceSpec, REDUCE_WG};
pub use softmax_masked::MaskedSoftmaxSpec;
pub use winograd::{
    winograd_input_kernel, winograd_output_kernel, winograd_tiles, winograd_weights_kernel,
};

/// `conv.wgsl` with the shared conv activation (`conv_act_wgsl!`) appended.
pub const CONV_WGSL: &str = concat!(include_str!("conv.wgsl"), conv_act_wgsl!());

/// Every hand-written WGSL file of the crate, as `(name, source)`. Op families add their file
/// here (`("matmul", include_str!("matmul.wgsl"))`) so the naga/MSL test covers it.
pub const STATIC_SOURCES: &[(&str, &str)] = &[
    ("conv", CONV_WGSL),
    ("im2col", include_str!("im2col.wgsl")),
    ("pool", include_str!("pool.wgsl")),
    ("shape", include_str!("shape.wgsl")),
];

/// Threads per workgroup for the generated elementwise kernels.
pub const ELEMENTWISE_WG: u32 = 256;
