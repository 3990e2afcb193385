//! Issue 23, 11th session, call C candidate: `rp1` with `rq1` on the one-slab `su` loop — two
//! register sets take turns, so a slab's global loads are issued two K steps before its
//! products (call A's probes put 4096³'s time in the staging; `rp1`'s one step ahead gained
//! 5%). Whole blocks: the loop runs two steps per iteration, each publishing its own set
//! between two barriers and refilling it two slabs ahead, products in straight code (no
//! matrix operation in an `if`); the renamed set touches only the staging registers; other
//! paths (edge blocks, scalar operands) keep the `rp1` loop. Renders, validates with naga,
//! translates to MSL and SPIR-V.

use mpsrt_core::DType;
use mpsrt_kernels::validate::{wgsl_to_msl, wgsl_to_spv};
use mpsrt_kernels::{plan_coop_matmul, CoopConfig, CoopMatmulSpec, CoopTune, CoopVariant};

fn spec(text: &str, aligned: bool, vec_a: bool, vec_b: bool) -> (CoopMatmulSpec, String) {
    let nv = [CoopConfig { m: 16, n: 16, k: 16, ab: DType::F16, cr: DType::F32 }];
    let base = plan_coop_matmul(&nv, (32, 32), [4096; 3], 0).unwrap();
    let t = CoopTune::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    let s = CoopMatmulSpec { out_f16: true, ..base }.with_variant(CoopVariant::Family(t), 49152);
    assert_eq!((s.variant, s.tune), (3, t), "{text}");
    let s = CoopMatmulSpec { aligned, vec_a, vec_b, ..s };
    let src = s.render().unwrap_or_else(|e| panic!("{text}: {e}"));
    (s, src)
}

/// The K loop's body (from its head to the end of the loop at the kernel's top level).
fn k_loop(src: &str) -> &str {
    let body = src.split("for (var k0").nth(1).unwrap();
    body.split("\n    }\n  }\n").next().unwrap()
}

#[test]
fn register_ring_on_the_one_slab_loop_stages_two_slabs_ahead() {
    for (text, units) in [
        ("fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1", 8),
        ("fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_fo1", 8),
        ("w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1_rp1_rq1", 8),
    ] {
        let t = CoopTune::parse(text).unwrap();
        assert_eq!(CoopVariant::parse(&t.name()), Ok(CoopVariant::Family(t)), "{text}");
        assert_eq!(t.aligned_k(), 2 * u32::from(t.bk), "{text}");
        let (s, src) = spec(text, true, true, true);
        assert!(s.shared_bytes() <= 23552, "{text}: two workgroups per SM");
        wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{text}: {e}\n{src}"));
        wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{text}: {e}"));
        // Two sets of staging registers, each declared once.
        for set in ["ua", "ub", "xa", "xb"] {
            assert_eq!(src.matches(&format!("var {set}")).count(), units, "{text}: {set}");
        }
        // Set x is set u renamed: the same loads and stores, the same number of each.
        let lp = k_loop(&src);
        for (u, x) in [("ua0 = a[", "xa0 = a["), ("= ua0;", "= xa0;"), ("= ub0;", "= xb0;")] {
            assert_eq!(lp.matches(u).count(), 1, "{text}: {u}");
            assert_eq!(lp.matches(x).count(), 1, "{text}: {x}");
        }
        let (_, one) = spec(&text.replace("_rq1", ""), true, true, true);
        assert!(!one.contains("xa0") && !one.contains("xb0"), "{text}");
        let bk = u32::from(t.bk);
        assert!(src.contains(&format!("k0 < K; k0 = k0 + {}u)", 2 * bk)), "{text}");
        assert!(!lp.contains("if ("), "{text}: a branch in the loop\n{lp}");
        let per_step = (t.tm * t.tn) as usize * (bk / 16) as usize;
        assert_eq!(lp.matches("coopMultiplyAdd").count(), 2 * per_step, "{text}");
        assert_eq!(lp.matches("workgroupBarrier()").count(), 4, "{text}");
        // Each step: barrier, its set's stores, barrier, its set's loads two slabs ahead,
        // then the products.
        for (h, set) in [(0u32, "u"), (1, "x")] {
            let ld = format!("let nxt = min(k0 + {}u, K - {bk}u);", (h + 2) * bk);
            let at = lp.find(&ld).unwrap_or_else(|| panic!("{text}: {ld}\n{lp}"));
            let before = &lp[..at];
            let b2 = before.rfind("workgroupBarrier()").unwrap();
            let st = before.rfind(&format!("= {set}a0;")).unwrap();
            let b1 = before[..st].rfind("workgroupBarrier()").unwrap();
            assert!(b1 < st && st < b2, "{text}: step {h}");
            let after = &lp[at..];
            let l = after.find(&format!("{set}b0 = b[")).unwrap();
            let mma = after.find("coopMultiplyAdd").unwrap();
            assert!(l < mma, "{text}: step {h}");
        }
        // Prologue: set u holds slab 0, set x slab 1.
        let pre = src.split("for (var k0").next().unwrap();
        assert!(pre.contains(&format!("let nxt = min({bk}u, K - {bk}u);")), "{text}");
        // Edge blocks and scalar operands keep the one-step rp1 loop.
        for (aligned, va, vb) in [(false, true, true), (true, false, true), (false, false, false)] {
            let (_, src) = spec(text, aligned, va, vb);
            assert!(!src.contains("xa0") && !src.contains("xb0"), "{text}");
            wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{text} {aligned} {va} {vb}: {e}"));
        }
    }
}

#[test]
fn register_ring_needs_one_slab_su_prefetch_of_both_operands() {
    for text in ["fi1_vs4_su3_rp1_rq1_ph1", "fi1_vs4_rp1_rq1", "rq1", "db1_sp1_k32_rq1"] {
        let t = CoopTune::parse(text).unwrap();
        assert!(t.check(16).is_err(), "{text}");
    }
    let t = CoopTune::parse("db1_k16_rq1").unwrap();
    assert!(t.check(16).is_ok());
    assert_eq!(t.aligned_k(), 32);
}
