//! Issue 23, 9th session: the in-process A/B candidates (`CoopTune::prefetch`) — the
//! workgroup-memory occupancy probe (`xs`) and the register-prefetch structures — render,
//! validate with naga, translate to MSL and SPIR-V on every operand path and both aligned
//! forms, with the f16 store and the f32 store, and fit NVIDIA's 48 KiB.

use mpsrt_core::DType;
use mpsrt_kernels::validate::{wgsl_to_msl, wgsl_to_spv};
use mpsrt_kernels::{plan_coop_matmul, CoopConfig, CoopMatmulSpec, CoopTune, CoopVariant};

/// The first `if` whose block (or `else` block) contains a matrix product, if any: a
/// cooperative-matrix value updated in a branch and merged after it.
pub fn product_in_branch(src: &str) -> Option<String> {
    let mut from = 0;
    while let Some(at) = src[from..].find("if (") {
        let start = from + at;
        from = start + 4;
        // The block after the condition, braces matched; then an `else` block, if any.
        let mut end = start;
        loop {
            let open = end + src[end..].find('{')?;
            let mut depth = 0;
            let mut close = open;
            for (i, ch) in src[open..].char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            close = open + i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            end = close + 1;
            if !src[end..].trim_start().starts_with("else") {
                break;
            }
        }
        if src[start..end].contains("coopMultiplyAdd") {
            return Some(src[start..end.min(start + 200)].to_string());
        }
    }
    None
}

fn base() -> CoopMatmulSpec {
    let nv = [CoopConfig { m: 16, n: 16, k: 16, ab: DType::F16, cr: DType::F32 }];
    plan_coop_matmul(&nv, (32, 32), [4096; 3], 0).unwrap()
}

#[test]
fn prefetch_candidates_validate_translate_and_fit() {
    let tunes = CoopTune::prefetch();
    assert!(tunes.len() >= 10, "{}", tunes.len());
    let paths = [(true, true), (false, false), (true, false), (false, true)];
    for (i, tune) in tunes.into_iter().enumerate() {
        // Every candidate is trusted (the unrolled slabs since their branch-free form checked
        // correct on the H100) and none falls back to generation 1.
        assert!(tune.unverified().is_none(), "{}", tune.name());
        assert_eq!(CoopVariant::parse(&tune.name()), Ok(CoopVariant::Family(tune)));
        for out_f16 in [true, false] {
            let plain = CoopMatmulSpec { out_f16, ..base() };
            let fallback = plain.with_variant(CoopVariant::Family(tune), 49152);
            assert_eq!(fallback.variant, 3, "{}", tune.name());
            let spec = plain.with_variant_opts(CoopVariant::Family(tune), 49152, true);
            assert_eq!((spec.variant, spec.out_f16), (3, out_f16), "{}", tune.name());
            for (p, (vec_a, vec_b)) in paths.into_iter().enumerate() {
                let aligned = p == 0 || (i + p) % 2 == 0;
                let spec =
                    CoopMatmulSpec { vec_a, vec_b, batch_dims: (i + p) % 3, aligned, ..spec };
                let src = spec.render().unwrap_or_else(|e| panic!("{}: {e}", tune.name()));
                wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}\n{src}"));
                wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{spec:?}: {e}"));
                // The probe's memory is declared and used (so the driver keeps it).
                let xs = 256 * u32::from(tune.xs);
                let decl = format!("var<workgroup> Xs: array<u32, {xs}>;");
                assert_eq!(src.contains(&decl), xs > 0, "{}", tune.name());
                assert_eq!(src.contains("K == 0xffffffffu"), xs > 0, "{}", tune.name());
                // (The register prefetch needs an operand staged 8 wide.)
                let prefetch = tune.db || (tune.rp && (vec_a || vec_b));
                if tune.nb && prefetch {
                    // No branch before the next slab's loads; whole-block loops clamp it.
                    assert!(!src.contains("if (nxt < K)"), "{}", tune.name());
                    assert!(src.contains("let nxt = min(k0 + "), "{}", tune.name());
                } else if prefetch && !(tune.un && aligned && vec_a && vec_b) {
                    assert!(src.contains("if (nxt < K)"), "{}", tune.name());
                }
                if tune.un && aligned && vec_a && vec_b {
                    // Two constant stages per iteration, one barrier each, and no odd tail
                    // (aligned kernels of `un1` have an even number of steps).
                    let head = format!("k0 = k0 + {}u) {{", 2 * tune.bk);
                    let body = src.split(&head).nth(1).unwrap();
                    let lp = body.split("\n  }\n").next().unwrap();
                    let mmas =
                        2 * u32::from(tune.bk / 16) * u32::from(tune.tm) * u32::from(tune.tn);
                    assert_eq!(lp.matches("workgroupBarrier()").count(), 2, "{}", tune.name());
                    assert_eq!(lp.matches("coopMultiplyAdd").count() as u32, mmas);
                    assert!(lp.contains("let nx = min(k0 + ") && !lp.contains("st * "));
                    assert!(!src.contains("workgroupUniformLoad"), "{}", tune.name());
                }
                if aligned {
                    // Every kernel that measured wrong on the H100 updated accumulators
                    // inside an `if`; aligned kernels never do.
                    assert_eq!(product_in_branch(&src), None, "{}", tune.name());
                }
                if tune.rp && vec_a && vec_b {
                    // Register prefetch: the operands `ph` keeps in registers are declared
                    // before the loop (A's as `ra*`, B's as `rb*`), the others are not.
                    let (ra, rb) = (src.contains("var ra0l"), src.contains("var rb0l"));
                    let pre = src.split("for (var k0").next().unwrap();
                    let (pa, pb) = (pre.contains("var ra0l"), pre.contains("var rb0l"));
                    assert_eq!((pa, pb), (tune.ph != 1, tune.ph != 2), "{}", tune.name());
                    assert!(ra && rb, "{}: both operands staged", tune.name());
                }
            }
        }
    }
}

#[test]
fn the_probe_adds_exactly_its_kibibytes() {
    let d = CoopTune::parse("fi1_cl1_vs4_uc1").unwrap();
    let f16 = CoopMatmulSpec { out_f16: true, ..base() };
    let plain = f16.with_variant(CoopVariant::Family(d), 49152);
    assert_eq!(plain.shared_bytes(), 23040);
    for kib in [2u8, 10, 24] {
        let t = CoopTune { xs: kib, ..d };
        assert!(t.name().contains(&format!("_xs{kib}_")), "{}", t.name());
        let s = f16.with_variant(CoopVariant::Family(t), 49152);
        assert_eq!(s.shared_bytes(), 23040 + 1024 * u32::from(kib));
        // A probe past the device's limit falls back like any tune.
        assert_eq!(f16.with_variant(CoopVariant::Family(t), 23040).variant, 1);
    }
    assert!(CoopTune::parse("xs41").unwrap().check(16).is_err());
    assert!(CoopTune::parse("xsq").is_err());
    // Half prefetch needs the register prefetch, and names one operand.
    assert!(CoopTune::parse("rp1_ph1").unwrap().check(16).is_ok());
    for bad in ["ph1", "rp1_ph3", "nb1", "un1", "db1_sp1_un1"] {
        assert!(CoopTune::parse(bad).unwrap().check(16).is_err(), "{bad}");
    }
}

/// `ov1`: an f16 output of whole blocks goes out four halves per store (`array<vec4<f16>>`),
/// with every epilogue; edge-block kernels and f32 outputs keep scalar stores.
#[test]
fn vector_f16_output_validates_with_every_epilogue() {
    use mpsrt_kernels::matmul::MatmulAct;
    use mpsrt_kernels::matmul_coop::CoopEpilogue;
    for text in ["fi1_cl1_vs4_uc1_ov1", "w2x2_t2x2_k32_fi1_cl1_vs4_uc1_ov1_rp1_nb1"] {
        let t = CoopTune::parse(text).unwrap();
        assert!(t.ov && t.name().contains("_ov1"), "{}", t.name());
        for (c, res, act) in [
            (false, false, MatmulAct::None),
            (true, false, MatmulAct::Gelu),
            (true, true, MatmulAct::None),
            (false, true, MatmulAct::Relu),
        ] {
            let epi = CoopEpilogue { c, res, act };
            for (out_f16, aligned) in [(true, true), (true, false), (false, true)] {
                let s = CoopMatmulSpec { out_f16, epi, ..base() }
                    .with_variant(CoopVariant::Family(t), 49152);
                let s = CoopMatmulSpec { aligned, vec_a: true, vec_b: true, ..s };
                let src = s.render().unwrap();
                let vector = src.contains("out: array<vec4<f16>>");
                assert_eq!(vector, out_f16 && aligned, "{text} {epi:?} {out_f16} {aligned}");
                assert_eq!(src.contains("v.w = "), vector);
                wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{text} {epi:?}: {e}\n{src}"));
                wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{text} {epi:?}: {e}"));
            }
        }
    }
}

/// `da1`: whole blocks read A's fragments from the storage buffer (no A slab, A bound as
/// f16 elements); other kernels of the tune keep the staged A.
#[test]
fn direct_a_reads_the_buffer_on_whole_blocks_only() {
    for text in ["fi1_cl1_vs4_uc1_da1", "w2x2_t2x2_k64_fi1_cl1_vs4_uc1_da1"] {
        let t = CoopTune::parse(text).unwrap();
        assert!(t.da && t.name().contains("_da1"), "{}", t.name());
        for out_f16 in [true, false] {
            let s =
                CoopMatmulSpec { out_f16, ..base() }.with_variant(CoopVariant::Family(t), 49152);
            for (aligned, vec_a, vec_b) in
                [(true, true, true), (false, true, true), (true, false, true)]
            {
                let spec = CoopMatmulSpec { aligned, vec_a, vec_b, ..s };
                let src = spec.render().unwrap();
                let direct = aligned && vec_a && vec_b;
                assert_eq!(src.contains("(&a[ia0_0], lda)"), direct, "{text} {spec:?}");
                assert_eq!(src.contains("(&As[(ab"), !direct, "{text} {spec:?}");
                let staged = CoopMatmulSpec { tune: CoopTune { da: false, ..t }, ..spec };
                assert_eq!(spec.shared_bytes() < staged.shared_bytes(), direct);
                wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{text}: {e}\n{src}"));
                wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{text}: {e}"));
            }
        }
    }
}

/// `lpN`: the one-slab whole-block loop touches slab `k + N` (one half per 32-byte sector of
/// A's and B's slab, spread over half the subgroups, alternating by step) and sums what it
/// loaded two steps before into a sink stored on a path that never runs; kernels of edge
/// blocks, other loops and tunes it does not apply to are unchanged, and so is the
/// workgroup memory.
#[test]
fn l1_prefetch_touches_each_sector_on_whole_blocks_only() {
    for (text, sectors) in [
        ("fi1_cl1_vs4_uc1_ov1_lp2", 128 * 2 + 32 * 8),
        ("fi1_cl1_vs4_uc1_ov1_lp1", 128 * 2 + 32 * 8),
        ("w4x2_t4x4_k32_fi1_cl1_vs4_uc1_ov1_lp3", 256 * 2 + 32 * 8),
        ("w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_lp2", 64 * 4 + 64 * 4),
        // The unrolled two-slab loop: one prefetch per half-step.
        ("w4x2_t4x4_k16_db1_fi1_cl1_vs4_uc1_un1_ov1_lp2", 256 + 16 * 8),
    ] {
        let t = CoopTune::parse(text).unwrap();
        assert!(t.lp > 0 && t.name().contains(&format!("_lp{}", t.lp)), "{}", t.name());
        let off = CoopTune { lp: 0, ..t };
        for out_f16 in [true, false] {
            let s = CoopMatmulSpec { out_f16, ..base() }.with_variant_opts(
                CoopVariant::Family(t),
                49152,
                t.un,
            );
            assert_eq!(s.variant, 3, "{text}");
            for (aligned, vec_a, vec_b) in
                [(true, true, true), (false, true, true), (true, true, false)]
            {
                let spec = CoopMatmulSpec { aligned, vec_a, vec_b, ..s };
                let src = spec.render().unwrap();
                let on = aligned && vec_a && vec_b;
                let half = spec.threads() / 2;
                let loads = src.matches("].x; }").count() + src.matches("].x; } else if").count();
                let copies = if t.un { 2 } else { 1 };
                assert_eq!(
                    loads as u32,
                    if on { copies * sectors / half } else { 0 },
                    "{text} {spec:?}"
                );
                assert_eq!(src.contains("lsum = lsum + lq0"), on, "{text}");
                // Slab `k + lp` (the unrolled loop's first half-step starts at `k0 + 0`).
                let at = if t.un { "k0 + 0u" } else { "k0" };
                let (ahead, bk) = (u32::from(t.lp) * u32::from(t.bk), t.bk);
                let kp = format!("let kp = min({at} + {ahead}u, K - {bk}u);");
                assert_eq!(src.contains(&kp), on, "{text}: {kp}");
                assert!(src.contains("if (K == 0xffffffffu) { out[0] = "), "{text}");
                let plain = CoopMatmulSpec { tune: off, ..spec };
                assert_eq!(spec.shared_bytes(), plain.shared_bytes());
                if aligned {
                    assert_eq!(product_in_branch(&src), None, "{text}");
                }
                wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{text}: {e}\n{src}"));
                wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{text}: {e}"));
            }
        }
    }
    for bad in ["lp1_db1", "lp2_rp1", "lp5", "w1x1_lp1", "fi1_da1_lp1"] {
        assert!(CoopTune::parse(bad).unwrap().check(16).is_err(), "{bad}");
    }
}

/// Evaluate a WGSL `u32` expression of `tid` at `tid = t` with naga's constant evaluator.
fn eval_u32(expr: &str, t: u32) -> u32 {
    let src = format!("const tid = {t}u;\nconst X: u32 = {expr};\n");
    let module = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{expr}: {e}"));
    let (_, c) = module.constants.iter().find(|(_, c)| c.name.as_deref() == Some("X")).unwrap();
    match module.global_expressions[c.init] {
        naga::Expression::Literal(naga::Literal::U32(v)) => v,
        ref e => panic!("{expr}: not a u32 constant: {e:?}"),
    }
}

/// `su1`/`su2`: whole blocks stage both slabs in 8-byte units, all loads before the first
/// store, every unit of both slabs exactly once (the rendered index expressions evaluated for
/// every lane), each half-warp's B units in one row and, with `su2` at K 32, A's on 8 rows;
/// other kernels stage as before.
#[test]
fn unit_staging_covers_each_slab_once() {
    for text in [
        "fi1_cl1_vs4_uc1_ov1_su1",
        "fi1_cl1_vs4_uc1_ov1_su2",
        "fi1_cl1_vs4_uc1_ov1_su3",
        "w4x2_t4x4_k32_fi1_cl1_vs4_uc1_su2",
        "w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1",
        "w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su2",
    ] {
        let t = CoopTune::parse(text).unwrap();
        assert!(t.su > 0 && t.name().contains(&format!("_su{}", t.su)), "{}", t.name());
        let s =
            CoopMatmulSpec { out_f16: true, ..base() }.with_variant(CoopVariant::Family(t), 49152);
        let (bm, bn, bk, nt) = (s.block_m(), s.block_n(), u32::from(t.bk), s.threads());
        for (aligned, vec_a, vec_b) in
            [(true, true, true), (false, true, true), (true, false, true)]
        {
            let spec = CoopMatmulSpec { aligned, vec_a, vec_b, ..s };
            let src = spec.render().unwrap();
            let on = aligned && vec_a && vec_b;
            let na = src.matches("let ua").count() as u32;
            let nb = src.matches("let ub").count() as u32;
            assert_eq!((na, nb), if on { (bm * bk / 4 / nt, bk * bn / 4 / nt) } else { (0, 0) });
            if !on {
                continue;
            }
            let body = src.split("for (var k0").nth(1).unwrap();
            assert!(body.find("As[(ra0").unwrap() > body.rfind("let ub").unwrap(), "{text}");
            // A: row and unit of every lane's units, from the rendered expressions.
            let mut seen = std::collections::BTreeSet::new();
            for j in 0..na {
                let line = body.lines().find(|l| l.contains(&format!("let ra{j} = "))).unwrap();
                let r = line.split(&format!("let ra{j} = ")).nth(1).unwrap();
                let (r, rest) = r.split_once(';').unwrap();
                let c = rest.split(&format!("let ca{j} = ")).nth(1).unwrap();
                let c = c.split_once(';').unwrap().0;
                for tid in 0..nt {
                    let (rr, cc) = (eval_u32(r, tid), eval_u32(c, tid));
                    assert!(rr < bm && cc < bk / 4, "{text}: lane {tid} unit {j}: ({rr}, {cc})");
                    assert!(seen.insert((rr, cc)), "{text}: A unit ({rr}, {cc}) twice");
                    if bk == 32 && tid % 16 == 0 && t.su > 1 {
                        // A half-warp: 8 rows of two units (su2), or rows r and r + 4 (su3).
                        let rows: Vec<u32> = (tid..tid + 16).map(|l| eval_u32(r, l)).collect();
                        let set: std::collections::BTreeSet<u32> = rows.iter().copied().collect();
                        let want: Vec<u32> = if t.su == 2 {
                            assert_eq!(set.len(), 8, "{text}");
                            continue;
                        } else {
                            vec![rows[0], rows[0] + 4]
                        };
                        assert_eq!(set.into_iter().collect::<Vec<_>>(), want, "{text}");
                    }
                }
            }
            assert_eq!(seen.len() as u32, bm * bk / 4, "{text}");
            // B: lane `u % nt` on unit `u`, row-major.
            let qb = bn / 4;
            let mut seen = std::collections::BTreeSet::new();
            for j in 0..nb {
                for tid in 0..nt {
                    let u = tid + j * nt;
                    let row = format!("Bs[(((tid + {}u) / {qb}u) * ", j * nt);
                    assert!(body.contains(&row), "{text}: {row}");
                    assert!(seen.insert((u / qb, u % qb)));
                }
            }
            assert_eq!(seen.len() as u32, bk * bn / 4);
            assert_eq!(product_in_branch(&src), None, "{text}");
            wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{text}: {e}\n{src}"));
            wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{text}: {e}"));
        }
    }
    for bad in ["su1_db1", "su1_rp1", "su1_vs2", "su1", "su4_vs4"] {
        assert!(CoopTune::parse(bad).unwrap().check(16).is_err(), "{bad}");
    }
}

/// `oc3`: the f16 store's scratch sized for three workgroups per SM (15360 bytes): a K-16
/// 128×128 tune keeps one tile per group and needs 14592 bytes of slabs and scratch; `oc` is 2 or 3.
#[test]
fn three_workgroup_budget_shrinks_the_scratch() {
    let t = CoopTune::parse("k16_fi1_cl1_vs4_uc1_ov1_su1_oc3").unwrap();
    assert_eq!((t.oc, t.name().contains("_oc3")), (3, true));
    let f16 = CoopMatmulSpec { out_f16: true, ..base() };
    let s = f16.with_variant(CoopVariant::Family(t), 49152);
    assert_eq!(s.shared_bytes(), 14592);
    let two = f16.with_variant(CoopVariant::Family(CoopTune { oc: 0, ..t }), 49152);
    assert_eq!(two.shared_bytes(), 18688);
    assert!(CoopTune::parse("oc4").unwrap().check(16).is_err());
    let src = CoopMatmulSpec { aligned: true, vec_a: true, vec_b: true, ..s }.render().unwrap();
    wgsl_to_msl(&src).unwrap();
    wgsl_to_spv(&src).unwrap();
}
