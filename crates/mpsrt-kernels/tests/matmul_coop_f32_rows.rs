//! Issue 23, 14th session: `rs1`, the f32 output of generation 3 through the per-subgroup row
//! scratch (as the f16 output goes) instead of `coopStoreT` from the accumulators straight to
//! the output. Renders, validates with naga and translates to MSL for the tunes the planner
//! uses with f32 outputs (split-K partials among them); whole blocks store `vec4<f32>`, edge
//! blocks scalar f32 with bounds checks; the f16 output's kernel is unchanged by the knob.

use mpsrt_core::DType;
use mpsrt_kernels::matmul::MatmulAct;
use mpsrt_kernels::matmul_coop::CoopEpilogue;
use mpsrt_kernels::validate::wgsl_to_msl;
use mpsrt_kernels::{plan_coop_matmul, CoopConfig, CoopMatmulSpec, CoopTune, CoopVariant};

/// The planner's generation-3 tunes: the deep ring (large K), the 128×128 one-set tune
/// (`large_coop_variant`, split-K slices) and the 64×64 K-64 tune (small products).
const TUNES: [&str; 3] = [
    "fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_ad1",
    "fi1_cl1_vs4_uc1_ov1_su3_rp1",
    "w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1_ad1",
];

fn spec(text: &str, out_f16: bool, aligned: bool, epi: CoopEpilogue) -> CoopMatmulSpec {
    let nv = [CoopConfig { m: 16, n: 16, k: 16, ab: DType::F16, cr: DType::F32 }];
    let base = plan_coop_matmul(&nv, (32, 32), [4096; 3], 0).unwrap();
    let t = CoopTune::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    t.check(16).unwrap_or_else(|e| panic!("{text}: {e}"));
    assert_eq!(CoopVariant::parse(&t.name()), Ok(CoopVariant::Family(t)), "{text}");
    let s = CoopMatmulSpec { out_f16, epi, ..base }.with_variant(CoopVariant::Family(t), 49152);
    // Edge blocks run the checked loop (the launcher drops `fi` there).
    let tune = CoopTune { fi: t.fi && aligned, ..s.tune };
    CoopMatmulSpec { aligned, vec_a: true, vec_b: true, tune, ..s }
}

fn render(s: &CoopMatmulSpec) -> String {
    let src = s.render().unwrap_or_else(|e| panic!("{}: {e}", s.tune.name()));
    wgsl_to_msl(&src).unwrap_or_else(|e| panic!("{}: {e}\n{src}", s.tune.name()));
    src
}

const NONE: CoopEpilogue = CoopEpilogue { c: false, res: false, act: MatmulAct::None };

#[test]
fn f32_rows_store_whole_blocks_four_floats_per_store() {
    for tune in TUNES {
        let plain = render(&spec(tune, false, true, NONE));
        assert!(plain.contains("coopStoreT(c0_0, &out["), "{tune}: straight store without rs1");
        let s = spec(&format!("{tune}_rs1"), false, true, NONE);
        let src = render(&s);
        assert!(src.contains("var<storage, read_write> out: array<vec4<f32>>"), "{tune}");
        assert!(!src.contains("&out["), "{tune}: no cooperative store to the output");
        assert!(src.contains("var v = vec4<f32>();"), "{tune}");
        // Every tile of the subgroup goes through the scratch once.
        let tiles = usize::from(s.tune.tm) * usize::from(s.tune.tn);
        assert_eq!(src.matches("&Cs[q").count(), tiles, "{tune}");
        // The scratch the f32 store already declared for edge tiles: no more memory.
        assert_eq!(s.shared_bytes(), spec(tune, false, true, NONE).shared_bytes(), "{tune}");
    }
}

#[test]
fn f32_rows_store_edge_blocks_with_bounds_checks() {
    for tune in TUNES {
        let src = render(&spec(&format!("{tune}_rs1"), false, false, NONE));
        assert!(src.contains("var<storage, read_write> out: array<f32>"), "{tune}");
        assert!(src.contains("if (m < Mr && n < N) { out[obase + m * N + n] = "), "{tune}");
        assert!(!src.contains("&out["), "{tune}");
    }
}

#[test]
fn f32_rows_store_takes_the_epilogue() {
    let epi = CoopEpilogue { c: true, res: true, act: MatmulAct::Gelu };
    for aligned in [true, false] {
        let src = render(&spec(&format!("{}_rs1", TUNES[1]), false, aligned, epi));
        assert!(src.contains("beta * cin[") && src.contains("+ res[obase + m * N + n]"));
        assert_eq!(src.contains("array<vec4<f32>>"), aligned);
    }
}

#[test]
fn f16_output_is_unchanged_by_rs1() {
    for tune in TUNES {
        for aligned in [true, false] {
            let a = render(&spec(tune, true, aligned, NONE));
            let b = render(&spec(&format!("{tune}_rs1"), true, aligned, NONE));
            // Only the header comment, which prints the tune's name, may differ.
            assert_eq!(body(&a), body(&b), "{tune} aligned {aligned}");
        }
    }
}

/// A kernel's text without its comment lines.
fn body(src: &str) -> Vec<&str> {
    src.lines().filter(|l| !l.trim_start().starts_with("//")).collect()
}
