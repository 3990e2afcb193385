//! The tracer's statement level: binds kernel parameters, walks statements, and lowers control
//! flow (static/runtime `if`, `range`/`tl.range` loops with loop-carried variables,
//! `tl.static_range` unrolling) and inlines `@jit` helper calls.

use crate::emit::Emitter;
use crate::value::{cast_expr, Module, Tensor, Ty, Val};
use crate::{ArgSpec, ConstValue, KernelSignature};
use mpsrt_core::{DType, Error, Result};
use rustpython_parser::ast::{self, Expr, Ranged, Stmt};
use rustpython_parser::text_size::TextRange;
use std::collections::{HashMap, HashSet};

pub(crate) type Env = HashMap<String, Val>;

/// What tracing learned about one kernel parameter.
#[derive(Debug, Clone)]
pub(crate) struct ArgInfo {
    pub name: String,
    pub spec: ArgSpec,
    pub loaded: bool,
    pub stored: bool,
    /// Atomic read-modify-writes on this buffer: (kind, value type) per helper `at{k}_{kind}`.
    pub atomics: Vec<(String, DType)>,
    /// A read-only packed buffer bound a second time as `bufv{k}: array<vec4<u32>>` (16-byte
    /// loads of a staged `tl.dot` operand's whole runs, `ttir::dot_stage`); every other read
    /// goes through the word binding `buf{k}`.
    pub quad: bool,
    /// The same with `bufv{k}: array<vec4<f16>>` (the staged dot's runs of 8 halves with
    /// `vec4<f16>` slabs: two 8-byte loads per run, stored to the slab as they are).
    pub half4: bool,
}

/// Whether a statement list ran to its end or hit `return`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Normal,
    Returned,
}

const MAX_INLINE_DEPTH: usize = 32;
const MAX_UNROLL: i64 = 4096;

/// Traces one kernel specialization into WGSL.
pub(crate) struct Lowerer<'a> {
    pub src: &'a crate::source::Source,
    pub funcs: HashMap<&'a str, &'a ast::StmtFunctionDef>,
    pub em: Emitter,
    pub args: Vec<ArgInfo>,
    /// Source range of the construct being lowered; errors point here.
    pub cur: TextRange,
    /// Loop/if-carried variables currently live: Python name -> WGSL `var`.
    carried: HashMap<String, Tensor>,
    /// Return value of the helper being inlined.
    ret: Option<Val>,
    depth: usize,
    /// Runtime `if`s / loops enclosing the statement being lowered.
    runtime_nesting: usize,
}

impl<'a> Lowerer<'a> {
    pub fn new(src: &'a crate::source::Source, wg: usize) -> Lowerer<'a> {
        let funcs = src.funcs.iter().map(|f| (f.name.as_str(), f)).collect();
        Lowerer {
            src,
            funcs,
            em: Emitter::new(wg),
            args: Vec::new(),
            cur: TextRange::default(),
            carried: HashMap::new(),
            ret: None,
            depth: 0,
            runtime_nesting: 0,
        }
    }

    /// An error located at the construct being lowered.
    pub fn err(&self, msg: impl AsRef<str>) -> Error {
        self.src.error_at(self.cur, msg.as_ref())
    }

    pub fn at<T: Ranged>(&mut self, node: &T) {
        self.cur = node.range();
    }

    /// Binds the parameters to the signature and lowers the kernel body.
    pub fn run(&mut self, f: &'a ast::StmtFunctionDef, sig: &KernelSignature) -> Result<()> {
        self.cur = f.range;
        let a = &f.args;
        if a.vararg.is_some()
            || a.kwarg.is_some()
            || !a.kwonlyargs.is_empty()
            || !a.posonlyargs.is_empty()
        {
            return Err(self.err("kernels take plain positional parameters only (no *args, **kwargs or keyword-only)"));
        }
        if a.args.len() != sig.args.len() {
            return Err(self.err(format!(
                "kernel `{}` has {} parameters but the launch passed {}",
                f.name,
                a.args.len(),
                sig.args.len()
            )));
        }
        let mut env = Env::new();
        for (k, (p, spec)) in a.args.iter().zip(&sig.args).enumerate() {
            self.at(&p.def);
            let name = p.def.arg.to_string();
            let is_constexpr = p.def.annotation.as_deref().is_some_and(annotation_is_constexpr);
            let val = match spec {
                ArgSpec::Constexpr { value } => const_val(value),
                _ if is_constexpr => {
                    return Err(self.err(format!("parameter `{name}` is tl.constexpr but the launch passed a tensor or runtime scalar")))
                }
                ArgSpec::Pointer { dtype } => {
                    if !dtype.gpu_supported() {
                        return Err(self.err(format!(
                            "pointer parameter `{name}` has dtype {dtype}, which the GPU does not support; cast it to {}",
                            dtype.gpu_fallback()
                        )));
                    }
                    Val::T(Tensor::scalar("0i", Ty::Ptr { arg: k, elem: *dtype }))
                }
                ArgSpec::Scalar { dtype } => {
                    let (expr, d) = match dtype {
                        DType::Bool => (format!("(P.s{k} != 0u)"), DType::Bool),
                        DType::F32 | DType::F16 => (format!("P.s{k}"), *dtype),
                        DType::I32 | DType::U8 | DType::I8 => (format!("P.s{k}"), DType::I32),
                        d => {
                            return Err(self.err(format!(
                                "scalar parameter `{name}` has dtype {d}; runtime scalars must be int32, float32, float16 or bool"
                            )))
                        }
                    };
                    Val::T(Tensor::scalar(expr, Ty::D(d)))
                }
            };
            self.args.push(ArgInfo {
                name: name.clone(),
                spec: spec.clone(),
                loaded: false,
                stored: false,
                atomics: Vec::new(),
                quad: false,
                half4: false,
            });
            env.insert(name, val);
        }
        self.block(&mut env, &f.body)?;
        Ok(())
    }

    /// Lowers a statement list; stops after `return`.
    pub fn block(&mut self, env: &mut Env, body: &'a [Stmt]) -> Result<Flow> {
        for s in body {
            if self.stmt(env, s)? == Flow::Returned {
                return Ok(Flow::Returned);
            }
        }
        Ok(Flow::Normal)
    }

    fn stmt(&mut self, env: &mut Env, s: &'a Stmt) -> Result<Flow> {
        self.at(s);
        match s {
            Stmt::Expr(e) => {
                // Docstrings and bare calls (tl.store, tl.static_assert...).
                if !matches!(&*e.value, Expr::Constant(_)) {
                    self.expr(env, &e.value)?;
                }
            }
            Stmt::Pass(_) => {}
            Stmt::Assign(a) => {
                let v = self.expr(env, &a.value)?;
                for t in &a.targets {
                    self.assign_target(env, t, v.clone())?;
                }
            }
            Stmt::AnnAssign(a) => {
                if let Some(value) = &a.value {
                    let v = self.expr(env, value)?;
                    self.assign_target(env, &a.target, v)?;
                }
            }
            Stmt::AugAssign(a) => {
                let cur = self.expr(env, &a.target)?;
                let rhs = self.expr(env, &a.value)?;
                self.at(s);
                let v = self.binop(a.op, cur, rhs)?;
                self.assign_target(env, &a.target, v)?;
            }
            Stmt::Return(r) => {
                let v = match &r.value {
                    Some(e) => self.expr(env, e)?,
                    None => Val::None,
                };
                if self.depth == 0 && self.runtime_nesting > 0 {
                    // An early exit of the kernel: every scalar condition is workgroup-uniform
                    // here, so the whole workgroup leaves together and later barriers stay valid.
                    if v != Val::None {
                        return Err(self.err("a kernel cannot return a value"));
                    }
                    self.em.line("return;");
                }
                self.ret = Some(v);
                return Ok(Flow::Returned);
            }
            Stmt::If(i) => return self.if_stmt(env, i),
            Stmt::For(f) => self.for_stmt(env, f)?,
            Stmt::Import(_) | Stmt::ImportFrom(_) => {}
            other => {
                return Err(self.err(format!(
                    "{} is not supported in a @jit function; {SUPPORTED_STMTS}",
                    stmt_name(other)
                )))
            }
        }
        Ok(Flow::Normal)
    }

    fn assign_target(&mut self, env: &mut Env, target: &Expr, v: Val) -> Result<()> {
        self.at(target);
        match target {
            Expr::Name(n) => self.assign(env, n.id.as_str(), v),
            Expr::Tuple(t) => {
                let Val::Tuple(items) = v else {
                    return Err(self.err(format!("cannot unpack {} into {} names", v.describe(), t.elts.len())));
                };
                if items.len() != t.elts.len() {
                    return Err(self.err(format!("cannot unpack {} values into {} names", items.len(), t.elts.len())));
                }
                for (e, item) in t.elts.iter().zip(items) {
                    self.assign_target(env, e, item)?;
                }
                Ok(())
            }
            _ => Err(self.err("only plain names and tuples of names can be assigned to (no `x[i] = ...` or attributes)")),
        }
    }

    /// Binds `name`; a loop/if-carried name is updated in place in its WGSL variable.
    fn assign(&mut self, env: &mut Env, name: &str, v: Val) -> Result<()> {
        let Some(var) = self.carried.get(name).cloned() else {
            env.insert(name.to_string(), v);
            return Ok(());
        };
        let t = self.tensor_of(v, Some(var.ty))?;
        let t = self.fit_carried(name, &var, t)?;
        // Other names (and views such as `x[:, None]` or `ptr + x`) may share this WGSL
        // variable; they keep the old value, as in Python, so snapshot it for them first.
        let aliases: Vec<String> = env
            .iter()
            .filter(|(k, v)| k.as_str() != name && aliases_var(v, &var.expr))
            .map(|(k, _)| k.clone())
            .collect();
        if !aliases.is_empty() {
            let snap = self.em.fresh("c");
            self.em.line(format!("var {snap} = {};", var.expr));
            for k in aliases {
                if let Some(v) = env.get_mut(&k) {
                    rename_var(v, &var.expr, &snap);
                }
            }
        }
        self.em.line(format!("{} = {};", var.expr, t.expr));
        env.insert(name.to_string(), Val::T(var));
        Ok(())
    }

    /// Checks that a new value of a carried variable keeps its type and shape (WGSL variables
    /// are statically typed, as are Triton's loop-carried values).
    fn fit_carried(&mut self, name: &str, var: &Tensor, t: Tensor) -> Result<Tensor> {
        let t = match (t.ty, var.ty) {
            (a, b) if a == b => t,
            _ => {
                return Err(self.err(format!(
                    "variable `{name}` changes type from {} to {} inside a loop or `if`; give it its final type before (e.g. tl.zeros(shape, dtype=...))",
                    var.ty.describe(),
                    t.ty.describe()
                )))
            }
        };
        if t.shape == var.shape {
            return Ok(t);
        }
        if t.shape.is_empty() || self.broadcastable(&t.shape, &var.shape) {
            return Ok(self.broadcast_to(&t, &var.shape));
        }
        Err(self.err(format!(
            "variable `{name}` changes shape from {:?} to {:?} inside a loop or `if`",
            var.shape, t.shape
        )))
    }

    /// Turns the names in `names` that exist in `env` into WGSL variables, so that a loop body
    /// or `if` branch can update them. Returns the previous carried entries to restore.
    fn carry(&mut self, env: &mut Env, names: &[String]) -> Result<Vec<(String, Option<Tensor>)>> {
        let mut saved = Vec::new();
        for n in names {
            let Some(v) = env.get(n).cloned() else { continue };
            let t = match v {
                Val::T(t) => t,
                Val::Int(_) | Val::Float(_) | Val::Bool(_) => self.tensor_of(v, None)?,
                // Compile-time values (dtypes, strings...) reassigned in a runtime loop would
                // need runtime representation we do not have.
                other => {
                    return Err(self.err(format!(
                        "`{n}` holds {} and is reassigned inside a runtime loop or `if`; only numbers and tensors can be",
                        other.describe()
                    )))
                }
            };
            let name = self.em.fresh("v");
            self.em.line(format!("var {name} = {};", t.expr));
            let var = Tensor { expr: name, ty: t.ty, shape: t.shape };
            saved.push((n.clone(), self.carried.insert(n.clone(), var.clone())));
            env.insert(n.clone(), Val::T(var));
        }
        Ok(saved)
    }

    /// Ends the carried scope: names defined only inside are dropped, and names carried by an
    /// enclosing construct receive their new value.
    fn uncarry(
        &mut self,
        env: &mut Env,
        saved: Vec<(String, Option<Tensor>)>,
        before: &HashSet<String>,
    ) {
        env.retain(|k, _| before.contains(k));
        for (n, prev) in saved {
            let inner = self.carried.remove(&n);
            if let Some(outer) = prev {
                if let Some(inner) = inner {
                    self.em.line(format!("{} = {};", outer.expr, inner.expr));
                }
                env.insert(n.clone(), Val::T(outer.clone()));
                self.carried.insert(n, outer);
            }
        }
    }

    fn if_stmt(&mut self, env: &mut Env, i: &'a ast::StmtIf) -> Result<Flow> {
        let c = self.expr(env, &i.test)?;
        self.at(&*i.test);
        if let Some(b) = self.const_truth(&c) {
            // Constexpr condition: only the taken branch exists in the specialization.
            return self.block(env, if b { &i.body } else { &i.orelse });
        }
        let c = match c {
            Val::T(t) if !t.is_block() => self.bool_of(t),
            other => {
                return Err(self.err(format!(
                    "`if` needs a scalar or constexpr condition, got {}",
                    other.describe()
                )))
            }
        };
        let mut names = Vec::new();
        assigned_names(&i.body, &mut names);
        assigned_names(&i.orelse, &mut names);
        let before: HashSet<String> = env.keys().cloned().collect();
        let saved = self.carry(env, &names)?;
        let decl_at = self.em.mark();
        self.em.open(format!("if ({})", c.expr));
        let mut then_env = env.clone();
        self.runtime_nesting += 1;
        let f1 = self.block(&mut then_env, &i.body)?;
        // Names first bound in both branches live on after the `if`, in variables declared
        // before it; each branch assigns its value at its end.
        let mut fresh: Vec<&String> =
            then_env.keys().filter(|k| f1 == Flow::Normal && !env.contains_key(*k)).collect();
        fresh.sort();
        let mut joined: Vec<(String, Tensor)> = Vec::new();
        for k in fresh {
            let t = match &then_env[k] {
                Val::T(t) => t.clone(),
                v @ (Val::Int(_) | Val::Float(_) | Val::Bool(_)) => {
                    self.tensor_of(v.clone(), None)?
                }
                _ => continue,
            };
            {
                let var = self.em.fresh("v");
                self.em.line(format!("{var} = {};", t.expr));
                joined.push((k.clone(), Tensor { expr: var, ty: t.ty, shape: t.shape.clone() }));
            }
        }
        let mut f2 = Flow::Normal;
        let mut both = Vec::new();
        if !i.orelse.is_empty() {
            self.em.else_();
            let mut else_env = env.clone();
            f2 = self.block(&mut else_env, &i.orelse)?;
            for (k, var) in joined.iter().filter(|_| f2 == Flow::Normal) {
                let Some(v) = else_env.get(k).cloned() else { continue };
                let t = self.tensor_of(v, Some(var.ty))?;
                let t = self.fit_carried(k, var, t)?;
                self.em.line(format!("{} = {};", var.expr, t.expr));
                both.push((k.clone(), var.clone()));
            }
        }
        self.em.close();
        for (_, var) in &joined {
            let ty = if var.is_block() {
                format!("array<{}, {}>", var.ty.wgsl(), self.em.regs(var.numel()))
            } else {
                var.ty.wgsl().to_string()
            };
            self.em.insert(decl_at, &format!("var {}: {ty};", var.expr));
        }
        self.runtime_nesting -= 1;
        if (f1 == Flow::Returned || f2 == Flow::Returned) && self.depth > 0 {
            self.at(i);
            return Err(self.err("`return` inside an `if` on a runtime value is only supported in the kernel itself, not in helper functions"));
        }
        self.uncarry(env, saved, &before);
        for (k, var) in both {
            env.insert(k, Val::T(var));
        }
        Ok(Flow::Normal)
    }

    fn for_stmt(&mut self, env: &mut Env, f: &'a ast::StmtFor) -> Result<()> {
        if !f.orelse.is_empty() {
            return Err(self.err("`for ... else` is not supported"));
        }
        let Expr::Name(target) = &*f.target else {
            self.at(&*f.target);
            return Err(self.err("the loop variable must be a single name"));
        };
        let Expr::Call(call) = &*f.iter else {
            self.at(&*f.iter);
            return Err(self.err(
                "`for` loops must iterate over range(...), tl.range(...) or tl.static_range(...)",
            ));
        };
        let callee = self.expr(env, &call.func)?;
        let kind = match &callee {
            Val::Builtin(n) if n == "range" || n == "tl.range" || n == "tl.static_range" => {
                n.clone()
            }
            other => {
                self.at(&*f.iter);
                return Err(self.err(format!(
                    "`for` loops must iterate over range(...), tl.range(...) or tl.static_range(...), not {}",
                    other.describe()
                )));
            }
        };
        let mut bounds = Vec::new();
        for a in &call.args {
            bounds.push(self.expr(env, a)?);
        }
        self.at(call);
        if kind == "range" && !call.keywords.is_empty() {
            return Err(self.err(
                "range() takes no keyword arguments; use tl.range for num_stages and similar hints",
            ));
        }
        // tl.range hints (num_stages, loop_unroll_factor, ...) are scheduling advice for
        // software pipelining, which has no WGSL counterpart; they are accepted and ignored.
        let (start, end, step) = match bounds.len() {
            1 => (Val::Int(0), bounds[0].clone(), Val::Int(1)),
            2 => (bounds[0].clone(), bounds[1].clone(), Val::Int(1)),
            3 => (bounds[0].clone(), bounds[1].clone(), bounds[2].clone()),
            n => {
                return Err(self.err(format!("{kind}() takes 1 to 3 positional arguments, got {n}")))
            }
        };
        if kind == "tl.static_range" {
            return self.static_loop(env, f, target.id.as_str(), [start, end, step]);
        }
        let mut ints = Vec::new();
        for v in [start, end, step] {
            ints.push(self.int_scalar(v, "loop bound")?);
        }
        let step_neg = match &ints[2].expr {
            e if e.starts_with('-') => true,
            e if e == "0i" => return Err(self.err("range() step must not be zero")),
            _ => false,
        };
        let mut names = Vec::new();
        assigned_names(&f.body, &mut names);
        names.retain(|n| n != target.id.as_str());
        let before: HashSet<String> = env.keys().cloned().collect();
        let saved = self.carry(env, &names)?;
        let lv = self.em.fresh("iv");
        let cmp = if step_neg { ">" } else { "<" };
        self.em.open(format!(
            "for (var {lv}: i32 = {}; {lv} {cmp} {}; {lv} += {})",
            ints[0].expr, ints[1].expr, ints[2].expr
        ));
        let mut body_env = env.clone();
        body_env.insert(target.id.to_string(), Val::T(Tensor::scalar(lv, Ty::D(DType::I32))));
        self.runtime_nesting += 1;
        let flow = self.block(&mut body_env, &f.body)?;
        self.runtime_nesting -= 1;
        if flow == Flow::Returned && self.depth > 0 {
            self.at(f);
            return Err(
                self.err("`return` inside a runtime loop of a helper function is not supported")
            );
        }
        self.em.close();
        self.uncarry(env, saved, &before);
        Ok(())
    }

    /// `tl.static_range`: the body is traced once per iteration with a constexpr loop variable.
    fn static_loop(
        &mut self,
        env: &mut Env,
        f: &'a ast::StmtFor,
        var: &str,
        b: [Val; 3],
    ) -> Result<()> {
        let mut v = Vec::new();
        for x in b {
            match x {
                Val::Int(i) => v.push(i),
                other => {
                    return Err(self.err(format!(
                        "tl.static_range bounds must be constexpr ints, got {}",
                        other.describe()
                    )))
                }
            }
        }
        let (mut i, end, step) = (v[0], v[1], v[2]);
        if step == 0 {
            return Err(self.err("tl.static_range step must not be zero"));
        }
        let mut count = 0;
        while (step > 0 && i < end) || (step < 0 && i > end) {
            count += 1;
            if count > MAX_UNROLL {
                return Err(self.err(format!(
                    "tl.static_range unrolls at most {MAX_UNROLL} iterations; use tl.range"
                )));
            }
            env.insert(var.to_string(), Val::Int(i));
            if self.block(env, &f.body)? == Flow::Returned {
                return Err(self.err("`return` inside tl.static_range is not supported"));
            }
            i = match i.checked_add(step) {
                Some(n) => n,
                None => break,
            };
        }
        Ok(())
    }

    /// Inlines a `@jit` helper: parameters bind to the argument values (constexprs stay
    /// compile-time), and the return value is whatever its `return` produced.
    pub fn call_jit(
        &mut self,
        name: &str,
        args: Vec<Val>,
        kwargs: Vec<(String, Val)>,
    ) -> Result<Val> {
        let f: &'a ast::StmtFunctionDef = self.funcs[name];
        if self.depth >= MAX_INLINE_DEPTH {
            return Err(self.err(format!(
                "@jit calls nest deeper than {MAX_INLINE_DEPTH} (recursion is not supported)"
            )));
        }
        let params = &f.args.args;
        if args.len() > params.len() {
            return Err(self.err(format!(
                "`{name}` takes {} arguments, got {}",
                params.len(),
                args.len()
            )));
        }
        let mut env = Env::new();
        let mut slots: Vec<Option<Val>> = args.into_iter().map(Some).collect();
        slots.resize(params.len(), None);
        for (k, v) in kwargs {
            let Some(pos) = params.iter().position(|p| p.def.arg.as_str() == k) else {
                return Err(self.err(format!("`{name}` has no parameter `{k}`")));
            };
            slots[pos] = Some(v);
        }
        for (p, slot) in params.iter().zip(slots) {
            let v = match (slot, &p.default) {
                (Some(v), _) => v,
                (None, Some(d)) => self.expr(&mut Env::new(), d)?,
                (None, None) => {
                    return Err(self.err(format!("`{name}` is missing argument `{}`", p.def.arg)))
                }
            };
            env.insert(p.def.arg.to_string(), v);
        }
        let saved_carried = std::mem::take(&mut self.carried);
        let saved_ret = self.ret.take();
        let saved_cur = self.cur;
        self.depth += 1;
        let res = self.block(&mut env, &f.body);
        self.depth -= 1;
        self.carried = saved_carried;
        let ret = std::mem::replace(&mut self.ret, saved_ret);
        res?;
        self.cur = saved_cur;
        Ok(ret.unwrap_or(Val::None))
    }

    /// The truth value of a compile-time condition, `None` for runtime values.
    pub fn const_truth(&self, v: &Val) -> Option<bool> {
        match v {
            Val::Bool(b) => Some(*b),
            Val::Int(i) => Some(*i != 0),
            Val::Float(f) => Some(*f != 0.0),
            Val::None => Some(false),
            Val::Str(s) => Some(!s.is_empty()),
            _ => None,
        }
    }

    /// A scalar bool expression from a scalar of any dtype.
    pub fn bool_of(&mut self, t: Tensor) -> Tensor {
        match t.ty {
            Ty::D(d) => Tensor::scalar(cast_expr(&t.expr, d, DType::Bool), Ty::D(DType::Bool)),
            Ty::Ptr { .. } => Tensor::scalar("true", Ty::D(DType::Bool)),
        }
    }

    /// An i32 scalar from a constexpr int or an integer scalar (loop bounds, program ids).
    pub fn int_scalar(&mut self, v: Val, what: &str) -> Result<Tensor> {
        match v {
            Val::Int(_) | Val::Bool(_) => self.tensor_of(v, Some(Ty::D(DType::I32))),
            Val::T(t)
                if !t.is_block() && matches!(t.ty, Ty::D(d) if d.is_int() || d == DType::Bool) =>
            {
                let d = t.ty.dtype().unwrap_or(DType::I32);
                Ok(Tensor::scalar(cast_expr(&t.expr, d, DType::I32), Ty::D(DType::I32)))
            }
            other => {
                Err(self.err(format!("{what} must be an integer scalar, got {}", other.describe())))
            }
        }
    }

    /// Resolves a free name: module aliases, Python builtins and `@jit` functions.
    pub fn global(&self, name: &str) -> Option<Val> {
        Some(match name {
            "tl" | "language" => Val::Module(Module::Lang),
            "mpsrt" | "triton" => Val::Module(Module::Top),
            "range" | "min" | "max" | "float" | "int" | "abs" | "len" | "bool" => {
                Val::Builtin(name.into())
            }
            "True" => Val::Bool(true),
            "False" => Val::Bool(false),
            _ if self.funcs.contains_key(name) => Val::JitFn(name.into()),
            _ => return None,
        })
    }
}

fn aliases_var(v: &Val, var: &str) -> bool {
    match v {
        Val::T(t) => t.expr == var,
        Val::Method(t, _) => t.expr == var,
        Val::Tuple(items) => items.iter().any(|i| aliases_var(i, var)),
        _ => false,
    }
}

fn rename_var(v: &mut Val, from: &str, to: &str) {
    match v {
        Val::T(t) if t.expr == from => t.expr = to.to_string(),
        Val::Method(t, _) if t.expr == from => t.expr = to.to_string(),
        Val::Tuple(items) => items.iter_mut().for_each(|i| rename_var(i, from, to)),
        _ => {}
    }
}

fn annotation_is_constexpr(e: &Expr) -> bool {
    match e {
        Expr::Attribute(a) => a.attr.as_str() == "constexpr",
        Expr::Name(n) => n.id.as_str() == "constexpr",
        Expr::Constant(c) => matches!(&c.value, ast::Constant::Str(s) if s.ends_with("constexpr")),
        _ => false,
    }
}

pub(crate) fn const_val(v: &ConstValue) -> Val {
    match v {
        ConstValue::Int(i) => Val::Int(*i),
        ConstValue::Float(f) => Val::Float(*f),
        ConstValue::Bool(b) => Val::Bool(*b),
        ConstValue::Str(s) => Val::Str(s.clone()),
        ConstValue::None => Val::None,
    }
}

/// Names a statement list may (re)assign, including in nested blocks.
fn assigned_names(body: &[Stmt], out: &mut Vec<String>) {
    fn target(e: &Expr, out: &mut Vec<String>) {
        match e {
            Expr::Name(n) if !out.iter().any(|x| x == n.id.as_str()) => out.push(n.id.to_string()),
            Expr::Tuple(t) => t.elts.iter().for_each(|e| target(e, out)),
            _ => {}
        }
    }
    for s in body {
        match s {
            Stmt::Assign(a) => a.targets.iter().for_each(|t| target(t, out)),
            Stmt::AugAssign(a) => target(&a.target, out),
            Stmt::AnnAssign(a) => target(&a.target, out),
            Stmt::For(f) => {
                target(&f.target, out);
                assigned_names(&f.body, out);
            }
            Stmt::If(i) => {
                assigned_names(&i.body, out);
                assigned_names(&i.orelse, out);
            }
            _ => {}
        }
    }
}

const SUPPORTED_STMTS: &str =
    "supported statements are assignments, augmented assignments, expression calls, `if`, `for` over range/tl.range/tl.static_range, `return` and `pass`";

fn stmt_name(s: &Stmt) -> &'static str {
    match s {
        Stmt::While(_) => "`while` loop",
        Stmt::Try(_) | Stmt::TryStar(_) => "`try` statement",
        Stmt::With(_) | Stmt::AsyncWith(_) => "`with` statement",
        Stmt::FunctionDef(_) | Stmt::AsyncFunctionDef(_) => "a nested function definition",
        Stmt::ClassDef(_) => "a class definition",
        Stmt::Break(_) => "`break`",
        Stmt::Continue(_) => "`continue`",
        Stmt::Raise(_) => "`raise`",
        Stmt::Assert(_) => "`assert` (use tl.static_assert)",
        Stmt::Delete(_) => "`del`",
        Stmt::Global(_) | Stmt::Nonlocal(_) => "`global`/`nonlocal`",
        Stmt::Match(_) => "`match` statement",
        Stmt::AsyncFor(_) => "`async for`",
        _ => "this statement",
    }
}
