//! Activations a producing conv/GEMM can apply while storing its result ([`conv2d_act`],
//! [`gemm_act`]): the graph engine's Conv/Gemm + activation fusion. On the GPU the tiled GEMM
//! applies them in its epilogue (`mpsrt_kernels::MatmulAct`), so the activation costs no extra
//! dispatch or pass over memory; every other path (CPU, GEMV, split-K, direct convs) computes
//! the plain result and applies [`Activation::apply`], the same elementwise ops a separate
//! node would run — so both routes give the same values.
//!
//! [`conv2d_act`]: crate::conv2d_act
//! [`gemm_act`]: crate::gemm_act

use crate::Tensor;
use mpsrt_core::Result;
use mpsrt_kernels::MatmulAct;

/// An activation fused into the producing op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// `max(x, 0)`; NaN stays NaN.
    Relu,
    /// `x < 0 ? slope * x : x`.
    LeakyRelu(f32),
    /// Clamp into `[min, max]` (both bounds present; `min <= max`).
    Clip(f32, f32),
    /// `clamp(alpha * x + beta, 0, 1)` (ONNX HardSigmoid).
    HardSigmoid(f32, f32),
    /// `x * clamp(x / 6 + 0.5, 0, 1)` (MobileNetV3's activation).
    HardSwish,
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// `x * sigmoid(x)` (SiLU; EfficientNet's activation, exported as Sigmoid + Mul).
    Silu,
    /// Exact GELU, `0.5 x (1 + erf(x / √2))` (BERT's FFN). GEMM epilogues only: a conv asked
    /// for it applies it after (the direct conv kernels have no code for it).
    Gelu,
    /// GELU's tanh approximation.
    GeluTanh,
}

impl Activation {
    /// The activation as a separate elementwise op.
    pub fn apply(self, t: &Tensor) -> Result<Tensor> {
        match self {
            Activation::Relu => crate::relu(t),
            Activation::LeakyRelu(a) => crate::leaky_relu(t, a as f64),
            Activation::Clip(lo, hi) => crate::clip(t, Some(lo as f64), Some(hi as f64)),
            Activation::HardSigmoid(a, b) => crate::hardsigmoid(t, a as f64, b as f64),
            Activation::HardSwish => crate::hardswish(t),
            Activation::Sigmoid => crate::sigmoid(t),
            Activation::Silu => crate::silu(t),
            Activation::Gelu => crate::gelu(t, false),
            Activation::GeluTanh => crate::gelu(t, true),
        }
    }

    /// The GEMM epilogue variant and its two parameters (meta words 3 and 15).
    pub(crate) fn kernel(self) -> (MatmulAct, f32, f32) {
        match self {
            Activation::Relu => (MatmulAct::Relu, 0.0, 0.0),
            Activation::LeakyRelu(a) => (MatmulAct::LeakyRelu, a, 0.0),
            Activation::Clip(lo, hi) => (MatmulAct::Clip, lo, hi),
            Activation::HardSigmoid(a, b) => (MatmulAct::HardSigmoid, a, b),
            Activation::HardSwish => (MatmulAct::HardSwish, 1.0 / 6.0, 0.5),
            Activation::Sigmoid => (MatmulAct::Sigmoid, 0.0, 0.0),
            Activation::Silu => (MatmulAct::Silu, 0.0, 0.0),
            Activation::Gelu => (MatmulAct::Gelu, 0.0, 0.0),
            Activation::GeluTanh => (MatmulAct::GeluTanh, 0.0, 0.0),
        }
    }
}

/// `t` with `act` applied, or `t` itself.
pub(crate) fn maybe_apply(t: Tensor, act: Option<Activation>) -> Result<Tensor> {
    match act {
        Some(a) => a.apply(&t),
        None => Ok(t),
    }
}
