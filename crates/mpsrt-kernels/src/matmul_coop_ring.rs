//! Unrolled two-slab K loops of generation 3 (a child of `matmul_coop_family.rs`, so it sees
//! the loop geometry): the `rq1` register ring — two register sets take turns so a slab's
//! global loads are issued two K steps before its products; unverified on hardware (wrong
//! results on the H100, 8th session), rendered only with `MPSRT_COOP_EXPERIMENTAL=1` — and
//! `un1`, the plain two-slab loop unrolled by two so both stages are constants.

use super::Loop;
use std::fmt::Write as _;

impl Loop {
    /// The `rq1` interior loop (both operands on the vector paths, two slabs): two register
    /// sets take turns, so each slab's global loads are issued two steps before its products
    /// (one with `db` alone); the loop is unrolled by two so every stage and register set is
    /// a constant. Invariant at the top: stage 0 holds slab `k0`, set 1 slab `k0 + bk`.
    pub(super) fn ring(&self, decl_regs: &dyn Fn(&mut String)) -> String {
        let (bk, a_stage, b_stage) = (self.bk, self.a_stage, self.b_stage);
        // Set 1: the same code with its own registers.
        let set1 = |code: String| -> String {
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
        let mut d = String::new();
        decl_regs(&mut d);
        c.push_str(&d);
        c.push_str(&set1(d));
        c.push_str("    {\n");
        c.push_str(&self.load("0u", "0u", false, true));
        c.push_str(&self.store("0u"));
        let _ = writeln!(c, "    }}\n    if ({bk}u < K) {{");
        c.push_str(&set1(self.load(&format!("{bk}u"), "1u", false, true)));
        c.push_str("    }\n    workgroupBarrier();\n");
        // Whole pairs of steps (no branch around the matrix operations: naga does not count
        // a condition on the loop counter as uniform), then an odd last step from stage 0.
        let _ =
            writeln!(c, "    var k0 = 0u;\n    for (; k0 + {0}u <= K; k0 = k0 + {0}u) {{", 2 * bk);
        // Slab k0 from stage 0: set 0 takes slab k0 + 2bk, set 1 lands in stage 1.
        let _ = writeln!(c, "    {{\n    if (k0 + {}u < K) {{", 2 * bk);
        c.push_str(&self.load(&format!("k0 + {}u", 2 * bk), "0u", false, true));
        c.push_str("    }\n    let ab = 0u; let bb = 0u;\n");
        c.push_str(&self.products());
        c.push_str(&set1(self.store("1u")));
        c.push_str("    workgroupBarrier();\n    }\n");
        // Slab k0 + bk from stage 1: set 1 takes slab k0 + 3bk, set 0 lands in stage 0.
        let _ = writeln!(c, "    {{\n    if (k0 + {}u < K) {{", 3 * bk);
        c.push_str(&set1(self.load(&format!("k0 + {}u", 3 * bk), "1u", false, true)));
        let _ = writeln!(c, "    }}\n    let ab = {a_stage}u; let bb = {b_stage}u;");
        c.push_str(&self.products());
        let _ = writeln!(c, "    if (k0 + {}u < K) {{", 2 * bk);
        c.push_str(&self.store("0u"));
        c.push_str("    }\n    workgroupBarrier();\n    }\n    }\n");
        // (`Wfull` is free here: the ring only runs in whole-block kernels; the uniform load
        // makes the K-dependent condition uniform for naga.)
        let _ =
            writeln!(c, "    if (tid == 0u) {{ Wfull = select(0u, 1u, K % {}u != 0u); }}", 2 * bk);
        c.push_str(
            "    if (workgroupUniformLoad(&Wfull) == 1u) {\n    let ab = 0u; let bb = 0u;\n",
        );
        c.push_str(&self.products());
        c.push_str("    }\n");
        c
    }

    /// The `un1` interior loop (whole blocks, K a multiple of `bk`, both operands on the
    /// vector paths, two slabs): `db`'s one barrier per step, unrolled by two so each half
    /// reads a constant stage (no `st` select in the matrix loads' addresses) and prefetches
    /// into one register set with no branch (the next slab is clamped to the last). An odd
    /// last step runs from stage 0 after the loop.
    pub(super) fn unrolled(&self, decl_regs: &dyn Fn(&mut String)) -> String {
        let (bk, a_stage, b_stage) = (self.bk, self.a_stage, self.b_stage);
        let mut c = String::new();
        decl_regs(&mut c);
        c.push_str("    {\n");
        c.push_str(&self.load("0u", "0u", false, true));
        c.push_str(&self.store("0u"));
        c.push_str("    }\n    workgroupBarrier();\n");
        let _ =
            writeln!(c, "    var k0 = 0u;\n    for (; k0 + {0}u <= K; k0 = k0 + {0}u) {{", 2 * bk);
        // Stage 0 holds slab k0: slab k0 + bk (inside K: the pair is whole) into stage 1.
        c.push_str("    {\n");
        c.push_str(&self.load(&format!("k0 + {bk}u"), "1u", false, true));
        c.push_str("    let ab = 0u; let bb = 0u;\n");
        c.push_str(&self.products());
        c.push_str(&self.store("1u"));
        c.push_str("    workgroupBarrier();\n    }\n");
        // Stage 1 holds slab k0 + bk: slab k0 + 2bk (clamped) into stage 0.
        let _ = writeln!(c, "    {{\n    let nx = min(k0 + {}u, K - {bk}u);", 2 * bk);
        c.push_str(&self.load("nx", "0u", false, true));
        let _ = writeln!(c, "    let ab = {a_stage}u; let bb = {b_stage}u;");
        c.push_str(&self.products());
        c.push_str(&self.store("0u"));
        c.push_str("    workgroupBarrier();\n    }\n    }\n");
        // The uniform load makes the K-dependent condition uniform for naga (as in `ring`).
        let _ =
            writeln!(c, "    if (tid == 0u) {{ Wfull = select(0u, 1u, K % {}u != 0u); }}", 2 * bk);
        c.push_str(
            "    if (workgroupUniformLoad(&Wfull) == 1u) {\n    let ab = 0u; let bb = 0u;\n",
        );
        c.push_str(&self.products());
        c.push_str("    }\n");
        c
    }
}
