//! Elementwise kernels generated from an expression tree.
//!
//! One renderer serves eager ops (`add`, `exp`, comparisons, `where`, casts: an expression of one
//! or two nodes) and the graph compiler's fused chains (deeper trees). Techniques: one thread per
//! output element — or per 32-bit word when the output is packed (f16: 2, u8/i8/bool: 4 per
//! word, so no two threads write the same word) — with 2-D dispatch beyond 65535 workgroups;
//! a `Vec4` mode with 128-bit loads/stores for contiguous 32-bit operands; a `Strided` mode that
//! walks arbitrary views (broadcast, transposed, sliced with steps) from shape/stride metadata.
//! Scalars (Python numbers, activation parameters) live in the metadata block, not in the source,
//! so `x * 2.0` and `x * 3.0` share one pipeline.

use mpsrt_core::DType;
use std::fmt::Write;

/// `vec4`s each thread of a `Vec4` kernel handles, spaced one launch-width apart so every
/// load stays coalesced while each thread keeps several 128-bit loads in flight.
pub const VEC4_UNROLL: u32 = 2;

/// Launch shape of generated elementwise kernels: threads per workgroup and `vec4`s per thread in
/// `Vec4` mode. Part of the rendered source; the host must dispatch with the same values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tuning {
    pub workgroup: u32,
    pub unroll: u32,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning { workgroup: crate::ELEMENTWISE_WG, unroll: VEC4_UNROLL }
    }
}

/// The GPU value type an expression node computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VType {
    Float,
    Int,
    Bool,
}

impl VType {
    pub fn of(d: DType) -> VType {
        if d == DType::Bool {
            VType::Bool
        } else if d.is_float() {
            VType::Float
        } else {
            VType::Int
        }
    }
    fn wgsl(self) -> &'static str {
        match self {
            VType::Float => "f32",
            VType::Int => "i32",
            VType::Bool => "bool",
        }
    }
}

/// Primitive one-argument functions. Parameterised activations are compositions (see tensor crate).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryFn {
    Neg,
    Abs,
    Sign,
    Relu,
    Exp,
    Log,
    Sqrt,
    Sigmoid,
    Tanh,
    Erf,
    Floor,
    Ceil,
    Round,
    Sin,
    Cos,
    Recip,
    Not,
    IsNan,
    Asin,
    Acos,
    Atan,
    /// Bitwise complement of an integer.
    BitNot,
}

/// Primitive two-argument functions; both operands have the same type (callers cast first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryFn {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    /// Bitwise ops on integers.
    BitAnd,
    BitOr,
    BitXor,
    /// Shifts with ONNX `BitShift` edges: a shift outside `0..32` gives 0 (left) or the sign
    /// fill (right) instead of WGSL's shift-modulo-width.
    Shl,
    Shr,
}

/// An elementwise expression over the kernel's inputs and scalar slots.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Expr {
    Input(usize),
    /// Scalar slot `k` of the metadata block, of the given type.
    Scalar(usize, VType),
    Cast(VType, Box<Expr>),
    Unary(UnaryFn, Box<Expr>),
    Binary(BinaryFn, Box<Expr>, Box<Expr>),
    /// `where(cond, a, b)`.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
}

impl Expr {
    pub fn input(i: usize) -> Expr {
        Expr::Input(i)
    }
    pub fn unary(f: UnaryFn, e: Expr) -> Expr {
        Expr::Unary(f, Box::new(e))
    }
    pub fn binary(f: BinaryFn, a: Expr, b: Expr) -> Expr {
        Expr::Binary(f, Box::new(a), Box::new(b))
    }
    pub fn cast(t: VType, e: Expr) -> Expr {
        Expr::Cast(t, Box::new(e))
    }
    pub fn select(c: Expr, a: Expr, b: Expr) -> Expr {
        Expr::Select(Box::new(c), Box::new(a), Box::new(b))
    }

    /// Type-check against the input types; the error names the offending node.
    pub fn ty(&self, inputs: &[VType]) -> Result<VType, String> {
        use BinaryFn::*;
        use UnaryFn::*;
        Ok(match self {
            Expr::Input(i) => *inputs
                .get(*i)
                .ok_or_else(|| format!("input {i} does not exist ({} inputs)", inputs.len()))?,
            Expr::Scalar(_, t) => *t,
            Expr::Cast(t, e) => {
                e.ty(inputs)?;
                *t
            }
            Expr::Unary(f, e) => {
                let t = e.ty(inputs)?;
                let ok = match f {
                    Neg | Abs | Sign | Relu => t != VType::Bool,
                    Not => t == VType::Bool,
                    BitNot => t == VType::Int,
                    IsNan => t == VType::Float,
                    _ => t == VType::Float,
                };
                if !ok {
                    return Err(format!("{f:?} does not accept {t:?}"));
                }
                if *f == IsNan {
                    VType::Bool
                } else {
                    t
                }
            }
            Expr::Binary(f, a, b) => {
                let (ta, tb) = (a.ty(inputs)?, b.ty(inputs)?);
                if ta != tb {
                    return Err(format!("{f:?} operands differ: {ta:?} vs {tb:?}"));
                }
                match f {
                    Add | Sub | Mul | Pow | Max | Min if ta != VType::Bool => ta,
                    Div if ta == VType::Float => ta,
                    Eq | Ne => VType::Bool,
                    Lt | Le | Gt | Ge if ta != VType::Bool => VType::Bool,
                    And | Or if ta == VType::Bool => VType::Bool,
                    BitAnd | BitOr | BitXor | Shl | Shr if ta == VType::Int => ta,
                    _ => return Err(format!("{f:?} does not accept {ta:?}")),
                }
            }
            Expr::Select(c, a, b) => {
                let (tc, ta, tb) = (c.ty(inputs)?, a.ty(inputs)?, b.ty(inputs)?);
                if tc != VType::Bool || ta != tb {
                    return Err(format!("where needs a bool condition and equal branch types, got {tc:?}, {ta:?}, {tb:?}"));
                }
                ta
            }
        })
    }
}

/// How the kernel finds each operand's element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Every input is dense in output order (offset may differ).
    Linear,
    /// Linear with 4 elements per thread through `vec4` loads (32-bit types, 16-byte aligned).
    Vec4,
    /// Inputs addressed through shape/strides of rank `ndim` (broadcasts, transposes, steps).
    Strided { ndim: usize },
}

/// Everything that determines the generated source (the pipeline cache key).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ElementwiseSpec {
    pub inputs: Vec<DType>,
    pub output: DType,
    pub num_scalars: usize,
    pub expr: Expr,
    pub mode: Mode,
}

/// Storage element type for a dtype on the GPU (narrow types are packed into u32 words).
fn storage_ty(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::I32 => "i32",
        _ => "u32",
    }
}

impl ElementwiseSpec {
    /// Output elements each thread produces (default tuning).
    pub fn elements_per_thread(&self) -> u32 {
        self.elements_per_thread_with(Tuning::default())
    }

    /// Output elements each thread produces under `tuning`.
    pub fn elements_per_thread_with(&self, tuning: Tuning) -> u32 {
        match (self.mode, self.output) {
            (Mode::Vec4, _) => 4 * tuning.unroll,
            (_, DType::F16) => 2,
            (_, DType::U8 | DType::I8 | DType::Bool) => 4,
            _ => 1,
        }
    }

    /// Can `Vec4` mode serve this operation? (All operands 32-bit, counts and offsets 4-aligned.)
    pub fn vec4_ok(inputs: &[DType], output: DType, numel: usize, offsets: &[usize]) -> bool {
        let wide = |d: DType| matches!(d, DType::F32 | DType::I32);
        wide(output)
            && inputs.iter().all(|&d| wide(d))
            && numel.is_multiple_of(4)
            && offsets.iter().all(|o| o.is_multiple_of(4))
    }

    fn scalar_base(&self) -> usize {
        3
    }
    fn operand_base(&self) -> usize {
        3 + self.num_scalars
    }

    /// The metadata block: `[numel, base, out_shift, scalars.., (shape.., (offset, strides..) per
    /// input) | offsets..]`.
    ///
    /// A launch split into binding windows (`mpsrt-tensor/src/gpu/window.rs`) records one
    /// dispatch per range of output elements: `numel` is the range's length, the output is bound
    /// from the range's first element, and `offsets` are relative to each input's binding. In
    /// `Strided` mode the kernel decodes coordinates from `base + e` (`base`: the range's first
    /// element) and `offsets` may be negative; `Linear`/`Vec4` ignore `base` (the caller folds
    /// it into the offsets). `out_shift` places the range's first element in the output's
    /// binding, in storage units (elements; words for packed outputs; vec4s in `Vec4` mode).
    #[allow(clippy::too_many_arguments)]
    pub fn meta(
        &self,
        numel: usize,
        base: usize,
        out_shift: usize,
        scalars: &[u32],
        shape: &[usize],
        offsets: &[isize],
        strides: &[Vec<isize>],
    ) -> Vec<u32> {
        let mut w = vec![numel as u32, base as u32, out_shift as u32];
        w.extend_from_slice(scalars);
        match self.mode {
            Mode::Linear | Mode::Vec4 => w.extend(offsets.iter().map(|&o| o as u32)),
            Mode::Strided { .. } => {
                w.extend(shape.iter().map(|&d| d as u32));
                for (o, s) in offsets.iter().zip(strides) {
                    w.push(*o as i32 as u32);
                    w.extend(s.iter().map(|&x| x as i32 as u32));
                }
            }
        }
        w
    }

    fn meta_words(&self) -> usize {
        let n = self.inputs.len();
        self.operand_base()
            + match self.mode {
                Mode::Linear | Mode::Vec4 => n,
                Mode::Strided { ndim } => ndim + n * (ndim + 1),
            }
    }

    /// Render the WGSL source with the default tuning.
    pub fn render(&self) -> Result<String, String> {
        self.render_with(Tuning::default())
    }

    /// Render the WGSL source; fails (with a reason) if the expression does not type-check.
    pub fn render_with(&self, tuning: Tuning) -> Result<String, String> {
        let in_types: Vec<VType> = self.inputs.iter().map(|&d| VType::of(d)).collect();
        let out_t = self.expr.ty(&in_types)?;
        if out_t != VType::of(self.output) {
            return Err(format!("expression yields {out_t:?} but the output is {}", self.output));
        }
        if let Some(d) = self.inputs.iter().chain([&self.output]).find(|d| !d.gpu_supported()) {
            return Err(format!("{d} cannot be used on the GPU"));
        }
        if self.mode == Mode::Vec4 && !Self::vec4_ok(&self.inputs, self.output, 0, &[]) {
            return Err("vec4 mode needs 32-bit operands".into());
        }
        let mut s = String::with_capacity(4096);
        let words = self.meta_words().div_ceil(4).max(1);
        let n = self.inputs.len();
        let vec4 = self.mode == Mode::Vec4;
        let _ = writeln!(
            s,
            "// generated by mpsrt-kernels: {:?} -> {} ({:?})",
            self.inputs, self.output, self.mode
        );
        let _ = writeln!(s, "struct Meta {{ w: array<vec4<u32>, {words}> }};");
        for (i, &d) in self.inputs.iter().enumerate() {
            let t =
                if vec4 { format!("vec4<{}>", storage_ty(d)) } else { storage_ty(d).to_string() };
            let _ = writeln!(s, "@group(0) @binding({i}) var<storage, read> in{i}: array<{t}>;");
        }
        let ot = if vec4 {
            format!("vec4<{}>", storage_ty(self.output))
        } else {
            storage_ty(self.output).to_string()
        };
        let _ = writeln!(s, "@group(0) @binding({n}) var<storage, read_write> out: array<{ot}>;");
        let _ = writeln!(s, "@group(0) @binding({}) var<uniform> M: Meta;", n + 1);
        s.push_str("var<private> NAN_BITS: u32 = 0x7fc00000u;\nvar<private> INF_BITS: u32 = 0x7f800000u;\n");
        s.push_str("fn mw(i: u32) -> u32 { return M.w[i >> 2u][i & 3u]; }\n");
        s.push_str("fn nan() -> f32 { return bitcast<f32>(NAN_BITS); }\nfn inf() -> f32 { return bitcast<f32>(INF_BITS); }\n");
        // WGSL lets implementations assume floats are never NaN/inf in comparisons (lavapipe
        // folds `x != x` to false), so NaN/inf tests look at the bits, which cannot be assumed away.
        s.push_str(
            "fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }\n",
        );
        s.push_str("fn is_inf(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }\n");
        if !vec4 {
            for (i, &d) in self.inputs.iter().enumerate() {
                s.push_str(&loader(i, d));
            }
        }
        let mut helpers = Helpers::default();
        let body = self.emit(&self.expr, &mut helpers);
        s.push_str(&helpers.text);
        let params: Vec<String> =
            in_types.iter().enumerate().map(|(i, t)| format!("x{i}: {}", t.wgsl())).collect();
        let _ = writeln!(s, "fn f({}) -> {} {{ return {body}; }}", params.join(", "), out_t.wgsl());
        s.push_str(&self.index_fn());
        s.push_str(&self.main_fn(out_t, tuning));
        Ok(s)
    }

    /// `fn src(e) -> ...`: element offsets of every input for output element `e`.
    fn index_fn(&self) -> String {
        let n = self.inputs.len();
        let ob = self.operand_base();
        let mut s = String::new();
        match self.mode {
            Mode::Vec4 => {}
            Mode::Linear => {
                let _ = writeln!(s, "fn val(e: u32) -> {} {{", VType::of(self.output).wgsl());
                let args: Vec<String> =
                    (0..n).map(|i| format!("ld{i}(mw({}u) + e)", ob + i)).collect();
                let _ = writeln!(s, "  return f({});\n}}", args.join(", "));
            }
            Mode::Strided { ndim } => {
                let _ = writeln!(s, "fn val(e: u32) -> {} {{", VType::of(self.output).wgsl());
                let _ = writeln!(s, "  var rem = e + mw(1u);");
                for i in 0..n {
                    let _ = writeln!(s, "  var o{i} = i32(mw({}u));", ob + ndim + i * (ndim + 1));
                }
                for d in (0..ndim).rev() {
                    let _ = writeln!(
                        s,
                        "  {{ let size = mw({}u); let c = i32(rem % size); rem = rem / size;",
                        ob + d
                    );
                    for i in 0..n {
                        let _ = writeln!(
                            s,
                            "    o{i} = o{i} + c * i32(mw({}u));",
                            ob + ndim + i * (ndim + 1) + 1 + d
                        );
                    }
                    s.push_str("  }\n");
                }
                let args: Vec<String> = (0..n).map(|i| format!("ld{i}(u32(o{i}))")).collect();
                let _ = writeln!(s, "  return f({});\n}}", args.join(", "));
            }
        }
        s
    }

    fn main_fn(&self, out_t: VType, tuning: Tuning) -> String {
        let ept = self.elements_per_thread_with(tuning);
        let wg = tuning.workgroup;
        let mut s = String::new();
        let _ = writeln!(s, "@compute @workgroup_size({wg})");
        let _ = writeln!(s, "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{");
        let _ = writeln!(s, "  let t = gid.x + gid.y * nwg.x * {wg}u;");
        s.push_str("  let numel = mw(0u);\n");
        if self.mode == Mode::Vec4 {
            // Thread t handles vec4 indices t, t + T, t + 2T, ... (T = threads launched). All
            // loads are issued first from clamped (always valid) indices, so each thread keeps
            // every 128-bit load in flight at once; only the stores are guarded.
            let ob = self.operand_base();
            let _ = writeln!(s, "  let total = nwg.x * nwg.y * {wg}u;");
            s.push_str("  let n4 = numel >> 2u;\n  if (t >= n4) { return; }\n");
            for k in 0..tuning.unroll {
                let _ = writeln!(s, "  let j{k} = min(t + {k}u * total, n4 - 1u);");
                for i in 0..self.inputs.len() {
                    let _ = writeln!(s, "  let v{i}_{k} = in{i}[(mw({}u) >> 2u) + j{k}];", ob + i);
                }
            }
            for k in 0..tuning.unroll {
                let lane = |c: &str| {
                    let args: Vec<String> =
                        (0..self.inputs.len()).map(|i| format!("v{i}_{k}.{c}")).collect();
                    format!("f({})", args.join(", "))
                };
                let _ = writeln!(
                    s,
                    "  if (t + {k}u * total < n4) {{ out[t + {k}u * total + mw(2u)] = vec4<{}>({}, {}, {}, {}); }}",
                    storage_ty(self.output),
                    lane("x"),
                    lane("y"),
                    lane("z"),
                    lane("w")
                );
            }
            s.push_str("}\n");
            return s;
        }
        let _ = writeln!(s, "  if (t * {ept}u >= numel) {{ return; }}");
        if ept == 1 {
            s.push_str("  out[t + mw(2u)] = val(t);\n}\n");
            return s;
        }
        let zero = match out_t {
            VType::Float => "0.0",
            VType::Int => "0",
            VType::Bool => "false",
        };
        for k in 0..ept {
            let _ = writeln!(s, "  var r{k} = {zero};\n  if (t * {ept}u + {k}u < numel) {{ r{k} = val(t * {ept}u + {k}u); }}");
        }
        match self.output {
            DType::F16 => s.push_str("  out[t + mw(2u)] = pack2x16float(vec2<f32>(r0, r1));\n"),
            DType::Bool => s.push_str(
                "  out[t + mw(2u)] = select(0u, 1u, r0) | (select(0u, 1u, r1) << 8u) | (select(0u, 1u, r2) << 16u) | (select(0u, 1u, r3) << 24u);\n",
            ),
            _ => s.push_str(
                "  out[t + mw(2u)] = (u32(r0) & 0xffu) | ((u32(r1) & 0xffu) << 8u) | ((u32(r2) & 0xffu) << 16u) | ((u32(r3) & 0xffu) << 24u);\n",
            ),
        }
        s.push_str("}\n");
        s
    }

    fn emit(&self, e: &Expr, h: &mut Helpers) -> String {
        match e {
            Expr::Input(i) => format!("x{i}"),
            Expr::Scalar(k, t) => {
                let w = format!("mw({}u)", self.scalar_base() + k);
                match t {
                    VType::Float => format!("bitcast<f32>({w})"),
                    VType::Int => format!("bitcast<i32>({w})"),
                    VType::Bool => format!("({w} != 0u)"),
                }
            }
            Expr::Cast(t, inner) => {
                let from = self.ty_of(inner);
                let x = self.emit(inner, h);
                match (from, t) {
                    (a, b) if a == *b => x,
                    (VType::Bool, VType::Float) => format!("select(0.0, 1.0, {x})"),
                    (VType::Bool, VType::Int) => format!("select(0, 1, {x})"),
                    // Truthy unless ±0, by the bits: lavapipe folds NaN comparisons, so
                    // `x != 0.0` gave false for NaN (NumPy and the CPU give true).
                    (VType::Float, VType::Bool) => {
                        format!("((bitcast<u32>({x}) & 0x7fffffffu) != 0u)")
                    }
                    (VType::Int, VType::Bool) => format!("({x} != 0)"),
                    (VType::Float, VType::Int) => {
                        h.need("cast_fi");
                        format!("cast_fi({x})")
                    }
                    (_, VType::Float) => format!("f32({x})"),
                    _ => format!("i32({x})"),
                }
            }
            Expr::Unary(f, inner) => {
                let t = self.ty_of(inner);
                let x = self.emit(inner, h);
                unary_text(*f, t, &x, h)
            }
            Expr::Binary(f, a, b) => {
                let t = self.ty_of(a);
                let (x, y) = (self.emit(a, h), self.emit(b, h));
                binary_text(*f, t, &x, &y, h)
            }
            Expr::Select(c, a, b) => {
                let (c, a, b) = (self.emit(c, h), self.emit(a, h), self.emit(b, h));
                format!("select({b}, {a}, {c})")
            }
        }
    }

    fn ty_of(&self, e: &Expr) -> VType {
        let in_types: Vec<VType> = self.inputs.iter().map(|&d| VType::of(d)).collect();
        // `render` type-checked the whole tree first, so sub-trees check too.
        e.ty(&in_types).unwrap_or(VType::Float)
    }
}

/// Loader `ldI(e)` reading element `e` of input `I` as its compute type.
fn loader(i: usize, d: DType) -> String {
    let byte = format!("((in{i}[e >> 2u] >> ((e & 3u) * 8u)) & 0xffu)");
    match d {
        DType::F32 => format!("fn ld{i}(e: u32) -> f32 {{ return in{i}[e]; }}\n"),
        DType::I32 => format!("fn ld{i}(e: u32) -> i32 {{ return in{i}[e]; }}\n"),
        DType::F16 => format!(
            "fn ld{i}(e: u32) -> f32 {{ return unpack2x16float(in{i}[e >> 1u])[e & 1u]; }}\n"
        ),
        DType::U8 => format!("fn ld{i}(e: u32) -> i32 {{ return i32({byte}); }}\n"),
        DType::I8 => format!("fn ld{i}(e: u32) -> i32 {{ return (i32({byte}) << 24u) >> 24u; }}\n"),
        DType::Bool => format!("fn ld{i}(e: u32) -> bool {{ return {byte} != 0u; }}\n"),
        // Rejected by `render` before we get here.
        DType::F64 | DType::I64 => String::new(),
    }
}

/// Helper functions emitted once per kernel, in first-use order.
#[derive(Default)]
struct Helpers {
    text: String,
    seen: Vec<&'static str>,
}

impl Helpers {
    fn need(&mut self, name: &'static str) {
        if self.seen.contains(&name) {
            return;
        }
        self.seen.push(name);
        self.text.push_str(match name {
            "cast_fi" => "fn cast_fi(x: f32) -> i32 { if (is_nan(x)) { return 0; } if (x >= 2147483648.0) { return 2147483647; } if (x <= -2147483648.0) { return -2147483647 - 1; } return i32(x); }\n",
            "log" => "fn h_log(x: f32) -> f32 { if (x < 0.0) { return nan(); } if (x == 0.0) { return -inf(); } return log(x); }\n",
            "sqrt" => "fn h_sqrt(x: f32) -> f32 { if (x < 0.0) { return nan(); } return sqrt(x); }\n",
            "sigmoid" => "fn h_sigmoid(x: f32) -> f32 { if (x >= 0.0) { return 1.0 / (1.0 + exp(-x)); } let e = exp(x); return e / (1.0 + e); }\n",
            "tanh" => concat!(
                "fn h_tanh(x: f32) -> f32 {\n  let a = abs(x);\n",
                "  if (a < 0.125) { let x2 = x * x; return x * (1.0 + x2 * (-0.33333333 + x2 * (0.13333333 + x2 * (-0.053968254 + x2 * 0.021869488)))); }\n",
                "  let t = exp(-2.0 * a);\n  return sign(x) * (1.0 - t) / (1.0 + t);\n}\n"
            ),
            "erf" => concat!(
                "fn h_erf(x: f32) -> f32 {\n  let a = abs(x);\n",
                "  if (a < 0.5) { let x2 = x * x; return 1.1283791671 * x * (1.0 + x2 * (-0.33333333 + x2 * (0.1 + x2 * (-0.023809524 + x2 * (0.0046296296 - x2 * 0.00075757576))))); }\n",
                "  let t = 1.0 / (1.0 + 0.3275911 * a);\n",
                "  let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);\n",
                "  return select(y, -y, x < 0.0);\n}\n"
            ),
            "sign_f" => "fn h_sign(x: f32) -> f32 { if (is_nan(x)) { return x; } return sign(x); }\n",
            "max_f" => "fn h_max(a: f32, b: f32) -> f32 { if (is_nan(a) || is_nan(b)) { return nan(); } return max(a, b); }\n",
            "min_f" => "fn h_min(a: f32, b: f32) -> f32 { if (is_nan(a) || is_nan(b)) { return nan(); } return min(a, b); }\n",
            // C/IEEE pow special cases first (NumPy follows them), then sign by exponent parity.
            "pow_f" => concat!(
                "fn h_pow(a: f32, b: f32) -> f32 {\n",
                "  if (b == 0.0 || a == 1.0) { return 1.0; }\n",
                "  if (is_nan(a) || is_nan(b)) { return nan(); }\n",
                "  let ab = abs(a);\n",
                "  if (is_inf(b)) { if (ab == 1.0) { return 1.0; } if ((ab > 1.0) == (b > 0.0)) { return inf(); } return 0.0; }\n",
                "  let is_int = floor(b) == b;\n",
                "  let odd = is_int && (b - 2.0 * floor(b * 0.5)) == 1.0;\n",
                "  if (ab == 0.0 || is_inf(a)) {\n",
                "    var m = 0.0;\n    if ((ab == 0.0) == (b < 0.0)) { m = inf(); }\n",
                "    if (odd && (bitcast<u32>(a) & 0x80000000u) != 0u) { return -m; }\n    return m;\n  }\n",
                "  if (a < 0.0) {\n    if (!is_int) { return nan(); }\n    let r = pow(ab, b);\n    return select(r, -r, odd);\n  }\n",
                "  return pow(a, b);\n}\n"
            ),
            "pow_i" => concat!(
                "fn h_ipow(a: i32, b: i32) -> i32 {\n",
                "  if (b < 0) { if (a == 1) { return 1; } if (a == -1) { return select(1, -1, (b & 1) == 1); } return 0; }\n",
                "  var r = 1; var base = a; var e = b;\n",
                "  loop { if (e == 0) { break; } if ((e & 1) == 1) { r = r * base; } base = base * base; e = e >> 1u; }\n",
                "  return r;\n}\n"
            ),
            _ => "",
        });
    }
}

fn unary_text(f: UnaryFn, t: VType, x: &str, h: &mut Helpers) -> String {
    use UnaryFn::*;
    let call = |h: &mut Helpers, key: &'static str, name: &str| {
        h.need(key);
        format!("{name}({x})")
    };
    match (f, t) {
        (Neg, _) => format!("(-{x})"),
        (Abs, _) => format!("abs({x})"),
        (Sign, VType::Float) => call(h, "sign_f", "h_sign"),
        (Sign, _) => format!("sign({x})"),
        (Relu, VType::Float) => format!("select({x}, 0.0, {x} < 0.0)"),
        (Relu, _) => format!("max({x}, 0)"),
        (Exp, _) => format!("exp({x})"),
        (Log, _) => call(h, "log", "h_log"),
        (Sqrt, _) => call(h, "sqrt", "h_sqrt"),
        (Sigmoid, _) => call(h, "sigmoid", "h_sigmoid"),
        (Tanh, _) => call(h, "tanh", "h_tanh"),
        (Erf, _) => call(h, "erf", "h_erf"),
        (Floor, _) => format!("floor({x})"),
        (Ceil, _) => format!("ceil({x})"),
        (Round, _) => format!("round({x})"),
        (Sin, _) => format!("sin({x})"),
        (Cos, _) => format!("cos({x})"),
        (Recip, _) => format!("(1.0 / {x})"),
        (Not, _) => format!("(!{x})"),
        (IsNan, _) => format!("is_nan({x})"),
        (Asin, _) => format!("asin({x})"),
        (Acos, _) => format!("acos({x})"),
        (Atan, _) => format!("atan({x})"),
        (BitNot, _) => format!("(~{x})"),
    }
}

fn binary_text(f: BinaryFn, t: VType, x: &str, y: &str, h: &mut Helpers) -> String {
    use BinaryFn::*;
    let float = t == VType::Float;
    let op = |o: &str| format!("({x} {o} {y})");
    match f {
        Add => op("+"),
        Sub => op("-"),
        Mul => op("*"),
        Div => op("/"),
        Pow if float => {
            h.need("pow_f");
            format!("h_pow({x}, {y})")
        }
        Pow => {
            h.need("pow_i");
            format!("h_ipow({x}, {y})")
        }
        Max if float => {
            h.need("max_f");
            format!("h_max({x}, {y})")
        }
        Min if float => {
            h.need("min_f");
            format!("h_min({x}, {y})")
        }
        Max => format!("max({x}, {y})"),
        Min => format!("min({x}, {y})"),
        Eq => op("=="),
        // naga emits an ordered `!=` (false when either side is NaN); NumPy's is unordered.
        Ne if float => format!("(({x} != {y}) || is_nan({x}) || is_nan({y}))"),
        Ne => op("!="),
        Lt => op("<"),
        Le => op("<="),
        Gt => op(">"),
        Ge => op(">="),
        And => op("&&"),
        Or => op("||"),
        BitAnd => op("&"),
        BitOr => op("|"),
        BitXor => op("^"),
        Shl => format!("select(0, {x} << u32({y} & 31), {y} >= 0 && {y} < 32)"),
        Shr => format!("({x} >> u32(select(31, {y}, {y} >= 0 && {y} < 32)))"),
    }
}
