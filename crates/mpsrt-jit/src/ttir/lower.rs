//! Lowers parsed TTIR onto the shared [`Emitter`]: SSA values become [`Tensor`]s (WGSL lets and
//! per-invocation arrays, distributed as the crate docs describe), `tt.splat` stays lazy until a
//! block is really needed, and loads, stores, reductions, broadcasts and `tt.dot` use the same
//! emission code as the Python frontend. `scf.for` / `scf.if` (WGSL loops / `if`s with `var`s
//! for their carried values) are in `control.rs`.

use super::parse::{self, err, operands, types_text, Elem, Loc, Op, Type};
use crate::emit::{bits, unbits, Emitter, RedOp};
use crate::lower::ArgInfo;
use crate::value::{Tensor, Ty};
use crate::{ArgSpec, KernelSignature};
use mpsrt_core::{DType, Error, Result};
use std::collections::HashMap;

/// A TTIR value: a materialized tensor, or a scalar splatted to `shape` (not yet in memory).
#[derive(Debug, Clone)]
pub(super) enum V {
    T(Tensor),
    Splat(Tensor, Vec<usize>),
}

impl V {
    pub fn shape(&self) -> &[usize] {
        match self {
            V::T(t) => &t.shape,
            V::Splat(_, s) => s,
        }
    }
    pub fn ty(&self) -> Ty {
        match self {
            V::T(t) | V::Splat(t, _) => t.ty,
        }
    }
    /// What elementwise code reads: the tensor itself, or the splatted scalar.
    pub fn view(&self) -> &Tensor {
        match self {
            V::T(t) | V::Splat(t, _) => t,
        }
    }
    pub fn is_uniform(&self) -> bool {
        matches!(self, V::Splat(..)) || !self.view().is_block()
    }
}

/// Traces one TTIR function into WGSL.
pub(crate) struct TtirLowerer {
    pub em: Emitter,
    pub args: Vec<ArgInfo>,
    pub(super) vals: HashMap<String, V>,
    /// Full-block facts (see `bounds`).
    pub(super) bounds: super::bounds::Bounds,
    /// Lowering a helper function (a combiner): no facts that name the entry point's values.
    pub(super) in_function: bool,
    /// Op being lowered (errors name it and its location).
    pub(super) op_name: String,
    pub(super) loc: Option<Loc>,
    pub(super) line: usize,
    pub(super) nesting: usize,
    /// `tl.dot` accumulators carried in cooperative matrices, by marker name (`coop_acc`).
    pub(super) coop_accs: HashMap<String, super::coop_acc::CoopAcc>,
    /// Blocks recomputable from their element index, by WGSL name (`remat`).
    pub(super) remat: HashMap<String, String>,
    /// `CompileOptions::stage_dot`.
    pub(super) stage_dot: bool,
    /// Halves per element of the staged dot's slabs: 4 (`slab_vec4`, 16x16 tiles), 2 or 1.
    pub(super) slab_w: usize,
    /// `CompileOptions::uniform_fast`, `joint_stage` and `prefetch_stage`.
    pub(super) uniform_fast: bool,
    pub(super) joint_stage: bool,
    pub(super) prefetch: bool,
    /// `tt.load` results staged straight into a dot's slab: accumulator marker, operand (`dot_stage`).
    pub(super) staged_loads: HashMap<String, (String, usize)>,
    /// Carried pointer blocks: WGSL name → (initial template, offset variable, step) (`dot_stage`).
    pub(super) carried_tpl: HashMap<String, (String, String, Option<String>)>,
    /// Where each enclosing `scf.for` starts (loop-invariant `let`s are inserted there).
    pub(super) loop_marks: Vec<(usize, usize)>,
    /// `tt.load` results issued one iteration early, by SSA name (`pipeline`).
    pub(super) pipelined: HashMap<String, V>,
}

impl TtirLowerer {
    pub fn new(wg: usize, opts: &crate::CompileOptions) -> TtirLowerer {
        let mut em = Emitter::new(wg);
        em.coop = opts.coop;
        em.emulate_coop = opts.emulate_coop;
        em.self_bounded = opts.self_bounded;
        em.native_f16_store = opts.f16_store && opts.coop.is_some();
        em.subgroups = opts.subgroups;
        TtirLowerer {
            em,
            args: Vec::new(),
            vals: HashMap::new(),
            bounds: Default::default(),
            in_function: false,
            op_name: String::new(),
            loc: None,
            line: 0,
            nesting: 0,
            coop_accs: HashMap::new(),
            remat: HashMap::new(),
            stage_dot: opts.stage_dot,
            uniform_fast: opts.uniform_fast,
            joint_stage: opts.joint_stage,
            prefetch: opts.prefetch_stage && opts.self_bounded,
            slab_w: match opts.coop {
                Some(c) if opts.slab_vec4 && c.size == 16 => 4,
                _ if opts.slab_vec2 => 2,
                _ => 1,
            },
            staged_loads: HashMap::new(),
            carried_tpl: HashMap::new(),
            loop_marks: Vec::new(),
            pipelined: HashMap::new(),
        }
    }

    /// An error naming the current op and the kernel source line it came from.
    pub fn err(&self, msg: impl AsRef<str>) -> Error {
        let at = match &self.loc {
            Some(l) => format!("{l} (TTIR line {})", self.line),
            None => format!("TTIR line {}", self.line),
        };
        // Messages of nested errors already carry the "[triton]" prefix of `Error`'s display.
        let msg = msg.as_ref().trim_start_matches("[triton] ");
        err(format!("{at}: `{}`: {msg}", self.op_name))
    }

    pub fn run(&mut self, f: &parse::Func, sig: &KernelSignature) -> Result<()> {
        for (k, ((name, _), spec)) in f.params.iter().zip(&sig.args).enumerate() {
            let v = match spec {
                ArgSpec::Pointer { dtype } => {
                    Tensor::scalar("0i", Ty::Ptr { arg: k, elem: *dtype })
                }
                ArgSpec::Scalar { dtype: DType::Bool } => {
                    Tensor::scalar(format!("(P.s{k} != 0u)"), Ty::D(DType::Bool))
                }
                ArgSpec::Scalar { dtype } => Tensor::scalar(format!("P.s{k}"), Ty::D(*dtype)),
                ArgSpec::Constexpr { .. } => {
                    return Err(err("TTIR parameters are never constexpr"))
                }
            };
            self.args.push(ArgInfo {
                name: name.trim_start_matches('%').to_string(),
                spec: spec.clone(),
                loaded: false,
                stored: false,
                atomics: Vec::new(),
                quad: false,
                half4: false,
            });
            self.vals.insert(name.clone(), V::T(v));
        }
        self.block(&f.body)?;
        Ok(())
    }

    pub(super) fn block(&mut self, ops: &[Op]) -> Result<Vec<V>> {
        for op in ops {
            self.op_name.clone_from(&op.name);
            self.loc.clone_from(&op.loc);
            self.line = op.line;
            match op.name.as_str() {
                "scf.yield" | "tt.reduce.return" => return self.get_all(&operands(&op.body)),
                "tt.return" => {
                    if self.nesting > 0 {
                        self.em.line("return;");
                    }
                    return Ok(Vec::new());
                }
                _ => {}
            }
            let outs = self.op(op)?;
            if outs.len() != op.results.len() {
                return Err(self.err(format!(
                    "produced {} values for {} results",
                    outs.len(),
                    op.results.len()
                )));
            }
            for (n, v) in op.results.iter().zip(outs) {
                self.vals.insert(n.clone(), v);
            }
            self.track_bounds(op);
        }
        Ok(Vec::new())
    }

    pub fn get(&self, name: &str) -> Result<V> {
        self.vals.get(name).cloned().ok_or_else(|| self.err(format!("unknown value {name}")))
    }

    /// Binds `name` (a region argument) and returns what it was bound to before.
    pub(super) fn set_val(&mut self, name: &str, v: V) -> Option<V> {
        self.vals.insert(name.to_string(), v)
    }
    pub(super) fn restore_val(&mut self, name: &str, old: Option<V>) {
        match old {
            Some(v) => self.vals.insert(name.to_string(), v),
            None => self.vals.remove(name),
        };
    }
    /// Lowers a region's ops; returns the values its terminator yields.
    pub(super) fn lower_region(&mut self, ops: &[Op]) -> Result<Vec<V>> {
        self.block(ops)
    }

    pub(super) fn get_all(&self, names: &[String]) -> Result<Vec<V>> {
        names.iter().map(|n| self.get(n)).collect()
    }

    /// A materialized tensor (splats are written out).
    pub fn tensor(&mut self, v: &V) -> Tensor {
        match v {
            V::T(t) => t.clone(),
            V::Splat(t, shape) => self.em.splat(t, shape),
        }
    }

    /// The register type of a TTIR type; pointer types take their buffer from `like`.
    pub fn ty_of(&self, t: &Type, like: Option<&V>) -> Result<Ty> {
        match t.elem {
            Elem::D(d) => Ok(Ty::D(d)),
            Elem::Ptr(_) => match like.map(V::ty) {
                Some(ty @ Ty::Ptr { .. }) => Ok(ty),
                _ => Err(self.err("cannot tell which buffer this pointer points into")),
            },
        }
    }

    pub fn check_rank(&self, shape: &[usize]) -> Result<()> {
        if shape.len() > 2 {
            return Err(self.err(format!("blocks of rank > 2 are not supported (shape {shape:?})")));
        }
        if shape.iter().product::<usize>() > crate::builtins::MAX_NUMEL {
            return Err(self.err(format!(
                "block {shape:?} is over the {} element limit",
                crate::builtins::MAX_NUMEL
            )));
        }
        Ok(())
    }

    fn op(&mut self, op: &Op) -> Result<Vec<V>> {
        let ops = operands(&op.body);
        let tys = types_text(&op.body);
        let one = |v: V| Ok(vec![v]);
        match op.name.as_str() {
            "llvm.intr.assume" => Ok(Vec::new()),
            "tt.get_program_id" | "tt.get_num_programs" => {
                let axis = match op.body.split_whitespace().next() {
                    Some("x") => 0,
                    Some("y") => 1,
                    Some("z") => 2,
                    other => return Err(self.err(format!("unknown axis {other:?}"))),
                };
                let e = if op.name == "tt.get_program_id" {
                    format!("pid{axis}")
                } else {
                    format!("i32(P.np{axis})")
                };
                one(V::T(Tensor::scalar(e, Ty::D(DType::I32))))
            }
            "tt.make_range" => {
                let start = parse::int_attr(&op.body, "start").unwrap_or(0);
                let t = parse::parse_type(tys)?;
                self.check_rank(&t.shape)?;
                let lit = crate::value::i32_lit(start);
                let r =
                    self.em.map(Ty::D(DType::I32), &t.shape, &[], |_| format!("i32(e) + {lit}"));
                self.remat_note(&r, format!("(i32({{E}}) + {lit})"));
                one(V::T(r))
            }
            "arith.constant" | "ub.poison" => self.constant(op, tys).map(|v| vec![v]),
            "tt.splat" => {
                let v = self.get(&ops[0])?;
                let t = self.out_type(tys)?;
                self.check_rank(&t.shape)?;
                one(V::Splat(v.view().clone(), t.shape))
            }
            "tt.expand_dims" | "tt.reshape" => {
                let v = self.get(&ops[0])?;
                let t = self.out_type(tys)?;
                self.check_rank(&t.shape)?;
                if t.shape.iter().product::<usize>() != v.shape().iter().product::<usize>() {
                    return Err(self.err("reshape changes the element count"));
                }
                // Row-major order is unchanged: only the shape changes.
                one(match v {
                    V::T(x) => V::T(Tensor { shape: t.shape, ..x }),
                    V::Splat(x, _) => V::Splat(x, t.shape),
                })
            }
            "tt.broadcast" => {
                let v = self.get(&ops[0])?;
                let t = self.out_type(tys)?;
                self.check_rank(&t.shape)?;
                one(self.broadcast(v, &t.shape))
            }
            "tt.trans" => {
                let v = self.get(&ops[0])?;
                let t = self.out_type(tys)?;
                one(self.transpose(v, &t.shape)?)
            }
            "tt.addptr" => {
                let (p, off) = (self.get(&ops[0])?, self.get(&ops[1])?);
                let shape = p.shape().to_vec();
                let ty = p.ty();
                if !matches!(ty, Ty::Ptr { .. }) {
                    return Err(self.err("the first operand is not a pointer"));
                }
                if p.view().expr == "0i" && off.ty() == Ty::D(DType::I32) {
                    // `base + offsets`: the offsets are the pointer, no new variable.
                    return one(match off {
                        V::T(t) => V::T(Tensor { ty, ..t }),
                        V::Splat(t, s) => V::Splat(Tensor { ty, ..t }, s),
                    });
                }
                one(self.map(ty, &shape, &[&p, &off], |a| format!("{} + {}", a[0], a[1])))
            }
            "tt.load" => match op.results.first().and_then(|r| self.pipelined.remove(r)) {
                Some(v) => Ok(vec![v]),
                None => self.load(op, &ops).map(|v| vec![v]),
            },
            "tt.atomic_rmw" | "tt.atomic_cas" => self.atomic(op, &ops).map(|v| vec![v]),
            "tt.bitcast" if self.get(&ops[0])?.ty().dtype().is_none() => {
                // A pointer reinterpreted as another element type (float atomic_max/min).
                let v = self.get(&ops[0])?;
                let t = self.out_type(tys)?;
                let (Ty::Ptr { arg, .. }, Elem::Ptr(elem)) = (v.ty(), t.elem) else {
                    return Err(self.err("pointer bitcast to a non-pointer"));
                };
                let ty = Ty::Ptr { arg, elem };
                one(match v {
                    V::T(x) => V::T(Tensor { ty, ..x }),
                    V::Splat(x, s) => V::Splat(Tensor { ty, ..x }, s),
                })
            }
            "tt.store" => {
                self.store(&ops)?;
                Ok(Vec::new())
            }
            "tt.reduce" => self.reduce(op, &ops),
            "tt.scan" => self.scan(op, &ops).map(|v| vec![v]),
            "tt.dot" => self.dot(&ops, tys).map(|v| vec![v]),
            "scf.for" => self.for_op(op),
            "scf.if" => self.if_op(op, &ops),
            name => match self.elementwise(op, &ops, tys)? {
                Some(v) => one(v),
                None => Err(self
                    .err(format!("the op `{name}` is not supported by the mpsrt Triton backend"))),
            },
        }
    }

    /// The result type of ops printed as `: A -> B`, `: A to B` or `: T`.
    pub fn out_type(&self, tys: &str) -> Result<Type> {
        let t = match tys.rfind("->") {
            Some(i) => &tys[i + 2..],
            None => match tys.find(" to ") {
                Some(i) => &tys[i + 4..],
                None => parse::split_top(tys, ',').last().copied().unwrap_or(tys),
            },
        };
        parse::parse_type(t.trim().trim_start_matches('(').trim_end_matches(')'))
            .map_err(|e| self.err(e.to_string()))
    }

    /// Elementwise `f` over values already of `shape` (or scalars / splats); all-uniform
    /// operands compute once and stay a splat.
    pub fn map(
        &mut self,
        ty: Ty,
        shape: &[usize],
        ins: &[&V],
        f: impl Fn(&[String]) -> String,
    ) -> V {
        let views: Vec<&Tensor> = ins.iter().map(|v| v.view()).collect();
        if ins.iter().all(|v| v.is_uniform()) {
            let s = self.em.map(ty, &[], &views, f);
            return if shape.is_empty() { V::T(s) } else { V::Splat(s, shape.to_vec()) };
        }
        let template = self.remat_args(ins).map(|args| f(&args));
        let out = self.em.map(ty, shape, &views, &f);
        if let Some(t) = template {
            self.remat_note(&out, t);
        }
        V::T(out)
    }

    fn broadcast(&mut self, v: V, shape: &[usize]) -> V {
        let t = match v {
            V::Splat(s, _) => return V::Splat(s, shape.to_vec()),
            V::T(t) if !t.is_block() => return V::Splat(t, shape.to_vec()),
            V::T(t) => t,
        };
        if t.numel() == shape.iter().product::<usize>() {
            return V::T(Tensor { shape: shape.to_vec(), ..t });
        }
        if let Some(out) = self.remat_broadcast(&t, shape) {
            return V::T(Tensor { shape: shape.to_vec(), ..out });
        }
        // The emitter's re-layout works on rank-2 shapes; a leading 1 keeps the element order.
        let pad = |s: &[usize]| if s.len() == 1 { vec![1, s[0]] } else { s.to_vec() };
        let src = Tensor { shape: pad(&t.shape), ..t };
        let out = self.em.relayout(&src, &pad(shape));
        V::T(Tensor { shape: shape.to_vec(), ..out })
    }

    fn transpose(&mut self, v: V, out_shape: &[usize]) -> Result<V> {
        let t = match v {
            V::Splat(s, _) => return Ok(V::Splat(s, out_shape.to_vec())),
            V::T(t) => t,
        };
        let [m, n] = t.shape[..] else {
            return Ok(V::T(Tensor { shape: out_shape.to_vec(), ..t }));
        };
        if out_shape != [n, m] {
            return Err(self.err("only 2-D transposes (order = [1, 0]) are supported"));
        }
        if m == 1 || n == 1 {
            return Ok(V::T(Tensor { shape: out_shape.to_vec(), ..t }));
        }
        // Through workgroup memory: the element an invocation needs is owned by another one.
        self.em.use_scratch(0, m * n);
        let b = bits(&t.at("i"), t.ty);
        self.em.for_each(m * n, |em| em.line(format!("wg0[e] = {b};")));
        self.em.barrier();
        let out = self.em.decl_block(t.ty, out_shape);
        let (lhs, rhs) = (out.at("i"), unbits(&format!("wg0[(e % {m}u) * {n}u + e / {m}u]"), t.ty));
        self.em.for_each(m * n, |em| em.line(format!("{lhs} = {rhs};")));
        self.em.barrier();
        Ok(V::T(out))
    }

    fn pointer(&self, v: &V) -> Result<(usize, DType)> {
        match v.ty() {
            Ty::Ptr { arg, elem } => Ok((arg, elem)),
            other => Err(self.err(format!("expected a pointer, got {}", other.describe()))),
        }
    }

    fn load(&mut self, op: &Op, ops: &[String]) -> Result<V> {
        if op.body.contains("boundaryCheck") || op.body.contains("padding") {
            return Err(
                self.err("block-pointer loads (boundary_check) are not supported; use masks")
            );
        }
        let p = self.get(&ops[0])?;
        let (arg, elem) = self.pointer(&p)?;
        self.args[arg].loaded = true;
        let shape = p.shape().to_vec();
        let p = if shape.is_empty() { p.view().clone() } else { self.tensor(&p) };
        let mask = match ops.get(1) {
            Some(m) => Some(self.get(m)?.view().clone()),
            None => None,
        };
        let other = match ops.get(2) {
            Some(o) => Some(self.get(o)?.view().clone()),
            None => None,
        };
        let full = ops.get(1).and_then(|m| self.bounds.full(m)).map(str::to_string);
        if let Some(v) = self.stage_dot_operand(op, &p, arg, elem, mask.as_ref(), other.as_ref()) {
            return Ok(v);
        }
        if p.is_block() && other.as_ref().is_none_or(|o| !o.is_block()) {
            // Pointers and masks recomputed from the element index where they can be (`remat`).
            let pi = self.at_e(&p);
            let mi = mask.as_ref().map(|m| self.at_e(m));
            let zero = crate::value::literal(0.0, elem);
            let oi = other.as_ref().map_or(zero, |o| o.expr.clone());
            let shape = p.shape.clone();
            let (em, full) = (&mut self.em, full.as_deref());
            let out = crate::memory::emit_block_load(
                em,
                &shape,
                arg,
                elem,
                &pi,
                mi.as_deref(),
                &oi,
                full,
            );
            return Ok(V::T(out));
        }
        Ok(V::T(crate::memory::emit_load(
            &mut self.em,
            &p,
            arg,
            elem,
            mask.as_ref(),
            other.as_ref(),
            full.as_deref(),
        )))
    }

    /// Element `e` of `t` as WGSL: its `remat` template when it has one, else `t[i]`.
    pub(super) fn at_e(&self, t: &Tensor) -> String {
        match self.remat.get(&t.expr) {
            Some(tpl) if t.is_block() => tpl.replace("{E}", "e"),
            _ => t.at("i"),
        }
    }

    fn store(&mut self, ops: &[String]) -> Result<()> {
        if ops.len() < 2 {
            return Err(self.err("expected a pointer and a value"));
        }
        let p = self.get(&ops[0])?;
        let (arg, elem) = self.pointer(&p)?;
        self.args[arg].stored = true;
        let v = self.get(&ops[1])?;
        let Ty::D(vd) = v.ty() else {
            return Err(self.err("storing pointers is not supported"));
        };
        let p = if p.shape().is_empty() { p.view().clone() } else { self.tensor(&p) };
        let mask = match ops.get(2) {
            Some(m) => Some(self.get(m)?.view().clone()),
            None => None,
        };
        let full = ops.get(2).and_then(|m| self.bounds.full(m)).map(str::to_string);
        if p.is_block() {
            let pi = self.at_e(&p);
            let mi =
                mask.as_ref().map(|m| if m.is_block() { self.at_e(m) } else { m.expr.clone() });
            let (em, full) = (&mut self.em, full.as_deref());
            crate::memory::emit_store_exprs(
                em,
                &p,
                &pi,
                arg,
                elem,
                v.view(),
                vd,
                mi.as_deref(),
                full,
            );
            return Ok(());
        }
        let m = mask.as_ref();
        crate::memory::emit_store(&mut self.em, &p, arg, elem, v.view(), vd, m, full.as_deref());
        Ok(())
    }

    fn reduce(&mut self, op: &Op, ops: &[String]) -> Result<Vec<V>> {
        let axis = parse::int_attr(&op.body, "axis").unwrap_or(0) as usize;
        if ops.len() != 1 || !super::reduce::is_simple(op) {
            return self.reduce_generic(op, ops, axis);
        }
        let red = self.combiner(op)?;
        let v = self.get(&ops[0])?;
        let src = self.tensor(&v);
        self.check_rank(&src.shape)?;
        if axis >= src.shape.len() {
            return Err(self.err(format!("axis {axis} of a rank-{} block", src.shape.len())));
        }
        let ty = src.ty;
        Ok(vec![V::T(self.em.reduce(&src, ty, Some(axis), red))])
    }

    /// The reduction's combiner: a region holding one add/max/min of its two arguments.
    pub(super) fn combiner(&self, op: &Op) -> Result<RedOp> {
        let r =
            op.regions.first().ok_or_else(|| self.err("tt.reduce without a combiner region"))?;
        let body: Vec<&Op> = r.ops.iter().filter(|o| !o.name.ends_with(".return")).collect();
        let args: Vec<&str> = r.args.iter().map(|(n, _)| n.as_str()).collect();
        if let [c] = body[..] {
            let ins = operands(&c.body);
            let uses_args = ins.len() == 2 && ins.iter().all(|i| args.contains(&i.as_str()));
            let red = match c.name.as_str() {
                "arith.addf" | "arith.addi" => Some(RedOp::Sum),
                "arith.maxnumf" | "arith.maximumf" | "arith.maxsi" => Some(RedOp::Max),
                "arith.minnumf" | "arith.minimumf" | "arith.minsi" => Some(RedOp::Min),
                _ => None,
            };
            if let (true, Some(red)) = (uses_args, red) {
                return Ok(red);
            }
        }
        let names: Vec<&str> = body.iter().map(|o| o.name.as_str()).collect();
        Err(self.err(format!(
            "reduction combiner [{}] is not supported (sum, max and min are)",
            names.join(", ")
        )))
    }

    fn dot(&mut self, ops: &[String], tys: &str) -> Result<V> {
        let out = self.out_type(tys)?;
        let Elem::D(od) = out.elem else { return Err(self.err("pointer dot")) };
        if !od.is_float() {
            return Err(self.err(format!("tt.dot producing {od} is not supported (f32/f16 are)")));
        }
        if ops.len() < 3 {
            return Err(self.err("expected a, b and an accumulator"));
        }
        let a = self.get(&ops[0])?;
        let b = self.get(&ops[1])?;
        let c = self.get(&ops[2])?;
        let (a, b) = (self.tensor(&a), self.tensor(&b));
        if a.shape.len() != 2 || b.shape.len() != 2 || a.shape[1] != b.shape[0] {
            return Err(self.err(format!("shapes {:?} x {:?}", a.shape, b.shape)));
        }
        let acc = c.view().clone();
        if let Some(v) = self.coop_acc_dot(&a, &b, &acc) {
            return Ok(v);
        }
        Ok(V::T(self.em.dot(&a, &b, Some(&acc), Ty::D(od))))
    }
}
