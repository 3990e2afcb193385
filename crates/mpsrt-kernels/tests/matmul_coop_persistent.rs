//! Issue 23, 12th session: persistent pairs (`pp1..pp3`: `2·S` workgroups loop over the output
//! blocks, a pair taking two horizontally adjacent blocks so both read the same A slabs) and
//! the subgroup-synchronized f16 store (`sb1`). Renders, validates with naga, translates to
//! MSL and SPIR-V; the loop and barrier structure; the launcher's grid; and the block walk of
//! every mode covers each block exactly once (the head's arithmetic, mirrored).

use mpsrt_core::DType;
use mpsrt_kernels::validate::wgsl_to_msl;
use mpsrt_kernels::{plan_coop_matmul, CoopConfig, CoopMatmulSpec, CoopTune, CoopVariant};

fn wgsl_to_spv(src: &str) -> Result<(), String> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    let flags = naga::valid::ValidationFlags::all();
    let info = naga::valid::Validator::new(flags, naga::valid::Capabilities::all())
        .validate(&module)
        .map_err(|e| format!("{e:?}"))?;
    naga::back::spv::write_vec(&module, &info, &naga::back::spv::Options::default(), None)
        .map(|_| ())
        .map_err(|e| format!("SPIR-V translation error: {e}"))
}

fn spec(text: &str, aligned: bool) -> CoopMatmulSpec {
    let nv = [CoopConfig { m: 16, n: 16, k: 16, ab: DType::F16, cr: DType::F32 }];
    let base = plan_coop_matmul(&nv, (32, 32), [4096; 3], 0).unwrap();
    let t = CoopTune::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    let s = CoopMatmulSpec { out_f16: true, ..base }.with_variant(CoopVariant::Family(t), 49152);
    assert_eq!((s.variant, s.tune), (3, t), "{text}");
    CoopMatmulSpec { aligned, vec_a: true, vec_b: true, ..s }
}

#[test]
fn persistent_pairs_render_validate_and_translate() {
    for text in [
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_pp1",
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_pp2",
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_pp3",
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_pp1_sb1",
        "fi1_cl1_vs4_uc1_ov1_su3_rp1_sb1",
        "w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1_pp1_sb1",
    ] {
        let t = CoopTune::parse(text).unwrap();
        assert_eq!(CoopVariant::parse(&t.name()), Ok(CoopVariant::Family(t)), "{text}");
        let s = spec(text, true);
        assert!(s.shared_bytes() <= 23552, "{text}: two workgroups per SM");
        let src = s.render().unwrap_or_else(|e| panic!("{text}: {e}"));
        wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{text}: {e}\n{src}"));
        wgsl_to_spv(&src).unwrap_or_else(|e| panic!("{text}: {e}"));
        let looped = src.contains("for (var it = 0u; it < cnt;");
        assert_eq!(looped, t.pp != 0, "{text}: persistent loop");
        // The store's barriers: per subgroup with sb1 (two per tile), none left at workgroup
        // scope after the K loop.
        let store = src.rsplit("for (var k0").next().unwrap();
        let store = store.split_once("coopStoreT").unwrap().1;
        let tiles = u32::from(t.tm) * u32::from(t.tn);
        let sub = store.matches("subgroupBarrier()").count() as u32;
        assert_eq!(sub, if t.sb { 2 * tiles } else { 0 }, "{text}");
        assert_eq!(store.contains("workgroupBarrier()"), !t.sb, "{text}");
        // The grid: 2·S workgroups for pp, one per block otherwise.
        let g = s.grid(4096, 4096, 1, 132);
        assert_eq!(g, if t.pp != 0 { [264, 1, 1] } else { [32, 32, 1] }, "{text}");
    }
}

#[test]
fn persistent_pairs_need_whole_blocks() {
    // Edge blocks: the checked loop renders (no fi), so no persistent loop and a plain grid.
    let s = spec("fi1_cl1_vs4_uc1_ov1_su3_rp1_pp1", false);
    let src = s.render().unwrap();
    assert!(!src.contains("Wcnt"));
    assert_eq!(s.grid(4000, 4000, 2, 132), [32, 32, 2]);
    // pp without fi, with sw or lp is refused.
    for bad in ["cl1_vs4_uc1_pp1", "fi1_cl1_vs4_uc1_pp1_sw8", "fi1_cl1_vs4_uc1_pp4"] {
        let t = CoopTune::parse(bad).unwrap();
        assert!(t.check(16).is_err(), "{bad}");
    }
}

/// The head's block walk (`persistent_head`), mirrored: workgroup `w` of `2·S` takes the blocks
/// of iterations `it < cnt`.
fn walk(pp: u8, w: u32, s2: u32, gx: u32, gy: u32) -> Vec<(u32, u32)> {
    let (s, np, h, p) = match pp {
        1 => (s2 / 2, gy * gx / 2, w / (s2 / 2), w % (s2 / 2)),
        2 => (s2 / 2, gy * gx / 2, w % 2, w / 2),
        _ => (s2, gx * gy, 0, w),
    };
    let cnt = if p < np { (np - p).div_ceil(s) } else { 0 };
    (0..cnt)
        .map(|it| {
            let q = p + it * s;
            if pp == 3 {
                (q / gx, q % gx)
            } else {
                let hx = gx / 2;
                (q / hx, (q % hx) * 2 + h)
            }
        })
        .collect()
}

#[test]
fn every_block_once_in_every_mode() {
    for pp in 1..=3u8 {
        for (gx, gy, sms) in [(32, 32, 132), (6, 8, 132), (24, 8, 7), (2, 1, 1), (18, 3, 5)] {
            let mut seen = vec![0u32; (gx * gy) as usize];
            for w in 0..2 * sms {
                let blocks = walk(pp, w, 2 * sms, gx, gy);
                for (r, c) in &blocks {
                    assert!(*r < gy && *c < gx, "pp{pp} {gx}x{gy}: block ({r}, {c}) outside");
                    seen[(r * gx + c) as usize] += 1;
                }
                if pp != 3 {
                    // The pair partner walks the same rows at the same iterations.
                    let partner = if pp == 1 { (w + sms) % (2 * sms) } else { w ^ 1 };
                    let other = walk(pp, partner, 2 * sms, gx, gy);
                    let rows = |v: &[(u32, u32)]| v.iter().map(|b| b.0).collect::<Vec<_>>();
                    assert_eq!(rows(&blocks), rows(&other), "pp{pp}: pair {w}/{partner}");
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "pp{pp} {gx}x{gy} S={sms}: {seen:?}");
        }
    }
}
