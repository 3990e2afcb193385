//! Compile-time values of the tracer: Python constants, and typed block/scalar values that live
//! in WGSL variables (the block-level IR is these typed values plus the WGSL they were emitted as).

use mpsrt_core::DType;

/// Element type of a traced value: a numeric dtype or a pointer into parameter `arg`'s buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    D(DType),
    /// A pointer is an i32 element index into the buffer of kernel parameter `arg` (element `elem`).
    Ptr {
        arg: usize,
        elem: DType,
    },
}

impl Ty {
    /// WGSL type holding one element in registers (f16 lives in f32, narrow ints in i32).
    pub fn wgsl(self) -> &'static str {
        match self {
            Ty::D(DType::Bool) => "bool",
            Ty::D(DType::F16 | DType::F32 | DType::F64) => "f32",
            _ => "i32",
        }
    }
    pub fn dtype(self) -> Option<DType> {
        match self {
            Ty::D(d) => Some(d),
            Ty::Ptr { .. } => None,
        }
    }
    pub fn describe(self) -> String {
        match self {
            Ty::D(d) => d.name().to_string(),
            Ty::Ptr { elem, .. } => format!("pointer<{}>", elem.name()),
        }
    }
}

/// A value living in WGSL: a scalar expression (`shape` empty) or a block held in a private
/// array named `expr` (element `i` of the invocation's share is `expr[i]`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tensor {
    pub expr: String,
    pub ty: Ty,
    pub shape: Vec<usize>,
}

impl Tensor {
    pub fn scalar(expr: impl Into<String>, ty: Ty) -> Tensor {
        Tensor { expr: expr.into(), ty, shape: Vec::new() }
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn is_block(&self) -> bool {
        !self.shape.is_empty()
    }
    /// The WGSL expression of this invocation's `i`-th element (the value itself for scalars).
    pub fn at(&self, i: &str) -> String {
        if self.is_block() {
            format!("{}[{i}]", self.expr)
        } else {
            self.expr.clone()
        }
    }
}

/// Which module an attribute chain starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Module {
    /// `mpsrt` / `triton`.
    Top,
    /// `mpsrt.language` / `triton.language` / `tl`.
    Lang,
}

/// Everything a Python expression can evaluate to during tracing.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) enum Val {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    #[default]
    None,
    DType(DType),
    /// `ptr.dtype`: the pointer type whose `element_ty` is the dtype.
    PtrType(DType),
    Tuple(Vec<Val>),
    Module(Module),
    /// A `tl.*` (or Python builtin) function, by name.
    Builtin(String),
    /// A `@jit` helper function, by name.
    JitFn(String),
    /// A bound method such as `x.to`.
    Method(Box<Tensor>, String),
    /// `tl.constexpr` used as an annotation or wrapper.
    ConstexprType,
    T(Tensor),
}

impl Val {
    pub fn describe(&self) -> String {
        match self {
            Val::Int(v) => format!("int {v}"),
            Val::Float(v) => format!("float {v}"),
            Val::Bool(v) => format!("bool {v}"),
            Val::Str(s) => format!("string {s:?}"),
            Val::None => "None".into(),
            Val::DType(d) => format!("dtype {d}"),
            Val::PtrType(d) => format!("pointer type to {d}"),
            Val::Tuple(v) => format!("tuple of {}", v.len()),
            Val::Module(_) => "module".into(),
            Val::Builtin(n) | Val::JitFn(n) => format!("function `{n}`"),
            Val::Method(_, n) => format!("method `{n}`"),
            Val::ConstexprType => "tl.constexpr".into(),
            Val::T(t) if t.is_block() => format!("block {:?} of {}", t.shape, t.ty.describe()),
            Val::T(t) => format!("scalar {}", t.ty.describe()),
        }
    }
}

/// Triton's promotion of two tensor dtypes: bool < integers < floats, the wider type within a
/// category, and mixed-signedness 8-bit ints widen to int32.
pub(crate) fn promote(a: DType, b: DType) -> DType {
    a.promote(b)
}

/// A WGSL literal of `v` as dtype `d` (register type per [`Ty::wgsl`]).
pub(crate) fn literal(v: f64, d: DType) -> String {
    match d {
        DType::Bool => (v != 0.0).to_string(),
        // Literals of f16 type take their f16 value, as Triton converts constants to the type.
        DType::F16 => f32_lit(half::f16::from_f64(v).to_f32()),
        DType::F32 | DType::F64 => f32_lit(v as f32),
        _ => i32_lit(v as i64),
    }
}

pub(crate) fn f32_lit(v: f32) -> String {
    if v.is_finite() {
        // Debug formatting always keeps a `.` or exponent, which WGSL needs for a float literal.
        format!("{v:?}f")
    } else {
        // WGSL has no inf/nan literals; build them from their bit patterns.
        format!("bitcast<f32>({}u)", v.to_bits())
    }
}

pub(crate) fn i32_lit(v: i64) -> String {
    let v = v as i32;
    if v == i32::MIN {
        "i32(-2147483647 - 1)".into()
    } else {
        format!("{v}i")
    }
}

/// WGSL expression converting `e` from element type `from` to `to` with Triton's semantics
/// (float to int truncates, narrow types wrap, f16 rounds to nearest).
pub(crate) fn cast_expr(e: &str, from: DType, to: DType) -> String {
    use DType::*;
    if from == to {
        return e.to_string();
    }
    let f_float = from.is_float();
    match to {
        Bool => {
            if from == Bool {
                e.into()
            } else if f_float {
                format!("({e} != 0.0f)")
            } else {
                format!("({e} != 0i)")
            }
        }
        F32 | F64 => match from {
            Bool => format!("select(0.0f, 1.0f, {e})"),
            F16 | F32 | F64 => e.into(),
            _ => format!("f32({e})"),
        },
        F16 => {
            let f = cast_expr(e, from, F32);
            format!("f16r({f})")
        }
        I32 | I64 => match from {
            Bool => format!("select(0i, 1i, {e})"),
            F16 | F32 | F64 => format!("i32({e})"),
            _ => e.into(),
        },
        U8 | I8 => {
            let i = cast_expr(e, from, I32);
            wrap_int(&i, to)
        }
    }
}

/// Re-establishes the value range of narrow types after an i32 / f32 operation.
pub(crate) fn normalize(e: &str, d: DType) -> String {
    match d {
        DType::F16 => format!("f16r({e})"),
        DType::U8 | DType::I8 => wrap_int(e, d),
        _ => e.to_string(),
    }
}

fn wrap_int(e: &str, d: DType) -> String {
    if d == DType::U8 {
        format!("(({e}) & 255i)")
    } else {
        format!("((({e}) << 24u) >> 24u)")
    }
}
