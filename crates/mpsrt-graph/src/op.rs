//! The op vocabulary of the graph IR, with typed attributes.
//!
//! Front ends (ONNX) resolve per-opset defaults and attribute-vs-input differences before building
//! an `Op`, so the executor sees one canonical form per op. Optional tensor inputs are trailing: a
//! node simply has fewer inputs (e.g. Conv without bias).

use crate::ir::HostTensor;
use mpsrt_core::DType;

/// Elementwise ops with one input and no attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Abs,
    Neg,
    Exp,
    Log,
    Sqrt,
    Reciprocal,
    Relu,
    Sigmoid,
    Tanh,
    Erf,
    Floor,
    Ceil,
    Round,
    Sin,
    Cos,
    Tan,
    Sign,
    Not,
    HardSwish,
    Softplus,
    Softsign,
    IsNaN,
    Acos,
    Asin,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Mish,
    BitwiseNot,
}

/// Elementwise ops with two broadcast inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    Mod,
    Equal,
    Less,
    Greater,
    LessOrEqual,
    GreaterOrEqual,
    And,
    Or,
    Xor,
    PRelu,
    /// C `fmod`: the result takes the dividend's sign (ONNX `Mod` with `fmod=1`).
    Fmod,
    BitShiftLeft,
    BitShiftRight,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
}

impl BinaryOp {
    /// Comparisons and logic ops produce bool.
    pub fn is_predicate(self) -> bool {
        use BinaryOp::*;
        matches!(self, Equal | Less | Greater | LessOrEqual | GreaterOrEqual | And | Or | Xor)
    }
}

/// Reductions over a set of axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSumExp,
    SumSquare,
}

/// ONNX-style automatic padding for convolutions and pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AutoPad {
    /// Use the explicit `pads`.
    #[default]
    NotSet,
    /// Output = ceil(in / stride), extra padding at the end.
    SameUpper,
    /// Output = ceil(in / stride), extra padding at the beginning.
    SameLower,
    /// No padding.
    Valid,
}

/// Convolution attributes. `pads` is `[begin_0.., end_0..]` as in ONNX; empty vectors mean the
/// default (stride 1, dilation 1, zero padding) and are expanded by shape inference.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConvAttrs {
    pub kernel_shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub pads: Vec<usize>,
    pub dilations: Vec<usize>,
    pub group: usize,
    pub auto_pad: AutoPad,
}

/// Extra attributes of a transposed convolution.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConvTransposeAttrs {
    pub conv: ConvAttrs,
    pub output_padding: Vec<usize>,
    /// Explicit output spatial shape, overriding pads when present.
    pub output_shape: Vec<usize>,
}

/// Pooling attributes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PoolAttrs {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub pads: Vec<usize>,
    pub dilations: Vec<usize>,
    pub auto_pad: AutoPad,
    pub ceil_mode: bool,
    pub count_include_pad: bool,
}

/// Interpolation of `Resize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResizeMode {
    Nearest,
    Linear,
    Cubic,
}

/// How output coordinates map back to input coordinates in `Resize` (ONNX names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoordTransform {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    /// Crop to `roi` (normalized) and resize; source points outside the input take
    /// `extrapolation_value`.
    TfCropAndResize,
}

/// Rounding of the source index for nearest-neighbour `Resize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NearestRounding {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

/// `Resize` attributes. Exactly one of `scales`/`sizes` is non-empty once canonical; a front end
/// that only has them as a runtime input passes it as the node's second input instead
/// (`sizes_input` says which), and canonicalization fills the field.
#[derive(Debug, Clone, PartialEq)]
pub struct ResizeAttrs {
    pub mode: ResizeMode,
    pub coord: CoordTransform,
    pub nearest: NearestRounding,
    pub cubic_coeff_a: f32,
    pub exclude_outside: bool,
    pub antialias: bool,
    /// Per-axis scale factors (all axes).
    pub scales: Vec<f32>,
    /// Per-axis output sizes (all axes).
    pub sizes: Vec<usize>,
    pub sizes_input: bool,
    /// The axes `scales`/`sizes`/`roi` refer to (ONNX `axes`); empty means every axis in order.
    pub axes: Vec<i64>,
    /// ONNX `keep_aspect_ratio_policy` for `sizes`.
    pub keep_aspect: KeepAspect,
    /// `tf_crop_and_resize` region: starts then ends, one per resized axis (normalized coords).
    pub roi: Vec<f32>,
    pub extrapolation_value: f32,
}

/// How `Resize` with `sizes` treats the aspect ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KeepAspect {
    /// Each axis gets its size (its own scale).
    #[default]
    Stretch,
    /// One scale for all resized axes: the largest whose result fits in every size.
    NotLarger,
    /// One scale for all resized axes: the smallest that covers every size.
    NotSmaller,
}

/// Padding modes of `Pad`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PadMode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

/// How a loss op reduces its per-element losses (ONNX `reduction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LossReduction {
    /// Per-element losses, shaped like the target.
    None,
    Sum,
    /// Weighted mean: the sum divided by the total weight of the non-ignored elements.
    Mean,
}

/// How a scatter op combines an update with the value already at its position (ONNX
/// `reduction`); `None` overwrites (the last update to a position wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScatterReduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

/// An operation with its attributes. Input order follows ONNX for each op.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    // ---- elementwise ----
    Unary(UnaryOp),
    Binary(BinaryOp),
    /// `(cond, x, y)`.
    Where,
    Cast {
        to: DType,
    },
    /// Front-end form `(x, like)`: cast to `like`'s dtype. Inference rewrites it to `Cast`.
    CastLike,
    Identity,
    LeakyRelu {
        alpha: f32,
    },
    Elu {
        alpha: f32,
    },
    Selu {
        alpha: f32,
        gamma: f32,
    },
    Celu {
        alpha: f32,
    },
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    ThresholdedRelu {
        alpha: f32,
    },
    /// `approximate_tanh` selects the tanh approximation (ONNX `approximate="tanh"`).
    Gelu {
        approximate_tanh: bool,
    },
    /// Bounds come from attributes, or from inputs `(x, min, max?)` that canonicalization
    /// folds into the attributes once their values are known.
    Clip {
        min: Option<f32>,
        max: Option<f32>,
    },
    /// `x * sigmoid(alpha * x)`.
    Swish {
        alpha: f32,
    },
    /// `x < -lambd ? x + bias : x > lambd ? x - bias : 0`.
    Shrink {
        lambd: f32,
        bias: f32,
    },
    /// Produces bool.
    IsInf {
        detect_negative: bool,
        detect_positive: bool,
    },
    /// Inference-mode dropout: identity (a second output, the mask, is all true).
    Dropout,

    // ---- linear algebra / nn ----
    MatMul,
    /// `alpha * A' @ B' + beta * C`; `C` (optional third input) broadcasts.
    Gemm {
        alpha: f32,
        beta: f32,
        trans_a: bool,
        trans_b: bool,
    },
    /// Inputs `(x, w, bias?)`.
    Conv(ConvAttrs),
    ConvTranspose(ConvTransposeAttrs),
    MaxPool(PoolAttrs),
    AveragePool(PoolAttrs),
    /// Lp pool with exponent `p`.
    LpPool {
        attrs: PoolAttrs,
        p: f32,
    },
    GlobalAveragePool,
    GlobalMaxPool,
    /// Inputs `(x, scale, bias, mean, var)`, inference form.
    BatchNormalization {
        epsilon: f32,
    },
    /// Inputs `(x, scale, bias?)`; normalizes over axes `axis..`.
    LayerNormalization {
        axis: i64,
        epsilon: f32,
    },
    /// Inputs `(x, scale, bias)`; `num_groups` channel groups normalized separately.
    GroupNormalization {
        num_groups: usize,
        epsilon: f32,
    },
    /// Inputs `(x, scale)`; root-mean-square normalization over axes `axis..`.
    RmsNormalization {
        axis: i64,
        epsilon: f32,
    },
    /// `x / ||x||_p` along `axis`.
    LpNormalization {
        axis: i64,
        p: i64,
    },
    /// `(x - mean) / std` over `axes`.
    MeanVarianceNormalization {
        axes: Vec<i64>,
    },
    /// One-hot of the argmax along `axis` (`flat`: opset < 13 2-D semantics like `SoftmaxFlat`).
    Hardmax {
        axis: i64,
        flat: bool,
    },
    /// Outputs `(values, indices)` of the `k` largest/smallest along `axis`. Front ends may pass
    /// a runtime `k` as a second input; canonicalization folds it in.
    TopK {
        axis: i64,
        k: usize,
        largest: bool,
        sorted: bool,
    },
    /// Identity matrix shaped like the input, ones on diagonal `k`; dtype from `dtype` or the input.
    EyeLike {
        dtype: Option<DType>,
        k: i64,
    },
    InstanceNormalization {
        epsilon: f32,
    },
    /// Scaled dot-product attention with optional mask, KV cache and GQA (ONNX `Attention`).
    Attention(crate::attention::AttentionAttrs),
    /// Cross-channel local response normalization.
    Lrn {
        size: usize,
        alpha: f32,
        beta: f32,
        bias: f32,
    },
    Softmax {
        axis: i64,
    },
    LogSoftmax {
        axis: i64,
    },
    /// ONNX <13 softmax: flatten to 2-D at `axis` and normalize the trailing block.
    SoftmaxFlat {
        axis: i64,
        log: bool,
    },
    /// Inputs `(scores [N, C, d..], target [N, d..] int, weight? [C])`: `-scores[n, target, d..]`
    /// weighted by `weight[target]`; targets equal to `ignore_index` contribute nothing.
    NegativeLogLikelihoodLoss {
        reduction: LossReduction,
        ignore_index: Option<i64>,
    },
    /// `NegativeLogLikelihoodLoss` of `log_softmax(scores, axis 1)`; an optional second output
    /// holds those log-probabilities.
    SoftmaxCrossEntropyLoss {
        reduction: LossReduction,
        ignore_index: Option<i64>,
    },
    /// `axes: None` means all axes (unless `noop_with_empty_axes`).
    Reduce {
        kind: ReduceKind,
        axes: Option<Vec<i64>>,
        keepdims: bool,
        noop_with_empty_axes: bool,
    },
    /// `max` picks ArgMax, otherwise ArgMin; produces int64.
    ArgReduce {
        max: bool,
        axis: i64,
        keepdims: bool,
        select_last_index: bool,
    },
    /// Cumulative sum along the axis given by the second input.
    CumSum {
        exclusive: bool,
        reverse: bool,
    },
    /// Sum of products over the labels of an Einstein-summation `equation` (see `einsum.rs`).
    Einsum {
        equation: String,
    },
    /// Cumulative product along the axis given by the second input.
    CumProd {
        exclusive: bool,
        reverse: bool,
    },
    /// Inputs `(indices, values [off, on])`: `on` where the (negative-wrapped) index equals the
    /// position along the new `axis` of length `depth`, else `off`. Front ends may pass a runtime
    /// depth as a third input; canonicalization folds it in.
    OneHot {
        axis: i64,
        depth: usize,
    },

    // ---- shape / data movement ----
    /// Inputs `(data, shape)`; shape is an int64 tensor (0 copies, -1 infers unless `allowzero`).
    Reshape {
        allowzero: bool,
    },
    /// `None` reverses the axes.
    Transpose {
        perm: Option<Vec<usize>>,
    },
    Concat {
        axis: i64,
    },
    /// `splits: None` splits evenly into as many parts as the node has outputs.
    Split {
        axis: i64,
        splits: Option<Vec<usize>>,
    },
    /// Inputs `(data, starts, ends, axes?, steps?)` as int tensors.
    Slice,
    Gather {
        axis: i64,
    },
    GatherElements {
        axis: i64,
    },
    Unsqueeze {
        axes: Vec<i64>,
    },
    /// `None` removes every size-1 axis.
    Squeeze {
        axes: Option<Vec<i64>>,
    },
    Flatten {
        axis: i64,
    },
    /// Inputs `(data, shape)`: broadcast to shape.
    Expand,
    /// Shape of the input as int64, sliced `[start, end)`.
    Shape {
        start: i64,
        end: Option<i64>,
    },
    Size,
    /// `pads` is `[begin_0.., end_0..]` over all axes (front end expands partial `axes`).
    Pad {
        mode: PadMode,
        pads: Vec<i64>,
        value: f32,
    },
    /// Inputs `(data, repeats)`.
    Tile,
    /// A constant produced by a node (front ends usually turn these into initializers).
    Constant(HostTensor),
    /// Input: int64 shape; fills with `value` (a one-element tensor).
    ConstantOfShape(HostTensor),
    /// Inputs `(start, limit, delta)` scalars.
    Range,
    DepthToSpace {
        blocksize: usize,
        crd: bool,
    },
    /// Inputs `(x)` when canonical, `(x, scales_or_sizes)` before (see `ResizeAttrs`).
    Resize(ResizeAttrs),
    SpaceToDepth {
        blocksize: usize,
    },
    /// Lower (`upper == false`) or upper triangle; optional second input `k`.
    Trilu {
        upper: bool,
    },

    // ---- quantization / scatter-gather ----
    /// Inputs `(x, scale, zero_point?)`: `clamp(round_half_even(x / scale) + zero_point, lo, hi)`
    /// stored as `to`. `[lo, hi]` is the range of the ONNX output type (int16/uint16 are held in
    /// int32, so the dtype alone does not give it). Scale is per tensor, per `axis`, or blocked
    /// along `axis` when `block_size > 0`.
    QuantizeLinear {
        axis: i64,
        block_size: usize,
        to: DType,
        lo: i64,
        hi: i64,
    },
    /// Inputs `(x, scale, zero_point?)`: `(x - zero_point) * scale`; scale broadcasts
    /// like QuantizeLinear's.
    DequantizeLinear {
        axis: i64,
        block_size: usize,
        /// `None`: the scale's dtype.
        to: Option<DType>,
    },
    /// Inputs `(data, indices, updates)`: `out[idx with idx[axis] = indices[idx]] = updates[idx]`.
    ScatterElements {
        axis: i64,
        reduction: ScatterReduction,
    },
    /// Inputs `(data, indices, updates)`: each index tuple (last dim of indices) addresses a slice.
    ScatterND {
        reduction: ScatterReduction,
    },
    /// Inputs `(data, indices)`: gathers slices addressed by the index tuples in the last dim.
    GatherND {
        batch_dims: usize,
    },
}

impl Op {
    /// A short name for messages (`"[Conv n12] ..."`).
    pub fn name(&self) -> String {
        match self {
            Op::Unary(u) => format!("{u:?}"),
            Op::Binary(b) => format!("{b:?}"),
            Op::Reduce { kind, .. } => format!("Reduce{kind:?}"),
            Op::ArgReduce { max, .. } => if *max { "ArgMax" } else { "ArgMin" }.to_string(),
            other => {
                let s = format!("{other:?}");
                let end = s.find(|c: char| !c.is_alphanumeric()).unwrap_or(s.len());
                s[..end].to_string()
            }
        }
    }

    /// Pure per-element ops whose output element depends only on the same (broadcast) element of
    /// each input: these may be fused into one generated kernel.
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Unary(_)
                | Op::Binary(_)
                | Op::Where
                | Op::Cast { .. }
                | Op::Identity
                | Op::LeakyRelu { .. }
                | Op::Elu { .. }
                | Op::Selu { .. }
                | Op::Celu { .. }
                | Op::HardSigmoid { .. }
                | Op::ThresholdedRelu { .. }
                | Op::Gelu { .. }
                | Op::Clip { .. }
                | Op::Swish { .. }
                | Op::Shrink { .. }
                | Op::IsInf { .. }
        )
    }

    /// Activations that a conv/matmul kernel could apply in its epilogue.
    pub fn is_activation(&self) -> bool {
        matches!(
            self,
            Op::Unary(UnaryOp::Relu | UnaryOp::Sigmoid | UnaryOp::Tanh | UnaryOp::HardSwish)
                | Op::LeakyRelu { .. }
                | Op::Clip { .. }
                | Op::Gelu { .. }
                | Op::HardSigmoid { .. }
                | Op::Swish { .. }
        )
    }

    /// Activations a conv/GEMM kernel applies in its epilogue (`Step::Epilogue`):
    /// Relu, LeakyRelu, Clip with both bounds, HardSigmoid, HardSwish, Sigmoid and Swish with
    /// alpha 1 (SiLU; `passes::simplify::fuse_silu` makes it from `x * Sigmoid(x)`).
    pub fn is_epilogue_activation(&self) -> bool {
        match self {
            Op::Unary(UnaryOp::Relu | UnaryOp::HardSwish | UnaryOp::Sigmoid)
            | Op::LeakyRelu { .. }
            | Op::HardSigmoid { .. } => true,
            Op::Swish { alpha } => *alpha == 1.0,
            Op::Clip { min: Some(lo), max: Some(hi) } => lo <= hi,
            _ => false,
        }
    }

    /// Ops the CPU constant folder may evaluate (shape/index arithmetic only).
    pub fn is_foldable(&self) -> bool {
        matches!(
            self,
            Op::Shape { .. }
                | Op::Size
                | Op::Gather { .. }
                | Op::Concat { .. }
                | Op::Slice
                | Op::Unsqueeze { .. }
                | Op::Squeeze { .. }
                | Op::Cast { .. }
                | Op::Reshape { .. }
                | Op::Flatten { .. }
                | Op::Identity
                | Op::Constant(_)
                | Op::ConstantOfShape(_)
                | Op::Range
                | Op::Expand
                | Op::Where
                | Op::Binary(_)
                | Op::Unary(UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Not | UnaryOp::Sign)
                | Op::Reduce {
                    kind: ReduceKind::Prod | ReduceKind::Sum | ReduceKind::Max | ReduceKind::Min,
                    ..
                }
        )
    }
}
