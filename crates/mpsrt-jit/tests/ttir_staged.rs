//! Tutorial 03's `tl.dot` staged like mpsrt's generation-3 GEMM (`ttir::dot_stage`): operands go
//! from global memory straight into padded f16 slabs, the loop carries pointer offsets instead
//! of pointer arrays, and the subgroups hold a two-dimensional grid of accumulator tiles. No
//! adapter here has cooperative matrices, so the WGSL is checked with naga (validation, SPIR-V
//! and MSL); the GPU run (bench/triton_backend.py, python/tests/test_triton_backend.py on the
//! H100/H200) checks the numbers.

mod common;

use mpsrt_jit::{compile_ttir, compile_ttir_widening, CompileOptions, CompiledKernel, CoopConfig};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/ttir/{name}.ttir", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn staged(name: &str, threads: u32) -> CompiledKernel {
    let opts = CompileOptions {
        max_workgroup_size: threads,
        coop: Some(CoopConfig { size: 16, subgroup: 32 }),
        subgroups: true,
        max_workgroup_storage: 48 * 1024,
        ..Default::default()
    };
    // Widening allowed up to 1024 (as the backend does): a staged dot keeps num_warps * 32.
    let k = compile_ttir_widening(&fixture(name), None, &opts, 1024).unwrap();
    common::validate_coop(&k).unwrap_or_else(|e| panic!("{name}: {e}"));
    k
}

/// The K loop's body (from the loop header to the first store of an accumulator tile).
fn loop_body(k: &CompiledKernel) -> &str {
    &k.wgsl[k.wgsl.find("for (var iv").unwrap()..k.wgsl.find("coopStoreT(").unwrap()]
}

#[test]
fn operands_go_straight_into_padded_word_slabs() {
    let k = staged("03_matmul_128x128", 256);
    assert_eq!(k.workgroup_size, 256, "num_warps = 8 is kept");
    // A: 128 rows of 32 + 8 halves, B: 32 rows of 128 + 8 (f16: NVIDIA's compiler rejects
    // cooperative loads through u32 pointers); C read out in 4 passes of 2 tile rows (32 x 128).
    assert!(k.wgsl.contains(": array<f16, 5120>;") && k.wgsl.contains(": array<f16, 4352>;"));
    assert!(k.wgsl.contains(": array<f32, 4096>;"), "{}", k.wgsl);
    assert_eq!(k.workgroup_bytes, (5120 + 4352) * 2 + 4096 * 4);
    let body = loop_body(&k);
    // One word per pair of halves when the pointers are consecutive and even, from buffers 0/1.
    assert_eq!(
        body.matches("h = vec2<f16>(unpack2x16float(wd0(u32(g) >> 1u)));").count(),
        8,
        "{body}"
    );
    assert_eq!(
        body.matches("h = vec2<f16>(unpack2x16float(wd1(u32(g) >> 1u)));").count(),
        8,
        "{body}"
    );
    // No register copy of the operands.
    assert!(!body.contains("] = f16(t"), "{body}");
    // Full blocks copy branch-free: each pair's base and the contiguity of them all are
    // computed once before the loop (the carried pointer's template without its offset).
    let pre = &k.wgsl[..k.wgsl.find("for (var iv").unwrap()];
    // (ANDed over the subgroup: `uniform_fast`, on by default with subgroups)
    assert_eq!(pre.matches("_ok = subgroupAll((").count(), 2, "{pre}");
    assert_eq!(body.matches("_ok && ((off").count(), 2, "{body}");
    // ... in runs of 8 halves: one 16-byte load each from the buffers bound a second time as
    // vec4<u32> (the word bindings serve every other read).
    assert!(k.wgsl.contains("var<storage, read> bufv0: array<vec4<u32>>;"), "{}", k.wgsl);
    assert!(k.wgsl.contains("var<storage, read> bufv1: array<vec4<u32>>;"), "{}", k.wgsl);
    assert!(k.wgsl.contains("var<storage, read> buf1: array<u32>;"), "{}", k.wgsl);
    assert_eq!(body.matches("let sv0_0 = bufv0[u32(").count(), 1, "{body}");
    assert_eq!(body.matches("let sv0_1 = bufv0[u32(").count(), 1, "{body}");
    assert_eq!(body.matches("let sv1_0 = bufv1[u32(").count(), 1, "{body}");
    assert_eq!(body.matches("let sv1_1 = bufv1[u32(").count(), 1, "{body}");
    // Staged copies are emitted at the dot (`stage_emit`): both operands' loads under one
    // branch, before any slab store; with `joint_stage` off, one branch per operand where its
    // load stands (session 13).
    let fast = &body[body.find("if (full").unwrap()..body.find("} else {").unwrap()];
    assert!(fast.find("let sv1_1").unwrap() < fast.find("caa").unwrap(), "{fast}");
    let opts = CompileOptions {
        max_workgroup_size: 256,
        coop: Some(CoopConfig { size: 16, subgroup: 32 }),
        subgroups: true,
        joint_stage: false,
        max_workgroup_storage: 48 * 1024,
        ..Default::default()
    };
    let sep = compile_ttir_widening(&fixture("03_matmul_128x128"), None, &opts, 1024).unwrap();
    common::validate_coop(&sep).unwrap();
    let sep_body = loop_body(&sep);
    assert_eq!(sep_body.matches("if (full").count(), 2, "{sep_body}");
    // A's slab stores come before B's branch.
    assert!(sep_body.find("caa").unwrap() < sep_body.rfind("if (full").unwrap(), "{sep_body}");
    // Pointers advance as a scalar offset.
    assert!(body.contains("off") && !body.contains("v42"), "{body}");
    // 8 subgroups as 2 x 4, each 4 x 2 tiles: per 16-deep step 4 A + 2 B fragments, 8 products.
    assert_eq!(body.matches("<f16, A>>").count(), 8, "{body}");
    assert_eq!(body.matches("<f16, B>>").count(), 4, "{body}");
    assert_eq!(body.matches("coopMultiplyAdd(").count(), 16, "{body}");
    // Fragment loads use the padded strides.
    assert!(body.contains(" 40u);") && body.contains(" 136u);"), "{body}");
    // Two barriers per K step: after staging, after the products.
    assert_eq!(body.matches("workgroupBarrier()").count(), 2, "{body}");
    assert_eq!(k.wgsl.matches("coopStoreT(").count(), 8);
    // The f16 result goes through an `array<f16>` binding (`f16_store`, on by default).
    assert!(k.wgsl.contains("buf2: array<f16>;") && !k.wgsl.contains("atomicStore("));
    // Without it, a word (two neighbouring elements) at a time where the pair lines up:
    // swapped with subgroupShuffleXor, one plain atomicStore instead of two RMWs each.
    let opts = CompileOptions {
        max_workgroup_size: 256,
        coop: Some(CoopConfig { size: 16, subgroup: 32 }),
        subgroups: true,
        f16_store: false,
        max_workgroup_storage: 48 * 1024,
        ..Default::default()
    };
    let k = compile_ttir_widening(&fixture("03_matmul_128x128"), None, &opts, 1024).unwrap();
    common::validate_coop(&k).unwrap();
    assert!(k.wgsl.contains("subgroupShuffleXor(") && k.wgsl.contains("atomicStore(&buf2["));
}

#[test]
fn vec2_slabs_store_a_pair_at_once() {
    // MPSRT_TRITON_VEC2_SLAB=1: the slabs hold vec2<f16> (half the elements), fragment loads
    // index and stride in pairs, a staged pair is one store.
    let opts = CompileOptions {
        max_workgroup_size: 256,
        coop: Some(CoopConfig { size: 16, subgroup: 32 }),
        subgroups: true,
        slab_vec2: true,
        max_workgroup_storage: 48 * 1024,
        ..Default::default()
    };
    let k = compile_ttir_widening(&fixture("03_matmul_128x128"), None, &opts, 1024).unwrap();
    common::validate_coop(&k).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        k.wgsl.contains(": array<vec2<f16>, 2560>;")
            && k.wgsl.contains(": array<vec2<f16>, 2176>;")
    );
    let body = loop_body(&k);
    assert!(body.contains("[at >> 1u] = h;") && !body.contains("h.x"), "{body}");
    assert!(body.contains(" >> 1u], 20u);") && body.contains(" >> 1u], 68u);"), "{body}");
}

#[test]
fn emulated_products_keep_the_staging() {
    // emulate_coop (lavapipe's tests): the same slabs and staged loads, f32 register products,
    // no cooperative matrices and no subgroup builtins in the module.
    for vec2 in [false, true] {
        let opts = CompileOptions {
            max_workgroup_size: 128,
            coop: Some(CoopConfig { size: 16, subgroup: 32 }),
            emulate_coop: true,
            slab_vec2: vec2,
            ..Default::default()
        };
        let k = compile_ttir(&fixture("03_matmul"), None, &opts).unwrap();
        common::validate_coop(&k).unwrap_or_else(|e| panic!("{e}"));
        assert!(k.wgsl.starts_with("enable f16;\n//"), "{}", k.wgsl);
        assert!(!k.wgsl.contains("coop_mat") && !k.wgsl.contains("subgroup_id"), "{}", k.wgsl);
        assert!(k.wgsl.contains("wd0(u32(g) >> 1u)") && k.wgsl.contains("s = fma("));
    }
}

#[test]
fn small_blocks_and_the_session_11_path() {
    // 64x32 at num_warps = 4: 4 subgroups as 2 x 2 (2 x 1 tiles each).
    let k = staged("03_matmul", 128);
    assert_eq!(k.workgroup_size, 128);
    let body = loop_body(&k);
    assert!(body.contains("wd0(u32(g)") && body.contains("wd1(u32(g)"), "{body}");
    assert_eq!(body.matches("coopMultiplyAdd(").count(), 4, "{body}");
    // The leaky-relu variant has the same loop.
    let lr = staged("03_matmul_leaky_relu", 128);
    assert!(loop_body(&lr).contains("wd1(u32(g)"));
    // stage_dot off: session 11's register-staged f16 path.
    let opts = CompileOptions {
        max_workgroup_size: 128,
        coop: Some(CoopConfig { size: 16, subgroup: 32 }),
        stage_dot: false,
        ..Default::default()
    };
    let old = compile_ttir(&fixture("03_matmul"), None, &opts).unwrap();
    common::validate_coop(&old).unwrap();
    assert!(loop_body(&old).contains("= f16(") && !old.wgsl.contains("(u32(g) >> 1u)"));
    // Without cooperative matrices nothing is staged (lavapipe's register path).
    let plain = CompileOptions { max_workgroup_size: 128, ..Default::default() };
    let k = compile_ttir(&fixture("03_matmul"), None, &plain).unwrap();
    common::validate(&k).unwrap();
    assert!(!k.wgsl.contains("coop") && !k.wgsl.contains("(u32(g) >> 1u)"));
    // The K loop carries the A/B pointer blocks as scalar offsets on every path; without
    // subgroups the f16 stores stay per element.
    assert_eq!(k.wgsl.matches("var off").count(), 2, "{}", k.wgsl);
    assert!(!k.wgsl.contains("subgroupShuffleXor"));
}

#[test]
fn prefetch_loads_the_next_step_before_the_products() {
    // prefetch_stage (self-bounded modules only): the first step's runs are loaded into `var`s
    // before the loop, stored at the top of each step, and the next step's runs (offset plus
    // step: 32 for A, B's `stride_bk * 32` lowered at the top of the body) are loaded between
    // the staging barrier and the products.
    let opts = CompileOptions {
        max_workgroup_size: 256,
        coop: Some(CoopConfig { size: 16, subgroup: 32 }),
        subgroups: true,
        slab_vec4: true,
        self_bounded: true,
        prefetch_stage: true,
        max_workgroup_storage: 48 * 1024,
        ..Default::default()
    };
    let k = compile_ttir_widening(&fixture("03_matmul_128x128"), None, &opts, 1024).unwrap();
    common::validate_coop(&k).unwrap_or_else(|e| panic!("{e}"));
    let pre = &k.wgsl[..k.wgsl.find("for (var iv").unwrap()];
    assert_eq!(pre.matches("var pv").count(), 8, "{pre}");
    let body = loop_body(&k);
    let products = body.find("coopLoadT").unwrap();
    let staged = body.find("workgroupBarrier()").unwrap();
    let next = &body[staged..products];
    assert_eq!(next.matches("+ 32i + P.off0) >> 2u)").count(), 4, "{next}");
    assert_eq!(next.matches("= bufv1[ixv1(").count(), 4, "{next}");
    assert!(!body[..staged].contains("= bufv"), "the step's own loads happened earlier");
    // Without self-bounded modules the speculative load could leave the buffer: no prefetch.
    let plain = CompileOptions { self_bounded: false, ..opts };
    let k = compile_ttir_widening(&fixture("03_matmul_128x128"), None, &plain, 1024).unwrap();
    assert!(!k.wgsl.contains("var pv"));
}

#[test]
fn f16_store_binds_the_output_as_halves() {
    // f16_store with matrix units: the f16 output is `array<f16>`, stored element by element
    // (no packed-word atomics, no pair exchange); without them nothing changes.
    let opts = CompileOptions {
        max_workgroup_size: 256,
        coop: Some(CoopConfig { size: 16, subgroup: 32 }),
        subgroups: true,
        self_bounded: true,
        f16_store: true,
        max_workgroup_storage: 48 * 1024,
        ..Default::default()
    };
    let k = compile_ttir_widening(&fixture("03_matmul_128x128"), None, &opts, 1024).unwrap();
    common::validate_coop(&k).unwrap_or_else(|e| panic!("{e}"));
    assert!(k.wgsl.contains("var<storage, read_write> buf2: array<f16>;"), "{}", k.wgsl);
    assert!(k.wgsl.contains("buf2[ix2(u32(p + P.off2))] = f16(v);"), "{}", k.wgsl);
    assert!(!k.wgsl.contains("atomic") && !k.wgsl.contains("subgroupShuffleXor"));
    assert_eq!(k.bindings.iter().filter(|b| b.wgsl_elem == "f16").count(), 1);
    let plain = CompileOptions { f16_store: true, max_workgroup_size: 128, ..Default::default() };
    let k = compile_ttir(&fixture("03_matmul"), None, &plain).unwrap();
    common::validate(&k).unwrap();
    assert!(k.wgsl.contains("buf2: array<atomic<u32>>;") && !k.wgsl.contains("enable f16"));
}
