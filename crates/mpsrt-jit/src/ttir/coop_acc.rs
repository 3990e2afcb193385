//! `tl.dot` accumulators that stay in cooperative matrices across an `scf.for` (Triton's matmul
//! loop: `acc = tl.dot(a, b, acc)` carried from iteration to iteration).
//!
//! The per-dot path (`coop.rs`) copies the f32 accumulator from registers into workgroup memory,
//! `coopLoadT`s it, multiplies, `coopStoreT`s it and reads it back every K step: at 128x64 tiles
//! that is 64 KiB of workgroup traffic per step beside the matrix work, and tutorial 03 reached
//! 42-46% of mpsrt's own f16 GEMM on an H100 (BENCHMARKS.md, session 10 call 9). Here the loop's
//! carried accumulator is a set of `coop_mat<f32, C>` variables, one per output tile this
//! subgroup owns (unrolled, so they stay in registers): the loop body stages A and B as f16, one
//! barrier, `coopMultiplyAdd`s into the carried tiles, one barrier; the tiles go through
//! workgroup memory only once, after the loop.
//!
//! Taken only when the pattern is exact — the carried value is used by nothing but one
//! top-level `tt.dot` (as its accumulator) whose result is nothing but yielded back in the same
//! position — and the shapes tile evenly over the workgroup's subgroups; anything else keeps
//! the per-dot path, which is correct for every use.

use super::lower::{TtirLowerer, V};
use super::parse::{self, operands, Elem, Op};
use crate::value::{Tensor, Ty};
use mpsrt_core::DType;

/// One carried accumulator held in cooperative matrices.
#[derive(Debug, Clone)]
pub(super) struct CoopAcc {
    /// Variable name prefix: tiles are `{name}_{j}`; also the marker `Tensor::expr` the carried
    /// value and the dot's result are bound to (never read as WGSL: the pattern check makes
    /// sure nothing but the dot and the yield sees them).
    pub name: String,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Staging arrays: A (f16, m x k), B (f16, k x n), C (f32, m x n; init and final read-out).
    pub ca: String,
    pub cb: String,
    pub cc: String,
    /// Read-out passes after the loop (see [`TtirLowerer::coop_acc_end`]): `cc` holds
    /// `m * n / passes` floats.
    pub passes: usize,
    /// Staged operands and a two-dimensional tile grid (`dot_stage`), or `None`.
    pub grid: Option<super::dot_stage::Grid>,
    /// The `tt.load`s (SSA names) feeding operands A and B that may stage into the slabs.
    pub loads: [Option<String>; 2],
    /// Operands A / B of the current iteration already written to their slabs by their load.
    pub staged: [bool; 2],
    /// Staged loads of the current iteration whose copies the dot emits (`stage_emit`).
    pub pending: Vec<super::stage_emit::Pending>,
}

impl CoopAcc {
    fn tiles_per_subgroup(&self, em: &crate::emit::Emitter) -> (usize, usize) {
        let cfg = em.coop.expect("coop accumulators need a configuration");
        let (s, sg) = (cfg.size as usize, cfg.subgroup as usize);
        let nsg = em.wg / sg;
        ((self.m / s) * (self.n / s) / nsg, nsg)
    }

    /// `let` bindings of tile `j`'s origin: `at{j}` in A (row block) and `ct{j}` in C.
    fn tile_lets(&self, em: &mut crate::emit::Emitter, j: usize) -> (String, String, String) {
        let s = em.coop.map_or(16, |c| c.size as usize);
        let (_, nsg) = self.tiles_per_subgroup(em);
        let tn = self.n / s;
        let (t, at, ct) = (em.fresh("tile"), em.fresh("at"), em.fresh("ct"));
        em.line(format!("let {t} = sg + {}u;", j * nsg));
        em.line(format!("let {at} = ({t} / {tn}u) * {}u;", s * self.k));
        em.line(format!("let {ct} = ({t} / {tn}u) * {}u + ({t} % {tn}u) * {s}u;", s * self.n));
        (t, at, ct)
    }
}

impl TtirLowerer {
    /// For `scf.for` `op` with carried values `names` / `inits`: which of them can live in
    /// cooperative matrices (see the module docs), with their shapes.
    pub(super) fn coop_candidates(
        &self,
        op: &Op,
        names: &[String],
        inits: &[V],
    ) -> Vec<Option<CoopAcc>> {
        let none = vec![None; names.len()];
        let Some(cfg) = self.em.coop else { return none };
        if self.em.emulate_coop && !self.stage_dot {
            return none;
        }
        let Some(body) = op.regions.first() else { return none };
        let Some(yield_op) = body.ops.last().filter(|o| o.name == "scf.yield") else { return none };
        let yielded = operands(&yield_op.body);
        let (s, sg) = (cfg.size as usize, cfg.subgroup as usize);
        if !self.em.wg.is_multiple_of(sg) {
            return none;
        }
        let nsg = self.em.wg / sg;
        names
            .iter()
            .zip(inits)
            .enumerate()
            .map(|(pos, (name, init))| {
                if init.ty() != Ty::D(DType::F32) || init.shape().len() != 2 {
                    return None;
                }
                let dots: Vec<&Op> = body
                    .ops
                    .iter()
                    .filter(|o| o.name == "tt.dot" && operands(&o.body).get(2) == Some(name))
                    .collect();
                let [dot] = dots.as_slice() else { return None };
                let result = dot.results.first()?;
                if yielded.get(pos) != Some(result) {
                    return None;
                }
                // Nothing else reads the carried value or the dot's result.
                let uses = |v: &str| count_uses(&body.ops, v);
                if uses(name) != 1
                    || uses(result) != 1
                    || yielded.iter().filter(|y| *y == result).count() != 1
                {
                    return None;
                }
                let tys = parse::types_text(&dot.body);
                let (ab, out) = tys.split_once("->")?;
                let (ta, tb) = ab.split_once('*')?;
                let (ta, tb, to) = (
                    parse::parse_type(ta).ok()?,
                    parse::parse_type(tb).ok()?,
                    parse::parse_type(out).ok()?,
                );
                let f16 = |t: &parse::Type| matches!(t.elem, Elem::D(DType::F16));
                if !(f16(&ta) && f16(&tb) && matches!(to.elem, Elem::D(DType::F32))) {
                    return None;
                }
                let (m, k, n) = (*ta.shape.first()?, *ta.shape.get(1)?, *tb.shape.get(1)?);
                if tb.shape.first() != Some(&k) || to.shape != [m, n] || init.shape() != [m, n] {
                    return None;
                }
                let fits = m.is_multiple_of(s) && n.is_multiple_of(s) && k.is_multiple_of(s);
                if !fits || !((m / s) * (n / s)).is_multiple_of(nsg) {
                    return None;
                }
                let mut acc = CoopAcc {
                    name: String::new(),
                    m,
                    n,
                    k,
                    ca: String::new(),
                    cb: String::new(),
                    cc: String::new(),
                    passes: 1,
                    grid: None,
                    loads: [None, None],
                    staged: [false, false],
                    pending: Vec::new(),
                };
                self.plan_staging(&mut acc, dot, &body.ops);
                if self.em.emulate_coop && acc.grid.is_none() {
                    return None;
                }
                Some(acc)
            })
            .collect()
    }

    /// Declares the tiles of `acc` and loads them from the loop's initial value; returns the
    /// marker tensor the carried value is bound to.
    pub(super) fn coop_acc_begin(&mut self, mut acc: CoopAcc, init: &V) -> Tensor {
        if let Some(g) = acc.grid {
            return self.staged_begin(acc, g, init);
        }
        let id = self.em.fresh("");
        acc.name = format!("cacc{id}");
        (acc.ca, acc.cb, acc.cc) = (format!("caa{id}"), format!("cab{id}"), format!("cac{id}"));
        let (m, n, k) = (acc.m, acc.n, acc.k);
        self.em.uses_coop = true;
        let s = self.em.coop.map_or(16, |c| c.size as usize);
        let (per, nsg) = acc.tiles_per_subgroup(&self.em);
        // Triton's `tl.zeros` accumulator: the tiles start from a zero tile, so the staging
        // array is only needed after the loop, where it can be read out in `per` passes (pass
        // `j` holds every subgroup's `j`-th tile: whole tile rows when `nsg` is a multiple of
        // the tiles per row). 128x128 blocks then fit NVIDIA's 48 KiB of workgroup memory.
        let zero = matches!(init, V::Splat(t, _) if t.expr == "0.0f");
        if zero && per > 1 && nsg.is_multiple_of(n / s) {
            acc.passes = per;
        }
        self.em.functions.push(format!(
            "var<workgroup> {}: array<f16, {}>;\nvar<workgroup> {}: array<f16, {}>;\nvar<workgroup> {}: array<f32, {}>;\n",
            acc.ca,
            m * k,
            acc.cb,
            k * n,
            acc.cc,
            m * n / acc.passes
        ));
        self.em.extra_workgroup_bytes += (m * k + k * n) * 2 + m * n * 4 / acc.passes;
        for j in 0..per {
            self.em.line(format!("var {}_{j}: coop_mat{s}x{s}<f32, C>;", acc.name));
        }
        let cc = acc.cc.clone();
        if zero {
            // One zero tile, loaded into every accumulator.
            self.em.for_each(s * s, |em| em.line(format!("{cc}[e] = 0.0f;")));
            self.em.barrier();
            for j in 0..per {
                self.em.line(format!(
                    "{}_{j} = coopLoadT<coop_mat{s}x{s}<f32, C>>(&{cc}[0], {s}u);",
                    acc.name
                ));
            }
            self.em.barrier();
            let marker =
                Tensor { expr: acc.name.clone(), ty: Ty::D(DType::F32), shape: vec![m, n] };
            self.coop_accs.insert(acc.name.clone(), acc);
            return marker;
        }
        // A splat is written from its scalar, without a register block.
        let src = match init {
            V::Splat(t, _) => t.expr.clone(),
            V::T(t) if !t.is_block() => t.expr.clone(),
            V::T(t) => t.at("i"),
        };
        self.em.for_each(m * n, |em| em.line(format!("{cc}[e] = {src};")));
        self.em.barrier();
        for j in 0..per {
            self.em.open("");
            let (_, _, ct) = acc.tile_lets(&mut self.em, j);
            self.em.line(format!(
                "{}_{j} = coopLoadT<coop_mat{s}x{s}<f32, C>>(&{cc}[{ct}], {n}u);",
                acc.name
            ));
            self.em.close();
        }
        self.em.barrier();
        let marker = Tensor { expr: acc.name.clone(), ty: Ty::D(DType::F32), shape: vec![m, n] };
        self.coop_accs.insert(acc.name.clone(), acc);
        marker
    }

    /// `acc += a @ b` on the carried tiles, or `None` when `acc` is not a carried accumulator.
    pub(super) fn coop_acc_dot(&mut self, a: &Tensor, b: &Tensor, acc: &Tensor) -> Option<V> {
        let c = self.coop_accs.get(&acc.expr)?.clone();
        if c.grid.is_some() {
            return self.staged_dot(a, b, acc);
        }
        let s = self.em.coop?.size as usize;
        let (ca, cb, n, k) = (c.ca.clone(), c.cb.clone(), c.n, c.k);
        let (av, bv) = (a.at("i"), b.at("i"));
        self.em.for_each(a.numel(), |em| em.line(format!("{ca}[e] = f16({av});")));
        self.em.for_each(b.numel(), |em| em.line(format!("{cb}[e] = f16({bv});")));
        self.em.barrier();
        let (per, nsg) = c.tiles_per_subgroup(&self.em);
        let tn = n / s;
        if per > 1 && nsg.is_multiple_of(tn) {
            // Tile j of subgroup sg is sg + j * nsg: with nsg a multiple of the tiles per row,
            // all of a subgroup's tiles share one column, so each B fragment is loaded once per
            // K step and used for every tile.
            self.em.open("");
            let lets: Vec<_> = (0..per).map(|j| c.tile_lets(&mut self.em, j)).collect();
            let kk = self.em.fresh("k");
            self.em.open(format!("for (var {kk} = 0u; {kk} < {k}u; {kk} += {s}u)"));
            self.em.line(format!(
                "let mb = coopLoadT<coop_mat{s}x{s}<f16, B>>(&{cb}[{kk} * {n}u + ({} % {tn}u) * {s}u], {n}u);",
                lets[0].0
            ));
            for (j, (_, at, _)) in lets.iter().enumerate() {
                self.em.line(format!(
                    "let ma{j} = coopLoadT<coop_mat{s}x{s}<f16, A>>(&{ca}[{at} + {kk}], {k}u);"
                ));
                self.em.line(format!("{0}_{j} = coopMultiplyAdd(ma{j}, mb, {0}_{j});", c.name));
            }
            self.em.close();
            self.em.close();
            self.em.barrier();
            return Some(V::T(acc.clone()));
        }
        for j in 0..per {
            self.em.open("");
            let (t, at, _) = c.tile_lets(&mut self.em, j);
            let kk = self.em.fresh("k");
            self.em.open(format!("for (var {kk} = 0u; {kk} < {k}u; {kk} += {s}u)"));
            self.em.line(format!(
                "let ma = coopLoadT<coop_mat{s}x{s}<f16, A>>(&{ca}[{at} + {kk}], {k}u);"
            ));
            self.em.line(format!(
                "let mb = coopLoadT<coop_mat{s}x{s}<f16, B>>(&{cb}[{kk} * {n}u + ({t} % {tn}u) * {s}u], {n}u);"
            ));
            self.em.line(format!("{0}_{j} = coopMultiplyAdd(ma, mb, {0}_{j});", c.name));
            self.em.close();
            self.em.close();
        }
        // The next iteration overwrites the staged A and B.
        self.em.barrier();
        Some(V::T(acc.clone()))
    }

    /// After the loop: the tiles written out and read back as an ordinary f32 block.
    pub(super) fn coop_acc_end(&mut self, marker: &Tensor) -> Tensor {
        let c = self.coop_accs[&marker.expr].clone();
        if let Some(g) = c.grid {
            return self.staged_end(&c, g);
        }
        let (per, _) = c.tiles_per_subgroup(&self.em);
        let (cc, n) = (c.cc.clone(), c.n);
        if c.passes > 1 {
            // Pass j: every subgroup stores its j-th tile (together, whole tile rows: elements
            // [j * chunk, (j + 1) * chunk) of the block), then each invocation reads the
            // elements of that range it owns, which are consecutive `i`s of its array.
            let out = self.em.decl_block(Ty::D(DType::F32), &[c.m, n]);
            let (chunk, wg) = (c.m * n / c.passes, self.em.wg);
            let lhs = out.at("i");
            for j in 0..c.passes {
                self.em.open("");
                let (_, _, ct) = c.tile_lets(&mut self.em, j);
                let off = j * chunk;
                self.em.line(format!("coopStoreT({}_{j}, &{cc}[{ct} - {off}u], {n}u);", c.name));
                self.em.close();
                self.em.barrier();
                for i in j * chunk / wg..(j + 1) * chunk / wg {
                    self.em.open("");
                    self.em.line(format!("let i = {i}u;"));
                    self.em.line(format!("let e = {}u + lid;", i * wg));
                    self.em.line(format!("{lhs} = {cc}[e - {off}u];"));
                    self.em.close();
                }
                self.em.barrier();
            }
            return out;
        }
        for j in 0..per {
            self.em.open("");
            let (_, _, ct) = c.tile_lets(&mut self.em, j);
            self.em.line(format!("coopStoreT({}_{j}, &{cc}[{ct}], {n}u);", c.name));
            self.em.close();
        }
        self.em.barrier();
        let out = self.em.decl_block(Ty::D(DType::F32), &[c.m, n]);
        let lhs = out.at("i");
        self.em.for_each(c.m * n, |em| em.line(format!("{lhs} = {cc}[e];")));
        self.em.barrier();
        out
    }
}

/// How many ops in `ops` (nested regions included) name the SSA value `v` among their operands.
pub(super) fn count_uses(ops: &[Op], v: &str) -> usize {
    ops.iter()
        .map(|o| {
            operands(&o.body).iter().filter(|x| *x == v).count()
                + o.regions.iter().map(|r| count_uses(&r.ops, v)).sum::<usize>()
        })
        .sum()
}
