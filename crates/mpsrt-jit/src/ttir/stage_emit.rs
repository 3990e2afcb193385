//! The staged dot's operand copies (`dot_stage`), emitted at the dot rather than at each load.
//!
//! Session 13 emitted each staged `tt.load` where it stood: A's copy (`if (fast) { whole runs }
//! else { pairs }`), then B's. On NVIDIA each branch is a reconvergence point, so B's global
//! loads could not issue before A's had landed in workgroup memory: every K step paid two
//! global-load round trips, where mpsrt's own GEMM (one unguarded block of loads, then the
//! stores) pays one. Tutorial 03's K loop cost 2.7x the built-in's per step on an H200 (session
//! 13, K-slope probe). Now `stage_dot_operand` only records a [`Pending`] copy and `staged_dot`
//! emits all of them before its barrier: when every operand has a whole-run path, one branch
//! on their joint condition holds all global loads first (into `let`s), then all slab stores;
//! the general per-pair copies of every operand share the `else`. Deferring is safe: a staged
//! load's buffer is never stored to by the kernel, and its pointer and mask templates name
//! only values bound before the load, still in scope at the dot (both are top-level ops of
//! the loop body).

use super::dot_stage::PAD;
use super::lower::TtirLowerer;

/// The whole-run copy of a staged operand: runs of `run` consecutive halves, one per base.
#[derive(Debug, Clone)]
pub(super) struct FastRuns {
    /// Per-step condition: mask all-true, every run contiguous and aligned.
    pub cond: String,
    /// The carried pointer's offset variable, and its step where known at the top of the loop
    /// body (`step_at_top`).
    pub off: String,
    pub step: Option<String>,
    /// Each run's loop-invariant base pointer (`hoist_bases`), `wg` runs apart.
    pub bases: Vec<String>,
    pub run: usize,
}

/// One staged operand copy waiting for its dot.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    pub arg: usize,
    pub slab: String,
    /// Columns of the operand block (the slab row is `cols + PAD` halves).
    pub cols: usize,
    /// The general path: pairs (or runs of `unit` halves) `wg` apart, `units` in all.
    pub unit: usize,
    pub units: usize,
    /// Pointer and mask of elements `e` and `e + 1`, and the masked-off value.
    pub p: [String; 2],
    pub m: [String; 2],
    pub other: String,
    pub fast: Option<FastRuns>,
}

impl TtirLowerer {
    /// Emits the pending copies of a staged dot (see the module docs). Returns the lines that
    /// prefetch the next K step's runs (`CompileOptions::prefetch_stage`), which the dot emits
    /// after its first barrier.
    pub(super) fn emit_pending(&mut self, pend: &[Pending]) -> Vec<String> {
        if pend.is_empty() {
            return Vec::new();
        }
        let fast: Vec<&FastRuns> = pend.iter().filter_map(|p| p.fast.as_ref()).collect();
        if fast.len() == pend.len() {
            let cond: Vec<&str> = fast.iter().map(|f| f.cond.as_str()).collect();
            let cond = cond.join(" && ");
            let prefetch = self.prefetch && fast.iter().all(|f| f.step.is_some());
            let mark = self.loop_marks.last().copied().filter(|_| prefetch);
            let mut next = Vec::new();
            let names = match mark {
                Some(mark) => {
                    // `var`s loaded with the first step's runs before the loop, reloaded with
                    // the next step's after the slabs are filled.
                    let id = self.em.fresh("pv");
                    let mut pre = Vec::new();
                    for (k, p) in pend.iter().enumerate() {
                        let f = p.fast.as_ref().expect("all fast");
                        let step = f.step.as_deref().expect("all stepped");
                        let cur = format!("{} + P.off{}", f.off, p.arg);
                        let nxt = format!("{} + {step} + P.off{}", f.off, p.arg);
                        pre.extend(self.run_loads(p, &format!("{id}_{k}"), &cur, "var "));
                        next.extend(self.run_loads(p, &format!("{id}_{k}"), &nxt, ""));
                    }
                    for (n, l) in pre.iter().enumerate() {
                        self.em.insert((mark.0 + n, mark.1), l);
                    }
                    if let Some(m) = self.loop_marks.last_mut() {
                        m.0 += pre.len();
                    }
                    (0..pend.len()).map(|k| format!("{id}_{k}")).collect::<Vec<_>>()
                }
                None => (0..pend.len()).map(|k| format!("sv{k}")).collect(),
            };
            self.em.open(format!("if ({cond})"));
            if mark.is_none() {
                for (k, p) in pend.iter().enumerate() {
                    let f = p.fast.as_ref().expect("all fast");
                    let at = format!("{} + P.off{}", f.off, p.arg);
                    for l in self.run_loads(p, &names[k], &at, "let ") {
                        self.em.line(l);
                    }
                }
            }
            for (k, p) in pend.iter().enumerate() {
                self.fast_stores(p, &names[k]);
            }
            self.em.else_();
            for p in pend {
                self.general_copy(p);
            }
            self.em.close();
            return next;
        }
        for (k, p) in pend.iter().enumerate() {
            match &p.fast {
                Some(f) => {
                    self.em.open(format!("if ({})", f.cond));
                    let at = format!("{} + P.off{}", f.off, p.arg);
                    for l in self.run_loads(p, &format!("sv{k}"), &at, "let ") {
                        self.em.line(l);
                    }
                    self.fast_stores(p, &format!("sv{k}"));
                    self.em.else_();
                    self.general_copy(p);
                    self.em.close();
                }
                None => self.general_copy(p),
            }
        }
        Vec::new()
    }

    /// Lines loading operand `p`'s whole runs into `{decl}{name}_{j}...` (`decl`: `let `,
    /// `var ` or empty for an assignment), each run at its base plus `at` (the offset terms).
    fn run_loads(&mut self, p: &Pending, name: &str, at: &str, decl: &str) -> Vec<String> {
        let Some(f) = &p.fast else { return Vec::new() };
        let (arg, b) = (p.arg, self.em.self_bounded);
        let mut out = Vec::new();
        for (j, base) in f.bases.iter().enumerate() {
            let g = format!("u32({base} + {at})");
            if f.run == 8 && self.slab_w == 4 {
                // Two vec4<f16> (the buffer bound as vec4<f16>), stored as they are.
                self.args[arg].half4 = true;
                let (i0, i1) = (
                    crate::module::bixv(arg, &format!("({g} >> 2u)"), b),
                    crate::module::bixv(arg, &format!("({g} >> 2u) + 1u"), b),
                );
                out.push(format!("{decl}{name}_{j}_0 = bufv{arg}[{i0}];"));
                out.push(format!("{decl}{name}_{j}_1 = bufv{arg}[{i1}];"));
            } else if f.run == 8 {
                // One vec4<u32> (the buffer bound as vec4<u32>).
                self.args[arg].quad = true;
                let i = crate::module::bixv(arg, &format!("{g} >> 3u"), b);
                out.push(format!("{decl}{name}_{j} = bufv{arg}[{i}];"));
            } else {
                out.push(format!("{decl}{name}_{j} = wd{arg}({g} >> 1u);"));
            }
        }
        out
    }

    /// The slab stores of operand `p`'s whole runs, loaded into `{name}_{j}...`.
    fn fast_stores(&mut self, p: &Pending, name: &str) {
        let Some(f) = &p.fast else { return };
        let (wg, cols, ld, slab) = (self.em.wg, p.cols, p.cols + PAD, p.slab.clone());
        for j in 0..f.bases.len() {
            let e0 = format!("((lid + {}u) * {}u)", j * wg, f.run);
            if f.run == 8 && self.slab_w == 4 {
                // The run starts a multiple of 8 halves into the padded row (cols, ld:
                // multiples of 8): two whole vectors of the slab.
                self.em.open("");
                self.em
                    .line(format!("let at = (({e0} / {cols}u) * {ld}u + {e0} % {cols}u) >> 2u;"));
                self.em.line(format!("{slab}[at] = {name}_{j}_0;"));
                self.em.line(format!("{slab}[at + 1u] = {name}_{j}_1;"));
                self.em.close();
                continue;
            }
            for c in 0..f.run / 2 {
                self.em.open("");
                self.em.line(format!("let e = {e0} + {}u;", 2 * c));
                let word =
                    if f.run == 8 { format!("{name}_{j}[{c}]") } else { format!("{name}_{j}") };
                self.em.line(format!("let h = vec2<f16>(unpack2x16float({word}));"));
                self.em.line(format!("let at = (e / {cols}u) * {ld}u + e % {cols}u;"));
                self.store_pair(&slab);
                self.em.close();
            }
        }
    }

    /// The general copy: per pair, one word where both halves are in bounds, consecutive and
    /// word-aligned, else two masked half loads.
    fn general_copy(&mut self, p: &Pending) {
        let (wg, unit, units, arg) = (self.em.wg, p.unit, p.units, p.arg);
        let (cols, ld) = (p.cols, p.cols + PAD);
        for j in 0..units.div_ceil(wg) {
            self.em.open("");
            self.em.line(format!("let w = lid + {}u;", j * wg));
            let guarded = !units.is_multiple_of(wg);
            if guarded {
                self.em.open(format!("if (w < {units}u)"));
            }
            for c in 0..unit / 2 {
                self.em.open("");
                self.em.line(format!("let e = w * {unit}u + {}u;", 2 * c));
                self.em.line(format!("let p0: i32 = {};", p.p[0]));
                self.em.line(format!("let p1: i32 = {};", p.p[1]));
                self.em.line(format!("let m0 = {};", p.m[0]));
                self.em.line(format!("let m1 = {};", p.m[1]));
                self.em.line(format!("let g = p0 + P.off{arg};"));
                self.em.line("var h: vec2<f16>;");
                self.em.open("if (m0 && m1 && p1 == p0 + 1i && (g & 1i) == 0i)");
                self.em.line(format!("h = vec2<f16>(unpack2x16float(wd{arg}(u32(g) >> 1u)));"));
                self.em.else_();
                self.em.line(format!("var lo: f32 = {};", p.other));
                self.em.line(format!("var hi: f32 = {};", p.other));
                self.em.line(format!("if (m0) {{ lo = ld{arg}(p0); }}"));
                self.em.line(format!("if (m1) {{ hi = ld{arg}(p1); }}"));
                self.em.line("h = vec2<f16>(f16(lo), f16(hi));");
                self.em.close();
                self.em.line(format!("let at = (e / {cols}u) * {ld}u + e % {cols}u;"));
                self.store_pair(&p.slab);
                self.em.close();
            }
            if guarded {
                self.em.close();
            }
            self.em.close();
        }
    }
}
