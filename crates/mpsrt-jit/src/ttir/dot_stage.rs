//! Staged `tl.dot` on cooperative matrices (`CompileOptions::stage_dot`), the shape of mpsrt's
//! own generation-3 f16 GEMM (`mpsrt-kernels/src/matmul_coop_family.rs`) inside Triton's K loop.
//!
//! `coop_acc` keeps the loop-carried accumulator in cooperative matrices, but its operands
//! reached workgroup memory one f16 element at a time: each invocation loaded its elements of
//! the `tt.load` block (a packed word read, unpacked, masked) into registers, then stored them
//! as 2-byte halves; every subgroup owned one column of tiles (one B fragment, many A
//! fragments per K step); and the workgroup widened to 1024 invocations (2 tiles each). At
//! 4096³ that ran at 25-31 TFLOP/s on an H200 (34-41% of the built-in GEMM of then, 75);
//! staged, 65-68 TFLOP/s (session 12, calls 3-7; 82 with `MPSRT_TRITON_UNCHECKED=1`), while the
//! built-in itself moved to ~189 with unchecked, vector-slab kernels. Here:
//!
//! * **Operands go straight from global memory into padded f16 slabs.** A `tt.load`
//!   whose only use is operand A or B of the carried dot, with a pointer (and mask) that
//!   `remat` can recompute from the element index, is not loaded into registers: each
//!   invocation takes pairs of consecutive halves, checks at run time that the two pointers are
//!   consecutive and the first even (then one `u32` load; else two masked half loads) and stores
//!   both halves (`f16` slabs: NVIDIA's compiler rejects cooperative loads through `u32`
//!   pointers; `slab_vec2` types them `vec2<f16>`, one store per pair). For carried pointers
//!   (below) under an all-true mask, each pair's base and one contiguity flag are computed once
//!   before the loop and full blocks copy without per-pair checks. Rows are padded by [`PAD`]
//!   halves so the matrix loads of one fragment hit different banks. Any other operand is
//!   written into the slab from registers, one half per element.
//! * **Copies are emitted at the dot** (`stage_emit`, session 14): every staged operand's
//!   global loads first, under one branch on their joint whole-run condition, then the slab
//!   stores; the general per-pair copies share the `else`.
//! * **Pointer blocks advanced by a uniform step** (`a_ptrs += BLOCK_SIZE_K * stride_ak`) are
//!   carried as their initial template plus one scalar offset (`carried_pointers`), so the loads
//!   above can recompute them, and no pointer array is carried across the loop.
//! * **Tiles are blocked in two dimensions**: the `nsg` subgroups form a `wm x wn` grid and
//!   each owns `tm x tn` tiles (tile rows `i * wm + sy`, columns `j * wn + sx`), chosen to
//!   minimise the fragment loads per K step (`tm + tn` for `tm * tn` products). After the loop
//!   the accumulators go through workgroup memory in `tm` passes of `wm` whole tile rows.
//! * The workgroup keeps Triton's `num_warps * 32` invocations (no widening, see `ttir::mod`).
//! * **`vec4<f16>` slabs** (`CompileOptions::slab_vec4`, 16x16 tiles; session 13): the built-in
//!   GEMM's `vs4`. A full run of 8 halves is two 8-byte loads from a second binding of the
//!   operand typed `array<vec4<f16>>` (`bufv{k}`; the word binding `buf{k}` keeps serving every
//!   other read, since a vector binding's `arrayLength` rounds the buffer's last halves away),
//!   stored to the slab as loaded — the word path unpacked each pair to f32, converted it back
//!   and stored halves one at a time. Fragments load through vector pointers, strides in
//!   vectors. Edge pairs go into vector components.

use super::coop_acc::CoopAcc;
use super::lower::{TtirLowerer, V};
use super::parse::{operands, Op};
use super::stage_emit::{FastRuns, Pending};
use crate::value::{Tensor, Ty};
use mpsrt_core::DType;

/// Halves of padding after every slab row.
pub(super) const PAD: usize = 8;

/// How a staged accumulator's tiles are dealt over the subgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Grid {
    pub wm: usize,
    pub wn: usize,
    pub tm: usize,
    pub tn: usize,
}

impl Grid {
    /// The `wm x wn` split of `nsg` subgroups over `m/s x n/s` tiles with the fewest fragment
    /// loads per product (ties: fewer subgroup rows, a smaller read-out array).
    pub fn choose(m: usize, n: usize, s: usize, nsg: usize) -> Option<Grid> {
        let (rows, cols) = (m / s, n / s);
        (1..=nsg)
            .filter(|wm| nsg.is_multiple_of(*wm))
            .filter_map(|wm| {
                let wn = nsg / wm;
                (rows.is_multiple_of(wm) && cols.is_multiple_of(wn)).then_some(Grid {
                    wm,
                    wn,
                    tm: rows / wm,
                    tn: cols / wn,
                })
            })
            .min_by_key(|g| (g.tm + g.tn, g.wm))
    }
}

impl TtirLowerer {
    /// Whether the carried accumulator `acc` (found by `coop_candidates` for `dot`) is staged:
    /// sets its grid and the `tt.load`s (top-level in `body`, used once) feeding its operands.
    pub(super) fn plan_staging(&self, acc: &mut CoopAcc, dot: &Op, body: &[Op]) {
        let Some(cfg) = self.em.coop else { return };
        if !self.stage_dot || !self.em.wg.is_multiple_of(cfg.subgroup as usize) {
            return;
        }
        let (s, nsg) = (cfg.size as usize, self.em.wg / cfg.subgroup as usize);
        let Some(grid) = Grid::choose(acc.m, acc.n, s, nsg) else { return };
        acc.grid = Some(grid);
        let ins = operands(&dot.body);
        for (which, name) in ins.iter().take(2).enumerate() {
            let is_load =
                body.iter().any(|o| o.name == "tt.load" && o.results.first() == Some(name));
            if is_load && super::coop_acc::count_uses(body, name) == 1 {
                acc.loads[which] = Some(name.clone());
            }
        }
    }

    /// Declares a staged accumulator's tiles and slabs (`coop_acc_begin` for a staged one).
    pub(super) fn staged_begin(&mut self, mut acc: CoopAcc, g: Grid, init: &V) -> Tensor {
        let s = self.em.coop.map_or(16, |c| c.size as usize);
        let id = self.em.fresh("");
        acc.name = format!("cacc{id}");
        (acc.ca, acc.cb, acc.cc) = (format!("caa{id}"), format!("cab{id}"), format!("cac{id}"));
        let (m, n, k) = (acc.m, acc.n, acc.k);
        if self.em.emulate_coop {
            self.em.uses_f16 = true;
        } else {
            self.em.uses_coop = true;
        }
        // Read-out passes: `wm` tile rows of the block each.
        acc.passes = g.tm;
        let chunk = m * n / g.tm;
        let (ha, hb) = (m * (k + PAD), k * (n + PAD));
        let w = self.slab_w;
        let et = if w == 1 { "f16".to_string() } else { format!("vec{w}<f16>") };
        self.em.functions.push(format!(
            "var<workgroup> {}: array<{et}, {}>;\nvar<workgroup> {}: array<{et}, {}>;\nvar<workgroup> {}: array<f32, {chunk}>;\n",
            acc.ca,
            ha / w,
            acc.cb,
            hb / w,
            acc.cc
        ));
        self.em.extra_workgroup_bytes += (ha + hb) * 2 + chunk * 4;
        let zero = matches!(init, V::Splat(t, _) if t.expr == "0.0f");
        if self.em.emulate_coop {
            // Register accumulators in the block distribution (`emulate_coop`).
            let src = match init {
                V::Splat(t, _) => t.expr.clone(),
                V::T(t) if !t.is_block() => t.expr.clone(),
                V::T(t) => t.at("i"),
            };
            self.em.max_numel = self.em.max_numel.max(m * n);
            let r = self.em.regs(m * n);
            self.em.line(format!("var {}_r: array<f32, {r}>;", acc.name));
            let name = acc.name.clone();
            self.em.for_each(m * n, |em| em.line(format!("{name}_r[i] = {src};")));
        } else {
            for t in 0..g.tm * g.tn {
                self.em.line(format!("var {}_{t} = coop_mat{s}x{s}<f32, C>();", acc.name));
            }
        }
        if !zero && !self.em.emulate_coop {
            // Pass `i` writes tile rows `i * wm ..` of the initial value and loads them.
            let src = match init {
                V::Splat(t, _) => t.expr.clone(),
                V::T(t) if !t.is_block() => t.expr.clone(),
                V::T(t) => t.at("i"),
            };
            let cc = acc.cc.clone();
            for i in 0..g.tm {
                let (lo, hi) = (i * chunk, (i + 1) * chunk);
                self.em.for_each(m * n, |em| {
                    em.open(format!("if (e >= {lo}u && e < {hi}u)"));
                    em.line(format!("{cc}[e - {lo}u] = {src};"));
                    em.close();
                });
                self.em.barrier();
                for j in 0..g.tn {
                    let at = self.tile_in_chunk(&acc, g, j);
                    self.em.line(format!(
                        "{}_{} = coopLoadT<coop_mat{s}x{s}<f32, C>>(&{cc}[{at}], {n}u);",
                        acc.name,
                        i * g.tn + j
                    ));
                }
                self.em.barrier();
            }
        }
        for (which, load) in acc.loads.clone().iter().enumerate() {
            if let Some(l) = load {
                self.staged_loads.insert(l.clone(), (acc.name.clone(), which));
            }
        }
        let marker = Tensor { expr: acc.name.clone(), ty: Ty::D(DType::F32), shape: vec![m, n] };
        self.coop_accs.insert(acc.name.clone(), acc);
        marker
    }

    /// Offset in the read-out chunk of this subgroup's tile `j` of a pass (local tile row `sy`).
    fn tile_in_chunk(&self, acc: &CoopAcc, g: Grid, j: usize) -> String {
        let s = self.em.coop.map_or(16, |c| c.size as usize);
        format!("(sg / {wn}u) * {}u + ({j}u * {wn}u + sg % {wn}u) * {s}u", s * acc.n, wn = g.wn)
    }

    /// A `tt.load` feeding a staged dot: written straight into the operand's slab (see the
    /// module docs). Returns a marker the dot recognises, or `None` to load into registers.
    pub(super) fn stage_dot_operand(
        &mut self,
        op: &Op,
        p: &Tensor,
        arg: usize,
        elem: DType,
        mask: Option<&Tensor>,
        other: Option<&Tensor>,
    ) -> Option<V> {
        let res = op.results.first()?;
        let (acc_name, which) = self.staged_loads.get(res)?.clone();
        let acc = self.coop_accs.get(&acc_name)?.clone();
        let ptpl = self.remat.get(&p.expr)?.clone();
        if elem != DType::F16 || !p.is_block() || self.args[arg].stored {
            return None;
        }
        let mtpl = match mask {
            None => None,
            Some(m) if !m.is_block() => Some(m.expr.clone()),
            Some(m) => Some(self.remat.get(&m.expr)?.clone()),
        };
        let oth = match other {
            None => "0.0f".to_string(),
            Some(o) if !o.is_block() => o.expr.clone(),
            Some(_) => return None,
        };
        let (rows, cols, slab) = if which == 0 {
            (acc.m, acc.k, acc.ca.clone())
        } else {
            (acc.k, acc.n, acc.cb.clone())
        };
        if p.shape != [rows, cols] || !cols.is_multiple_of(2) {
            return None;
        }
        let full = operands(&op.body).get(1).and_then(|m| self.bounds.full(m)).map(str::to_string);
        let wg = self.em.wg;
        let ok = |e: &str| {
            let m = mtpl.as_ref().map_or("true".to_string(), |t| t.replace("{E}", e));
            match &full {
                Some(f) => format!("({f} || {m})"),
                None => m,
            }
        };
        // A carried pointer (`template + off`) with the mask known all-true: the runs' bases
        // and their contiguity are loop invariant, computed once before the loop, and full
        // blocks take a branch-free copy. Runs of 8 halves (one 16-byte load) where the block
        // splits evenly into them, else pairs.
        let run =
            if (rows * cols / 8).is_multiple_of(wg) && cols.is_multiple_of(8) { 8 } else { 2 };
        let fast = match (mtpl.is_some(), &full) {
            (true, None) => None,
            _ => self.hoist_bases(&p.expr, rows * cols, run, wg),
        };
        let fast = fast.map(|(off, step, bases, contiguous)| {
            let mut cond = match &full {
                Some(f) => format!("{f} && {contiguous}"),
                None => contiguous,
            };
            cond.push_str(&format!(" && (({off} + P.off{arg}) & {}i) == 0i", run - 1));
            FastRuns { cond, off, step, bases, run }
        });
        // The general path takes units of `unit` halves, `wg` units apart: the same elements
        // as the fast path (the branch is per invocation), pairs otherwise.
        let unit = if fast.is_some() { run } else { 2 };
        let pending = Pending {
            arg,
            slab: slab.clone(),
            cols,
            unit,
            units: rows * cols / unit,
            p: [ptpl.replace("{E}", "e"), ptpl.replace("{E}", "(e + 1u)")],
            m: [ok("e"), ok("(e + 1u)")],
            other: oth,
            fast,
        };
        if self.joint_stage {
            self.coop_accs.get_mut(&acc_name)?.pending.push(pending);
        } else {
            let _ = self.emit_pending(&[pending]);
        }
        self.coop_accs.get_mut(&acc_name)?.staged[which] = true;
        Some(V::T(Tensor {
            expr: format!("staged_{slab}"),
            ty: Ty::D(elem),
            shape: p.shape.clone(),
        }))
    }

    /// For a carried pointer block `ptr` (`carried_block`) of `numel` elements read in runs of
    /// `run` consecutive elements, `wg` runs apart per invocation: `let`s before the innermost
    /// loop holding each run's base pointer (the template without the carried offset) and one
    /// bool saying every run is consecutive and starts at a multiple of `run`. Returns the offset
    /// variable, its step (`step_at_top`), the bases and the bool.
    fn hoist_bases(
        &mut self,
        ptr: &str,
        numel: usize,
        run: usize,
        wg: usize,
    ) -> Option<(String, Option<String>, Vec<String>, String)> {
        let (tpl, off, step) = self.carried_tpl.get(ptr)?.clone();
        let mark = *self.loop_marks.last()?;
        if !(numel / run).is_multiple_of(wg) || !numel.is_multiple_of(run) {
            return None;
        }
        let id = self.em.fresh("hb");
        let mut lines = Vec::new();
        let mut conds = Vec::new();
        let mut bases = Vec::new();
        for j in 0..numel / run / wg {
            let e = format!("((lid + {}u) * {run}u)", j * wg);
            let b = format!("{id}_{j}");
            lines.push(format!("let {b}: i32 = {};", tpl.replace("{E}", &e)));
            conds.push(format!("(({b} & {}i) == 0i)", run - 1));
            for t in 1..run {
                let next = tpl.replace("{E}", &format!("({e} + {t}u)"));
                conds.push(format!("({next} == {b} + {t}i)"));
            }
            bases.push(b);
        }
        let c = format!("{id}_ok");
        let all = conds.join(" && ");
        lines.push(if self.uniform_fast && self.em.subgroups {
            // Subgroup-uniform (`CompileOptions::uniform_fast`).
            format!("let {c} = subgroupAll({all});")
        } else {
            format!("let {c} = {all};")
        });
        for (k, l) in lines.iter().enumerate() {
            self.em.insert((mark.0 + k, mark.1), l);
        }
        if let Some(m) = self.loop_marks.last_mut() {
            m.0 += lines.len();
        }
        Some((off, step, bases, c))
    }

    /// `emulate_coop`: every invocation adds the products of its own output elements, read
    /// from the slabs in f32.
    fn emulated_products(&mut self, c: &CoopAcc, lda: usize, ldb: usize) {
        let (n, k, name) = (c.n, c.k, c.name.clone());
        let w = self.slab_w;
        let half = |slab: &str, at: String| {
            if w > 1 {
                format!("f32({slab}[({at}) / {w}u][({at}) % {w}u])")
            } else {
                format!("f32({slab}[{at}])")
            }
        };
        let a = half(&c.ca, format!("(e / {n}u) * {lda}u + kk"));
        let b = half(&c.cb, format!("kk * {ldb}u + e % {n}u"));
        self.em.for_each(c.m * n, |em| {
            em.line("var s = 0.0f;");
            em.open(format!("for (var kk = 0u; kk < {k}u; kk++)"));
            em.line(format!("s = fma({a}, {b}, s);"));
            em.close();
            em.line(format!("{name}_r[i] += s;"));
        });
    }

    /// Stores the pair `h` (a `vec2<f16>`) at half index `at` (even) of `slab`.
    pub(super) fn store_pair(&mut self, slab: &str) {
        if self.slab_w == 4 {
            // `at` is even: the pair is the low or high half of one vector.
            self.em.line(format!("{slab}[at >> 2u][at & 3u] = h.x;"));
            self.em.line(format!("{slab}[at >> 2u][(at & 3u) + 1u] = h.y;"));
        } else if self.slab_w == 2 {
            self.em.line(format!("{slab}[at >> 1u] = h;"));
        } else {
            self.em.line(format!("{slab}[at] = h.x;"));
            self.em.line(format!("{slab}[at + 1u] = h.y;"));
        }
    }

    /// Writes a register-held operand into its padded slab, one half per element.
    fn pack_into_slab(&mut self, t: &Tensor, slab: &str, cols: usize) {
        let (v, ld, w) = (t.at("i"), cols + PAD, self.slab_w);
        self.em.for_each(t.numel(), |em| {
            let at = format!("(e / {cols}u) * {ld}u + e % {cols}u");
            em.line(if w > 1 {
                format!("{slab}[({at}) / {w}u][({at}) % {w}u] = f16({v});")
            } else {
                format!("{slab}[{at}] = f16({v});")
            });
        });
    }

    /// `acc += a @ b` for a staged accumulator.
    pub(super) fn staged_dot(&mut self, a: &Tensor, b: &Tensor, acc: &Tensor) -> Option<V> {
        let c = self.coop_accs.get(&acc.expr)?.clone();
        let g = c.grid?;
        let s = self.em.coop?.size as usize;
        let (n, k) = (c.n, c.k);
        let fallback = [!c.staged[0], !c.staged[1]];
        // The staged loads' copies, all global loads first (`stage_emit`).
        let pend = std::mem::take(&mut self.coop_accs.get_mut(&acc.expr)?.pending);
        let prefetch = self.emit_pending(&pend);
        if fallback[0] {
            self.pack_into_slab(a, &c.ca, k);
        }
        if fallback[1] {
            self.pack_into_slab(b, &c.cb, n);
        }
        // Loads of the next iteration find the slab marked unstaged again.
        if let Some(cur) = self.coop_accs.get_mut(&acc.expr) {
            cur.staged = [false, false];
        }
        self.em.barrier();
        // The next K step's runs, in flight during the products (`prefetch_stage`).
        for l in prefetch {
            self.em.line(l);
        }
        let (lda, ldb) = (k + PAD, n + PAD);
        if self.em.emulate_coop {
            self.emulated_products(&c, lda, ldb);
            self.em.barrier();
            return Some(V::T(acc.clone()));
        }
        // Indices and strides in slab elements (vectors of `slab_w` halves; every fragment
        // origin and stride is a multiple of 8 halves).
        let w = self.slab_w;
        let sh = match w {
            4 => ") >> 2u",
            2 => ") >> 1u",
            _ => ")",
        };
        self.em.open("");
        self.em.line(format!("let sy = sg / {}u; let sx = sg % {}u;", g.wn, g.wn));
        for kk in (0..k).step_by(s) {
            for i in 0..g.tm {
                self.em.line(format!(
                    "let a{i}_{kk} = coopLoadT<coop_mat{s}x{s}<f16, A>>(&{}[((({i}u * {}u + sy) * {s}u) * {lda}u + {kk}u{sh}], {}u);",
                    c.ca,
                    g.wm,
                    lda / w
                ));
            }
            for j in 0..g.tn {
                self.em.line(format!(
                    "let b{j}_{kk} = coopLoadT<coop_mat{s}x{s}<f16, B>>(&{}[({kk}u * {ldb}u + ({j}u * {}u + sx) * {s}u{sh}], {}u);",
                    c.cb,
                    g.wn,
                    ldb / w
                ));
            }
            for i in 0..g.tm {
                for j in 0..g.tn {
                    self.em.line(format!(
                        "{0}_{1} = coopMultiplyAdd(a{i}_{kk}, b{j}_{kk}, {0}_{1});",
                        c.name,
                        i * g.tn + j
                    ));
                }
            }
        }
        self.em.close();
        // The next iteration overwrites the slabs.
        self.em.barrier();
        Some(V::T(acc.clone()))
    }

    /// After the loop: the tiles read back as an ordinary f32 block, `wm` tile rows per pass.
    pub(super) fn staged_end(&mut self, c: &CoopAcc, g: Grid) -> Tensor {
        if self.em.emulate_coop {
            let expr = format!("{}_r", c.name);
            return Tensor { expr, ty: Ty::D(DType::F32), shape: vec![c.m, c.n] };
        }
        let (cc, n, wg) = (c.cc.clone(), c.n, self.em.wg);
        let out = self.em.decl_block(Ty::D(DType::F32), &[c.m, n]);
        let chunk = c.m * n / g.tm;
        let lhs = out.at("i");
        for i in 0..g.tm {
            self.em.open("");
            for j in 0..g.tn {
                let at = self.tile_in_chunk(c, g, j);
                self.em.line(format!(
                    "coopStoreT({}_{}, &{cc}[{at}], {n}u);",
                    c.name,
                    i * g.tn + j
                ));
            }
            self.em.close();
            self.em.barrier();
            let lo = i * chunk;
            if chunk.is_multiple_of(wg) && chunk / wg <= crate::emit::UNROLL {
                for r in lo / wg..(lo + chunk) / wg {
                    self.em.open("");
                    self.em.line(format!("let i = {r}u;"));
                    self.em.line(format!("let e = {}u + lid;", r * wg));
                    self.em.line(format!("{lhs} = {cc}[e - {lo}u];"));
                    self.em.close();
                }
            } else if chunk.is_multiple_of(wg) {
                // The pass's elements are this invocation's `i` in [lo / wg, (lo + chunk) / wg).
                let (a, b) = (lo / wg, (lo + chunk) / wg);
                self.em.open(format!("for (var i = {a}u; i < {b}u; i++)"));
                self.em.line(format!("let e = i * {wg}u + lid;"));
                self.em.line(format!("{lhs} = {cc}[e - {lo}u];"));
                self.em.close();
            } else {
                let hi = lo + chunk;
                self.em.for_each(c.m * n, |em| {
                    em.open(format!("if (e >= {lo}u && e < {hi}u)"));
                    em.line(format!("{lhs} = {cc}[e - {lo}u];"));
                    em.close();
                });
            }
            self.em.barrier();
        }
        out
    }

    /// Loop-carried pointer blocks advanced by a uniform step each iteration (`p = p + c`):
    /// for `scf.for` `op` with carried `names` / `inits`, the positions whose initial value has
    /// a `remat` template and whose yielded value is `tt.addptr(name, x)` with `x` a splat or
    /// constant, with `x`'s SSA name.
    pub(super) fn carried_pointers(
        &self,
        op: &Op,
        names: &[String],
        inits: &[V],
    ) -> Vec<Option<String>> {
        let none = vec![None; names.len()];
        let Some(body) = op.regions.first() else { return none };
        let Some(yield_op) = body.ops.last().filter(|o| o.name == "scf.yield") else { return none };
        let yielded = operands(&yield_op.body);
        names
            .iter()
            .zip(inits)
            .enumerate()
            .map(|(pos, (name, init))| {
                let V::T(t) = init else { return None };
                if !t.is_block() || !self.remat.contains_key(&t.expr) {
                    return None;
                }
                if !matches!(t.ty, Ty::Ptr { .. } | Ty::D(DType::I32)) {
                    return None;
                }
                let y = yielded.get(pos)?;
                let step_op = body.ops.iter().find(|o| o.results.first() == Some(y))?;
                let ins = operands(&step_op.body);
                let step_is_addptr = step_op.name == "tt.addptr" || step_op.name == "arith.addi";
                if !step_is_addptr || ins.first() != Some(name) || ins.len() != 2 {
                    return None;
                }
                let x = &ins[1];
                let uniform_here = self.get(x).is_ok_and(|v| v.is_uniform());
                let splat_in_body = body.ops.iter().any(|o| {
                    o.results.first() == Some(x)
                        && (o.name == "tt.splat" || o.name == "arith.constant")
                });
                if uniform_here || splat_in_body {
                    Some(x.clone())
                } else {
                    None
                }
            })
            .collect()
    }

    /// A carried pointer block as a fresh array of its template plus the scalar offset `off`
    /// (dead, and dropped by the driver, where only template readers use it). Inside the loop
    /// (`step`: the `scf.for` and the step's SSA name) the step's value is also made available
    /// at the top of the body where it can be (`step_at_top`), for the staged dot's prefetch.
    pub(super) fn carried_block(
        &mut self,
        init: &Tensor,
        off: &str,
        step: Option<(&Op, &str)>,
    ) -> Tensor {
        let tpl = self.remat.get(&init.expr).cloned().unwrap_or_default();
        let t = format!("({tpl} + {off})");
        let expr = t.replace("{E}", "e");
        let out = self.em.map(init.ty, &init.shape, &[], |_| expr.clone());
        self.remat_note(&out, t);
        let step = step.and_then(|(op, x)| self.step_at_top(op, x));
        self.carried_tpl.insert(out.expr.clone(), (tpl, off.to_string(), step));
        out
    }

    /// The WGSL value of a carried pointer's step `x` at the top of `op`'s body: `x` itself
    /// when it is bound (defined before the loop), else the body ops computing it lowered here
    /// early (a short chain of side-effect-free scalar ops whose other operands are bound: the
    /// same SSA values at the top of an iteration as where the body computes them again).
    fn step_at_top(&mut self, op: &Op, x: &str) -> Option<String> {
        if self.get(x).is_err() {
            self.lower_early(&op.regions.first()?.ops, x, 3)?;
        }
        let v = self.get(x).ok()?;
        v.is_uniform().then(|| v.view().expr.clone())
    }

    fn lower_early(&mut self, ops: &[Op], name: &str, depth: usize) -> Option<()> {
        const PURE: [&str; 7] = [
            "tt.splat",
            "arith.constant",
            "arith.muli",
            "arith.addi",
            "arith.subi",
            "arith.extsi",
            "arith.shli",
        ];
        let def = ops.iter().find(|o| o.results.first().map(String::as_str) == Some(name))?;
        if depth == 0 || !def.regions.is_empty() || !PURE.contains(&def.name.as_str()) {
            return None;
        }
        for x in operands(&def.body) {
            if self.get(&x).is_err() {
                self.lower_early(ops, &x, depth - 1)?;
            }
        }
        self.lower_region(std::slice::from_ref(def)).ok()?;
        Some(())
    }
}
