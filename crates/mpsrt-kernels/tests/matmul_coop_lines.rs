//! Issue 23, 13th session: the knobs and probes of the f16 GEMM's L2 study, all opt-in — A
//! pairs (`ap1`: the `rq1` ring loads A's next two K-32 slabs as whole 128-byte lines), K
//! rotation (`kr1`), the L1 touch-prefetch on the `su` `rp1` loop and its ring (`lp`), and
//! the ring's timing probes `pr6..pr8` (refills from slab 0). Renders, validates with naga,
//! translates to SPIR-V and MSL; the A-pair unit map's coverage and bank pattern; which
//! combinations `CoopTune::check` refuses.

use mpsrt_core::DType;
use mpsrt_kernels::validate::wgsl_to_msl;
use mpsrt_kernels::{plan_coop_matmul, CoopConfig, CoopMatmulSpec, CoopTune, CoopVariant};
use std::collections::HashSet;

const RING: &str = "fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_ad1";

fn render(text: &str) -> (CoopTune, String) {
    let nv = [CoopConfig { m: 16, n: 16, k: 16, ab: DType::F16, cr: DType::F32 }];
    let base = plan_coop_matmul(&nv, (32, 32), [4096; 3], 0).unwrap();
    let t = CoopTune::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    t.check(16).unwrap_or_else(|e| panic!("{text}: {e}"));
    assert_eq!(CoopVariant::parse(&t.name()), Ok(CoopVariant::Family(t)), "{text}");
    let s = CoopMatmulSpec { out_f16: true, ..base }.with_variant(CoopVariant::Family(t), 49152);
    let s = CoopMatmulSpec { aligned: true, vec_a: true, vec_b: true, ..s };
    assert!(s.shared_bytes() <= 23552, "{text}: two workgroups per SM");
    let src = s.render().unwrap_or_else(|e| panic!("{text}: {e}"));
    wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{text}: {e}\n{src}"));
    (t, src)
}

/// The K loop (from its head to the end of the kernel's K loop).
fn k_loop(src: &str) -> &str {
    let body = src.split("for (var k0").nth(1).unwrap();
    body.split_once("\n    }\n  }\n").map_or(body, |(l, _)| l)
}

#[test]
fn a_pairs_load_whole_lines_every_other_step() {
    let (_, src) = render(&format!("{RING}_ap1"));
    let body = k_loop(&src);
    // Sixteen A loads (one pair) in the second half-step only; B's eight per half-step.
    assert_eq!(body.matches("= a[").count(), 16, "A pairs: one load group per two steps");
    assert_eq!(body.matches("= b[").count(), 16);
    let halves: Vec<&str> = body.split("let ab = 0u;").collect();
    assert_eq!(halves[0].matches("= a[").count(), 0, "no A loads in the first half-step");
    // Each half-step stores eight A units (its slab of the pair) and two barriers per step.
    assert_eq!(body.matches("As[ps0 +").count(), 8);
    assert_eq!(body.matches("As[ps1 +").count(), 8);
    assert_eq!(body.matches("workgroupBarrier()").count(), 4);
    // The default ring's text is unchanged by the new knobs' plumbing (no pair registers).
    let (_, plain) = render(RING);
    assert!(!plain.contains("pa0 =") && !plain.contains("let kr") && !plain.contains("lq0"));
}

/// The A-pair map as `rp_ring_apair` renders it: thread `tid`'s unit `j` is on row
/// `(j / 2)·16 + (j % 2)·4 + g % 4 + (g / 4)·8` (`g = tid / 16`) at line unit
/// `(tid % 16 + 8·(j % 2)) % 16`; units 0..8 of a line are the even slab's, 8..16 the odd's.
fn unit(tid: u32, j: u32) -> (u32, u32) {
    let g = tid / 16;
    let row = (j / 2) * 16 + (j % 2) * 4 + g % 4 + (g / 4) * 8;
    (row, (tid % 16 + 8 * (j % 2)) % 16)
}

#[test]
fn a_pair_map_covers_each_line_once_and_stores_without_bank_conflicts() {
    let mut seen = HashSet::new();
    for tid in 0..128 {
        for j in 0..16 {
            assert!(seen.insert(unit(tid, j)), "tid {tid} unit {j} twice");
        }
        // Eight units of each slab per thread: every lane stores every step.
        let even = (0..16).filter(|&j| unit(tid, j).1 < 8).count();
        assert_eq!(even, 8, "tid {tid}");
    }
    assert_eq!(seen.len(), 128 * 16, "every 8-byte unit of the 128×64 pair");
    for warp in 0..4 {
        for j in 0..16 {
            // A load: each half-warp on one row's 16 units (one 128-byte line).
            for half in 0..2 {
                let lanes: Vec<(u32, u32)> =
                    (0..16).map(|l| unit(warp * 32 + half * 16 + l, j)).collect();
                assert!(lanes.iter().all(|u| u.0 == lanes[0].0), "warp {warp} unit {j}");
                let cols: HashSet<u32> = lanes.iter().map(|u| u.1).collect();
                assert_eq!(cols.len(), 16);
            }
        }
        // A store of slab `e`, instruction `i`: lane picks unit 2i or 2i + 1 (whichever is
        // on slab e); a half-warp's 16 × 8 bytes land on 32 distinct banks (rows 80 bytes).
        for e in 0..2 {
            for i in 0..8 {
                for half in 0..2 {
                    let mut banks = HashSet::new();
                    for l in 0..16 {
                        let tid = warp * 32 + half * 16 + l;
                        let (row, c) = [unit(tid, 2 * i), unit(tid, 2 * i + 1)]
                            .into_iter()
                            .find(|u| u.1 / 8 == e)
                            .unwrap();
                        let byte = row * 80 + (c % 8) * 8;
                        assert!(banks.insert((byte / 4) % 32), "bank conflict");
                        assert!(banks.insert((byte / 4 + 1) % 32), "bank conflict");
                    }
                }
            }
        }
    }
}

#[test]
fn k_rotation_wraps_every_slab_start() {
    for text in [format!("{RING}_kr1"), "fi1_cl1_vs4_uc1_ov1_su3_rp1_ad1_kr1".to_string()] {
        let (_, src) = render(&text);
        assert!(src.contains("let kr = ((m0 / 128u + n0 / 128u) % (K / 32u)) * 32u;"), "{text}");
        let starts: Vec<&str> = src.lines().filter(|l| l.contains("let nxt =")).collect();
        assert!(!starts.is_empty());
        assert!(starts.iter().all(|l| l.ends_with("+ kr) % K;")), "{text}: {starts:?}");
    }
}

#[test]
fn l1_touch_prefetch_on_the_register_prefetch_loops() {
    for text in [format!("{RING}_lp3"), "fi1_cl1_vs4_uc1_ov1_su3_rp1_ad1_lp2".to_string()] {
        let (t, src) = render(&text);
        let body = k_loop(&src);
        // Every thread, every step, no branch: four sector touches per step at 128×128 K 32.
        let steps = if t.rq { 2 } else { 1 };
        assert_eq!(body.matches("lsum = lsum + lq0 + lq1 + lq2 + lq3;").count(), steps, "{text}");
        assert!(!body.contains("& 1u) == 0u)"), "{text}: no parity branch");
        // Slab `k + lp` of the step at `k0` (the ring's second half-step at `k0 + 32`).
        let kp = format!("u + {}u, K - 32u);", 32 * u32::from(t.lp));
        let kp1 = format!("let kp = min(k0 + {}u, K - 32u);", 32 * u32::from(t.lp));
        assert!(body.contains(&kp) || body.contains(&kp1), "{text}");
        assert!(src.contains("if (K == 0xffffffffu) { out[0] = vec4<f16>(lsum); }"), "{text}");
    }
}

#[test]
fn ring_probes_refill_from_slab_zero() {
    for (pr, a0, b0) in [(6, true, true), (7, false, true), (8, true, false)] {
        let (_, src) = render(&format!("{RING}_pr{pr}"));
        let body = k_loop(&src);
        let gia = body.lines().find(|l| l.contains("let gia =")).unwrap();
        let gib = body.lines().find(|l| l.contains("let gib =")).unwrap();
        // pr6 sets `nxt` to 0; pr7/pr8 read slab 0 for one operand only.
        let zero = |l: &str, op: &str| {
            pr == 6 || l.contains(&format!("i32(0u + {op}")) || l.contains("(0u + tid")
        };
        assert_eq!(zero(gia, "ca0"), a0, "pr{pr} A: {gia}");
        assert_eq!(zero(gib, "tid"), b0, "pr{pr} B: {gib}");
    }
}

#[test]
fn new_knobs_refuse_other_loops() {
    for bad in [
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_ap1", // ap1 needs the rq1 ring
        "w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1_rp1_rq1_ap1", // and the 4×4 K-32 tune
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_ad1_ap1_kr1",
        "fi1_cl1_vs4_uc1_ov1_su3_kr1",     // kr1 needs rp1
        "fi1_cl1_vs4_uc1_ov1_rp1_kr1",     // and su staging
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_pr6", // pr6..8 need the ring
        "fi1_cl1_vs4_uc1_ov1_su3_pr7",
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_pr3", // pr1..5 stay off rp1
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_pr9",
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_ph1_lp2", // lp on rp1 without ph
    ] {
        let t = CoopTune::parse(bad).unwrap();
        assert!(t.check(16).is_err(), "{bad}");
    }
}

#[test]
fn sixteen_byte_units_halve_the_loads() {
    let (_, plain) = render(RING);
    let count = |src: &str, op: &str| k_loop(src).matches(&format!(" = {op}[")).count();
    for (xw, a16, b16) in [(1, false, true), (2, true, false), (3, true, true)] {
        let text = format!("{RING}_xw{xw}");
        let (_, src) = render(&text);
        // 16-byte elements for the chosen operands, one load per two staging registers.
        let bound = |op: &str| format!("var<storage, read> {op}: array<H8>;");
        assert_eq!(src.contains(&bound("a")), a16, "{text}");
        assert_eq!(src.contains(&bound("b")), b16, "{text}");
        for (op, wide) in [("a", a16), ("b", b16)] {
            let want = if wide { count(&plain, op) / 2 } else { count(&plain, op) };
            assert_eq!(count(&src, op), want, "{text}: {op} loads");
        }
        // The same number of slab stores (two adjacent 8-byte stores per 16-byte unit).
        assert_eq!(k_loop(&src).matches("As[").count(), k_loop(&plain).matches("As[").count());
        assert_eq!(k_loop(&src).matches("Bs[").count(), k_loop(&plain).matches("Bs[").count());
    }
    let bad = CoopTune::parse("fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_xw1").unwrap();
    assert!(bad.check(16).is_err(), "xw needs ad1");
}

/// A's 16-byte unit map as `affine_parts16` renders it at K 32 (four units per row): thread
/// `tid`'s unit `j` is on row `(tid / 32)·8 + q / 2 + (q % 2)·4 + 32 j` (`q = (tid % 32) / 4`)
/// at unit `tid % 4`.
#[test]
fn sixteen_byte_a_units_cover_the_slab_and_quarter_warps_avoid_bank_conflicts() {
    let unit = |tid: u32, j: u32| {
        let q = (tid % 32) / 4;
        ((tid / 32) * 8 + q / 2 + (q % 2) * 4 + 32 * j, tid % 4)
    };
    let mut seen = HashSet::new();
    for tid in 0..128 {
        for j in 0..4 {
            assert!(seen.insert(unit(tid, j)));
        }
    }
    assert_eq!(seen.len(), 128 * 4);
    // A quarter-warp's 8 × 16 bytes (one 128-byte store wavefront) on 32 distinct banks.
    for tid0 in (0..128).step_by(8) {
        let mut banks = HashSet::new();
        for tid in tid0..tid0 + 8 {
            let (row, u) = unit(tid, 0);
            for w in 0..4 {
                assert!(banks.insert((row * 80 / 4 + u * 4 + w) % 32), "quarter-warp {tid0}");
            }
        }
    }
}

#[test]
fn half_steps_store_beside_the_products_with_one_barrier_per_half() {
    let (_, src) = render(&format!("{RING}_hs1"));
    let body = k_loop(&src);
    // Four K-16 sub-steps per two slabs, one barrier each (the ring: two per slab as well).
    assert_eq!(body.matches("workgroupBarrier()").count(), 4);
    let subs: Vec<&str> = body.split("workgroupBarrier();").skip(1).collect();
    for (u, sub) in subs.iter().enumerate() {
        // Each sub-step stores one half (A by the thread's column, B's four rows of it) ...
        let half = (u + 1) % 2;
        assert!(sub.contains(&format!("if (tc0 / 4u == {half}u) {{")), "sub-step {u}");
        assert_eq!(sub.matches("As[spa").count(), 8, "sub-step {u}");
        assert_eq!(sub.matches("Bs[spb").count(), 4, "sub-step {u}");
        let first_b = if half == 0 { "Bs[spb + 0u]" } else { "Bs[spb + 544u]" };
        assert!(sub.contains(first_b), "sub-step {u}: B rows of half {half}");
        // ... then multiplies its own half: eight A fragment loads and sixteen products,
        // never inside a branch; sub-steps 0 and 2 refill a register set.
        assert_eq!(sub.matches("coopMultiplyAdd").count(), 16, "sub-step {u}");
        assert_eq!(sub.matches("= a[").count(), if u % 2 == 0 { 8 } else { 0 }, "sub-step {u}");
        let products = sub.split("let ab = 0u;").nth(1).unwrap();
        assert!(!products.contains("if ("), "sub-step {u}: products outside branches");
    }
    let bad = CoopTune::parse("fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_hs1").unwrap();
    assert!(bad.check(16).is_err(), "hs1 needs ad1");
    let bad = CoopTune::parse("fi1_cl1_vs4_uc1_ov1_su3_rp1_ad1_hs1").unwrap();
    assert!(bad.check(16).is_err(), "hs1 needs the rq1 ring");
}

#[test]
fn refill_position_moves_the_global_loads_among_the_products() {
    for lo in 0..3usize {
        let text = if lo == 0 { RING.to_string() } else { format!("{RING}_lo{lo}") };
        let (_, src) = render(&text);
        let body = k_loop(&src);
        for step in body.split("workgroupBarrier();").skip(1).filter(|s| s.contains("= a[")) {
            // Products before the step's first global load: none, one K-16 half (16), all 32.
            let before = &step[..step.find("= a[").unwrap()];
            assert_eq!(before.matches("coopMultiplyAdd").count(), [0, 16, 32][lo], "{text}");
            assert_eq!(step.matches("coopMultiplyAdd").count(), 32, "{text}");
        }
    }
    for bad in
        [format!("{RING}_lo3"), format!("{RING}_hs1_lo1"), "fi1_cl1_vs4_uc1_ov1_su3_rp1_lo1".into()]
    {
        assert!(CoopTune::parse(&bad).unwrap().check(16).is_err(), "{bad}");
    }
}
