//! Fused scaled-dot-product attention on the matrix units (f16 q/k/v/out, f32 accumulation and
//! softmax): `softmax(q·kᵀ·scale + mask [causal]) · v` with both products as cooperative-matrix
//! multiplies (wgpu's `EXPERIMENTAL_COOPERATIVE_MATRIX`, 16×16 f16 → f32 tiles).
//!
//! Each subgroup owns 16 query rows of one (batch, head); a workgroup holds [`AttnCoopSpec::sgs`]
//! independent subgroups (nothing is shared between them, so the only cost of more is
//! workgroup memory). Q's `d / 16` fragments are loaded once into registers; K and V fragments
//! are loaded straight from global memory (`coopLoad` on the storage buffer, column-major for
//! Kᵀ), which is why the launcher only takes aligned problems: `Sq` and `Skv` multiples of 16,
//! head sizes multiples of 16, unit column strides and every offset/stride a multiple of 8
//! elements (16 bytes). Keys are processed in chunks of `ch` (≤ 128): a chunk's 16 × `ch`
//! scores are stored (f32) to the subgroup's scratch, two passes over the chunks — the first
//! computes each row's max and sum (online), the second recomputes the scores, writes the
//! normalized probabilities as f16 to a second scratch and accumulates `P · V` in `dv / 16` f32
//! fragments — so no rescaling of the opaque accumulators is needed. With one chunk (BERT's
//! 128 keys) it is one pass: the max, then the unnormalized probabilities (≤ 1) and their sum,
//! `P · V`, and `1 / sum` applied per row on the way out. The output goes through the score scratch to packed f16
//! words. `L = subgroup / 16` lanes share a row (their partial max/sum combined with
//! `subgroupShuffleXor`), reading columns `hl, hl + L, …` of a scratch row padded by 4 floats.
//!
//! Masks: an additive mask of any broadcast strides (f32 or f16) and a causal bound `key <=
//! query + offset`; a row with no attendable key gives zeros (the fused kernel's rule).

use mpsrt_core::DType;
use std::fmt::Write as _;

/// Largest key chunk (scores per row held in the scratch at once).
pub const ATTN_COOP_MAX_CHUNK: u32 = 128;
/// Largest head size (q/k and v) the kernel is rendered for.
pub const ATTN_COOP_MAX_HEAD: u32 = 128;

/// A rendered cooperative-matrix attention kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttnCoopSpec {
    /// Head size of q and k (multiple of 16).
    pub d: u32,
    /// Head size of v and the output (multiple of 16).
    pub dv: u32,
    /// Keys per chunk (multiple of 16, ≤ [`ATTN_COOP_MAX_CHUNK`]).
    pub ch: u32,
    /// Subgroups (16 query rows each) per workgroup: 1, 2 or 4.
    pub sgs: u32,
    /// Lanes per subgroup the kernel is rendered for (16, 32, 64 or 128).
    pub subgroup: u32,
    /// Element type of the additive mask, if any (F32 or F16).
    pub mask: Option<DType>,
    /// The keys are one chunk (`Skv == ch`): the second pass reuses the scores instead of
    /// recomputing them (a runtime branch around the matrix operations is not uniform control
    /// flow for naga, so this is rendered).
    pub one_chunk: bool,
}

impl AttnCoopSpec {
    /// Score scratch row stride (f32): wide enough for a chunk and for the output tile.
    fn ss(&self) -> u32 {
        self.ch + 4
    }
    /// Probability scratch row stride (f16), 16-byte aligned rows.
    fn ps(&self) -> u32 {
        self.ch + 8
    }

    /// Workgroup-memory bytes the kernel declares.
    pub fn shared_bytes(&self) -> u32 {
        self.sgs * 16 * (4 * self.ss() + 2 * self.ps() + 4)
    }

    /// Threads per workgroup.
    pub fn threads(&self) -> u32 {
        self.sgs * self.subgroup
    }

    /// Query rows per workgroup.
    pub fn rows(&self) -> u32 {
        self.sgs * 16
    }

    /// The kernel for these head sizes and key length, or `None` when it does not take them
    /// (the caller then uses the scalar fused kernel). `sgs` is the wanted subgroups per
    /// workgroup, lowered until the workgroup memory fits `limit`; the key chunk is the largest
    /// multiple of 16 up to `max_chunk` (≤ 128) dividing `skv` (smaller chunks: less workgroup
    /// memory, scores computed twice). Pure.
    pub fn plan(
        d: u32,
        dv: u32,
        skv: u32,
        mask: Option<DType>,
        subgroup: u32,
        (sgs, max_chunk): (u32, u32),
        limit: u32,
    ) -> Option<AttnCoopSpec> {
        let head_ok = |x: u32| x > 0 && x.is_multiple_of(16) && x <= ATTN_COOP_MAX_HEAD;
        if !head_ok(d)
            || !head_ok(dv)
            || skv == 0
            || !skv.is_multiple_of(16)
            || !matches!(mask, None | Some(DType::F32) | Some(DType::F16))
            || !matches!(subgroup, 16 | 32 | 64 | 128)
        {
            return None;
        }
        // Whole chunks only: a trip count that depends on the chunk index is not uniform
        // control flow for naga, and the matrix operations need it.
        let ch = (1..=max_chunk.min(ATTN_COOP_MAX_CHUNK) / 16)
            .rev()
            .map(|t| 16 * t)
            .find(|&c| skv.is_multiple_of(c))?;
        let mut sgs = sgs.clamp(1, 4);
        loop {
            let s = AttnCoopSpec { d, dv, ch, sgs, subgroup, mask, one_chunk: ch == skv };
            if s.shared_bytes() <= limit {
                return Some(s);
            }
            if sgs == 1 {
                return None;
            }
            sgs /= 2;
        }
    }

    /// Render the WGSL. Bindings: q, k, v (`array<f16>`), \[mask\], out (`array<u32>`, packed
    /// f16), then the same 36-word metadata block as the scalar kernel
    /// ([`crate::AttnSpec::render`]): 0 `Sq`, 1 `Skv`, 2 `groups`, 3 `scale` bits, 4 causal,
    /// 5 causal offset, `(offset, batch, head, seq, col)` strides of q at 8, k at 13, v at 18,
    /// mask at 23, out at 28.
    pub fn render(&self) -> Result<String, String> {
        let s = *self;
        let head_ok = |x: u32| x > 0 && x.is_multiple_of(16) && x <= ATTN_COOP_MAX_HEAD;
        if !head_ok(s.d)
            || !head_ok(s.dv)
            || !matches!(s.sgs, 1 | 2 | 4)
            || !matches!(s.subgroup, 16 | 32 | 64 | 128)
            || !s.ch.is_multiple_of(16)
            || s.ch == 0
            || s.ch > ATTN_COOP_MAX_CHUNK
            || !matches!(s.mask, None | Some(DType::F32) | Some(DType::F16))
        {
            return Err(format!("unsupported cooperative attention {s:?}"));
        }
        let (d, dv, ch, sgs, sgsz) = (s.d, s.dv, s.ch, s.sgs, s.subgroup);
        let (ss, ps) = (s.ss(), s.ps());
        let lanes = sgsz / 16;
        let nt = ch / 16;
        let mut w = String::with_capacity(8192);
        let _ = writeln!(w, "// generated by mpsrt-kernels: cooperative attention {s:?}");
        w.push_str("// Techniques: matrix-unit QK^T and PV (16x16 f16 -> f32), fragments loaded from global memory, two-pass softmax over key chunks in per-subgroup scratch, subgroup shuffles for row statistics.\n");
        w.push_str("enable f16;\nenable wgpu_cooperative_matrix;\n");
        let mask = s.mask.map(|m| if m == DType::F16 { "f16" } else { "f32" });
        crate::attention::preamble(&mut w, "f16", mask, "u32", false);
        let _ = writeln!(w, "var<workgroup> Sc: array<f32, {}>;", sgs * 16 * ss);
        let _ = writeln!(w, "var<workgroup> Pc: array<f16, {}>;", sgs * 16 * ps);
        // One chunk: each row's 1 / sum, applied to the output on the way out.
        let _ = writeln!(w, "var<workgroup> Li: array<f32, {}>;", sgs * 16);
        let _ = writeln!(w, "@compute @workgroup_size({})", s.threads());
        w.push_str("fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32) {\n");
        w.push_str("  let Sq = mw(0u); let Skv = mw(1u); let groups = mw(2u);\n");
        w.push_str(
            "  let scale = bitcast<f32>(mw(3u)); let causal = mw(4u) != 0u; let coff = mi(5u);\n",
        );
        w.push_str("  let bi = i32(wid.z); let hq = i32(wid.y); let hk = i32(wid.y / groups);\n");
        w.push_str("  let ninf = bitcast<f32>(0xff800000u);\n");
        // Subgroups past Sq recompute the last tile (uniform control flow) and store nothing.
        let _ = writeln!(w, "  let t0 = (wid.x * {sgs}u + sg) * 16u;");
        w.push_str("  let live = t0 < Sq; let i0 = min(t0, Sq - 16u);\n");
        w.push_str("  let qsq = mi(11u); let ksq = mi(16u); let vsq = mi(21u);\n");
        w.push_str("  let qb = mi(8u) + bi * mi(9u) + hq * mi(10u) + i32(i0) * qsq;\n");
        w.push_str("  let kb = mi(13u) + bi * mi(14u) + hk * mi(15u);\n");
        w.push_str("  let vb = mi(18u) + bi * mi(19u) + hk * mi(20u);\n");
        if s.mask.is_some() {
            w.push_str("  let mb = mi(23u) + bi * mi(24u) + hq * mi(25u); let msq = mi(26u); let msk = mi(27u);\n");
        }
        for t in 0..d / 16 {
            let _ = writeln!(
                w,
                "  let qa{t} = coopLoadT<coop_mat16x16<f16, A>>(&q[u32(qb + {})], u32(qsq));",
                16 * t
            );
        }
        let _ = writeln!(w, "  let sb = sg * {}u; let pb = sg * {}u;", 16 * ss, 16 * ps);
        let _ = writeln!(w, "  let r = lane / {lanes}u; let hl = lane % {lanes}u; let i = i0 + r;");
        // The row's biased score at chunk column jj (key j0 + jj).
        w.push_str("  var m = ninf; var l = 0.0;\n");
        let _ = writeln!(w, "  let nch = Skv / {ch}u;");
        let score = {
            let mut x = format!("Sc[sb + r * {ss}u + jj] * scale");
            if let Some(mt) = s.mask {
                let rd = "mk[u32(mb + i32(i) * msq + i32(j0 + jj) * msk)]";
                if mt == DType::F16 {
                    let _ = write!(x, " + f32({rd})");
                } else {
                    let _ = write!(x, " + {rd}");
                }
            }
            x
        };
        let score_fn = |w: &mut String, ind: &str| {
            let _ = writeln!(w, "{ind}var x = {score};");
            let _ = writeln!(w, "{ind}if (causal && i32(j0 + jj) > i32(i) + coff) {{ x = ninf; }}");
        };
        // Scores of a chunk into the scratch (row-major 16 × ch, stride ss), unrolled: the
        // fragment loads of every key tile are independent, so the compiler can have many in
        // flight (a loop waited for each tile's loads in turn: latency-bound at 2-3 subgroups
        // per SM).
        let scores = |w: &mut String, ind: &str| {
            for jt in 0..nt {
                let _ = writeln!(w, "{ind}{{\n{ind}  let kr = kb + i32(j0 + {}u) * ksq;", 16 * jt);
                let _ = writeln!(w, "{ind}  var acc = coop_mat16x16<f32, C>();");
                for t in 0..d / 16 {
                    let _ = writeln!(w, "{ind}  acc = coopMultiplyAdd(qa{t}, coopLoad<coop_mat16x16<f16, B>>(&k[u32(kr + {})], u32(ksq)), acc);", 16 * t);
                }
                let _ = writeln!(w, "{ind}  let so = sb + {}u;", 16 * jt);
                let _ = writeln!(w, "{ind}  coopStoreT(acc, &Sc[so], {ss}u);\n{ind}}}");
            }
            let _ = writeln!(w, "{ind}workgroupBarrier();");
        };
        // Combine the `lanes` partial values of a row (adjacent lanes) with xor shuffles.
        let reduce = |w: &mut String, var: &str, max: bool| {
            let mut x = 1;
            while x < lanes {
                let sh = format!("subgroupShuffleXor({var}, {x}u)");
                if max {
                    let _ = writeln!(w, "    {var} = max({var}, {sh});");
                } else {
                    let _ = writeln!(w, "    {var} = {var} + {sh};");
                }
                x *= 2;
            }
        };
        for n in 0..dv / 16 {
            let _ = writeln!(w, "  var o{n} = coop_mat16x16<f32, C>();");
        }
        let pv = |w: &mut String| {
            for kt in 0..nt {
                let _ = writeln!(w, "    {{\n      let po = pb + {}u;", 16 * kt);
                let _ =
                    writeln!(w, "      let pa = coopLoadT<coop_mat16x16<f16, A>>(&Pc[po], {ps}u);");
                let _ = writeln!(w, "      let vr = vb + i32(j0 + {}u) * vsq;", 16 * kt);
                for n in 0..dv / 16 {
                    let _ = writeln!(w, "      o{n} = coopMultiplyAdd(pa, coopLoadT<coop_mat16x16<f16, B>>(&v[u32(vr + {})], u32(vsq)), o{n});", 16 * n);
                }
                w.push_str("    }\n");
            }
        };
        // The lane's columns `hl, hl + lanes, …` of the chunk, `un` per loop step (unrolled,
        // so their loads overlap: one loop step per load was latency-bound, H100 call 1).
        let un = [32u32, 16, 8, 4, 2, 1].into_iter().find(|u| ch % (lanes * u) == 0).unwrap_or(1);
        let cols = |w: &mut String, body: &dyn Fn(&mut String)| {
            let _ = writeln!(w, "    for (var jb = hl; jb < {ch}u; jb = jb + {}u) {{", lanes * un);
            for u in 0..un {
                let _ = writeln!(w, "      {{\n        let jj = jb + {}u;", lanes * u);
                body(w);
                w.push_str("      }\n");
            }
            w.push_str("    }\n");
        };
        // The biased score `x` written back to the scratch (the mask is read once per pass)
        // and folded into the row max `mx`.
        let biased = |w: &mut String| {
            cols(w, &|w: &mut String| {
                score_fn(w, "        ");
                let _ =
                    writeln!(w, "        Sc[sb + r * {ss}u + jj] = x;\n        mx = max(mx, x);");
            });
        };
        let sc = format!("Sc[sb + r * {ss}u + jj]");
        if s.one_chunk {
            // One chunk: the max, then unnormalized probabilities (≤ 1, f16) and their sum in
            // the same pass; 1 / sum scales the output rows.
            w.push_str("  {\n    let j0 = 0u;\n");
            scores(&mut w, "    ");
            w.push_str("    var mx = ninf;\n");
            biased(&mut w);
            reduce(&mut w, "mx", true);
            w.push_str("    let ms = select(mx, 0.0, is_ninf(mx));\n    var sm = 0.0;\n");
            cols(&mut w, &|w: &mut String| {
                let _ = writeln!(w, "        let p = exp({sc} - ms);");
                let _ =
                    writeln!(w, "        sm = sm + p;\n        Pc[pb + r * {ps}u + jj] = f16(p);");
            });
            reduce(&mut w, "sm", false);
            w.push_str(
                "    if (hl == 0u) { Li[sg * 16u + r] = select(0.0, 1.0 / sm, sm > 0.0); }\n",
            );
            w.push_str("    workgroupBarrier();\n");
            pv(&mut w);
            w.push_str("    workgroupBarrier();\n  }\n");
        } else {
            // Pass 1: each row's max and sum over all chunks.
            let _ = writeln!(w, "  for (var c = 0u; c < nch; c = c + 1u) {{");
            let _ = writeln!(w, "    let j0 = c * {ch}u;");
            scores(&mut w, "    ");
            w.push_str("    var mx = ninf;\n");
            biased(&mut w);
            reduce(&mut w, "mx", true);
            w.push_str("    let mn = max(m, mx); let ms = select(mn, 0.0, is_ninf(mn));\n");
            w.push_str("    var sm = 0.0;\n");
            cols(&mut w, &|w: &mut String| {
                let _ = writeln!(w, "        sm = sm + exp({sc} - ms);");
            });
            reduce(&mut w, "sm", false);
            w.push_str("    l = l * exp(m - ms) + sm; m = mn;\n");
            w.push_str("    workgroupBarrier();\n  }\n");
            // Pass 2: normalized probabilities (f16) and P·V.
            w.push_str(
                "  let ms = select(m, 0.0, is_ninf(m)); let inv = select(0.0, 1.0 / l, l > 0.0);\n",
            );
            let _ = writeln!(w, "  for (var c = 0u; c < nch; c = c + 1u) {{");
            let _ = writeln!(w, "    let j0 = c * {ch}u;");
            scores(&mut w, "    ");
            cols(&mut w, &|w: &mut String| {
                score_fn(w, "        ");
                let _ = writeln!(w, "        Pc[pb + r * {ps}u + jj] = f16(exp(x - ms) * inv);");
            });
            w.push_str("    workgroupBarrier();\n");
            pv(&mut w);
            w.push_str("    workgroupBarrier();\n  }\n");
        }
        // Output through the score scratch, as packed f16 pairs, `ch` columns per round (the
        // scratch is one chunk wide: small chunks keep the workgroup memory small).
        let tpr = ch.min(dv) / 16;
        let mut n0 = 0;
        while n0 < dv / 16 {
            let n1 = (n0 + tpr).min(dv / 16);
            for n in n0..n1 {
                let _ = writeln!(w, "  coopStoreT(o{n}, &Sc[sb + {}u], {ss}u);", 16 * (n - n0));
            }
            w.push_str("  workgroupBarrier();\n  if (live) {\n");
            w.push_str("    let ob = mi(28u) + bi * mi(29u) + hq * mi(30u); let osq = mi(31u);\n");
            let half = 8 * (n1 - n0);
            let _ = writeln!(w, "    for (var e = lane; e < {}u; e = e + {sgsz}u) {{", 16 * half);
            let _ = writeln!(w, "      let rr = e / {half}u; let cc = (e % {half}u) * 2u;");
            let _ = writeln!(
                w,
                "      let x = Sc[sb + rr * {ss}u + cc]; let y = Sc[sb + rr * {ss}u + cc + 1u];"
            );
            let scale = if s.one_chunk { " * Li[sg * 16u + rr]" } else { "" };
            let _ = writeln!(w, "      out[u32(ob + i32(i0 + rr) * osq + i32(cc + {}u)) >> 1u] = pack2x16float(vec2<f32>(x, y){scale});", 16 * n0);
            w.push_str("    }\n  }\n  workgroupBarrier();\n");
            n0 = n1;
        }
        w.push_str("}\n");
        Ok(w)
    }
}
