//! Unrolled two-slab K loops of generation 3 (a child of `matmul_coop_family.rs`, so it sees
//! the loop geometry): `un1`, the two-slab loop unrolled by two so both stages are constants,
//! and the `rq1` register ring, the same loop with two register sets taking turns so a slab's
//! global loads are issued two K steps before its products. One renderer serves both.
//! `rp_ring`: the same two register sets ahead of `rp1`'s one slab (`su` staging);
//! `rp_ring_apair`: that ring with A fetched two slabs at a time (`ap1`, whole 128-byte lines);
//! `rp_ring_halves`: that ring on the slab's two K-16 halves as two stages (`hs1`).
//!
//! Both once ended in a branch that ran the odd last step's products (`if (K % 2bk != 0)`),
//! and both measured wrong on the H100, like the branched `fi1` form: every kernel that failed
//! there had cooperative-matrix operations inside an `if`, every kernel that passed had them
//! only in straight code and loops. The loops are now rendered only for whole-block products
//! with an even number of steps (`CoopMatmulSpec::aligned` asks for `K % 2bk == 0` with these
//! knobs), with no branch around any matrix operation.

use super::Loop;
use std::fmt::Write as _;

/// Register set 1 of a ring: the same code with its own staging registers (`ua<n>` / `ub<n>`
/// renamed `xa<n>` / `xb<n>`).
fn set1_regs(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(i) = rest.find(['u']) {
        let reg = rest[i..].starts_with("ua") || rest[i..].starts_with("ub");
        let word = i == 0 || !rest[..i].ends_with(|c: char| c.is_alphanumeric());
        let digit = rest[i + 1..].chars().nth(1).is_some_and(|c| c.is_ascii_digit());
        out.push_str(&rest[..i]);
        out.push(if reg && word && digit { 'x' } else { 'u' });
        rest = &rest[i + 1..];
    }
    out + rest
}

impl Loop {
    /// The start of a register ring (`rp_ring`, `rp_ring_halves`): both sets' registers, `decl`
    /// (declarations of the loop's own), `kr1`'s rotation, then set 0 loading the first slab and
    /// set 1 the second; the second load's block is left open.
    fn ring_head(&self, vars: &str, decl: &str, loads: &str) -> String {
        let bk = self.bk;
        let mut c = String::new();
        c.push_str(vars);
        c.push_str(&set1_regs(vars));
        c.push_str(decl);
        c.push_str(&self.rotation());
        let _ = writeln!(c, "    {{\n    let nxt = {};", self.slab("0u"));
        c.push_str(loads);
        let next = self.slab(&format!("min({bk}u, K - {bk}u)"));
        let _ = writeln!(c, "    }}\n    {{\n    let nxt = {next};");
        c.push_str(&set1_regs(loads));
        c
    }

    /// The whole-block two-slab loop (both operands on the vector paths, K a multiple of
    /// `2·bk`) unrolled by two, with `sets` register sets (1: `un1`, 2: `rq1`): the half-step
    /// `h` multiplies stage `h` while register set `h % sets` takes slab `k0 + (h + sets)·bk`
    /// (clamped to the last slab: at the end a slab is reloaded into a stage nothing reads)
    /// and set `(h + 1) % sets` lands in the other stage, then one barrier. Invariant at the
    /// top of an iteration: stage 0 holds slab `k0`, and with two sets, set 1 holds slab
    /// `k0 + bk`.
    pub(super) fn unrolled(&self, decl_regs: &dyn Fn(&mut String), sets: u32) -> String {
        let (bk, a_stage, b_stage) = (self.bk, self.a_stage, self.b_stage);
        if sets == 1 && self.lp == 0 && self.unit_parts("0u", false, "", true).is_some() {
            return self.unrolled_units();
        }
        // Set 1: the same code with its own registers.
        let set = |i: u32, code: String| -> String {
            if i == 0 {
                return code;
            }
            let mut code = code;
            for t in 0..16 {
                for h in ["l", "h"] {
                    code = code
                        .replace(&format!("ra{t}{h}"), &format!("qa{t}{h}"))
                        .replace(&format!("rb{t}{h}"), &format!("qb{t}{h}"));
                }
            }
            code
        };
        let mut c = String::new();
        for i in 0..sets {
            let mut d = String::new();
            decl_regs(&mut d);
            c.push_str(&set(i, d));
        }
        c.push_str("    {\n");
        c.push_str(&self.load("0u", "0u", false, true));
        c.push_str(&self.store("0u"));
        if sets == 2 {
            c.push_str(&set(1, self.load(&format!("{bk}u"), "1u", false, true)));
        }
        c.push_str("    }\n    workgroupBarrier();\n");
        // With `lp`: the L1 prefetch at the top of each half-step (its parity is `h`).
        let (lp_decl, _) = self.l1_prefetch(false, "k0");
        c.push_str(&lp_decl);
        let _ = writeln!(c, "    for (var k0 = 0u; k0 < K; k0 = k0 + {}u) {{", 2 * bk);
        for h in 0..2u32 {
            let _ = writeln!(c, "    {{\n    let nx = min(k0 + {}u, K - {bk}u);", (h + sets) * bk);
            c.push_str(&self.l1_prefetch(false, &format!("k0 + {}u", h * bk)).1);
            c.push_str(&set(h % sets, self.load("nx", "0u", false, true)));
            let _ = writeln!(c, "    let ab = {}u; let bb = {}u;", h * a_stage, h * b_stage);
            c.push_str(&self.products());
            c.push_str(&set((h + 1) % sets, self.store(&format!("{}u", 1 - h))));
            c.push_str("    workgroupBarrier();\n    }\n");
        }
        c.push_str("    }\n");
        c
    }

    /// `un1` with `su` staging (8-byte units, a warp's loads and stores on 256 contiguous
    /// bytes): the same two constant stages, the next slab's units held in the `ua*`/`ub*`
    /// registers during the products of this one and stored into the other stage after them.
    fn unrolled_units(&self) -> String {
        let (bk, a_stage, b_stage) = (self.bk, self.a_stage, self.b_stage);
        let parts = |k: &str, st: u32| self.unit_parts_at(k, false, "", true, st, (true, true));
        let mut c = self.unit_vars(false, (true, true));
        let (l0, s0) = parts("nx", 0).expect("su applies");
        c.push_str("    {\n    let nx = 0u;\n");
        c.push_str(&l0);
        c.push_str(&s0);
        c.push_str("    }\n    workgroupBarrier();\n");
        let _ = writeln!(c, "    for (var k0 = 0u; k0 < K; k0 = k0 + {}u) {{", 2 * bk);
        for h in 0..2u32 {
            let (l, s) = parts("nx", 1 - h).expect("su applies");
            let _ = writeln!(c, "    {{\n    let nx = min(k0 + {}u, K - {bk}u);", (h + 1) * bk);
            c.push_str(&l);
            let _ = writeln!(c, "    let ab = {}u; let bb = {}u;", h * a_stage, h * b_stage);
            c.push_str(&self.products());
            c.push_str(&s);
            c.push_str("    workgroupBarrier();\n    }\n");
        }
        c.push_str("    }\n");
        c
    }
}

impl Loop {
    /// `rp1` with `rq1` (one slab, `su` units, both operands prefetched): two register sets
    /// take turns, so a slab's global loads are issued two K steps before its products (one
    /// step with `rp1` alone, whose 4096³ still spends its time in the staging, 11th session
    /// call A's probes). The loop runs two steps per iteration (K a multiple of `2·bk`,
    /// [`CoopTune::aligned_k`](crate::matmul_coop_tune::CoopTune::aligned_k)); step `h`
    /// publishes set `h` between its two barriers, refills it with slab `k0 + (h + 2)·bk`
    /// (clamped to the last slab: at the end a slab is reloaded that nothing stores) and runs
    /// its products in a scope of their own. No matrix operation inside an `if`.
    pub(super) fn rp_ring(&self, loads: &str, stores: &str, vars: &str) -> String {
        let bk = self.bk;
        // Set 1: the same code with its own registers (`ua<n>`/`ub<n>` -> `xa<n>`/`xb<n>`).
        let set1 = set1_regs;
        // With `lp`: every thread touches its share of slab `k + lp` each step (L1 prefetch).
        let mut c = self.ring_head(vars, &self.l1_prefetch_by(false, "k0", true).0, loads);
        let _ = writeln!(c, "    }}\n    for (var k0 = 0u; k0 < K; k0 = k0 + {}u) {{", 2 * bk);
        for h in 0..2u32 {
            let pick = |code: &str| if h == 0 { code.to_string() } else { set1(code) };
            c.push_str("    workgroupBarrier();\n    {\n");
            c.push_str(&pick(stores));
            c.push_str("    }\n    workgroupBarrier();\n");
            let nxt = if self.pr == 6 {
                // Timing probe: every refill reads slab 0 (L1-resident after the first).
                "0u".to_string()
            } else {
                self.slab(&format!("min(k0 + {}u, K - {bk}u)", (h + 2) * bk))
            };
            // `lo`: the refill after the first K-16 products (1) or after all of them (2), so
            // the step's first fragment loads are not queued behind its global loads.
            let refill = format!("    {{\n    let nxt = {nxt};\n{}    }}\n", pick(loads));
            if self.lo == 0 {
                c.push_str(&refill);
            }
            c.push_str(&self.l1_prefetch_by(false, &format!("k0 + {}u", h * bk), true).1);
            c.push_str("    {\n    let ab = 0u; let bb = 0u;\n");
            if self.lo == 1 {
                let half = bk / 2;
                c.push_str(&self.products_range(0, half));
                c.push_str(&refill);
                c.push_str(&self.products_range(half, bk));
            } else {
                c.push_str(&self.products());
            }
            c.push_str("    }\n");
            if self.lo == 2 {
                c.push_str(&refill);
            }
        }
        c.push_str("    }\n");
        c
    }
}

impl Loop {
    /// `rp_ring` with A's slabs fetched in pairs (`ap1`; 128×128 blocks of 128 threads, K 32):
    /// at K 32 a slab row of A is 64 bytes, half a 128-byte line, so each warp load touched four
    /// lines where B's touch two (13th session: A's loads cost about twice B's). Here every
    /// other step loads A's next two slabs as whole lines — a half-warp on one row's 128 bytes
    /// — into one 16-unit register group; each step stores its half. Lane `l` of a 16-lane
    /// group takes line unit `(l + 8·(j % 2)) % 16` for its unit `j`, so every thread holds
    /// eight units of each slab and all lanes store every step; unit `j` of group `g` sits on
    /// row `(j / 2)·16 + (j % 2)·4 + g % 4 + (g / 4)·8`, so a half-warp stores rows four apart
    /// (distinct banks). The pair is loaded one step before its first slab is stored (B: two).
    /// Registers as `rp_ring`: 32 for A's pair, 2 × 16 for B's sets.
    pub(super) fn rp_ring_apair(&self, b_loads: &str, b_stores: &str, b_vars: &str) -> String {
        let Loop { bk, as_, .. } = *self;
        let set1 = set1_regs;
        let mut c = String::new();
        c.push_str(b_vars);
        c.push_str(&set1(b_vars));
        for j in 0..16 {
            let _ = writeln!(c, "    var pa{j} = vec4<f16>();");
        }
        // Per-thread: 16-lane group, line unit, row of unit 0, the two store offsets.
        c.push_str("    let pg = tid / 16u; let pc = tid % 16u;\n");
        c.push_str("    let pr0 = pg % 4u + (pg / 4u) * 8u;\n");
        c.push_str("    let pce = i32(pc * 4u); let pco = i32(((pc + 8u) % 16u) * 4u);\n");
        c.push_str("    let podd = pc >= 8u;\n");
        let _ = writeln!(
            c,
            "    let ps0 = ((pr0 + select(0u, 4u, podd)) * {as_}u + (pc % 8u) * 4u) >> 2u;"
        );
        let _ = writeln!(
            c,
            "    let ps1 = ((pr0 + select(4u, 0u, podd)) * {as_}u + (pc % 8u) * 4u) >> 2u;"
        );
        let pair_loads = |kk: &str| {
            let mut l = format!("    let pgb = abase + i32(m0 + pr0) * sam + i32({kk});\n");
            for j in 0..16u32 {
                let row = (j / 2) * 16 + (j % 2) * 4;
                let col = if j % 2 == 0 { "pce" } else { "pco" };
                let _ = writeln!(l, "    pa{j} = a[u32(pgb + {row} * sam + {col}) >> 2u];");
            }
            l
        };
        // Slab `e` of the pair: unit `2i` or `2i + 1`, whichever this lane's line unit puts there.
        let pair_store = |e: u32| {
            let mut st = String::new();
            let (base, odd) = if e == 0 { ("ps0", "podd") } else { ("ps1", "!podd") };
            for i in 0..8u32 {
                let _ = writeln!(
                    st,
                    "    As[{base} + {}u] = select(pa{}, pa{}, {odd});",
                    i * 16 * as_ / 4,
                    2 * i,
                    2 * i + 1
                );
            }
            st
        };
        c.push_str("    {\n");
        c.push_str(&pair_loads("0u"));
        c.push_str("    let nxt = 0u;\n");
        c.push_str(b_loads);
        let _ = writeln!(c, "    }}\n    {{\n    let nxt = min({bk}u, K - {bk}u);");
        c.push_str(&set1(b_loads));
        let _ = writeln!(c, "    }}\n    for (var k0 = 0u; k0 < K; k0 = k0 + {}u) {{", 2 * bk);
        for h in 0..2u32 {
            let pick = |code: &str| if h == 0 { code.to_string() } else { set1(code) };
            c.push_str("    workgroupBarrier();\n    {\n");
            c.push_str(&pair_store(h));
            c.push_str(&pick(b_stores));
            c.push_str("    }\n    workgroupBarrier();\n    {\n");
            if h == 1 {
                let kk = format!("min(k0 + {}u, K - {}u)", 2 * bk, 2 * bk);
                c.push_str(&pair_loads(&kk));
            }
            let _ = writeln!(c, "    let nxt = min(k0 + {}u, K - {bk}u);", (h + 2) * bk);
            c.push_str(&pick(b_loads));
            c.push_str("    }\n    {\n    let ab = 0u; let bb = 0u;\n");
            c.push_str(&self.products());
            c.push_str("    }\n");
        }
        c.push_str("    }\n");
        c
    }
}

impl Loop {
    /// `rp_ring` on the one slab's two K-16 halves as two stages (`hs1`; `su` `ad1` units, the
    /// 2×2 4×4 K-32 tune): sub-step `t` multiplies half `t % 2` while the threads store the next
    /// K-16 chunk into the other half, then one barrier — no phase in which a workgroup only
    /// stores (the one-slab loop stores between two barriers, 13th session: the kernel without
    /// global loads ran at 381–408 TFLOP/s against 581 for the products alone). Same memory,
    /// padding and barrier count (one per K 16). A slab's registers are stored in two parts,
    /// its K 0..16 half one sub-step before its K 16..32 half; a set is refilled right after its
    /// second part, three sub-steps before it is stored again. A unit's half is its column
    /// (`tc0 / 4`, per thread: those stores sit in a branch with no matrix operation), B's its
    /// row (`j < 4`: rows 0..16). `None` where the `su` stores are not in that form.
    pub(super) fn rp_ring_halves(&self, loads: &str, stores: &str, vars: &str) -> Option<String> {
        let bk = self.bk;
        let half = bk / 2;
        // Split the stores: index lines, then A's stores by the thread's column, B's by row.
        let (mut pre, mut a_st, mut b_st) =
            (String::new(), String::new(), [String::new(), String::new()]);
        let nb = stores.matches("Bs[").count();
        let mut bj = 0;
        for line in stores.lines() {
            let t = line.trim_start();
            if t.starts_with("As[") {
                a_st.push_str(line);
                a_st.push('\n');
            } else if t.starts_with("Bs[") {
                b_st[usize::from(bj >= nb / 2)].push_str(line);
                b_st[usize::from(bj >= nb / 2)].push('\n');
                bj += 1;
            } else if t.starts_with("let ") {
                pre.push_str(line);
                pre.push('\n');
            } else {
                return None;
            }
        }
        if !pre.contains("let tc0 =") || nb == 0 || a_st.is_empty() {
            return None;
        }
        let part = |e: usize| {
            let mut c = pre.clone();
            let _ = writeln!(c, "    if (tc0 / {}u == {e}u) {{", half / 4);
            c.push_str(&a_st);
            c.push_str("    }\n");
            c.push_str(&b_st[e]);
            c
        };
        let mut c = self.ring_head(vars, "", loads);
        c.push_str("    }\n    {\n");
        c.push_str(&part(0));
        let _ = writeln!(c, "    }}\n    for (var k0 = 0u; k0 < K; k0 = k0 + {}u) {{", 2 * bk);
        // Sub-step u: multiplies half u % 2 of slab k0 + (u / 2)·bk; stores set (u + 1) / 2 % 2's
        // half (u + 1) % 2; sub-steps 0 and 2 then refill the set whose second half they stored.
        for u in 0..4u32 {
            let set = u.div_ceil(2) % 2;
            let pick = |code: &str| if set == 0 { code.to_string() } else { set1_regs(code) };
            c.push_str("    workgroupBarrier();\n    {\n");
            c.push_str(&pick(&part(((u + 1) % 2) as usize)));
            c.push_str("    }\n");
            if u % 2 == 0 {
                let _ = writeln!(
                    c,
                    "    {{\n    let nxt = min(k0 + {}u, K - {bk}u);",
                    (u / 2 + 2) * bk
                );
                c.push_str(&pick(loads));
                c.push_str("    }\n");
            }
            c.push_str("    {\n    let ab = 0u; let bb = 0u;\n");
            let lo = (u % 2) * half;
            c.push_str(&self.products_range(lo, lo + half));
            c.push_str("    }\n");
        }
        c.push_str("    }\n");
        Some(c)
    }
}
