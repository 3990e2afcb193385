//! Element types and the promotion rule used by every binary op.
//!
//! Promotion follows PyTorch's categories rather than NumPy's value-based rules, because users
//! arrive with PyTorch habits and because it never silently widens to float64 (which the GPU lacks):
//! `bool < integer < floating`; within a category the wider type wins; mixing categories
//! yields the higher category's type (`i32 + f16 -> f16`, `u8 + i8 -> i32`, `f16 + f32 -> f32`).

use crate::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// A tensor element type. f64 and i64 exist on the CPU only (Metal has no 64-bit floats);
/// sending them to the GPU is an error that suggests a cast.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    U8,
    I8,
    I32,
    I64,
    F16,
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 8] = [
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::F32,
        DType::F64,
    ];

    /// Bytes per element in memory (bool is one byte, as in NumPy).
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::F16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// NumPy's name for the type.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::F32 | DType::F64)
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::U8 | DType::I8 | DType::I32 | DType::I64)
    }

    pub fn is_signed(self) -> bool {
        !matches!(self, DType::Bool | DType::U8)
    }

    /// Whether the type can live in GPU memory (WGSL has 32-bit arithmetic; narrower types are
    /// stored packed into 32-bit words, 64-bit types are not supported).
    pub fn gpu_supported(self) -> bool {
        !matches!(self, DType::F64 | DType::I64)
    }

    /// The GPU-capable type to suggest when `self` is not.
    pub fn gpu_fallback(self) -> DType {
        match self {
            DType::F64 => DType::F32,
            DType::I64 => DType::I32,
            d => d,
        }
    }

    fn category(self) -> u8 {
        match self {
            DType::Bool => 0,
            DType::U8 | DType::I8 | DType::I32 | DType::I64 => 1,
            _ => 2,
        }
    }

    /// The result type of a binary op on `self` and `other` (see module docs).
    pub fn promote(self, other: DType) -> DType {
        use DType::*;
        if self == other {
            return self;
        }
        let (ca, cb) = (self.category(), other.category());
        if ca != cb {
            return if ca > cb { self } else { other };
        }
        match (self, other) {
            (U8, I8) | (I8, U8) => I32,
            _ if self.size() >= other.size() => self,
            _ => other,
        }
    }

    /// The type produced by ops that always return floats (exp, sqrt, mean, true division...).
    pub fn to_float(self) -> DType {
        if self.is_float() {
            self
        } else {
            DType::F32
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = Error;
    /// Accepts NumPy names and the usual aliases (`float`, `half`, `int`, `long`, `f32`, ...).
    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim().trim_start_matches("torch.").trim_start_matches("paddle.");
        Ok(match t {
            "bool" | "bool_" => DType::Bool,
            "uint8" | "u8" => DType::U8,
            "int8" | "i8" => DType::I8,
            "int32" | "i32" | "int" => DType::I32,
            "int64" | "i64" | "long" => DType::I64,
            "float16" | "f16" | "half" => DType::F16,
            "float32" | "f32" | "float" => DType::F32,
            "float64" | "f64" | "double" => DType::F64,
            _ => {
                return Err(Error::dtype(
                    "dtype",
                    format!(
                        "unknown dtype {s:?}: expected one of bool, uint8, int8, int32, int64, \
                         float16, float32, float64"
                    ),
                ))
            }
        })
    }
}

/// Rust scalar types that can be tensor elements. Conversions go through f64 so generic CPU
/// reference code can be written once; integer casts from float truncate toward zero like NumPy's
/// `astype` (saturating at the type's range instead of being undefined).
pub trait Element: Copy + Send + Sync + 'static + PartialOrd + fmt::Debug {
    const DTYPE: DType;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
}

macro_rules! element {
    ($t:ty, $d:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }
    };
}
element!(u8, U8);
element!(i8, I8);
element!(i32, I32);
element!(i64, I64);
element!(f32, F32);
element!(f64, F64);

impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        half::f16::from_f64(v)
    }
}

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn to_f64(self) -> f64 {
        if self {
            1.0
        } else {
            0.0
        }
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;

    #[test]
    fn promotion_table() {
        let cases = [
            (F32, F32, F32),
            (F16, F32, F32),
            (I32, F16, F16),
            (Bool, I32, I32),
            (Bool, Bool, Bool),
            (U8, I8, I32),
            (U8, I32, I32),
            (I32, I64, I64),
            (F32, F64, F64),
            (I64, F32, F32),
            (Bool, F16, F16),
        ];
        for (a, b, want) in cases {
            assert_eq!(a.promote(b), want, "{a} + {b}");
            assert_eq!(b.promote(a), want, "{b} + {a} (symmetry)");
        }
    }

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
        assert!("complex64".parse::<DType>().unwrap_err().to_string().starts_with("[dtype]"));
    }
}
