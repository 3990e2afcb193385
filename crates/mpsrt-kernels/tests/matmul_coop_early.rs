//! Issue 23, 12th session: the subgroup-synchronized f16 store (`sb1`: each subgroup reads
//! back only its own scratch rows, so `subgroupBarrier` replaces the store's 32 workgroup
//! barriers) and early loads (`el1`: on the `su` `rp1` loop the next slab's global loads are
//! issued right behind this slab's stores, before the barrier that publishes it). Renders,
//! validates with naga, translates to SPIR-V and MSL (`wgsl_to_msl` does both); barrier and load
//! placement.

use mpsrt_core::DType;
use mpsrt_kernels::validate::wgsl_to_msl;
use mpsrt_kernels::{plan_coop_matmul, CoopConfig, CoopMatmulSpec, CoopTune, CoopVariant};

fn render(text: &str, aligned: bool) -> (CoopTune, String) {
    let nv = [CoopConfig { m: 16, n: 16, k: 16, ab: DType::F16, cr: DType::F32 }];
    let base = plan_coop_matmul(&nv, (32, 32), [4096; 3], 0).unwrap();
    let t = CoopTune::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    assert_eq!(CoopVariant::parse(&t.name()), Ok(CoopVariant::Family(t)), "{text}");
    let s = CoopMatmulSpec { out_f16: true, ..base }.with_variant(CoopVariant::Family(t), 49152);
    assert_eq!((s.variant, s.tune), (3, t), "{text}");
    let s = CoopMatmulSpec { aligned, vec_a: true, vec_b: true, ..s };
    assert!(s.shared_bytes() <= 23552, "{text}: two workgroups per SM");
    let src = s.render().unwrap_or_else(|e| panic!("{text}: {e}"));
    wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{text}: {e}\n{src}"));
    (t, src)
}

/// The K loop's body (from its head to the end of the loop at the kernel's top level) and
/// what follows it (the store).
fn split(src: &str) -> (&str, &str) {
    let body = src.split("for (var k0").nth(1).unwrap();
    body.split_once("\n    }\n  }\n").unwrap()
}

#[test]
fn subgroup_barrier_store_and_early_loads_render() {
    for text in [
        "fi1_cl1_vs4_uc1_ov1_su3_rp1",
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_sb1",
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_el1",
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_el1_sb1",
        "w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1_sb1",
    ] {
        let (t, src) = render(text, true);
        let (k_loop, store) = split(&src);
        // The store: two barriers per group of tiles, per subgroup with sb1.
        let tiles = u32::from(t.tm) * u32::from(t.tn);
        let (sub, wg) = (
            store.matches("subgroupBarrier()").count(),
            store.matches("workgroupBarrier()").count(),
        );
        assert_eq!(
            (sub as u32, wg as u32),
            if t.sb { (2 * tiles, 0) } else { (0, 2 * tiles) },
            "{text}"
        );
        assert!(!k_loop.contains("subgroupBarrier"), "{text}: the K loop keeps workgroup barriers");
        if t.rp {
            // Two barriers per step; the next slab's first global load comes before the
            // second (el1) or after it.
            assert_eq!(k_loop.matches("workgroupBarrier()").count(), 2, "{text}");
            let second = k_loop.match_indices("workgroupBarrier()").nth(1).unwrap().0;
            let load = k_loop.find("ua0 = a[").unwrap();
            let store0 = k_loop.find("As[(ta0").unwrap();
            assert!(store0 < load, "{text}: this slab's stores come first");
            assert_eq!(load < second, t.el, "{text}: early loads");
        }
    }
}

#[test]
fn early_loads_need_the_su_register_prefetch_loop() {
    for bad in [
        "fi1_cl1_vs4_uc1_ov1_su3_el1",
        "fi1_cl1_vs4_uc1_ov1_rp1_el1",
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_ph1_el1",
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_el1",
    ] {
        let t = CoopTune::parse(bad).unwrap();
        assert!(t.check(16).is_err(), "{bad}");
    }
    // Edge blocks (checked loops): el1 renders what rp1 alone does (past the header line,
    // which names the tune).
    let (_, src) = render("cl1_vs4_uc1_ov1_su3_rp1_el1", false);
    let (_, plain) = render("cl1_vs4_uc1_ov1_su3_rp1", false);
    assert_eq!(src.split_once('\n').unwrap().1, plain.split_once('\n').unwrap().1);
}

#[test]
fn product_rate_probes_render() {
    // `pr4`: fragment loads and products every step; `pr5`: products only (fragments once).
    for (text, loads_in_loop) in
        [("fi1_cl1_vs4_uc1_ov1_su3_pr4", true), ("fi1_cl1_vs4_uc1_ov1_su3_pr5", false)]
    {
        let (_, src) = render(text, true);
        let body = src.split("for (var k1").nth(1).unwrap().split("\n    }\n").next().unwrap();
        assert_eq!(body.matches("coopMultiplyAdd").count(), 32, "{text}");
        assert_eq!(body.contains("coopLoadT"), loads_in_loop, "{text}");
        assert!(!body.contains("Barrier"), "{text}");
    }
}

/// `su3`'s row of unit `v` (`Loop::unit_parts_at`'s `pairs` form), mirrored.
fn su3_row(v: u32) -> u32 {
    (v / 64) * 8 + ((v / 32) % 2) * 2 + ((v % 32) / 16) + ((v % 16) / 8) * 4
}

#[test]
fn affine_unit_addresses_render_and_step_whole_rows() {
    // The identity `ad1` rests on: a thread's unit j is its unit 0 moved down j·nt/8 rows
    // (`su3`), j·nt/q rows with q units a row (`su1`, A and B), the unit in the row unchanged.
    for nt in [128u32, 256] {
        for tid in 0..nt {
            for j in 0..8 {
                assert_eq!(su3_row(tid + j * nt), su3_row(tid) + j * nt / 8, "su3 nt {nt}");
                assert_eq!((tid + j * nt) % 8, tid % 8);
                for q in [8u32, 16, 32] {
                    assert_eq!((tid + j * nt) / q, tid / q + j * nt / q, "q {q}");
                    assert_eq!((tid + j * nt) % q, tid % q);
                }
            }
        }
    }
    for text in [
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_ad1",
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_ad1",
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_el1_ad1",
        "w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1_ad1",
    ] {
        let (t, src) = render(text, true);
        let k_loop = src.split("for (var k0").nth(1).unwrap();
        // One per-thread offset per operand and set, uniform steps, constant slab offsets.
        assert!(k_loop.contains("ua1 = a[gia + 1u * gsa]"), "{text}");
        assert!(k_loop.contains("ub1 = b[gib + 1u * gsb]"), "{text}");
        let rows = if t.su == 3 { 16 } else { 128 / (u32::from(t.bk) / 4) };
        let a_step = rows * (u32::from(t.bk) + 8) / 4;
        assert!(k_loop.contains(&format!("As[spa + {a_step}u] = ua1;")), "{text}: {a_step}");
        assert!(!k_loop.contains("let ra1"), "{text}: no per-unit index");
        if t.rq {
            assert!(k_loop.contains("xa1 = a[gia + 1u * gsa]"), "{text}: second set");
        }
    }
    assert!(CoopTune::parse("fi1_cl1_vs4_uc1_ov1_ad1").unwrap().check(16).is_err());
}
