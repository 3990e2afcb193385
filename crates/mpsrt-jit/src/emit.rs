//! WGSL text emission and the block machinery: distributing a block's elements over the
//! workgroup, elementwise maps, re-layouts (broadcasts) through workgroup memory, reductions and
//! `tl.dot`. Shapes here are already checked; the tracer reports user errors with locations.

use crate::value::{Tensor, Ty};
use mpsrt_core::DType;

/// Elements per invocation up to which [`Emitter::for_each`] unrolls its loop.
pub(crate) const UNROLL: usize = 16;

/// Reduction combinators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RedOp {
    Sum,
    Max,
    Min,
}

/// Accumulates the kernel body's WGSL and what it needs from the module (scratch sizes).
pub(crate) struct Emitter {
    pub lines: Vec<String>,
    indent: usize,
    counter: usize,
    /// Invocations per workgroup.
    pub wg: usize,
    /// Largest number of u32 words used from the two workgroup scratch arrays.
    pub scratch: [usize; 2],
    /// Largest block (in elements) the kernel creates; decides the workgroup size.
    pub max_numel: usize,
    /// Module-level helpers (structs, functions such as a reduction's combiner, typed
    /// workgroup arrays), emitted before the entry point.
    pub functions: Vec<String>,
    /// Cooperative-matrix configuration `tl.dot` may use (see `coop`).
    pub coop: Option<crate::coop::CoopConfig>,
    /// A `tl.dot` ran on cooperative matrices: the module enables f16 and
    /// `wgpu_cooperative_matrix`, and the entry point takes `subgroup_id`.
    pub uses_coop: bool,
    /// `f16` values are used without cooperative matrices: the module enables `f16` alone.
    pub uses_f16: bool,
    /// Workgroup bytes outside the two scratch arrays (cooperative `tl.dot` staging).
    pub extra_workgroup_bytes: usize,
    /// `CompileOptions::emulate_coop`: `coop` only configures the staged dot, which multiplies
    /// in registers.
    pub emulate_coop: bool,
    /// `CompileOptions::self_bounded`: storage indices go through `ix{k}` (`module::bix`).
    pub self_bounded: bool,
    /// `CompileOptions::f16_store` on an adapter with f16 matrix units: buffers an f16 block is
    /// stored to are bound as `array<f16>` (plain stores; the module enables `f16`).
    pub native_f16_store: bool,
    /// Whole-block reductions may use subgroup operations (`CompileOptions::subgroups`).
    pub subgroups: bool,
    /// A reduction used subgroup operations: the entry point takes the subgroup builtins
    /// (`sg`, `sgl`, `nsg`, `sgs`).
    pub uses_subgroups: bool,
    /// Words of the subgroup reductions' `var<workgroup> wgr` (0: not declared).
    pub wgr_words: usize,
    /// The adapter's fixed subgroup size (`CompileOptions::subgroup_size`; 0: unknown).
    pub subgroup_size: usize,
    /// Reduction results need not be uniform values in WGSL's sense (no reduction steers
    /// control flow, `ttir::uniform`): reductions may skip the `workgroupUniformLoad`
    /// (`subgroup`).
    pub nonuniform_ok: bool,
    /// `CompileOptions::one_barrier`: with `nonuniform_ok`, multi-subgroup reductions take one
    /// barrier (partials in alternating halves of `wgr`, `subgroup`).
    pub one_barrier: bool,
    /// A one-barrier reduction was emitted: the entry point declares its parity `var rp`.
    pub uses_parity: bool,
}

impl Emitter {
    pub fn new(wg: usize) -> Emitter {
        Emitter {
            lines: Vec::new(),
            indent: 1,
            counter: 0,
            wg,
            scratch: [0, 0],
            max_numel: 1,
            functions: Vec::new(),
            coop: None,
            uses_coop: false,
            uses_f16: false,
            extra_workgroup_bytes: 0,
            emulate_coop: false,
            self_bounded: false,
            native_f16_store: false,
            subgroups: false,
            uses_subgroups: false,
            wgr_words: 0,
            subgroup_size: 0,
            nonuniform_ok: false,
            one_barrier: false,
            uses_parity: false,
        }
    }

    /// Starts collecting the body of a helper function: lines go to a fresh buffer until
    /// [`Emitter::end_function`] hands them back and restores the entry point's.
    pub fn begin_function(&mut self) -> (Vec<String>, usize) {
        (std::mem::take(&mut self.lines), std::mem::replace(&mut self.indent, 1))
    }
    pub fn end_function(&mut self, saved: (Vec<String>, usize)) -> Vec<String> {
        self.indent = saved.1;
        std::mem::replace(&mut self.lines, saved.0)
    }

    pub fn line(&mut self, s: impl AsRef<str>) {
        self.lines.push(format!("{}{}", "    ".repeat(self.indent), s.as_ref()));
    }
    pub fn open(&mut self, s: impl AsRef<str>) {
        let s = s.as_ref();
        self.line(if s.is_empty() { "{".to_string() } else { format!("{s} {{") });
        self.indent += 1;
    }
    pub fn close(&mut self) {
        self.indent -= 1;
        self.line("}");
    }
    /// Closes a block and opens its `else` branch.
    pub fn else_(&mut self) {
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
    }
    /// A position to insert declarations at later (before a construct whose variables are only
    /// known after lowering it).
    pub fn mark(&self) -> (usize, usize) {
        (self.lines.len(), self.indent)
    }
    pub fn insert(&mut self, at: (usize, usize), s: &str) {
        self.lines.insert(at.0, format!("{}{s}", "    ".repeat(at.1)));
    }

    pub fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}{}", self.counter)
    }

    /// Elements of a `numel` block each invocation holds.
    pub fn regs(&self, numel: usize) -> usize {
        numel.div_ceil(self.wg).max(1)
    }

    /// Declares an uninitialized block variable of the given element type and shape.
    pub fn decl_block(&mut self, ty: Ty, shape: &[usize]) -> Tensor {
        let numel: usize = shape.iter().product();
        self.max_numel = self.max_numel.max(numel);
        let name = self.fresh("t");
        self.line(format!("var {name}: array<{}, {}>;", ty.wgsl(), self.regs(numel)));
        Tensor { expr: name, ty, shape: shape.to_vec() }
    }

    /// Emits `body` once per element this invocation owns: `i` indexes the private arrays,
    /// `e` (u32) is the row-major element index within the block.
    ///
    /// Up to [`UNROLL`] elements per invocation the loop is unrolled here, one `{ let i = Ku; .. }`
    /// block each: with constant indices the driver keeps the private arrays in registers (a
    /// runtime-indexed array can land in local memory, which cost the vector-add tutorial most
    /// of its bandwidth on NVIDIA).
    pub fn for_each(&mut self, numel: usize, body: impl Fn(&mut Self)) {
        let r = self.regs(numel);
        if numel >= self.wg && r <= UNROLL {
            for k in 0..r {
                self.open(String::new());
                self.line(format!("let i = {k}u;"));
                self.line(format!("let e = {}u + lid;", k * self.wg));
                body(self);
                self.close();
            }
            return;
        }
        if numel >= self.wg {
            self.open(format!("for (var i = 0u; i < {r}u; i++)"));
            self.line(format!("let e = i * {}u + lid;", self.wg));
        } else {
            self.open(format!("if (lid < {numel}u)"));
            self.line("let i = 0u;");
            self.line("let e = lid;");
        }
        body(self);
        self.close();
    }

    /// Elementwise `f` over operands that are scalars or already have `shape`.
    pub fn map(
        &mut self,
        ty: Ty,
        shape: &[usize],
        ins: &[&Tensor],
        f: impl Fn(&[String]) -> String,
    ) -> Tensor {
        if shape.is_empty() {
            let args: Vec<String> = ins.iter().map(|t| t.expr.clone()).collect();
            let name = self.fresh("t");
            self.line(format!("let {name}: {} = {};", ty.wgsl(), f(&args)));
            return Tensor::scalar(name, ty);
        }
        let out = self.decl_block(ty, shape);
        let numel = out.numel();
        let args: Vec<String> = ins.iter().map(|t| t.at("i")).collect();
        let rhs = f(&args);
        let lhs = out.at("i");
        self.for_each(numel, |em| em.line(format!("{lhs} = {rhs};")));
        out
    }

    /// Copies a scalar to every element of a new block.
    pub fn splat(&mut self, t: &Tensor, shape: &[usize]) -> Tensor {
        self.map(t.ty, shape, &[t], |a| a[0].clone())
    }

    pub fn barrier(&mut self) {
        self.line("workgroupBarrier();");
    }

    pub fn use_scratch(&mut self, which: usize, words: usize) {
        self.scratch[which] = self.scratch[which].max(words);
    }

    /// Writes every element of block `t` into scratch array `which` at its row-major index.
    fn stage(&mut self, t: &Tensor, which: usize) {
        self.use_scratch(which, t.numel());
        let v = bits(&t.at("i"), t.ty);
        self.for_each(t.numel(), |em| em.line(format!("wg{which}[e] = {v};")));
        self.barrier();
    }

    /// Broadcasts `t` (same rank as `shape`, each dim equal or 1) to `shape` through workgroup
    /// memory, because the elements an invocation needs are owned by other invocations.
    pub fn relayout(&mut self, t: &Tensor, shape: &[usize]) -> Tensor {
        if !t.is_block() {
            return self.splat(t, shape);
        }
        self.stage(t, 0);
        let out = self.decl_block(t.ty, shape);
        let src_idx = match (t.shape.as_slice(), shape) {
            ([_], [_]) => "e".to_string(),
            ([sm, sn], [_, n]) => {
                let row = if *sm == 1 { "0u".to_string() } else { format!("(e / {n}u)") };
                let col = if *sn == 1 { "0u".to_string() } else { format!("(e % {n}u)") };
                format!("{row} * {sn}u + {col}")
            }
            _ => "e".to_string(),
        };
        let rhs = unbits(&format!("wg0[{src_idx}]"), t.ty);
        let lhs = out.at("i");
        self.for_each(out.numel(), |em| em.line(format!("{lhs} = {rhs};")));
        self.barrier();
        out
    }

    /// Reduces block `t` (register type of `ty`) over `axis` (None: all elements) with `op`.
    /// The result has the reduced shape (a scalar for whole-block reductions).
    pub fn reduce(&mut self, t: &Tensor, ty: Ty, axis: Option<usize>, op: RedOp) -> Tensor {
        let d = ty.dtype().unwrap_or(DType::I32);
        let ident = identity(op, d);
        let wt = ty.wgsl();
        match (axis, t.shape.as_slice()) {
            (None, _) | (Some(0), [_]) if self.subgroups && self.wg > 1 && wt != "bool" => {
                let acc = self.fresh("r");
                self.line(format!("var {acc}: {wt} = {ident};"));
                let x = t.at("i");
                let c = combine(op, &acc, &x);
                self.for_each(t.numel(), |em| em.line(format!("{acc} = {c};")));
                self.subgroup_fold(&acc, ty, op)
            }
            (None, _) | (Some(0), [_]) => {
                // Each invocation folds its own elements, then a tree over the workgroup.
                let acc = self.fresh("r");
                self.line(format!("var {acc}: {wt} = {ident};"));
                let x = t.at("i");
                let c = combine(op, &acc, &x);
                self.for_each(t.numel(), |em| em.line(format!("{acc} = {c};")));
                self.use_scratch(0, self.wg);
                self.line(format!("wg0[lid] = {};", bits(&acc, ty)));
                self.barrier();
                if self.wg > 1 {
                    let s = self.fresh("s");
                    self.open(format!("for (var {s} = {}u; {s} > 0u; {s} >>= 1u)", self.wg / 2));
                    let a = unbits("wg0[lid]", ty);
                    let b = unbits(&format!("wg0[lid + {s}]"), ty);
                    self.open(format!("if (lid < {s})"));
                    self.line(format!("wg0[lid] = {};", bits(&combine(op, &a, &b), ty)));
                    self.close();
                    self.barrier();
                    self.close();
                }
                let name = self.fresh("t");
                let w = self.fresh("w");
                // workgroupUniformLoad makes the result uniform, so it may steer control flow
                // that contains barriers (e.g. a loop bound computed from a reduction).
                self.line(format!("let {w} = workgroupUniformLoad(&wg0[0]);"));
                self.line(format!("let {name}: {wt} = {};", unbits(&w, ty)));
                self.barrier();
                Tensor::scalar(name, ty)
            }
            (Some(axis), [m, n]) => {
                let (m, n) = (*m, *n);
                self.stage(t, 0);
                let (out_shape, len) = if axis == 0 { (vec![n], m) } else { (vec![m], n) };
                let out = self.decl_block(ty, &out_shape);
                let k = self.fresh("k");
                let idx =
                    if axis == 0 { format!("{k} * {n}u + e") } else { format!("e * {n}u + {k}") };
                let acc = self.fresh("r");
                let x = unbits(&format!("wg0[{idx}]"), ty);
                let c = combine(op, &acc, &x);
                let lhs = out.at("i");
                self.for_each(out.numel(), |em| {
                    em.line(format!("var {acc}: {wt} = {ident};"));
                    em.open(format!("for (var {k} = 0u; {k} < {len}u; {k}++)"));
                    em.line(format!("{acc} = {c};"));
                    em.close();
                    em.line(format!("{lhs} = {acc};"));
                });
                self.barrier();
                out
            }
            _ => self.splat(t, &[]),
        }
    }

    /// `a @ b` (+ `acc`), f32 math: both operands are staged in workgroup memory and each
    /// invocation computes the dot products of the output elements it owns.
    pub fn dot(&mut self, a: &Tensor, b: &Tensor, acc: Option<&Tensor>, out_ty: Ty) -> Tensor {
        if let Some(out) = self.dot_coop(a, b, acc, out_ty) {
            return out;
        }
        let (m, k, n) = (a.shape[0], a.shape[1], b.shape[1]);
        self.use_scratch(0, m * k);
        self.use_scratch(1, k * n);
        let (av, bv) = (as_f32(&a.at("i"), a.ty), as_f32(&b.at("i"), b.ty));
        self.for_each(a.numel(), |em| em.line(format!("wg0[e] = bitcast<u32>({av});")));
        self.for_each(b.numel(), |em| em.line(format!("wg1[e] = bitcast<u32>({bv});")));
        self.barrier();
        let out = self.decl_block(out_ty, &[m, n]);
        let s = self.fresh("r");
        let kk = self.fresh("k");
        let lhs = out.at("i");
        let base = acc.map(|t| as_f32(&t.at("i"), t.ty)).unwrap_or_else(|| "0.0f".into());
        let fin = crate::value::normalize(&s, out_ty.dtype().unwrap_or(DType::F32));
        if m * n >= self.wg && self.wg.is_multiple_of(n) {
            // All outputs of an invocation share one column (`e % n == lid % n`): iterate k
            // outermost so each B element is read once per k for all of them.
            let (r, rows_per_i) = (self.regs(m * n), self.wg / n);
            let bk = self.fresh("b");
            self.line(format!("var {s}: array<f32, {r}>;"));
            self.for_each(m * n, |em| em.line(format!("{s}[i] = {base};")));
            self.open(format!("for (var {kk} = 0u; {kk} < {k}u; {kk}++)"));
            self.line(format!("let {bk} = bitcast<f32>(wg1[{kk} * {n}u + lid % {n}u]);"));
            let step = format!(
                "{s}[i] = fma(bitcast<f32>(wg0[(i * {rows_per_i}u + lid / {n}u) * {k}u + {kk}]), {bk}, {s}[i]);"
            );
            if r <= UNROLL {
                // Constant indices keep the accumulators in registers (see `for_each`).
                for i in 0..r {
                    self.open(String::new());
                    self.line(format!("let i = {i}u;"));
                    self.line(&step);
                    self.close();
                }
            } else {
                self.open(format!("for (var i = 0u; i < {r}u; i++)"));
                self.line(&step);
                self.close();
            }
            self.close();
            let fin =
                crate::value::normalize(&format!("{s}[i]"), out_ty.dtype().unwrap_or(DType::F32));
            self.for_each(m * n, |em| em.line(format!("{lhs} = {fin};")));
            self.barrier();
            return out;
        }
        self.for_each(m * n, |em| {
            em.line(format!("let row = (e / {n}u) * {k}u;"));
            em.line("let col = e % ".to_string() + &format!("{n}u;"));
            em.line(format!("var {s}: f32 = {base};"));
            em.open(format!("for (var {kk} = 0u; {kk} < {k}u; {kk}++)"));
            em.line(format!(
                "{s} = fma(bitcast<f32>(wg0[row + {kk}]), bitcast<f32>(wg1[{kk} * {n}u + col]), {s});"
            ));
            em.close();
            em.line(format!("{lhs} = {fin};"));
        });
        self.barrier();
        out
    }
}

fn as_f32(e: &str, ty: Ty) -> String {
    match ty {
        Ty::D(d) if d.is_float() => e.to_string(),
        Ty::D(DType::Bool) => format!("select(0.0f, 1.0f, {e})"),
        _ => format!("f32({e})"),
    }
}

/// The u32 bit pattern of a register value (scratch memory is untyped words).
pub(crate) fn bits(e: &str, ty: Ty) -> String {
    match ty.wgsl() {
        "bool" => format!("select(0u, 1u, {e})"),
        _ => format!("bitcast<u32>({e})"),
    }
}

pub(crate) fn unbits(e: &str, ty: Ty) -> String {
    match ty.wgsl() {
        "bool" => format!("({e} != 0u)"),
        t => format!("bitcast<{t}>({e})"),
    }
}

pub(crate) fn combine(op: RedOp, a: &str, b: &str) -> String {
    match op {
        RedOp::Sum => format!("{a} + {b}"),
        RedOp::Max => format!("max({a}, {b})"),
        RedOp::Min => format!("min({a}, {b})"),
    }
}

pub(crate) fn identity(op: RedOp, d: DType) -> String {
    let float = d.is_float();
    match (op, float) {
        (RedOp::Sum, true) => "0.0f".into(),
        (RedOp::Sum, false) => "0i".into(),
        (RedOp::Max, true) => "bitcast<f32>(0xff800000u)".into(),
        (RedOp::Max, false) => "i32(-2147483647 - 1)".into(),
        (RedOp::Min, true) => "bitcast<f32>(0x7f800000u)".into(),
        (RedOp::Min, false) => "2147483647i".into(),
    }
}
