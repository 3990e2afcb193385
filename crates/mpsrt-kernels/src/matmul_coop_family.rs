//! Generation 3 of the cooperative-matrix f16 GEMM: one renderer for a family of kernels whose
//! shape and technique are parameters ([`CoopTune`]), so one GPU session can time them all
//! (`bench_coop_sweep`) and the planner can keep the winner per shape.
//!
//! Parameters: the workgroup's grid of subgroups (`wm × wn`), cooperative tiles per subgroup
//! (`tm × tn`), K per step (`bk`), slab row padding (`pad` halves, against bank conflicts of
//! the matrix loads), one or two slab buffers (`db`: with two, the next slab's 16-byte global
//! loads are in registers while the current slab is multiplied), a bounds-check-free
//! specialization for interior workgroups (`fi`: a workgroup-uniform branch; edge workgroups
//! keep the checked loop), and direct loads (`dg`): interior workgroups of row-major, 16-byte
//! aligned operands read their cooperative tiles straight from the storage buffers (no
//! workgroup staging, no barriers; with `db` the next step's tiles are loaded before the
//! current step's products). Every variant stores interior tiles with `coopStoreT` straight to
//! the output (f32 accumulation, `alpha == 1`); edge tiles go through a per-subgroup scratch
//! with bounds checks.
//!
//! The text form (`w2x2_t4x4_k32_p8_db0_fi1_dg0`, [`CoopTune::name`] / [`CoopTune::parse`])
//! is what `MPSRT_COOP_VARIANT` takes.

use crate::matmul_coop::CoopMatmulSpec;
use mpsrt_core::DType;
use std::fmt::Write as _;

/// One member of the kernel family (see the module doc for each knob).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopTune {
    pub wm: u8,
    pub wn: u8,
    pub tm: u8,
    pub tn: u8,
    pub bk: u8,
    pub pad: u8,
    pub db: bool,
    pub fi: bool,
    pub dg: bool,
    /// Word-typed memory: slabs and operands bound as `u32` words and cooperative tiles loaded
    /// through `u32` pointers (strides in words), as NVIDIA's own cooperative-matrix samples do
    /// with `uvec4` buffers; staging stores whole words. Vulkan only: Metal's simdgroup loads
    /// take the element type's pointer, so the planner never picks it for 8×8 tiles.
    pub wl: bool,
    /// Predicated interior loads: one K loop for every workgroup whose global loads skip the
    /// bounds checks when the block is interior (`full || in bounds`), with no branch around
    /// the cooperative operations (the `fi` branch measured wrong on the H100).
    pub pi: bool,
}

impl Default for CoopTune {
    fn default() -> Self {
        CoopTune {
            wm: 2,
            wn: 2,
            tm: 4,
            tn: 4,
            bk: 32,
            pad: 8,
            db: false,
            fi: false,
            dg: false,
            wl: false,
            pi: false,
        }
    }
}

impl CoopTune {
    /// Canonical text form, e.g. `w2x2_t4x4_k32_p8_db0_fi1_dg0`.
    pub fn name(&self) -> String {
        format!(
            "w{}x{}_t{}x{}_k{}_p{}_db{}_fi{}_dg{}_wl{}_pi{}",
            self.wm,
            self.wn,
            self.tm,
            self.tn,
            self.bk,
            self.pad,
            u8::from(self.db),
            u8::from(self.fi),
            u8::from(self.dg),
            u8::from(self.wl),
            u8::from(self.pi)
        )
    }

    /// Parse the text form; tokens may come in any order and missing ones keep the default.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut t = CoopTune::default();
        let bad = |tok: &str| {
            format!("cooperative variant token '{tok}' in '{text}' is not one of wAxB, tAxB, kN, pN, db0/1, fi0/1, dg0/1, wl0/1, pi0/1")
        };
        let pair = |v: &str, tok: &str| -> Result<(u8, u8), String> {
            let (a, b) = v.split_once('x').ok_or_else(|| bad(tok))?;
            Ok((a.parse().map_err(|_| bad(tok))?, b.parse().map_err(|_| bad(tok))?))
        };
        let flag = |v: &str, tok: &str| match v {
            "0" => Ok(false),
            "1" => Ok(true),
            _ => Err(bad(tok)),
        };
        for tok in text.split(['_', ',']).map(str::trim).filter(|s| !s.is_empty()) {
            if let Some(v) = tok.strip_prefix("db") {
                t.db = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("fi") {
                t.fi = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("pi") {
                t.pi = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("wl") {
                t.wl = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix("dg") {
                t.dg = flag(v, tok)?;
            } else if let Some(v) = tok.strip_prefix('w') {
                (t.wm, t.wn) = pair(v, tok)?;
            } else if let Some(v) = tok.strip_prefix('t') {
                (t.tm, t.tn) = pair(v, tok)?;
            } else if let Some(v) = tok.strip_prefix('k') {
                t.bk = v.parse().map_err(|_| bad(tok))?;
            } else if let Some(v) = tok.strip_prefix('p') {
                t.pad = v.parse().map_err(|_| bad(tok))?;
            } else {
                return Err(bad(tok));
            }
        }
        Ok(t)
    }

    /// Tunes `bench_coop_sweep` times with `COOP_VARIANTS=experimental` (and
    /// `MPSRT_COOP_EXPERIMENTAL=1`): the unverified interior (`fi1`) and direct-load (`dg1`)
    /// paths, which the launcher uses only where every block is whole (the `aligned`
    /// specialization, no branch around the matrix operations).
    pub fn experimental() -> Vec<CoopTune> {
        let d = CoopTune::default();
        let mut v = Vec::new();
        for (wm, wn, tm, tn) in [(2, 2, 4, 4), (2, 4, 4, 2), (4, 2, 2, 4), (2, 2, 2, 2)] {
            v.push(CoopTune { wm, wn, tm, tn, fi: true, ..d });
        }
        for (wm, wn, tm, tn, bk, db) in [
            (2, 2, 4, 4, 32, false),
            (2, 2, 4, 4, 16, true),
            (1, 1, 4, 4, 32, false),
            (4, 2, 2, 4, 16, true),
        ] {
            v.push(CoopTune { wm, wn, tm, tn, bk, db, dg: true, ..d });
        }
        v
    }

    /// Why this tune is not trusted, if it is not: measured wrong or failing on the H100
    /// (session11 call A: every `fi1` and `dg1` kernel failed the correctness check, and every
    /// `wl1` kernel failed NVIDIA's shader compiler, driver 580). The launcher runs generation 1
    /// instead unless `MPSRT_COOP_EXPERIMENTAL=1`.
    pub fn unverified(&self) -> Option<&'static str> {
        if self.wl {
            Some("wl1: NVIDIA's compiler rejects u32-pointer cooperative loads (driver 580)")
        } else if self.fi || self.dg {
            Some("fi1/dg1: wrong results on the H100 (session11 call A), not understood yet")
        } else {
            None
        }
    }

    /// Whether the renderer accepts this tune for tiles of `size`.
    pub fn check(&self, size: u32) -> Result<(), String> {
        let p2 = |v: u8, hi: u8| v.is_power_of_two() && v <= hi;
        if !p2(self.wm, 4) || !p2(self.wn, 4) || self.wm * self.wn > 8 {
            return Err(format!(
                "{}: subgroup grid must be ≤ 8 subgroups, 1/2/4 a side",
                self.name()
            ));
        }
        if !p2(self.tm, 8) || !p2(self.tn, 8) || self.tm * self.tn > 16 {
            return Err(format!("{}: at most 16 tiles per subgroup, 1..8 a side", self.name()));
        }
        let bk = u32::from(self.bk);
        if bk % size != 0 || bk % 8 != 0 || !(8..=64).contains(&bk) {
            return Err(format!(
                "{}: K step must be a multiple of {size} and 8, ≤ 64",
                self.name()
            ));
        }
        if !self.pad.is_multiple_of(8) || self.pad > 16 {
            return Err(format!("{}: pad must be 0, 8 or 16 halves", self.name()));
        }
        Ok(())
    }

    /// The tunes `bench_coop_sweep` times (one process each): one-factor variations around the
    /// generation-1 shape, wider/taller workgroups, and the direct-load family.
    pub fn sweep() -> Vec<CoopTune> {
        let d = CoopTune::default();
        let mut v = Vec::new();
        for (pad, db, bk) in [
            (8, false, 32),
            (8, true, 32),
            (0, false, 32),
            (0, true, 32),
            (8, false, 16),
            (8, true, 16),
            (8, false, 64),
        ] {
            v.push(CoopTune { pad, db, bk, ..d });
        }
        let grids = [
            (2, 4, 4, 2),
            (4, 2, 2, 4),
            (2, 4, 4, 4),
            (4, 2, 4, 4),
            (2, 2, 2, 2),
            (2, 2, 4, 2),
            (2, 2, 2, 4),
            (1, 1, 4, 4),
            (2, 1, 4, 4),
        ];
        for (wm, wn, tm, tn) in grids {
            for db in [false, true] {
                v.push(CoopTune { wm, wn, tm, tn, db, ..d });
            }
        }
        for (wm, wn, tm, tn) in [(2, 2, 4, 4), (2, 4, 4, 2), (4, 2, 2, 4), (2, 2, 2, 2)] {
            v.push(CoopTune { wm, wn, tm, tn, pi: true, ..d });
        }
        v
    }
}

/// Shapes derived from a spec and its tune.
pub(crate) fn block(spec: &CoopMatmulSpec) -> (u32, u32, u32) {
    let t = &spec.tune;
    let s = spec.size;
    (
        u32::from(t.wm) * u32::from(t.tm) * s,
        u32::from(t.wn) * u32::from(t.tn) * s,
        u32::from(t.wm) * u32::from(t.wn) * spec.subgroup,
    )
}

/// Workgroup-memory bytes of a generation-3 kernel.
pub(crate) fn shared_bytes(spec: &CoopMatmulSpec) -> u32 {
    let (bm, bn, _) = block(spec);
    let t = &spec.tune;
    let (bk, pad) = (u32::from(t.bk), u32::from(t.pad));
    let stages = if t.db { 2 } else { 1 };
    let acc = if spec.acc == DType::F32 { 4 } else { 2 };
    let scratch = u32::from(t.wm) * u32::from(t.wn) * spec.size * spec.size * acc;
    2 * stages * (bm * (bk + pad) + bk * (bn + pad)) + scratch
}

/// Render a generation-3 kernel (`spec.variant == 3`, `spec.tune`). Direct loads need both
/// operands on the vector paths (`vec_a && vec_b`: row-major, 16-byte aligned); without them
/// `dg` is ignored.
pub(crate) fn render(spec: &CoopMatmulSpec) -> Result<String, String> {
    let t = spec.tune;
    t.check(spec.size)?;
    let s = spec.size;
    let sg = spec.subgroup;
    let (bm, bn, nt) = block(spec);
    let (tm, tn, wn) = (u32::from(t.tm), u32::from(t.tn), u32::from(t.wn));
    let (bk, pad) = (u32::from(t.bk), u32::from(t.pad));
    let dg = t.dg && spec.vec_a && spec.vec_b;
    // Direct loads read f16 elements; staging then runs on the scalar paths.
    let (va, vb) = (spec.vec_a && !dg, spec.vec_b && !dg);
    let acc = if spec.acc == DType::F32 { "f32" } else { "f16" };
    let (as_, bs_) = (bk + pad, bn + pad);
    let (a_stage, b_stage) = (bm * as_, bk * bs_);
    let stages = if t.db { 2 } else { 1 };
    let nb = spec.batch_dims;
    let h = crate::MATMUL_META_HEAD;
    let words = (h + 3 * nb).div_ceil(4);
    let mut w = String::with_capacity(16384);
    let _ = writeln!(
        w,
        "// generated by mpsrt-kernels: cooperative matmul generation 3 {} {spec:?}",
        t.name()
    );
    w.push_str("enable f16;\nenable wgpu_cooperative_matrix;\n");
    let _ = writeln!(w, "struct Meta {{ w: array<vec4<u32>, {words}> }};");
    let wl = t.wl;
    let ty = |v: bool| match (v, wl) {
        (true, false) => "vec4<f16>",
        (false, false) => "f16",
        (true, true) => "vec4<u32>",
        (false, true) => "u32",
    };
    let _ = writeln!(w, "@group(0) @binding(0) var<storage, read> a: array<{}>;", ty(va));
    let _ = writeln!(w, "@group(0) @binding(1) var<storage, read> b: array<{}>;", ty(vb));
    w.push_str("@group(0) @binding(2) var<storage, read_write> out: array<f32>;\n");
    w.push_str("@group(0) @binding(3) var<uniform> M: Meta;\n");
    crate::matmul::meta_fns(&mut w, nb);
    if wl {
        // Halves of word-typed operands (scalar staging paths).
        for (f, arr, v) in [("ha", "a", va), ("hb", "b", vb)] {
            if !v {
                let _ = writeln!(w, "fn {f}(i: u32) -> f16 {{ let v = unpack2x16float({arr}[i >> 1u]); return f16(select(v.x, v.y, (i & 1u) == 1u)); }}");
            }
        }
        let _ = writeln!(w, "var<workgroup> As: array<u32, {}>;", stages * a_stage / 2);
        let _ = writeln!(w, "var<workgroup> Bs: array<u32, {}>;", stages * b_stage / 2);
    } else {
        let _ = writeln!(w, "var<workgroup> As: array<f16, {}>;", stages * a_stage);
        let _ = writeln!(w, "var<workgroup> Bs: array<f16, {}>;", stages * b_stage);
    }
    let _ = writeln!(w, "var<workgroup> Cs: array<{acc}, {}>;", u32::from(t.wm) * wn * s * s);
    w.push_str("var<workgroup> Wfull: u32;\n");
    let _ = writeln!(w, "@compute @workgroup_size({nt})");
    w.push_str("fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32,\n");
    w.push_str(
        "        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {\n",
    );
    w.push_str("  let Mr = mw(0u); let N = mw(1u); let K = mw(2u);\n  let bo = boffs(wid.z);\n");
    w.push_str("  let abase = mi(4u) + bo.x; let bbase = mi(5u) + bo.y;\n");
    w.push_str("  let sam = mi(6u); let sak = mi(7u); let sbk = mi(8u); let sbn = mi(9u);\n");
    let _ = writeln!(w, "  let m0 = wid.y * {bm}u; let n0 = wid.x * {bn}u;");
    let _ =
        writeln!(w, "  let sm = (sg / {wn}u) * {}u; let sn = (sg % {wn}u) * {}u;", tm * s, tn * s);
    // Accumulators as separate named variables (never an indexed array of matrices).
    for i in 0..tm {
        for j in 0..tn {
            let _ = writeln!(w, "  var c{i}_{j} = coop_mat{s}x{s}<{acc}, C>();");
        }
    }
    let inside = format!("m0 + {bm}u <= Mr && n0 + {bn}u <= N");
    let pi = t.pi && !(t.fi || dg);
    let l =
        Loop { s, bm, bn, nt, tm, tn, bk, as_, bs_, a_stage, b_stage, va, vb, db: t.db, wl, pi };
    if (t.fi || dg) && spec.aligned {
        // Every workgroup is interior: the fast path alone, outside any branch.
        w.push_str("  {\n");
        w.push_str(&if dg { l.direct() } else { l.shared(false) });
        w.push_str("  }\n");
    } else if t.fi || dg {
        // naga's uniformity analysis counts `workgroup_id` as non-uniform, and cooperative
        // loads need uniform control flow: the branch reads its condition back through
        // `workgroupUniformLoad`, which makes it uniform by construction.
        let _ = writeln!(
            w,
            "  if (tid == 0u) {{ Wfull = select(0u, 1u, {inside} && K % {bk}u == 0u); }}"
        );
        w.push_str("  let full = workgroupUniformLoad(&Wfull) == 1u;\n");
        w.push_str("  if (full) {\n");
        w.push_str(&if dg { l.direct() } else { l.shared(false) });
        w.push_str("  } else {\n");
        w.push_str(&l.shared(true));
        w.push_str("  }\n");
    } else {
        if pi {
            let _ = writeln!(w, "  let full = {inside} && K % {bk}u == 0u;");
        }
        w.push_str(&l.shared(true));
    }
    crate::matmul_coop::store_epilogue(&mut w, spec.acc, &inside, tm, tn, s, sg, "_");
    w.push_str("}\n");
    Ok(w)
}

/// The K loop's geometry, shared by its renderings.
struct Loop {
    s: u32,
    bm: u32,
    bn: u32,
    nt: u32,
    tm: u32,
    tn: u32,
    bk: u32,
    as_: u32,
    bs_: u32,
    a_stage: u32,
    b_stage: u32,
    va: bool,
    vb: bool,
    db: bool,
    wl: bool,
    pi: bool,
}

impl Loop {
    /// Direct loads from the storage buffers (interior workgroups, K a multiple of `bk`, both
    /// operands row-major with 16-byte aligned rows). With `db`, each chunk of `bk` is loaded
    /// one chunk ahead into named matrices.
    fn direct(&self) -> String {
        let Loop { s, tm, tn, bk, .. } = *self;
        let mut c = String::new();
        c.push_str(
            "    let ga = u32(abase + i32(m0 + sm) * sam); let gb = u32(bbase + i32(n0 + sn));\n",
        );
        // Word-typed loads: indices and strides in u32 words (all even in halves here).
        let (sh, ws) = if self.wl { (" >> 1u", 2) } else { ("", 1) };
        let _ = writeln!(c, "    let lda = u32(sam); let ldb = u32(sbk); let lwa = lda / {ws}u; let lwb = ldb / {ws}u;");
        let loads = |c: &mut String, k: &str, pre: &str, decl: &str| {
            for i in 0..tm {
                let _ = writeln!(c, "    let ia{pre}{i} = (ga + {}u * lda + {k}){sh};", i * s);
                let _ = writeln!(c, "    {decl}{pre}a{i} = coopLoadT<coop_mat{s}x{s}<f16, A>>(&a[ia{pre}{i}], lwa);");
            }
            for j in 0..tn {
                let _ = writeln!(c, "    let ib{pre}{j} = (gb + ({k}) * ldb + {}u){sh};", j * s);
                let _ = writeln!(c, "    {decl}{pre}b{j} = coopLoadT<coop_mat{s}x{s}<f16, B>>(&b[ib{pre}{j}], lwb);");
            }
        };
        let mmas = |c: &mut String, pre: &str| {
            for i in 0..tm {
                for j in 0..tn {
                    let _ = writeln!(
                        c,
                        "    c{i}_{j} = coopMultiplyAdd({pre}a{i}, {pre}b{j}, c{i}_{j});"
                    );
                }
            }
        };
        if self.db {
            // The current chunk's tiles (`bk / s` steps) in `var`s, the next chunk's loaded
            // before the current chunk's products.
            let steps: Vec<u32> = (0..bk).step_by(s as usize).collect();
            for &kk in &steps {
                loads(&mut c, &format!("{kk}u"), &format!("p{kk}"), "var ");
            }
            let _ = writeln!(c, "    for (var k0 = 0u; k0 < K; k0 = k0 + {bk}u) {{");
            // The last chunk reloads its own tiles rather than reading past K.
            let _ = writeln!(c, "    let kn = min(k0 + {bk}u, K - {bk}u);");
            for &kk in &steps {
                loads(&mut c, &format!("kn + {kk}u"), &format!("n{kk}"), "let ");
            }
            for &kk in &steps {
                mmas(&mut c, &format!("p{kk}"));
            }
            for &kk in &steps {
                for i in 0..tm {
                    let _ = writeln!(c, "    p{kk}a{i} = n{kk}a{i};");
                }
                for j in 0..tn {
                    let _ = writeln!(c, "    p{kk}b{j} = n{kk}b{j};");
                }
            }
            c.push_str("    }\n");
        } else {
            let _ = writeln!(c, "    for (var k0 = 0u; k0 < K; k0 = k0 + {bk}u) {{");
            for kk in (0..bk).step_by(s as usize) {
                let pre = format!("s{kk}");
                loads(&mut c, &format!("k0 + {kk}u"), &pre, "let ");
                mmas(&mut c, &pre);
            }
            c.push_str("    }\n");
        }
        c
    }

    /// The products of one staged slab at stage offsets `ab`/`bb`.
    fn products(&self) -> String {
        let Loop { s, tm, tn, bk, as_, bs_, .. } = *self;
        // Word-typed slabs: indices and strides in u32 words (every offset is even).
        let (sh, ws) = if self.wl { (" >> 1u", 2) } else { ("", 1) };
        let mut c = String::new();
        for kk in (0..bk).step_by(s as usize) {
            for i in 0..tm {
                let _ = writeln!(c, "    let a{i}_{kk} = coopLoadT<coop_mat{s}x{s}<f16, A>>(&As[(ab + (sm + {}u) * {as_}u + {kk}u){sh}], {}u);", i * s, as_ / ws);
            }
            for j in 0..tn {
                let _ = writeln!(c, "    let b{j}_{kk} = coopLoadT<coop_mat{s}x{s}<f16, B>>(&Bs[(bb + {kk}u * {bs_}u + sn + {}u){sh}], {}u);", j * s, bs_ / ws);
            }
            for i in 0..tm {
                for j in 0..tn {
                    let _ = writeln!(
                        c,
                        "    c{i}_{j} = coopMultiplyAdd(a{i}_{kk}, b{j}_{kk}, c{i}_{j});"
                    );
                }
            }
        }
        c
    }

    /// Register names and type of the `t`-th vector a thread stages (8 halves: two
    /// `vec4<f16>`, or one `vec4<u32>` when word-typed).
    fn regs(&self, reg: &str, t: u32) -> Vec<(String, &'static str)> {
        if self.wl {
            vec![(format!("{reg}{t}w"), "vec4<u32>")]
        } else {
            vec![(format!("{reg}{t}l"), "vec4<f16>"), (format!("{reg}{t}h"), "vec4<f16>")]
        }
    }

    /// Global loads of slab `k0`: into registers `r*` on the vector paths (`to_regs`), or
    /// (scalar paths, and vector paths when `!to_regs`) straight into stage `st`. `checked`:
    /// bounds checks against M, N, K (edge workgroups).
    fn load(&self, k0: &str, st: &str, checked: bool, to_regs: bool) -> String {
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
        let vsh = if wl { 3 } else { 2 };
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
                let mut body = format!("let at = {arr}_at;");
                for (i, (r, ty)) in regs.iter().enumerate() {
                    let _ = write!(c, "      {decl}{r} = {ty}();");
                    let _ = write!(body, " {r} = {arr}[at + {i}u];");
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
        if self.va {
            let idx = format!("let m = m0 + e / {q}u; let k = {k0} + (e % {q}u) * 8u; let a_at = u32(abase + i32(m) * sam + i32(k)) >> {vsh}u;");
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
            if checked {
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
        if self.vb {
            let idx = format!("let n = n0 + (e % {qn}u) * 8u; let k = {k0} + e / {qn}u; let b_at = u32(bbase + i32(k) * sbk + i32(n)) >> {vsh}u;");
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
            if checked {
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
        c
    }

    /// Stores of the register-held vectors (vector paths) into stage `st`.
    fn store(&self, st: &str) -> String {
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
        if self.va {
            one(
                bm * q,
                "ra",
                "As",
                format!("{st} * {a_stage}u + (e / {q}u) * {as_}u + (e % {q}u) * 8u"),
            );
        }
        if self.vb {
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
    fn put(&self, regs: &[(String, &str)], dst: &str, at: &str, tot: u32) -> String {
        let mut c = String::new();
        let open = if !tot.is_multiple_of(self.nt) {
            format!("      if (e < {tot}u) {{\n")
        } else {
            "      {\n".into()
        };
        c.push_str(&open);
        if self.wl {
            let _ = writeln!(c, "      let at = ({at}) >> 1u;");
            for (i, part) in ["x", "y", "z", "w"].iter().enumerate() {
                let _ = writeln!(c, "      {dst}[at + {i}u] = {}.{part};", regs[0].0);
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

    /// The staged K loop; `checked` bounds-checks every global load (edge workgroups).
    fn shared(&self, checked: bool) -> String {
        let Loop { bk, a_stage, b_stage, .. } = *self;
        let mut c = String::new();
        if !self.db {
            let _ = writeln!(c, "    for (var k0 = 0u; k0 < K; k0 = k0 + {bk}u) {{");
            c.push_str(&self.load("k0", "0u", checked, false));
            c.push_str("    workgroupBarrier();\n    let ab = 0u; let bb = 0u;\n");
            c.push_str(&self.products());
            c.push_str("    workgroupBarrier();\n    }\n");
            return c;
        }
        let vecs = self.va || self.vb;
        // Register-held vectors live across the loop.
        let Loop { bm, bn, nt, .. } = *self;
        for (on, reg, tot) in [(self.va, "ra", bm * bk / 8), (self.vb, "rb", bk * bn / 8)] {
            for t in 0..if on { tot.div_ceil(nt) } else { 0 } {
                for (r, ty) in self.regs(reg, t) {
                    let _ = writeln!(c, "    var {r} = {ty}();");
                }
            }
        }
        c.push_str("    {\n");
        c.push_str(&self.load("0u", "0u", checked, true));
        c.push_str(&self.store("0u"));
        c.push_str("    }\n    workgroupBarrier();\n    var st = 0u;\n");
        let _ = writeln!(c, "    for (var k0 = 0u; k0 < K; k0 = k0 + {bk}u) {{");
        let _ = writeln!(c, "    let nxt = k0 + {bk}u; let ot = 1u - st;");
        c.push_str("    if (nxt < K) {\n");
        c.push_str(&self.load("nxt", "ot", checked, true));
        c.push_str("    }\n");
        let _ = writeln!(c, "    let ab = st * {a_stage}u; let bb = st * {b_stage}u;");
        c.push_str(&self.products());
        if vecs {
            c.push_str("    if (nxt < K) {\n");
            c.push_str(&self.store("ot"));
            c.push_str("    }\n");
        }
        c.push_str("    workgroupBarrier();\n    st = ot;\n    }\n");
        c
    }
}
