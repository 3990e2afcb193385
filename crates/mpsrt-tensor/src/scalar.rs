//! Host scalars mixed into tensor ops (`x + 2.0`), with PyTorch's rule that a Python number
//! does not widen a tensor's dtype within its category.

use mpsrt_core::DType;
use mpsrt_kernels::VType;

/// A host number or boolean.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    F(f64),
    I(i64),
    B(bool),
}

impl Scalar {
    /// The dtype `tensor <op> scalar` computes in: the tensor's dtype unless the scalar belongs to
    /// a higher category (float scalar with an int tensor → float32; int with bool → int32).
    pub fn result_dtype(self, tensor: DType) -> DType {
        match self {
            Scalar::F(_) if !tensor.is_float() => DType::F32,
            Scalar::I(_) if tensor == DType::Bool => DType::I32,
            _ => tensor,
        }
    }

    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::F(v) => v,
            Scalar::I(v) => v as f64,
            Scalar::B(b) => b as u8 as f64,
        }
    }

    pub fn as_i64(self) -> i64 {
        match self {
            Scalar::F(v) => v as i64,
            Scalar::I(v) => v,
            Scalar::B(b) => b as i64,
        }
    }

    pub fn as_bool(self) -> bool {
        match self {
            Scalar::F(v) => v != 0.0,
            Scalar::I(v) => v != 0,
            Scalar::B(b) => b,
        }
    }

    /// The 32-bit word the GPU kernel reads for this scalar as type `t`.
    pub(crate) fn gpu_word(self, t: VType) -> u32 {
        match t {
            VType::Float => (self.as_f64() as f32).to_bits(),
            VType::Int => self.as_i64() as i32 as u32,
            VType::Bool => self.as_bool() as u32,
        }
    }
}

impl From<f64> for Scalar {
    fn from(v: f64) -> Self {
        Scalar::F(v)
    }
}
impl From<f32> for Scalar {
    fn from(v: f32) -> Self {
        Scalar::F(v as f64)
    }
}
impl From<i64> for Scalar {
    fn from(v: i64) -> Self {
        Scalar::I(v)
    }
}
impl From<i32> for Scalar {
    fn from(v: i32) -> Self {
        Scalar::I(v as i64)
    }
}
impl From<bool> for Scalar {
    fn from(v: bool) -> Self {
        Scalar::B(v)
    }
}
