//! Calls: the `tl.*` functions, Python builtins usable on constexprs/scalars, `x.to(dtype)` and
//! `@jit` helper calls (inlined by the statement level).

use crate::emit::RedOp;
use crate::lower::Lowerer;
use crate::value::{cast_expr, i32_lit, normalize, promote, Tensor, Ty, Val};
use mpsrt_core::{DType, Result};

/// The `tl.*` functions this compiler supports (used in "unsupported" messages).
pub(crate) const LANG_FUNCS: &[&str] = &[
    "program_id",
    "num_programs",
    "arange",
    "load",
    "store",
    "zeros",
    "full",
    "zeros_like",
    "full_like",
    "where",
    "maximum",
    "minimum",
    "exp",
    "exp2",
    "log",
    "log2",
    "sqrt",
    "rsqrt",
    "abs",
    "sin",
    "cos",
    "sigmoid",
    "floor",
    "ceil",
    "sum",
    "max",
    "min",
    "dot",
    "cdiv",
    "cast",
    "range",
    "static_range",
    "assume",
    "multiple_of",
    "max_contiguous",
    "static_assert",
    "debug_barrier",
];

type Kwargs = Vec<(String, Val)>;

/// Largest block, in elements (Triton's limit too): keeps private arrays and scratch bounded.
pub(crate) const MAX_NUMEL: usize = 1 << 20;

impl<'a> Lowerer<'a> {
    /// Matches positional and keyword arguments to `names`; names in `ignored` are accepted
    /// and dropped (performance hints with no WGSL meaning).
    fn bind(
        &self,
        f: &str,
        names: &[&str],
        required: usize,
        args: Vec<Val>,
        kwargs: Kwargs,
        ignored: &[&str],
    ) -> Result<Vec<Option<Val>>> {
        if args.len() > names.len() {
            return Err(self.err(format!(
                "{f}() takes at most {} positional arguments, got {}",
                names.len(),
                args.len()
            )));
        }
        let mut out: Vec<Option<Val>> = args.into_iter().map(Some).collect();
        out.resize(names.len(), None);
        for (k, v) in kwargs {
            if let Some(p) = names.iter().position(|n| *n == k) {
                out[p] = Some(v);
            } else if !ignored.contains(&k.as_str()) {
                return Err(self.err(format!("{f}() got an unsupported keyword argument `{k}`")));
            }
        }
        if let Some(missing) = names[..required].iter().zip(&out).find(|(_, v)| v.is_none()) {
            return Err(self.err(format!("{f}() is missing argument `{}`", missing.0)));
        }
        Ok(out)
    }

    pub fn call(&mut self, f: Val, args: Vec<Val>, kwargs: Kwargs) -> Result<Val> {
        let name = match f {
            Val::JitFn(n) => return self.call_jit(&n, args, kwargs),
            Val::Method(t, m) if m == "to" => {
                let a = self.bind(
                    "to",
                    &["dtype", "fp_downcast_rounding", "bitcast"],
                    1,
                    args,
                    kwargs,
                    &[],
                )?;
                if a[2].as_ref().is_some_and(|b| self.const_truth(b) == Some(true)) {
                    return Err(self.err("x.to(dtype, bitcast=True) is not supported"));
                }
                let d = self.want_dtype(a[0].clone())?;
                return Ok(Val::T(self.cast(&t, d)?));
            }
            Val::Builtin(n) => n,
            Val::ConstexprType => {
                // `tl.constexpr(v)` just marks a compile-time value.
                return args
                    .into_iter()
                    .next()
                    .ok_or_else(|| self.err("tl.constexpr() needs a value"));
            }
            other => {
                return Err(
                    self.err(format!("{} is not callable in a @jit function", other.describe()))
                )
            }
        };
        let n = name.as_str();
        match n {
            "range" | "tl.range" | "tl.static_range" => {
                Err(self.err(format!("{n}() can only be used as a `for` loop iterator")))
            }
            "min" | "max" => self.py_minmax(n, args),
            "float" | "int" | "bool" | "abs" => self.py_conv(n, args),
            "len" => match args.first() {
                Some(Val::Tuple(t)) => Ok(Val::Int(t.len() as i64)),
                _ => Err(self.err("len() is supported on tuples only")),
            },
            "tl.program_id" | "tl.num_programs" => {
                let a = self.bind(n, &["axis"], 1, args, kwargs, &[])?;
                let axis = match a[0] {
                    Some(Val::Int(x @ 0..=2)) => x,
                    _ => return Err(self.err(format!("{n}() axis must be a constexpr 0, 1 or 2"))),
                };
                let e = if n == "tl.program_id" {
                    format!("pid{axis}")
                } else {
                    format!("i32(P.np{axis})")
                };
                Ok(Val::T(Tensor::scalar(e, Ty::D(DType::I32))))
            }
            "tl.arange" => {
                let a = self.bind(n, &["start", "end"], 2, args, kwargs, &[])?;
                let (Some(Val::Int(s)), Some(Val::Int(e))) = (&a[0], &a[1]) else {
                    return Err(self.err("tl.arange(start, end) needs constexpr int bounds"));
                };
                let len = e.checked_sub(*s).unwrap_or(-1);
                if len <= 0 || !(len as u64).is_power_of_two() || len > MAX_NUMEL as i64 {
                    return Err(self.err(format!(
                        "tl.arange length must be a power of two, got {len} ({s}..{e})"
                    )));
                }
                let t = self.em.decl_block(Ty::D(DType::I32), &[len as usize]);
                let (lhs, start) = (t.at("i"), i32_lit(*s));
                self.em.for_each(len as usize, |em| em.line(format!("{lhs} = i32(e) + {start};")));
                Ok(Val::T(t))
            }
            "tl.zeros" | "tl.full" => {
                let (shape, value, dtype) = if n == "tl.zeros" {
                    let a = self.bind(n, &["shape", "dtype"], 2, args, kwargs, &[])?;
                    (a[0].clone(), Val::Int(0), a[1].clone())
                } else {
                    let a = self.bind(n, &["shape", "value", "dtype"], 3, args, kwargs, &[])?;
                    (a[0].clone(), a[1].clone().unwrap_or(Val::Int(0)), a[2].clone())
                };
                let shape = self.want_shape(shape)?;
                let d = self.want_dtype(dtype)?;
                self.full(&shape, value, d)
            }
            "tl.zeros_like" | "tl.full_like" => {
                let a = self.bind(n, &["input", "value", "dtype"], 1, args, kwargs, &[])?;
                let Some(Val::T(t)) = &a[0] else {
                    return Err(self.err(format!("{n}() needs a tensor")));
                };
                let d = match &a[2] {
                    Some(v) => self.want_dtype(Some(v.clone()))?,
                    None => t.ty.dtype().unwrap_or(DType::I32),
                };
                let value = if n == "tl.zeros_like" {
                    Val::Int(0)
                } else {
                    a[1].clone().unwrap_or(Val::Int(0))
                };
                let shape = t.shape.clone();
                self.full(&shape, value, d)
            }
            "tl.load" => self.load(args, kwargs),
            "tl.store" => self.store(args, kwargs),
            "tl.where" => {
                let a = self.bind(n, &["condition", "x", "y"], 3, args, kwargs, &[])?;
                let [c, x, y] =
                    [a[0].clone(), a[1].clone(), a[2].clone()].map(Option::unwrap_or_default);
                self.where_(c, x, y)
            }
            "tl.maximum" | "tl.minimum" => {
                let a = self.bind(n, &["x", "y"], 2, args, kwargs, &["propagate_nan"])?;
                let (x, y) = self
                    .operands(a[0].clone().unwrap_or_default(), a[1].clone().unwrap_or_default())?;
                let ts = self.broadcast_all(&[x, y])?;
                let d = self.num_dtype(&ts[0])?.promote(self.num_dtype(&ts[1])?);
                let (dx, dy) = (self.num_dtype(&ts[0])?, self.num_dtype(&ts[1])?);
                let f = if n == "tl.maximum" { "max" } else { "min" };
                let shape =
                    if ts[0].is_block() { ts[0].shape.clone() } else { ts[1].shape.clone() };
                let d2 = if d == DType::Bool { DType::I32 } else { d };
                let r = self.em.map(Ty::D(d2), &shape, &[&ts[0], &ts[1]], |v| {
                    format!("{f}({}, {})", cast_expr(&v[0], dx, d2), cast_expr(&v[1], dy, d2))
                });
                Ok(Val::T(r))
            }
            "tl.exp" | "tl.exp2" | "tl.log" | "tl.log2" | "tl.sqrt" | "tl.rsqrt" | "tl.abs"
            | "tl.sin" | "tl.cos" | "tl.sigmoid" | "tl.floor" | "tl.ceil" => {
                let a = self.bind(n, &["x"], 1, args, kwargs, &[])?;
                self.math(&n[3..], a[0].clone().unwrap_or_default())
            }
            "tl.sum" | "tl.max" | "tl.min" => {
                let a = self.bind(
                    n,
                    &["input", "axis", "keep_dims", "return_indices"],
                    1,
                    args,
                    kwargs,
                    &["propagate_nan", "dtype"],
                )?;
                if a[3].as_ref().is_some_and(|v| self.const_truth(v) == Some(true)) {
                    return Err(self.err("return_indices=True is not supported"));
                }
                let keep = a[2].as_ref().and_then(|v| self.const_truth(v)).unwrap_or(false);
                let op = match n {
                    "tl.sum" => RedOp::Sum,
                    "tl.max" => RedOp::Max,
                    _ => RedOp::Min,
                };
                self.reduction(a[0].clone().unwrap_or_default(), a[1].clone(), keep, op)
            }
            "tl.dot" => {
                let a = self.bind(
                    n,
                    &[
                        "input",
                        "other",
                        "acc",
                        "input_precision",
                        "allow_tf32",
                        "max_num_imprecise_acc",
                        "out_dtype",
                    ],
                    2,
                    args,
                    kwargs,
                    &[],
                )?;
                let out_dtype = match &a[6] {
                    Some(v) => self.want_dtype(Some(v.clone()))?,
                    None => DType::F32,
                };
                self.dot(
                    a[0].clone().unwrap_or_default(),
                    a[1].clone().unwrap_or_default(),
                    a[2].clone(),
                    out_dtype,
                )
            }
            "tl.cdiv" => {
                let a = self.bind(n, &["x", "div"], 2, args, kwargs, &[])?;
                let (x, y) = (a[0].clone().unwrap_or_default(), a[1].clone().unwrap_or_default());
                if let (Val::Int(x), Val::Int(y)) = (&x, &y) {
                    if *y == 0 {
                        return Err(self.err("cdiv by zero"));
                    }
                    let sum = x
                        .checked_add(y - 1)
                        .ok_or_else(|| self.err("constexpr integer overflow"))?;
                    return Ok(Val::Int(sum.div_euclid(*y)));
                }
                let sum = self.binop(rustpython_parser::ast::Operator::Add, x, y.clone())?;
                let sum = self.binop(rustpython_parser::ast::Operator::Sub, sum, Val::Int(1))?;
                self.binop(rustpython_parser::ast::Operator::FloorDiv, sum, y)
            }
            "tl.next_power_of_2" => match args.first() {
                Some(Val::Int(v @ 0..=0x4000_0000_0000_0000)) => {
                    Ok(Val::Int((*v as u64).max(1).next_power_of_two() as i64))
                }
                _ => Err(self.err("next_power_of_2() needs a constexpr non-negative int")),
            },
            "tl.cast" => {
                let a = self.bind(
                    n,
                    &["input", "dtype", "fp_downcast_rounding", "bitcast"],
                    2,
                    args,
                    kwargs,
                    &[],
                )?;
                if a[3].as_ref().is_some_and(|b| self.const_truth(b) == Some(true)) {
                    return Err(self.err("tl.cast(..., bitcast=True) is not supported"));
                }
                let t = self.tensor_of(a[0].clone().unwrap_or_default(), None)?;
                let d = self.want_dtype(a[1].clone())?;
                Ok(Val::T(self.cast(&t, d)?))
            }
            // Compiler hints without a WGSL counterpart: value passes through.
            "tl.assume" => Ok(Val::None),
            "tl.multiple_of" | "tl.max_contiguous" => {
                args.into_iter().next().ok_or_else(|| self.err(format!("{n}() needs a value")))
            }
            "tl.static_assert" => {
                let cond = args.first().and_then(|v| self.const_truth(v));
                match cond {
                    Some(true) => Ok(Val::None),
                    Some(false) => {
                        let msg = match args.get(1) {
                            Some(Val::Str(s)) => s.clone(),
                            _ => String::new(),
                        };
                        Err(self.err(format!("static assertion failed {msg}")))
                    }
                    None => Err(self.err("tl.static_assert needs a constexpr condition")),
                }
            }
            "tl.debug_barrier" => {
                self.em.barrier();
                Ok(Val::None)
            }
            "tl.jit" => Err(self.err("@jit cannot be used inside a kernel")),
            _ => Err(self.err(format!("{n}() is not supported"))),
        }
    }

    fn num_dtype(&self, t: &Tensor) -> Result<DType> {
        t.ty.dtype().ok_or_else(|| self.err("this operation is not supported on pointers"))
    }

    pub fn want_dtype(&self, v: Option<Val>) -> Result<DType> {
        match v {
            Some(Val::DType(d)) => Ok(d),
            Some(other) => {
                Err(self
                    .err(format!("expected a dtype such as tl.float32, got {}", other.describe())))
            }
            None => Err(self.err("a dtype is required")),
        }
    }

    fn want_shape(&self, v: Option<Val>) -> Result<Vec<usize>> {
        let items = match v {
            Some(Val::Int(n)) => vec![Val::Int(n)],
            Some(Val::Tuple(t)) => t,
            _ => {
                return Err(
                    self.err("block shapes must be a constexpr int or tuple of constexpr ints")
                )
            }
        };
        let mut shape = Vec::new();
        for it in items {
            match it {
                Val::Int(n) if n > 0 && (n as u64).is_power_of_two() => shape.push(n as usize),
                other => {
                    return Err(self.err(format!(
                        "block dimensions must be constexpr powers of two, got {}",
                        other.describe()
                    )))
                }
            }
        }
        if shape.len() > 2 {
            return Err(self.err("blocks of rank > 2 are not supported"));
        }
        if shape.iter().product::<usize>() > MAX_NUMEL {
            return Err(
                self.err(format!("blocks may have at most {MAX_NUMEL} elements, got {shape:?}"))
            );
        }
        Ok(shape)
    }

    fn full(&mut self, shape: &[usize], value: Val, d: DType) -> Result<Val> {
        let v = self.tensor_of(value, Some(Ty::D(d)))?;
        if v.is_block() {
            return Err(self.err("tl.full value must be a scalar"));
        }
        let v = self.cast(&v, d)?;
        if shape.is_empty() {
            return Ok(Val::T(v));
        }
        Ok(Val::T(self.em.splat(&v, shape)))
    }

    /// Converts `t` to dtype `d` (Triton `.to`): truncating float->int, rounding to f16.
    pub fn cast(&mut self, t: &Tensor, d: DType) -> Result<Tensor> {
        let Ty::D(from) = t.ty else {
            return Err(self.err("casting pointers is not supported"));
        };
        if !d.gpu_supported() {
            return Err(self.err(format!("dtype {d} is not supported on the GPU")));
        }
        if from == d {
            return Ok(t.clone());
        }
        let shape = t.shape.clone();
        Ok(self.em.map(Ty::D(d), &shape, &[t], |v| cast_expr(&v[0], from, d)))
    }

    pub fn where_(&mut self, c: Val, x: Val, y: Val) -> Result<Val> {
        let c = self.tensor_of(c, Some(Ty::D(DType::Bool)))?;
        let (x, y) = self.operands(x, y)?;
        let ts = self.broadcast_all(&[c, x, y])?;
        let (dx, dy) = (self.num_dtype(&ts[1])?, self.num_dtype(&ts[2])?);
        let dc = self.num_dtype(&ts[0])?;
        let d = promote(dx, dy);
        let shape = ts.iter().find(|t| t.is_block()).map(|t| t.shape.clone()).unwrap_or_default();
        let r = self.em.map(Ty::D(d), &shape, &[&ts[0], &ts[1], &ts[2]], |v| {
            format!(
                "select({}, {}, {})",
                cast_expr(&v[2], dy, d),
                cast_expr(&v[1], dx, d),
                cast_expr(&v[0], dc, DType::Bool)
            )
        });
        Ok(Val::T(r))
    }

    fn math(&mut self, f: &str, x: Val) -> Result<Val> {
        let t = self.tensor_of(x, None)?;
        let from = self.num_dtype(&t)?;
        // Transcendentals work on floats; ints are converted to float32 (abs keeps its type).
        let d = if f == "abs" && from != DType::Bool { from } else { from.to_float() };
        let shape = t.shape.clone();
        let r = self.em.map(Ty::D(d), &shape, &[&t], |v| {
            let a = cast_expr(&v[0], from, d);
            let e = match f {
                "rsqrt" => format!("inverseSqrt({a})"),
                "sigmoid" => format!("1.0f / (1.0f + exp(-{a}))"),
                _ => format!("{f}({a})"),
            };
            normalize(&e, d)
        });
        Ok(Val::T(r))
    }

    fn reduction(&mut self, x: Val, axis: Option<Val>, keep: bool, op: RedOp) -> Result<Val> {
        let t = self.tensor_of(x, None)?;
        let d = self.num_dtype(&t)?;
        if !t.is_block() {
            return Ok(Val::T(t));
        }
        let rank = t.shape.len();
        let axis = match axis {
            None | Some(Val::None) => None,
            Some(Val::Int(a)) if a >= -(rank as i64) && a < rank as i64 => {
                Some(a.rem_euclid(rank as i64) as usize)
            }
            Some(other) => {
                return Err(self.err(format!(
                    "reduction axis must be a constexpr int in range for rank {rank}, got {}",
                    other.describe()
                )))
            }
        };
        // Sums accumulate narrow types in 32 bits (as Triton does); results return to the input
        // type for max/min, stay int32 for integer sums and f16 for f16 sums.
        let acc = match d {
            DType::Bool | DType::U8 | DType::I8 => DType::I32,
            DType::F16 => DType::F32,
            d => d,
        };
        let src = self.cast(&t, acc)?;
        let r = self.em.reduce(&src, Ty::D(acc), axis, op);
        let out_d = match (op, d) {
            (RedOp::Sum, DType::Bool | DType::U8 | DType::I8) => DType::I32,
            _ => d,
        };
        let mut r = self.cast(&r, out_d)?;
        if keep {
            let shape = match axis {
                None => vec![1; rank],
                Some(a) => {
                    let mut s = t.shape.clone();
                    s[a] = 1;
                    s
                }
            };
            r = if r.is_block() { Tensor { shape, ..r } } else { self.em.splat(&r, &shape) };
        }
        Ok(Val::T(r))
    }

    fn dot(&mut self, a: Val, b: Val, acc: Option<Val>, out_dtype: DType) -> Result<Val> {
        let (a, b) = (self.tensor_of(a, None)?, self.tensor_of(b, None)?);
        if a.shape.len() != 2 || b.shape.len() != 2 {
            return Err(self.err(format!(
                "tl.dot needs two 2-D blocks, got shapes {:?} and {:?}",
                a.shape, b.shape
            )));
        }
        if a.shape[1] != b.shape[0] {
            return Err(
                self.err(format!("tl.dot inner dimensions differ: {:?} x {:?}", a.shape, b.shape))
            );
        }
        let (da, db) = (self.num_dtype(&a)?, self.num_dtype(&b)?);
        if !da.is_float() || !db.is_float() {
            return Err(
                self.err(format!("tl.dot supports float16/float32 inputs, got {da} and {db}"))
            );
        }
        let out_shape = [a.shape[0], b.shape[1]];
        let acc = match acc {
            None | Some(Val::None) => None,
            Some(v) => {
                let t = self.tensor_of(v, Some(Ty::D(out_dtype)))?;
                if !self.broadcastable(&t.shape, &out_shape) {
                    return Err(self.err(format!(
                        "tl.dot accumulator shape {:?} does not match {:?}",
                        t.shape, out_shape
                    )));
                }
                Some(self.broadcast_to(&t, &out_shape))
            }
        };
        let ty = match &acc {
            Some(t) => t.ty,
            None => Ty::D(out_dtype),
        };
        Ok(Val::T(self.em.dot(&a, &b, acc.as_ref(), ty)))
    }

    fn py_minmax(&mut self, n: &str, args: Vec<Val>) -> Result<Val> {
        let args = match args.as_slice() {
            [Val::Tuple(t)] => t.clone(),
            _ => args,
        };
        if args.len() < 2 {
            return Err(self.err(format!("{n}() needs at least two values")));
        }
        let mut acc = args[0].clone();
        for v in &args[1..] {
            acc = match (&acc, v) {
                (Val::Int(a), Val::Int(b)) => {
                    Val::Int(if n == "min" { *a.min(b) } else { *a.max(b) })
                }
                _ => {
                    let (x, y) = self.operands(acc.clone(), v.clone())?;
                    if x.is_block() || y.is_block() {
                        return Err(self.err(format!(
                            "Python {n}() works on scalars; use tl.{n}imum for blocks"
                        )));
                    }
                    let (dx, dy) = (self.num_dtype(&x)?, self.num_dtype(&y)?);
                    let d = promote(dx, dy);
                    Val::T(self.em.map(Ty::D(d), &[], &[&x, &y], |v| {
                        format!("{n}({}, {})", cast_expr(&v[0], dx, d), cast_expr(&v[1], dy, d))
                    }))
                }
            };
        }
        Ok(acc)
    }

    fn py_conv(&mut self, n: &str, args: Vec<Val>) -> Result<Val> {
        let v = args.into_iter().next().unwrap_or(Val::None);
        Ok(match (n, v) {
            ("float", Val::Str(s)) => match s.trim().to_ascii_lowercase().as_str() {
                "inf" | "+inf" | "infinity" => Val::Float(f64::INFINITY),
                "-inf" | "-infinity" => Val::Float(f64::NEG_INFINITY),
                "nan" => Val::Float(f64::NAN),
                t => Val::Float(
                    t.parse().map_err(|_| self.err(format!("float({s:?}) is not a number")))?,
                ),
            },
            ("float", Val::Int(i)) => Val::Float(i as f64),
            ("float", Val::Float(f)) => Val::Float(f),
            ("int", Val::Int(i)) => Val::Int(i),
            ("int", Val::Float(f)) => Val::Int(f.trunc() as i64),
            ("int", Val::Bool(b)) => Val::Int(i64::from(b)),
            ("bool", v) if self.const_truth(&v).is_some() => {
                Val::Bool(self.const_truth(&v) == Some(true))
            }
            ("abs", Val::Int(i)) => {
                Val::Int(i.checked_abs().ok_or_else(|| self.err("constexpr integer overflow"))?)
            }
            ("abs", Val::Float(f)) => Val::Float(f.abs()),
            (n, v) => {
                return Err(self.err(format!(
                    "{n}() is supported on constexpr values only, got {}",
                    v.describe()
                )))
            }
        })
    }
}
