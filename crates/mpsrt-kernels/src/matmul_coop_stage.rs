//! Generation 3's staging code (a child of `matmul_coop_family.rs`, so it sees the loop
//! geometry): the global loads of a K slab — 8-wide vectors into registers or straight into
//! the slab, scalar and word-typed paths, bounds checks as guards or clamped addresses — and
//! the stores of register-held vectors into a slab stage. Split from the family renderer,
//! which keeps the K loops' structure.

use super::Loop;
use std::fmt::Write as _;

impl Loop {
    /// Register names and type of the `t`-th vector a thread stages (8 halves: two
    /// `vec4<f16>`, or one `vec4<u32>` when word-typed).
    pub(super) fn regs(&self, reg: &str, t: u32) -> Vec<(String, &'static str)> {
        if self.wl {
            vec![(format!("{reg}{t}w"), "vec4<u32>")]
        } else {
            vec![(format!("{reg}{t}l"), "vec4<f16>"), (format!("{reg}{t}h"), "vec4<f16>")]
        }
    }

    /// Global loads of slab `k0`: into registers `r*` on the vector paths (`to_regs`), or
    /// (scalar paths, and vector paths when `!to_regs`) straight into stage `st`. `checked`:
    /// bounds checks against M, N, K (edge workgroups).
    pub(super) fn load(&self, k0: &str, st: &str, checked: bool, to_regs: bool) -> String {
        self.load_sel(k0, st, checked, to_regs, (true, true))
    }

    /// [`load`](Self::load) of the operands `sel` picks (A, B).
    pub(super) fn load_sel(
        &self,
        k0: &str,
        st: &str,
        checked: bool,
        to_regs: bool,
        sel: (bool, bool),
    ) -> String {
        let Loop { bm, bn, nt, bk, as_, bs_, a_stage, b_stage, wl, .. } = *self;
        let mut c = String::new();
        let (q, qn) = (bk / 8, bn / 8);
        // Bounds checks, skipped at run time in interior blocks with `pi` (`full` is uniform).
        let guard = |cond: &str| {
            if self.pi {
                format!("(full || ({cond}))")
            } else {
                cond.to_string()
            }
        };
        // Vector index of element `x` (halves): 4 per `vec4<f16>`, 8 per `vec4<u32>`.
        let vsh = if wl || self.gl { 3 } else { 2 };
        // One 16-byte element `w` (`H8`) into the two `vec4<f16>` registers, zero where
        // `ok` (a checked load) is false.
        let split = |regs: &[(String, &str)], decl: &str, ok: Option<&str>| {
            let part = |p: &str| match ok {
                Some(ok) => format!("select(vec4<f16>(), w.{p}, {ok})"),
                None => format!("w.{p}"),
            };
            format!("{decl}{} = {}; {decl}{} = {};", regs[0].0, part("l"), regs[1].0, part("h"))
        };
        // Coordinates of a checked vector load, clamped into the operand with `cl` (K and
        // N are multiples of 8 on the vector paths, and at least one 16-wide tile).
        let clamp = |x: &str, xl: &str, y: &str, yl: &str| {
            if checked && self.cl {
                (format!("min({x}, {xl})"), format!("min({y}, {yl})"))
            } else {
                (x.to_string(), y.to_string())
            }
        };
        let vec = |c: &mut String,
                   tot: u32,
                   reg: &str,
                   arr: &str,
                   idx: &str,
                   cond: &str,
                   dst: &str,
                   at: &str| {
            for t in 0..tot.div_ceil(nt) {
                let _ = writeln!(c, "    {{ let e = tid + {}u;", t * nt);
                let mut conds = Vec::new();
                if !tot.is_multiple_of(nt) {
                    conds.push(format!("e < {tot}u"));
                }
                if checked {
                    conds.push(guard(cond));
                }
                let regs = self.regs(reg, t);
                let decl = if to_regs { "" } else { "var " };
                let _ = writeln!(c, "      {idx}");
                if checked && self.cl {
                    // Clamped address (always inside the operand), zero selected outside:
                    // no branch, so the loads of a step issue together.
                    let _ = writeln!(c, "      let ok = {};", conds.join(" && "));
                    if self.gl {
                        let _ = writeln!(
                            c,
                            "      let w = {arr}[{arr}_at];\n      {}",
                            split(&regs, decl, Some("ok"))
                        );
                    }
                    for (i, (r, ty)) in regs.iter().enumerate().filter(|_| !self.gl) {
                        let _ = writeln!(
                            c,
                            "      {decl}{r} = select({ty}(), {arr}[{arr}_at + {i}u], ok);"
                        );
                    }
                    if !to_regs {
                        c.push_str(&self.put(&regs, dst, at, tot));
                    }
                    c.push_str("    }\n");
                    continue;
                }
                let mut body = format!("let at = {arr}_at;");
                for (i, (r, ty)) in regs.iter().enumerate() {
                    let _ = write!(c, "      {decl}{r} = {ty}();");
                    if !self.gl {
                        let _ = write!(body, " {r} = {arr}[at + {i}u];");
                    }
                }
                if self.gl {
                    let _ = write!(body, " let w = {arr}[at]; {}", split(&regs, "", None));
                }
                c.push('\n');
                if conds.is_empty() {
                    let _ = writeln!(c, "      {{ {body} }}");
                } else {
                    let _ = writeln!(c, "      if ({}) {{ {body} }}", conds.join(" && "));
                }
                if !to_regs {
                    c.push_str(&self.put(&regs, dst, at, tot));
                }
                c.push_str("    }\n");
            }
        };
        if sel.0 {
            if self.va {
                let (mc, kc) = clamp("m", "Mr - 1u", "k", "K - 8u");
                let idx = format!("let m = m0 + e / {q}u; let k = {k0} + (e % {q}u) * 8u; let a_at = u32(abase + i32({mc}) * sam + i32({kc})) >> {vsh}u;");
                let at = format!("{st} * {a_stage}u + (e / {q}u) * {as_}u + (e % {q}u) * 8u");
                vec(&mut c, bm * q, "ra", "a", &idx, "m < Mr && k < K", "As", &at);
            } else if wl {
                // Pairs of halves along K, packed into one word of the slab.
                let h = bk / 2;
                let _ = writeln!(c, "    for (var e = tid; e < {}u; e = e + {nt}u) {{", bm * h);
                let _ = writeln!(c, "      let r = e / {h}u; let kk = (e % {h}u) * 2u; let m = m0 + r; let k = {k0} + kk;");
                c.push_str("      let i0 = u32(abase + i32(m) * sam + i32(k) * sak); let i1 = u32(i32(i0) + sak);\n");
                if checked {
                    c.push_str("      var v0 = f16(0.0); var v1 = f16(0.0);\n      if (m < Mr && k < K) { v0 = ha(i0); }\n      if (m < Mr && k + 1u < K) { v1 = ha(i1); }\n");
                } else {
                    c.push_str("      let v0 = ha(i0); let v1 = ha(i1);\n");
                }
                let _ = writeln!(c, "      As[({st} * {a_stage}u + r * {as_}u + kk) >> 1u] = pack2x16float(vec2<f32>(f32(v0), f32(v1)));\n    }}");
            } else {
                let _ = writeln!(c, "    for (var e = tid; e < {}u; e = e + {nt}u) {{", bm * bk);
                let _ = writeln!(
                    c,
                    "      let r = e / {bk}u; let kk = e % {bk}u; let m = m0 + r; let k = {k0} + kk;"
                );
                let ld = "a[u32(abase + i32(m) * sam + i32(k) * sak)]";
                if checked && self.cl {
                    let _ = writeln!(c, "      let v = select(f16(0.0), a[u32(abase + i32(min(m, Mr - 1u)) * sam + i32(min(k, K - 1u)) * sak)], m < Mr && k < K);");
                } else if checked {
                    let _ = writeln!(
                        c,
                        "      var v = f16(0.0);\n      if ({}) {{ v = {ld}; }}",
                        guard("m < Mr && k < K")
                    );
                } else {
                    let _ = writeln!(c, "      let v = {ld};");
                }
                let _ = writeln!(c, "      As[{st} * {a_stage}u + r * {as_}u + kk] = v;\n    }}");
            }
        }
        if sel.1 {
            if self.vb {
                let (kc, nc) = clamp("k", "K - 1u", "n", "N - 8u");
                let idx = format!("let n = n0 + (e % {qn}u) * 8u; let k = {k0} + e / {qn}u; let b_at = u32(bbase + i32({kc}) * sbk + i32({nc})) >> {vsh}u;");
                let at = format!("{st} * {b_stage}u + (e / {qn}u) * {bs_}u + (e % {qn}u) * 8u");
                vec(&mut c, bk * qn, "rb", "b", &idx, "n < N && k < K", "Bs", &at);
            } else if wl {
                // Pairs of halves along N.
                let h = bn / 2;
                let _ = writeln!(c, "    for (var e = tid; e < {}u; e = e + {nt}u) {{", bk * h);
                let _ = writeln!(c, "      let kk = e / {h}u; let cc = (e % {h}u) * 2u; let n = n0 + cc; let k = {k0} + kk;");
                c.push_str("      let i0 = u32(bbase + i32(k) * sbk + i32(n) * sbn); let i1 = u32(i32(i0) + sbn);\n");
                if checked {
                    c.push_str("      var v0 = f16(0.0); var v1 = f16(0.0);\n      if (n < N && k < K) { v0 = hb(i0); }\n      if (n + 1u < N && k < K) { v1 = hb(i1); }\n");
                } else {
                    c.push_str("      let v0 = hb(i0); let v1 = hb(i1);\n");
                }
                let _ = writeln!(c, "      Bs[({st} * {b_stage}u + kk * {bs_}u + cc) >> 1u] = pack2x16float(vec2<f32>(f32(v0), f32(v1)));\n    }}");
            } else {
                let _ = writeln!(c, "    for (var e = tid; e < {}u; e = e + {nt}u) {{", bk * bn);
                let _ = writeln!(
                    c,
                    "      let kk = e / {bn}u; let cc = e % {bn}u; let n = n0 + cc; let k = {k0} + kk;"
                );
                let ld = "b[u32(bbase + i32(k) * sbk + i32(n) * sbn)]";
                if checked && self.cl {
                    let _ = writeln!(c, "      let v = select(f16(0.0), b[u32(bbase + i32(min(k, K - 1u)) * sbk + i32(min(n, N - 1u)) * sbn)], n < N && k < K);");
                } else if checked {
                    let _ = writeln!(
                        c,
                        "      var v = f16(0.0);\n      if ({}) {{ v = {ld}; }}",
                        guard("n < N && k < K")
                    );
                } else {
                    let _ = writeln!(c, "      let v = {ld};");
                }
                let _ = writeln!(c, "      Bs[{st} * {b_stage}u + kk * {bs_}u + cc] = v;\n    }}");
            }
        }
        c
    }

    /// Stores of the register-held vectors (vector paths) into stage `st`.
    pub(super) fn store(&self, st: &str) -> String {
        self.store_sel(st, (true, true))
    }

    /// [`store`](Self::store) of the operands `sel` picks (A, B).
    pub(super) fn store_sel(&self, st: &str, sel: (bool, bool)) -> String {
        let Loop { bm, bn, nt, bk, as_, bs_, a_stage, b_stage, .. } = *self;
        let (q, qn) = (bk / 8, bn / 8);
        let mut c = String::new();
        let mut one = |tot: u32, reg: &str, dst: &str, at: String| {
            for t in 0..tot.div_ceil(nt) {
                let _ = writeln!(c, "    {{ let e = tid + {}u;", t * nt);
                c.push_str(&self.put(&self.regs(reg, t), dst, &at, tot));
                c.push_str("    }\n");
            }
        };
        if self.va && sel.0 {
            one(
                bm * q,
                "ra",
                "As",
                format!("{st} * {a_stage}u + (e / {q}u) * {as_}u + (e % {q}u) * 8u"),
            );
        }
        if self.vb && sel.1 {
            one(
                bk * qn,
                "rb",
                "Bs",
                format!("{st} * {b_stage}u + (e / {qn}u) * {bs_}u + (e % {qn}u) * 8u"),
            );
        }
        c
    }

    /// Eight halves held in `regs` into `dst` at element `at` (an expression of `e`; four
    /// words at `at / 2` when word-typed), guarded by `e < tot` when the threads do not divide
    /// the slab evenly.
    pub(super) fn put(&self, regs: &[(String, &str)], dst: &str, at: &str, tot: u32) -> String {
        let mut c = String::new();
        let open = if !tot.is_multiple_of(self.nt) {
            format!("      if (e < {tot}u) {{\n")
        } else {
            "      {\n".into()
        };
        c.push_str(&open);
        let v = if dst == "As" { self.vsa } else { self.vsb };
        if self.wl {
            let _ = writeln!(c, "      let at = ({at}) >> 1u;");
            for (i, part) in ["x", "y", "z", "w"].iter().enumerate() {
                let _ = writeln!(c, "      {dst}[at + {i}u] = {}.{part};", regs[0].0);
            }
        } else if v == 4 {
            let _ = writeln!(c, "      let at = ({at}) >> 2u;");
            let _ = writeln!(
                c,
                "      {dst}[at] = {};\n      {dst}[at + 1u] = {};",
                regs[0].0, regs[1].0
            );
        } else if v == 2 {
            let _ = writeln!(c, "      let at = ({at}) >> 1u;");
            for (i, (r, part)) in [(0, "xy"), (0, "zw"), (1, "xy"), (1, "zw")].iter().enumerate() {
                let _ = writeln!(c, "      {dst}[at + {i}u] = {}.{part};", regs[*r].0);
            }
        } else {
            let _ = writeln!(c, "      let at = {at};");
            for (i, part) in ["x", "y", "z", "w"].iter().enumerate() {
                let _ = writeln!(c, "      {dst}[at + {i}u] = {}.{part};", regs[0].0);
                let _ = writeln!(c, "      {dst}[at + {}u] = {}.{part};", i + 4, regs[1].0);
            }
        }
        c.push_str("      }\n");
        c
    }

    /// The next slab's start `nxt` (a `let`) and the opening of the block that prefetches it:
    /// `if (nxt < K) {`, or with `nb` a plain block — checked loads are bounded by K anyway,
    /// and unchecked loops (whole blocks, K a multiple of the step) reload their last slab
    /// (`nxt` clamped to `K - bk`) into registers or a stage nothing reads afterwards — so no
    /// branch on the loop counter stands between the products and the next slab's loads.
    pub(super) fn next(&self, checked: bool) -> (String, String) {
        let bk = self.bk;
        match (self.nb, checked) {
            (false, _) => (format!("let nxt = k0 + {bk}u;"), "    if (nxt < K) {\n".into()),
            (true, true) => (format!("let nxt = k0 + {bk}u;"), "    {\n".into()),
            (true, false) => (format!("let nxt = min(k0 + {bk}u, K - {bk}u);"), "    {\n".into()),
        }
    }

    /// The `lp` L1 prefetch of the whole-block loops (one slab, or two unrolled): (declarations
    /// before the loop, code at the top of the step that starts at `k0`). Each step half of the subgroups — even ones on even
    /// steps, odd ones on odd steps — first add the halves they loaded two steps earlier into
    /// `lsum` (by then long arrived: no stall), then load one half of every 32-byte sector of
    /// slab `k0 + lp·bk` (clamped to the last slab), so the SM's L1 holds that slab when its
    /// 16-byte loads run `lp` steps later. Only where both operands are 8 wide and every
    /// block is whole (`!checked`); empty otherwise.
    pub(super) fn l1_prefetch(&self, checked: bool, k0: &str) -> (String, String) {
        self.l1_prefetch_by(checked, k0, false)
    }

    /// [`Loop::l1_prefetch`], with `all`: every thread touches its share of the slab every
    /// step (half as many loads in flight per thread, held one step; the register ring's
    /// form, where registers are the scarce resource), with no branch.
    pub(super) fn l1_prefetch_by(&self, checked: bool, k0: &str, all: bool) -> (String, String) {
        let Loop { bm, bn, bk, nt, lp, sgs, .. } = *self;
        let vec = self.va && self.vb && !self.gl && !self.wl;
        if lp == 0 || checked || !self.aligned || !vec || bk % 16 != 0 {
            return (String::new(), String::new());
        }
        // Sectors (16 halves) per slab row, the slab's A and total sectors, prefetching threads.
        let (qa, qb) = (bk / 16, bn / 16);
        let (a_sec, tot, half) = (bm * qa, bm * qa + bk * qb, if all { nt } else { nt / 2 });
        let n = tot.div_ceil(half);
        let mut decl = String::new();
        for t in 0..n {
            let _ = writeln!(decl, "    var lq{t} = f16(0.0);");
        }
        let mut c = String::new();
        if all {
            c.push_str("    {\n");
        } else {
            let _ = writeln!(c, "    if ((((({k0}) / {bk}u) ^ sg) & 1u) == 0u) {{");
        }
        let sum: Vec<String> = (0..n).map(|t| format!("lq{t}")).collect();
        let _ = writeln!(c, "      lsum = lsum + {};", sum.join(" + "));
        let _ = writeln!(c, "      let kp = min({k0} + {}u, K - {bk}u);", lp * bk);
        if all {
            let _ = writeln!(c, "      let h = sg * {sgs}u + lane;");
        } else {
            let _ = writeln!(c, "      let h = (sg >> 1u) * {sgs}u + lane;");
        }
        let a_ld = format!(
            "a[u32(abase + i32(m0 + s / {qa}u) * sam + i32(kp + (s % {qa}u) * 16u)) >> 2u].x"
        );
        let b_ld = format!(
            "b[u32(bbase + i32(kp + s2 / {qb}u) * sbk + i32(n0 + (s2 % {qb}u) * 16u)) >> 2u].x"
        );
        for t in 0..n {
            let (lo, hi) = (t * half, (t + 1) * half);
            let _ = write!(c, "      {{ let s = h + {lo}u; let s2 = s - min(s, {a_sec}u);");
            if hi <= a_sec {
                let _ = writeln!(c, " lq{t} = {a_ld}; }}");
            } else if lo >= a_sec && hi <= tot {
                let _ = writeln!(c, " lq{t} = {b_ld}; }}");
            } else {
                let _ = writeln!(
                    c,
                    " if (s < {a_sec}u) {{ lq{t} = {a_ld}; }} else if (s < {tot}u) {{ lq{t} = {b_ld}; }} }}"
                );
            }
        }
        c.push_str("    }\n");
        (decl, c)
    }

    /// The `su` staging of slab `k0` into the one slab (whole blocks, both operands 8 wide in
    /// `vs4` slabs), in units of 4 halves (one `vec4<f16>`): B's unit `u` (row-major in units)
    /// goes to lane `u % nt`, so a warp reads and writes 32 consecutive units; A's likewise
    /// with `su1`, and with `su2` in blocks of 8 rows × 4 units — lane `l` of block `v / 32`
    /// on row `(l % 16) / 2`, unit `(l / 16) · 2 + l % 2` — so each half-warp stores 16 bytes
    /// to each of 8 rows (distinct banks for padded rows of 40 halves); with `su3` at K 32 as
    /// with `su1` (a warp on 4 rows × 64 bytes) but a half-warp on rows `r` and `r + 4`, 320
    /// bytes apart (distinct banks). Every load is issued
    /// before the first store. `None` where it does not apply.
    pub(super) fn load_units(&self, k0: &str, checked: bool) -> Option<String> {
        let (loads, stores) = self.unit_parts(k0, checked, "let ", false)?;
        Some(loads + &stores)
    }

    /// The `var` declarations of the `su` staging registers (`ua*`, `ub*`, of the operands
    /// `sel` picks) that a loop with register prefetch (`rp1`) or two slabs (`un1`) assigns;
    /// empty where `su` does not apply.
    pub(super) fn unit_vars(&self, checked: bool, sel: (bool, bool)) -> String {
        if self.unit_parts("0u", checked, "", false).is_none() {
            return String::new();
        }
        let (ua, ub) = (self.bm * self.bk / 4, self.bk * self.bn / 4);
        let mut c = String::new();
        for j in 0..if sel.0 { ua / self.nt } else { 0 } {
            let _ = writeln!(c, "    var ua{j} = vec4<f16>();");
        }
        for j in 0..if sel.1 { ub / self.nt } else { 0 } {
            let _ = writeln!(c, "    var ub{j} = vec4<f16>();");
        }
        c
    }

    /// [`load_units`](Self::load_units) in two parts: the loads (binding `{decl}ua{j}` /
    /// `{decl}ub{j}`: `"let "`, or `""` to assign the registers of [`unit_vars`](Self::unit_vars))
    /// and the slab stores; with `own_idx` the stores compute their own row/unit indices, so
    /// the parts can sit in different scopes (register prefetch: stores at the top of a step,
    /// the next slab's loads after the barrier).
    pub(super) fn unit_parts(
        &self,
        k0: &str,
        checked: bool,
        decl: &str,
        own_idx: bool,
    ) -> Option<(String, String)> {
        self.unit_parts_at(k0, checked, decl, own_idx, 0, (true, true))
    }

    /// [`unit_parts`](Self::unit_parts) storing into slab stage `stage` (two-slab loops), of
    /// the operands `sel` picks (A, B).
    pub(super) fn unit_parts_at(
        &self,
        k0: &str,
        checked: bool,
        decl: &str,
        own_idx: bool,
        stage: u32,
        sel: (bool, bool),
    ) -> Option<(String, String)> {
        let Loop { bm, bn, nt, bk, as_, bs_, a_stage, b_stage, .. } = *self;
        // Stage offsets, written only where non-zero (the one-slab kernels' text unchanged).
        let off = |o: u32| if o == 0 { String::new() } else { format!("{o}u + ") };
        let (oa, ob) = (off(stage * a_stage), off(stage * b_stage));
        let on = self.su != 0 && self.aligned && self.va && self.vb;
        let (ua, ub) = (bm * bk / 4, bk * bn / 4);
        let (qa, qb) = (bk / 4, bn / 4);
        let blocks = self.su == 2 && qa % 4 == 0 && bm % 8 == 0;
        // `su3` at K 32 (64-byte rows 80 bytes apart): rows r and r + 4 share a half-warp.
        let pairs = self.su == 3 && qa == 8 && bm % 8 == 0;
        if !on || checked || self.gl || self.wl || self.vsa != 4 || self.vsb != 4 {
            return None;
        }
        if ua % nt != 0 || ub % nt != 0 {
            return None;
        }
        // Row and unit-in-row of A's unit `v` (an expression).
        let a_rc = |v: &str| -> (String, String) {
            if pairs {
                // Instruction group g = v / 32 of row block g / 2: lanes of half-warp `h`
                // (bit 4) on rows 2(g % 2) + h and that + 4 (bit 3), unit l % 8.
                (
                    format!("(({v}) / 64u) * 8u + ((({v}) / 32u) % 2u) * 2u + ((({v}) % 32u) / 16u) + ((({v}) % 16u) / 8u) * 4u"),
                    format!("({v}) % 8u"),
                )
            } else if blocks {
                let q4 = qa / 4;
                (
                    format!("(({v}) / 32u / {q4}u) * 8u + (({v}) % 16u) / 2u"),
                    format!("(({v}) / 32u % {q4}u) * 4u + ((({v}) % 32u) / 16u) * 2u + ({v}) % 2u"),
                )
            } else {
                (format!("({v}) / {qa}u"), format!("({v}) % {qa}u"))
            }
        };
        let (na, nb) = (if sel.0 { ua / nt } else { 0 }, if sel.1 { ub / nt } else { 0 });
        // `ad1`: unit j of a thread is unit 0 moved by a uniform number of rows (`nt` threads
        // cover whole rows), so one per-thread offset per operand and uniform steps replace the
        // per-unit index arithmetic (registers: two register sets, `rq1`, spilled at 255).
        let a_rows = if pairs {
            (nt % 64 == 0).then_some(nt / 8)
        } else {
            (!blocks && nt % qa == 0).then_some(nt / qa)
        };
        let b_rows = (nt % qb == 0).then_some(nt / qb);
        if let (true, Some(ra), Some(rb)) = (self.ad, a_rows, b_rows) {
            if (ra * as_) % 4 == 0 && (rb * bs_) % 4 == 0 {
                let (units, rows, offs) = ((na, nb), (ra, rb), (oa.as_str(), ob.as_str()));
                return Some(if self.xw != 0 {
                    self.affine_parts16(k0, decl, own_idx, units, rows, offs, &a_rc)
                } else {
                    self.affine_parts(k0, decl, own_idx, units, rows, offs, &a_rc)
                });
            }
        }
        let mut c = String::new();
        for j in 0..na {
            let (r, u) = a_rc(&format!("tid + {}u", j * nt));
            let _ = writeln!(c, "    let ra{j} = {r}; let ca{j} = {u};");
            let _ = writeln!(c, "    {decl}ua{j} = a[u32(abase + i32(m0 + ra{j}) * sam + i32({k0} + ca{j} * 4u)) >> 2u];");
        }
        for j in 0..nb {
            let _ = writeln!(c, "    {decl}ub{j} = b[u32(bbase + i32({k0} + (tid + {0}u) / {qb}u) * sbk + i32(n0 + ((tid + {0}u) % {qb}u) * 4u)) >> 2u];", j * nt);
        }
        let mut st = String::new();
        let (ri, ci) = if own_idx { ("ta", "tc") } else { ("ra", "ca") };
        for j in 0..na {
            if own_idx {
                let (r, u) = a_rc(&format!("tid + {}u", j * nt));
                let _ = writeln!(st, "    let ta{j} = {r}; let tc{j} = {u};");
            }
            let _ = writeln!(st, "    As[({oa}{ri}{j} * {as_}u + {ci}{j} * 4u) >> 2u] = ua{j};");
        }
        for j in 0..nb {
            let _ = writeln!(
                st,
                "    Bs[({ob}((tid + {0}u) / {qb}u) * {bs_}u + ((tid + {0}u) % {qb}u) * 4u) >> 2u] = ub{j};",
                j * nt
            );
        }
        Some((c, st))
    }

    /// [`unit_parts_at`](Self::unit_parts_at)'s `ad1` form: unit `j` of A is unit 0 moved down
    /// `j·rows.0` rows (B: `j·rows.1`), so the loads add uniform row steps to one per-thread
    /// offset and the stores constant slab offsets. `a_rc` gives unit 0's row and unit.
    #[allow(clippy::too_many_arguments)]
    fn affine_parts(
        &self,
        k0: &str,
        decl: &str,
        own_idx: bool,
        (na, nb): (u32, u32),
        (ra, rb): (u32, u32),
        (oa, ob): (&str, &str),
        a_rc: &dyn Fn(&str) -> (String, String),
    ) -> (String, String) {
        let Loop { as_, bs_, bn, .. } = *self;
        let qb = bn / 4;
        let (r0, u0) = a_rc("tid");
        let mut c = String::new();
        if na > 0 {
            let _ = writeln!(c, "    let ra0 = {r0}; let ca0 = {u0};");
            // Byte offsets and steps are multiples of 4 halves (the vector path): indices in
            // `vec4<f16>` units.
            let _ = writeln!(c, "    let gia = u32(abase + i32(m0 + ra0) * sam + i32({k0} + ca0 * 4u)) >> 2u; let gsa = u32({ra} * sam) >> 2u;");
        }
        for j in 0..na {
            let _ = writeln!(c, "    {decl}ua{j} = a[gia + {j}u * gsa];");
        }
        if nb > 0 {
            let _ = writeln!(c, "    let gib = u32(bbase + i32({k0} + tid / {qb}u) * sbk + i32(n0 + (tid % {qb}u) * 4u)) >> 2u; let gsb = u32({rb} * sbk) >> 2u;");
        }
        for j in 0..nb {
            let _ = writeln!(c, "    {decl}ub{j} = b[gib + {j}u * gsb];");
        }
        let mut st = String::new();
        let (ri, ci) = if own_idx { ("ta0", "tc0") } else { ("ra0", "ca0") };
        if na > 0 {
            if own_idx {
                let _ = writeln!(st, "    let ta0 = {r0}; let tc0 = {u0};");
            }
            let _ = writeln!(st, "    let spa = ({oa}{ri} * {as_}u + {ci} * 4u) >> 2u;");
        }
        for j in 0..na {
            let _ = writeln!(st, "    As[spa + {}u] = ua{j};", j * ra * as_ / 4);
        }
        if nb > 0 {
            let _ = writeln!(
                st,
                "    let spb = ({ob}(tid / {qb}u) * {bs_}u + (tid % {qb}u) * 4u) >> 2u;"
            );
        }
        for j in 0..nb {
            let _ = writeln!(st, "    Bs[spb + {}u] = ub{j};", j * rb * bs_ / 4);
        }
        (c, st)
    }
}

impl Loop {
    /// [`affine_parts`](Self::affine_parts) with 16-byte units (`xw`) for B (bit 1) and/or A
    /// (bit 2): the operand is bound as `array<H8>`, each load reads 16 bytes into two of the
    /// `vec4<f16>` staging registers (half as many load instructions; the two 8-byte slab
    /// stores are adjacent and 16-byte aligned, so the compiler may merge them). B: lane `l`
    /// takes 16-byte unit `l` of a run of 32 (two 256-byte rows per warp load). A (64-byte
    /// rows at K 32): a quarter-warp on rows `r` and `r + 4` (distinct banks, as `su3`), a
    /// warp on 8 rows. The other operand as `affine_parts`.
    #[allow(clippy::too_many_arguments)]
    fn affine_parts16(
        &self,
        k0: &str,
        decl: &str,
        own_idx: bool,
        (na, nb): (u32, u32),
        (ra, rb): (u32, u32),
        (oa, ob): (&str, &str),
        a_rc: &dyn Fn(&str) -> (String, String),
    ) -> (String, String) {
        let Loop { as_, bs_, bn, bk, nt, .. } = *self;
        let (a16, b16) = (self.xw & 2 != 0, self.xw & 1 != 0);
        let (mut c, mut st) = (String::new(), String::new());
        // A.
        if na > 0 && a16 {
            let q = bk / 8; // 16-byte units per A row
            let rows = nt / q; // rows per pass of the workgroup
            let row = format!(
                "(tid / 32u) * {}u + ((tid % 32u) / {q}u) / 2u + (((tid % 32u) / {q}u) % 2u) * 4u",
                32 / q
            );
            let _ = writeln!(c, "    let ra0 = {row};");
            let _ = writeln!(c, "    let gia = u32(abase + i32(m0 + ra0) * sam + i32({k0} + (tid % {q}u) * 8u)) >> 3u; let gsa = u32({rows} * sam) >> 3u;");
            for j in 0..na / 2 {
                let _ = writeln!(c, "    let ha{j} = a[gia + {j}u * gsa]; {decl}ua{} = ha{j}.l; {decl}ua{} = ha{j}.h;", 2 * j, 2 * j + 1);
            }
            if own_idx {
                let _ = writeln!(st, "    let ta0 = {row};");
            }
            let ri = if own_idx { "ta0" } else { "ra0" };
            let _ = writeln!(st, "    let spa = ({oa}{ri} * {as_}u + (tid % {q}u) * 8u) >> 2u;");
            for j in 0..na / 2 {
                let o = j * rows * as_ / 4;
                let _ = writeln!(
                    st,
                    "    As[spa + {o}u] = ua{}; As[spa + {}u] = ua{};",
                    2 * j,
                    o + 1,
                    2 * j + 1
                );
            }
        }
        if !a16 {
            // A in 8-byte units, as `affine_parts` renders it.
            let (l8, s8) = self.affine_parts(k0, decl, own_idx, (na, 0), (ra, rb), (oa, ob), a_rc);
            c.push_str(&l8);
            st.push_str(&s8);
        }
        // B.
        if nb > 0 && b16 {
            let q = bn / 8;
            let rows = nt / q;
            let _ = writeln!(c, "    let gib = u32(bbase + i32({k0} + tid / {q}u) * sbk + i32(n0 + (tid % {q}u) * 8u)) >> 3u; let gsb = u32({rows} * sbk) >> 3u;");
            for j in 0..nb / 2 {
                let _ = writeln!(c, "    let hb{j} = b[gib + {j}u * gsb]; {decl}ub{} = hb{j}.l; {decl}ub{} = hb{j}.h;", 2 * j, 2 * j + 1);
            }
            let _ = writeln!(
                st,
                "    let spb = ({ob}(tid / {q}u) * {bs_}u + (tid % {q}u) * 8u) >> 2u;"
            );
            for j in 0..nb / 2 {
                let o = j * rows * bs_ / 4;
                let _ = writeln!(
                    st,
                    "    Bs[spb + {o}u] = ub{}; Bs[spb + {}u] = ub{};",
                    2 * j,
                    o + 1,
                    2 * j + 1
                );
            }
        }
        if !b16 {
            let (l8, s8) = self.affine_parts(k0, decl, own_idx, (0, nb), (ra, rb), (oa, ob), a_rc);
            c.push_str(&l8);
            st.push_str(&s8);
        }
        (c, st)
    }
}
