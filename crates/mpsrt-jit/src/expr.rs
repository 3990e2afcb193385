//! The tracer's expression level: names, attributes, subscripts (`x[:, None]`), operators with
//! NumPy broadcasting and Triton's type promotion, and constant folding of constexpr arithmetic.

use crate::lower::{Env, Lowerer};
use crate::value::{cast_expr, literal, normalize, promote, Module, Tensor, Ty, Val};
use mpsrt_core::{DType, Result};
use rustpython_parser::ast::{self, CmpOp, Constant, Expr, Operator, UnaryOp};

/// Renders a binary / unary operation on WGSL operand expressions.
type Render2 = Box<dyn Fn(&str, &str) -> String>;
type Render1 = Box<dyn Fn(&str) -> String>;

impl<'a> Lowerer<'a> {
    pub fn expr(&mut self, env: &mut Env, e: &'a Expr) -> Result<Val> {
        let saved = self.cur;
        self.at(e);
        let v = self.expr_inner(env, e)?;
        self.cur = saved;
        Ok(v)
    }

    fn expr_inner(&mut self, env: &mut Env, e: &'a Expr) -> Result<Val> {
        match e {
            Expr::Constant(c) => self.constant(&c.value),
            Expr::Name(n) => {
                let id = n.id.as_str();
                if let Some(v) = env.get(id) {
                    return Ok(v.clone());
                }
                self.global(id).ok_or_else(|| self.err(format!("undefined name `{id}` (only parameters, local variables, tl, range/min/max and @jit functions are visible)")))
            }
            Expr::Attribute(a) => {
                let base = self.expr(env, &a.value)?;
                self.attribute(base, a.attr.as_str())
            }
            Expr::Subscript(s) => {
                let base = self.expr(env, &s.value)?;
                self.subscript(env, base, &s.slice)
            }
            Expr::BinOp(b) => {
                let l = self.expr(env, &b.left)?;
                let r = self.expr(env, &b.right)?;
                self.binop(b.op, l, r)
            }
            Expr::UnaryOp(u) => {
                let v = self.expr(env, &u.operand)?;
                self.unary(u.op, v)
            }
            Expr::Compare(c) => {
                if c.ops.len() != 1 {
                    return Err(self.err(
                        "chained comparisons (a < b < c) are not supported; combine with `&`",
                    ));
                }
                let l = self.expr(env, &c.left)?;
                let r = self.expr(env, &c.comparators[0])?;
                self.compare(c.ops[0], l, r)
            }
            Expr::BoolOp(b) => {
                let mut acc = self.expr(env, &b.values[0])?;
                for v in &b.values[1..] {
                    let rhs = self.expr(env, v)?;
                    let op =
                        if b.op == ast::BoolOp::And { Operator::BitAnd } else { Operator::BitOr };
                    acc = match (self.const_truth(&acc), self.const_truth(&rhs)) {
                        (Some(x), Some(y)) => {
                            Val::Bool(if op == Operator::BitAnd { x && y } else { x || y })
                        }
                        _ => {
                            let (l, r) = (self.scalar_bool(acc)?, self.scalar_bool(rhs)?);
                            self.binop(op, Val::T(l), Val::T(r))?
                        }
                    };
                }
                Ok(acc)
            }
            Expr::IfExp(i) => {
                let c = self.expr(env, &i.test)?;
                match self.const_truth(&c) {
                    Some(true) => self.expr(env, &i.body),
                    Some(false) => self.expr(env, &i.orelse),
                    None => {
                        let (a, b) = (self.expr(env, &i.body)?, self.expr(env, &i.orelse)?);
                        self.where_(c, a, b)
                    }
                }
            }
            Expr::Tuple(t) => Ok(Val::Tuple(self.exprs(env, &t.elts)?)),
            Expr::List(l) => Ok(Val::Tuple(self.exprs(env, &l.elts)?)),
            Expr::Call(c) => {
                let f = self.expr(env, &c.func)?;
                let args = self.exprs(env, &c.args)?;
                let mut kwargs = Vec::new();
                for k in &c.keywords {
                    let Some(name) = &k.arg else {
                        return Err(self.err("`**kwargs` in calls is not supported"));
                    };
                    kwargs.push((name.to_string(), self.expr(env, &k.value)?));
                }
                self.at(e);
                self.call(f, args, kwargs)
            }
            other => {
                Err(self.err(format!("{} is not supported in a @jit function", expr_name(other))))
            }
        }
    }

    fn exprs(&mut self, env: &mut Env, es: &'a [Expr]) -> Result<Vec<Val>> {
        es.iter().map(|e| self.expr(env, e)).collect()
    }

    fn constant(&self, c: &Constant) -> Result<Val> {
        Ok(match c {
            Constant::None => Val::None,
            Constant::Bool(b) => Val::Bool(*b),
            Constant::Str(s) => Val::Str(s.clone()),
            Constant::Float(f) => Val::Float(*f),
            Constant::Int(i) => Val::Int(
                i.to_string()
                    .parse::<i64>()
                    .map_err(|_| self.err("integer literal does not fit in 64 bits"))?,
            ),
            Constant::Tuple(t) => {
                Val::Tuple(t.iter().map(|c| self.constant(c)).collect::<Result<_>>()?)
            }
            _ => return Err(self.err("bytes, complex and `...` literals are not supported")),
        })
    }

    fn attribute(&mut self, base: Val, attr: &str) -> Result<Val> {
        match (&base, attr) {
            (Val::Module(Module::Top), "language") => Ok(Val::Module(Module::Lang)),
            (Val::Module(Module::Top), "cdiv" | "next_power_of_2" | "jit") => {
                Ok(Val::Builtin(format!("tl.{attr}")))
            }
            (Val::Module(Module::Lang), "constexpr") => Ok(Val::ConstexprType),
            (Val::Module(Module::Lang), a) => {
                if let Some(d) = dtype_named(a) {
                    return Ok(Val::DType(d));
                }
                if crate::builtins::LANG_FUNCS.contains(&a) {
                    return Ok(Val::Builtin(format!("tl.{a}")));
                }
                Err(self.err(format!(
                    "tl.{a} is not supported; supported: {} and dtypes float32/float16/int32/int8/uint8/int1",
                    crate::builtins::LANG_FUNCS.join(", ")
                )))
            }
            (Val::T(t), "to") => Ok(Val::Method(Box::new(t.clone()), "to".into())),
            (Val::T(t), "dtype") => Ok(match t.ty {
                Ty::D(d) => Val::DType(d),
                Ty::Ptr { elem, .. } => Val::PtrType(elem),
            }),
            (Val::T(t), "shape") => {
                Ok(Val::Tuple(t.shape.iter().map(|&n| Val::Int(n as i64)).collect()))
            }
            (Val::PtrType(d), "element_ty") => Ok(Val::DType(*d)),
            (Val::DType(d), "primitive_bitwidth") => Ok(Val::Int(d.size() as i64 * 8)),
            _ => Err(self.err(format!("{} has no supported attribute `{attr}`", base.describe()))),
        }
    }

    fn subscript(&mut self, env: &mut Env, base: Val, slice: &'a Expr) -> Result<Val> {
        if let Val::Tuple(items) = &base {
            let idx = self.expr(env, slice)?;
            return match idx {
                Val::Int(i) => {
                    let n = items.len() as i64;
                    let k = if i < 0 { i + n } else { i };
                    items
                        .get(k as usize)
                        .filter(|_| k >= 0)
                        .cloned()
                        .ok_or_else(|| self.err("tuple index out of range"))
                }
                _ => Err(self.err("tuples can only be indexed by a constexpr int")),
            };
        }
        let Val::T(t) = base else {
            return Err(self.err(format!("cannot index {}", base.describe())));
        };
        let parts: Vec<&Expr> = match slice {
            Expr::Tuple(tp) => tp.elts.iter().collect(),
            e => vec![e],
        };
        // Only `:` (keep a dimension) and `None` (insert a size-1 dimension) are supported:
        // inserting a unit dimension keeps the row-major element order, so no data moves.
        let mut shape = Vec::new();
        let mut dims = t.shape.iter();
        for p in parts {
            match p {
                Expr::Constant(c) if matches!(c.value, Constant::None) => shape.push(1),
                Expr::Slice(s) if s.lower.is_none() && s.upper.is_none() && s.step.is_none() => {
                    match dims.next() {
                        Some(&d) => shape.push(d),
                        None => {
                            return Err(self.err("too many `:` in subscript for the block's rank"))
                        }
                    }
                }
                _ => return Err(self.err(
                    "only `:` and `None` subscripts are supported (e.g. x[:, None], x[None, :])",
                )),
            }
        }
        shape.extend(dims);
        if shape.len() > 2 {
            return Err(self.err("blocks of rank > 2 are not supported"));
        }
        if !t.is_block() {
            return Ok(Val::T(self.em.splat(&t, &shape)));
        }
        Ok(Val::T(Tensor { expr: t.expr, ty: t.ty, shape }))
    }

    /// Converts a value to a tensor; Python numbers take the dtype of `hint` (Triton's weak
    /// typing of literals), defaulting to int32 / float32 / bool.
    pub fn tensor_of(&mut self, v: Val, hint: Option<Ty>) -> Result<Tensor> {
        let hint = hint.and_then(|t| t.dtype());
        let (x, d) = match v {
            Val::T(t) => return Ok(t),
            Val::Int(i) => {
                let d = match hint {
                    Some(h) if h.is_float() || h.is_int() => h,
                    _ => DType::I32,
                };
                if !d.is_float() && i32::try_from(i).is_err() {
                    return Err(self.err(format!(
                        "integer {i} does not fit in int32 (64-bit integers are not supported)"
                    )));
                }
                (i as f64, d)
            }
            Val::Float(f) => (
                f,
                if hint.is_some_and(|h| h.is_float()) {
                    hint.unwrap_or(DType::F32)
                } else {
                    DType::F32
                },
            ),
            Val::Bool(b) => match hint {
                Some(h) if h != DType::Bool => (f64::from(u8::from(b)), h),
                _ => return Ok(Tensor::scalar(b.to_string(), Ty::D(DType::Bool))),
            },
            other => {
                return Err(
                    self.err(format!("expected a number or tensor, got {}", other.describe()))
                )
            }
        };
        Ok(Tensor::scalar(literal(x, d), Ty::D(d)))
    }

    pub fn scalar_bool(&mut self, v: Val) -> Result<Tensor> {
        match v {
            Val::T(t) if !t.is_block() => Ok(self.bool_of(t)),
            Val::T(_) => {
                Err(self.err("`and`/`or`/`not` need scalars; use `&`, `|` and `~` on blocks"))
            }
            other => {
                let t = self.tensor_of(other, Some(Ty::D(DType::Bool)))?;
                Ok(self.bool_of(t))
            }
        }
    }

    /// Converts two operands to tensors, each literal typed after the other operand.
    pub fn operands(&mut self, a: Val, b: Val) -> Result<(Tensor, Tensor)> {
        let ha = if let Val::T(t) = &b { Some(t.ty) } else { None };
        let hb = if let Val::T(t) = &a { Some(t.ty) } else { None };
        Ok((self.tensor_of(a, ha)?, self.tensor_of(b, hb)?))
    }

    pub fn broadcastable(&self, from: &[usize], to: &[usize]) -> bool {
        from.len() <= to.len()
            && from.iter().rev().zip(to.iter().rev()).all(|(&f, &t)| f == t || f == 1)
    }

    /// NumPy broadcast of two shapes.
    pub fn bshape(&self, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
        let n = a.len().max(b.len());
        let pad = |s: &[usize]| -> Vec<usize> {
            std::iter::repeat_n(1, n - s.len()).chain(s.iter().copied()).collect()
        };
        let (pa, pb) = (pad(a), pad(b));
        let mut out = Vec::with_capacity(n);
        for (&x, &y) in pa.iter().zip(&pb) {
            out.push(match (x, y) {
                _ if x == y => x,
                (1, y) => y,
                (x, 1) => x,
                _ => {
                    return Err(self
                        .err(format!("block shapes {a:?} and {b:?} cannot be broadcast together")))
                }
            });
        }
        Ok(out)
    }

    /// Broadcasts `t` to `shape` (already checked compatible).
    pub fn broadcast_to(&mut self, t: &Tensor, shape: &[usize]) -> Tensor {
        if t.shape == shape {
            return t.clone();
        }
        if !t.is_block() {
            return self.em.splat(t, shape);
        }
        let mut padded: Vec<usize> = std::iter::repeat_n(1, shape.len() - t.shape.len()).collect();
        padded.extend(&t.shape);
        let same_numel = padded.iter().product::<usize>() == shape.iter().product::<usize>();
        let src = Tensor { expr: t.expr.clone(), ty: t.ty, shape: padded };
        if same_numel {
            // Only unit dimensions were added: the element order is unchanged.
            return Tensor { shape: shape.to_vec(), ..src };
        }
        self.em.relayout(&src, shape)
    }

    /// Brings tensors to one broadcast shape.
    pub fn broadcast_all(&mut self, ts: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut shape: Vec<usize> = Vec::new();
        for t in ts {
            shape = self.bshape(&shape, &t.shape)?;
        }
        if shape.len() > 2 {
            return Err(self.err("blocks of rank > 2 are not supported"));
        }
        if shape.iter().product::<usize>() > crate::builtins::MAX_NUMEL {
            return Err(self.err(format!(
                "broadcasting gives a block of shape {shape:?}, over the {} element limit",
                crate::builtins::MAX_NUMEL
            )));
        }
        Ok(ts
            .iter()
            .map(|t| if t.is_block() { self.broadcast_to(t, &shape) } else { t.clone() })
            .collect())
    }

    pub fn binop(&mut self, op: Operator, a: Val, b: Val) -> Result<Val> {
        if let Some(v) = self.fold(op, &a, &b)? {
            return Ok(v);
        }
        if let (Operator::Pow, Val::T(t), Val::Int(n @ 1..=4)) = (op, &a, &b) {
            // Small integer powers multiply out: exact, and defined for negative bases.
            let mut acc = Val::T(t.clone());
            for _ in 1..*n {
                acc = self.binop(Operator::Mult, acc, Val::T(t.clone()))?;
            }
            return Ok(acc);
        }
        let (x, y) = self.operands(a, b)?;
        let ts = self.broadcast_all(&[x, y])?;
        let (x, y) = (&ts[0], &ts[1]);
        let shape = if x.is_block() { x.shape.clone() } else { y.shape.clone() };
        // Pointer arithmetic: pointer +/- integer offsets stays a pointer into the same buffer.
        match (x.ty, y.ty, op) {
            (Ty::Ptr { .. }, Ty::D(d), Operator::Add | Operator::Sub)
            | (Ty::D(d), Ty::Ptr { .. }, Operator::Add)
                if d.is_int() || d == DType::Bool =>
            {
                let ty = if matches!(x.ty, Ty::Ptr { .. }) { x.ty } else { y.ty };
                let sym = if op == Operator::Add { "+" } else { "-" };
                // `base_ptr + int32 offsets`: the offsets are the pointer, no new variable.
                let (base, offs) = if matches!(x.ty, Ty::Ptr { .. }) { (x, y) } else { (y, x) };
                if base.expr == "0i" && offs.ty == Ty::D(DType::I32) && (op == Operator::Add) {
                    return Ok(Val::T(Tensor {
                        expr: offs.expr.clone(),
                        ty,
                        shape: offs.shape.clone(),
                    }));
                }
                let dx = x.ty.dtype().unwrap_or(DType::I32);
                let dy = y.ty.dtype().unwrap_or(DType::I32);
                return Ok(Val::T(self.em.map(ty, &shape, &[x, y], |v| {
                    format!(
                        "{} {sym} {}",
                        cast_expr(&v[0], dx, DType::I32),
                        cast_expr(&v[1], dy, DType::I32)
                    )
                })));
            }
            (Ty::Ptr { .. }, _, _) | (_, Ty::Ptr { .. }, _) => {
                return Err(self.err(format!(
                    "unsupported pointer arithmetic: {} {} {} (only pointer +/- integer offsets)",
                    x.ty.describe(),
                    op_sym(op),
                    y.ty.describe()
                )))
            }
            _ => {}
        }
        let (dx, dy) = (x.ty.dtype().unwrap_or(DType::I32), y.ty.dtype().unwrap_or(DType::I32));
        let mut d = promote(dx, dy);
        let sym = op_sym(op);
        let is_float = d.is_float();
        let out: Render2 = match op {
            Operator::Add | Operator::Sub | Operator::Mult => {
                if d == DType::Bool {
                    d = DType::I32;
                }
                Box::new(move |a, b| format!("{a} {sym} {b}"))
            }
            Operator::Div => {
                d = d.to_float();
                Box::new(|a, b| format!("{a} / {b}"))
            }
            // Integer `//` and `%` follow C (truncation), as Triton's do; float `//` floors.
            Operator::FloorDiv if is_float => Box::new(|a, b| format!("floor({a} / {b})")),
            Operator::FloorDiv | Operator::Mod => {
                if d == DType::Bool {
                    d = DType::I32;
                }
                let sym = if op == Operator::Mod { "%" } else { "/" };
                Box::new(move |a, b| format!("{a} {sym} {b}"))
            }
            Operator::Pow => {
                d = d.to_float();
                Box::new(|a, b| format!("pow({a}, {b})"))
            }
            Operator::BitAnd | Operator::BitOr | Operator::BitXor if !is_float => {
                if d == DType::Bool && op == Operator::BitXor {
                    Box::new(|a, b| format!("{a} != {b}"))
                } else {
                    Box::new(move |a, b| format!("{a} {sym} {b}"))
                }
            }
            Operator::LShift | Operator::RShift if d.is_int() => {
                Box::new(move |a, b| format!("{a} {sym} u32({b})"))
            }
            _ => {
                return Err(self.err(format!(
                    "operator `{sym}` is not supported on {} and {}",
                    x.ty.describe(),
                    y.ty.describe()
                )))
            }
        };
        let r = self.em.map(Ty::D(d), &shape, &[x, y], |v| {
            normalize(&out(&cast_expr(&v[0], dx, d), &cast_expr(&v[1], dy, d)), d)
        });
        Ok(Val::T(r))
    }

    pub fn compare(&mut self, op: CmpOp, a: Val, b: Val) -> Result<Val> {
        let sym = match op {
            CmpOp::Eq | CmpOp::Is => "==",
            CmpOp::NotEq | CmpOp::IsNot => "!=",
            CmpOp::Lt => "<",
            CmpOp::LtE => "<=",
            CmpOp::Gt => ">",
            CmpOp::GtE => ">=",
            _ => return Err(self.err("`in` / `not in` are not supported")),
        };
        if let Some(v) = fold_cmp(sym, &a, &b) {
            return Ok(Val::Bool(v));
        }
        let (x, y) = self.operands(a, b)?;
        let ts = self.broadcast_all(&[x, y])?;
        let (x, y) = (&ts[0], &ts[1]);
        let shape = if x.is_block() { x.shape.clone() } else { y.shape.clone() };
        let (dx, dy) = (x.ty.dtype().unwrap_or(DType::I32), y.ty.dtype().unwrap_or(DType::I32));
        let mut d = promote(dx, dy);
        if d == DType::Bool && sym != "==" && sym != "!=" {
            d = DType::I32;
        }
        let r = self.em.map(Ty::D(DType::Bool), &shape, &[x, y], |v| {
            format!("{} {sym} {}", cast_expr(&v[0], dx, d), cast_expr(&v[1], dy, d))
        });
        Ok(Val::T(r))
    }

    pub fn unary(&mut self, op: UnaryOp, v: Val) -> Result<Val> {
        match (&v, op) {
            (Val::Int(i), UnaryOp::USub) => {
                return i
                    .checked_neg()
                    .map(Val::Int)
                    .ok_or_else(|| self.err("constexpr integer overflow"))
            }
            (Val::Float(f), UnaryOp::USub) => return Ok(Val::Float(-f)),
            (Val::Int(_) | Val::Float(_), UnaryOp::UAdd) => return Ok(v),
            (Val::Int(i), UnaryOp::Invert) => return Ok(Val::Int(!i)),
            (Val::Bool(b), UnaryOp::Not) => return Ok(Val::Bool(!b)),
            (Val::Int(i), UnaryOp::Not) => return Ok(Val::Bool(*i == 0)),
            _ => {}
        }
        if op == UnaryOp::Not {
            let b = self.scalar_bool(v)?;
            return Ok(Val::T(Tensor::scalar(format!("!({})", b.expr), b.ty)));
        }
        let t = self.tensor_of(v, None)?;
        let Ty::D(d) = t.ty else {
            return Err(self.err("unary operators are not supported on pointers"));
        };
        let shape = t.shape.clone();
        let (ty, f): (Ty, Render1) = match op {
            UnaryOp::UAdd => return Ok(Val::T(t)),
            UnaryOp::USub if d == DType::Bool => {
                (Ty::D(DType::I32), Box::new(|a| format!("-select(0i, 1i, {a})")))
            }
            UnaryOp::USub => (t.ty, Box::new(move |a| normalize(&format!("-{a}"), d))),
            UnaryOp::Invert if d == DType::Bool => (t.ty, Box::new(|a| format!("!{a}"))),
            UnaryOp::Invert if d.is_int() => {
                (t.ty, Box::new(move |a| normalize(&format!("~{a}"), d)))
            }
            _ => return Err(self.err(format!("`~` is not supported on {d}"))),
        };
        Ok(Val::T(self.em.map(ty, &shape, &[&t], |v| f(&v[0]))))
    }

    /// Compile-time arithmetic on Python numbers (Python semantics: `//` floors, `%` follows
    /// the divisor's sign). `None` when an operand is a runtime value.
    fn fold(&self, op: Operator, a: &Val, b: &Val) -> Result<Option<Val>> {
        let num = |v: &Val| match v {
            Val::Int(i) => Some((Some(*i), *i as f64)),
            Val::Bool(b) => Some((Some(i64::from(*b)), f64::from(u8::from(*b)))),
            Val::Float(f) => Some((None, *f)),
            _ => None,
        };
        let (Some((ia, fa)), Some((ib, fb))) = (num(a), num(b)) else {
            return Ok(None);
        };
        let zero = || self.err("division by zero in constexpr arithmetic");
        if let (Some(x), Some(y)) = (ia, ib) {
            let ov = || self.err("constexpr integer overflow");
            return Ok(Some(match op {
                Operator::Add => Val::Int(x.checked_add(y).ok_or_else(ov)?),
                Operator::Sub => Val::Int(x.checked_sub(y).ok_or_else(ov)?),
                Operator::Mult => Val::Int(x.checked_mul(y).ok_or_else(ov)?),
                Operator::Div => {
                    Val::Float(if y == 0 { return Err(zero()) } else { x as f64 / y as f64 })
                }
                Operator::FloorDiv if y == 0 => return Err(zero()),
                Operator::FloorDiv => {
                    let (q, r) =
                        (x.checked_div(y).ok_or_else(ov)?, x.checked_rem(y).ok_or_else(ov)?);
                    Val::Int(q - i64::from(r != 0 && ((x < 0) != (y < 0))))
                }
                Operator::Mod => {
                    if y == 0 {
                        return Err(zero());
                    }
                    // Python's modulo takes the divisor's sign.
                    let r = x.checked_rem(y).ok_or_else(ov)?;
                    Val::Int(if r != 0 && ((r < 0) != (y < 0)) { r + y } else { r })
                }
                Operator::Pow if y >= 0 => {
                    Val::Int(x.checked_pow(u32::try_from(y).map_err(|_| ov())?).ok_or_else(ov)?)
                }
                Operator::Pow => Val::Float((x as f64).powf(y as f64)),
                Operator::BitAnd => Val::Int(x & y),
                Operator::BitOr => Val::Int(x | y),
                Operator::BitXor => Val::Int(x ^ y),
                Operator::LShift => {
                    Val::Int(x.checked_shl(u32::try_from(y).map_err(|_| ov())?).ok_or_else(ov)?)
                }
                Operator::RShift => Val::Int(x >> y.clamp(0, 63)),
                Operator::MatMult => return Ok(None),
            }));
        }
        Ok(Some(Val::Float(match op {
            Operator::Add => fa + fb,
            Operator::Sub => fa - fb,
            Operator::Mult => fa * fb,
            Operator::Div if fb == 0.0 => return Err(zero()),
            Operator::Div => fa / fb,
            Operator::FloorDiv if fb == 0.0 => return Err(zero()),
            Operator::FloorDiv => (fa / fb).floor(),
            Operator::Mod if fb == 0.0 => return Err(zero()),
            Operator::Mod => fa - fb * (fa / fb).floor(),
            Operator::Pow => fa.powf(fb),
            _ => return Err(self.err("bitwise operators need integers")),
        })))
    }
}

fn fold_cmp(sym: &str, a: &Val, b: &Val) -> Option<bool> {
    let num = |v: &Val| match v {
        Val::Int(i) => Some(*i as f64),
        Val::Float(f) => Some(*f),
        Val::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    };
    if let (Some(x), Some(y)) = (num(a), num(b)) {
        return Some(match sym {
            "==" => x == y,
            "!=" => x != y,
            "<" => x < y,
            "<=" => x <= y,
            ">" => x > y,
            _ => x >= y,
        });
    }
    let eq = match (a, b) {
        (Val::Str(x), Val::Str(y)) => x == y,
        (Val::None, Val::None) => true,
        (Val::DType(x), Val::DType(y)) => x == y,
        (Val::T(_), _) | (_, Val::T(_)) => return None,
        (Val::None, _) | (_, Val::None) | (Val::Str(_), _) | (_, Val::Str(_)) => false,
        _ => return None,
    };
    match sym {
        "==" => Some(eq),
        "!=" => Some(!eq),
        _ => None,
    }
}

pub(crate) fn dtype_named(n: &str) -> Option<DType> {
    Some(match n {
        "float32" => DType::F32,
        "float16" => DType::F16,
        "int32" => DType::I32,
        "int8" => DType::I8,
        "uint8" => DType::U8,
        "int1" => DType::Bool,
        _ => return None,
    })
}

fn op_sym(op: Operator) -> &'static str {
    match op {
        Operator::Add => "+",
        Operator::Sub => "-",
        Operator::Mult => "*",
        Operator::MatMult => "@",
        Operator::Div => "/",
        Operator::Mod => "%",
        Operator::Pow => "**",
        Operator::LShift => "<<",
        Operator::RShift => ">>",
        Operator::BitOr => "|",
        Operator::BitXor => "^",
        Operator::BitAnd => "&",
        Operator::FloorDiv => "//",
    }
}

fn expr_name(e: &Expr) -> &'static str {
    match e {
        Expr::ListComp(_) => "a list comprehension",
        Expr::SetComp(_) | Expr::DictComp(_) => "a comprehension",
        Expr::GeneratorExp(_) => "a generator expression",
        Expr::Lambda(_) => "`lambda`",
        Expr::Dict(_) => "a dict literal",
        Expr::Set(_) => "a set literal",
        Expr::NamedExpr(_) => "the walrus operator `:=`",
        Expr::Await(_) | Expr::Yield(_) | Expr::YieldFrom(_) => "`await`/`yield`",
        Expr::JoinedStr(_) | Expr::FormattedValue(_) => "an f-string",
        Expr::Starred(_) => "`*` unpacking",
        Expr::Slice(_) => "a slice outside a subscript",
        _ => "this expression",
    }
}
