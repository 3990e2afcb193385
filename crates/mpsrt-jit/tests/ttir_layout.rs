//! The layout choice for reduction kernels (`CompileOptions::narrow_to`) and the barrier-light
//! reductions (`CompileOptions::one_barrier`, crate module `subgroup`) on committed TTIR
//! fixtures (see `tests/ttir/generate.py`): workgroup sizes, barrier counts and the uniform
//! fallback where a reduction steers control flow; every module passes naga validation and the
//! MSL and SPIR-V translations. Running them is python/tests/test_triton_layout.py's job.

mod common;

use mpsrt_jit::{compile_ttir, compile_ttir_widening, CompileOptions, CompiledKernel};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/ttir/{name}.ttir", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Subgroups of a fixed `sg` lanes, Triton's `num_warps * 32` = `threads`.
fn opts(threads: u32, sg: u32, narrow_to: u32) -> CompileOptions {
    CompileOptions {
        max_workgroup_size: threads,
        subgroups: true,
        subgroup_size: sg,
        narrow_to,
        ..CompileOptions::default()
    }
}

fn build(text: &str, o: &CompileOptions) -> CompiledKernel {
    let k = compile_ttir_widening(text, None, o, 1024).unwrap_or_else(|e| panic!("{e}"));
    common::validate_coop(&k).unwrap_or_else(|e| panic!("{e}"));
    k
}

fn count(k: &CompiledKernel, what: &str) -> usize {
    k.wgsl.matches(what).count()
}

/// Tutorial 02 at 256 columns (the fixture is 1024).
fn softmax_256() -> String {
    fixture("02_fused_softmax").replace("1024", "256")
}

#[test]
fn softmax_rows_of_256_run_on_one_subgroup_without_barriers() {
    // num_warps = 8 asks for 256 invocations of 1 element; on 32-lane subgroups the layout
    // choice gives one subgroup of 8 elements, so both reductions are subgroup operations.
    let k = build(&softmax_256(), &opts(256, 32, 8));
    assert_eq!(k.workgroup_size, 32);
    assert!(k.wgsl.contains("let i = 7u;"), "{}", k.wgsl);
    assert_eq!(count(&k, "workgroupBarrier"), 0, "{}", k.wgsl);
    assert_eq!(count(&k, "workgroupUniformLoad"), 0, "{}", k.wgsl);
    assert!(!k.wgsl.contains("var<workgroup>"), "{}", k.wgsl);
    assert!(k.wgsl.contains("subgroupMax(") && k.wgsl.contains("subgroupAdd("));
    assert_eq!(k.workgroup_bytes, 0);
    // A row that would need more than `narrow_to` elements per lane on one subgroup keeps
    // num_warps' workgroup (one barrier per reduction): 4 per lane on 32 lanes, or 8-lane
    // subgroups (lavapipe).
    for (sg, n) in [(32, 4), (8, 8)] {
        let k = build(&softmax_256(), &opts(256, sg, n));
        assert_eq!(k.workgroup_size, 256);
        assert_eq!(count(&k, "workgroupBarrier"), 2, "{}", k.wgsl);
    }
    // 64 columns on 8-lane subgroups: one subgroup again.
    let k8 = build(&fixture("02_fused_softmax").replace("1024", "64"), &opts(256, 8, 8));
    assert_eq!((k8.workgroup_size, count(&k8, "workgroupBarrier")), (8, 0));
}

#[test]
fn one_barrier_reductions_alternate_halves_of_the_partials() {
    // Without the layout choice: 256 invocations, one barrier per reduction, the partials'
    // half flipping after each (the race argument is in `subgroup::fold_one_barrier`).
    let k = build(&softmax_256(), &opts(256, 32, 0));
    assert_eq!(k.workgroup_size, 256);
    assert_eq!(count(&k, "workgroupBarrier"), 2, "{}", k.wgsl);
    assert_eq!(count(&k, "workgroupUniformLoad"), 0, "{}", k.wgsl);
    assert_eq!(count(&k, "rp = 256u - rp;"), 2, "{}", k.wgsl);
    assert!(k.wgsl.contains("var rp: u32 = 0u;") && k.wgsl.contains("wgr[rp + sg]"));
    assert!(k.wgsl.contains("var<workgroup> wgr: array<u32, 512>;"), "{}", k.wgsl);
    assert_eq!(k.workgroup_bytes, 512 * 4);
    // An unknown (varying) subgroup size: no layout choice, still one barrier.
    let k0 = build(&softmax_256(), &opts(256, 0, 8));
    assert_eq!((k0.workgroup_size, count(&k0, "workgroupBarrier")), (256, 2));
    // Switched off: session 14's two barriers (the second inside workgroupUniformLoad).
    let old = build(&softmax_256(), &CompileOptions { one_barrier: false, ..opts(256, 32, 0) });
    assert_eq!(count(&old, "workgroupUniformLoad"), 2, "{}", old.wgsl);
    assert!(!old.wgsl.contains("rp"), "{}", old.wgsl);
    assert!(old.wgsl.contains("var<workgroup> wgr: array<u32, 257>;"));
    // No subgroups at all: the workgroup-memory tree, untouched by both options.
    let tree = build(&softmax_256(), &CompileOptions { subgroups: false, ..opts(256, 32, 8) });
    assert_eq!(tree.workgroup_size, 256);
    assert!(!tree.wgsl.contains("subgroup") && !tree.wgsl.contains("rp"), "{}", tree.wgsl);
}

#[test]
fn larger_rows_keep_their_layout() {
    // 1024 columns do not fit one subgroup at 8 per lane: num_warps' 256 invocations, one
    // barrier per reduction; 4096 columns keep the widened 256 x 16 (`WIDEN_TO`).
    let text = fixture("02_fused_softmax");
    let k = build(&text, &opts(256, 32, 8));
    assert_eq!((k.workgroup_size, count(&k, "workgroupBarrier")), (256, 2));
    let k16 = build(&text.replace("1024", "512"), &opts(256, 32, 16));
    assert_eq!((k16.workgroup_size, count(&k16, "workgroupBarrier")), (32, 0));
    let wide = build(&text.replace("1024", "4096"), &opts(256, 32, 8));
    assert_eq!(wide.workgroup_size, 256);
    assert!(wide.wgsl.contains("let i = 15u;"));
}

#[test]
fn four_reductions_per_row_in_a_row_loop() {
    // test_triton_layout.py's row statistics: max, min, sum, sum of squares per row.
    let text = fixture("row_stats");
    let k = build(&text, &opts(256, 32, 8));
    assert_eq!(k.workgroup_size, 32);
    assert_eq!(count(&k, "workgroupBarrier"), 0, "{}", k.wgsl);
    let k8 = build(&text, &opts(256, 8, 8));
    assert_eq!(k8.workgroup_size, 256);
    assert_eq!(count(&k8, "workgroupBarrier"), 4, "{}", k8.wgsl);
    assert_eq!(count(&k8, "rp = 256u - rp;"), 4, "{}", k8.wgsl);
}

#[test]
fn reductions_that_steer_control_flow_stay_uniform() {
    // `if tl.sum(x) > 0:` and `for i in range(0, tl.sum(...))`: the branch and the loop bound
    // hold no barrier here, but their results must be uniform values in WGSL's sense, so every
    // reduction publishes through workgroupUniformLoad and the workgroup is not narrowed.
    let k = build(&fixture("steer"), &opts(64, 8, 8));
    assert_eq!(k.workgroup_size, 64);
    assert_eq!(count(&k, "workgroupUniformLoad"), 3, "{}", k.wgsl);
    assert!(!k.wgsl.contains("rp"), "{}", k.wgsl);
    // Even where the workgroup is one subgroup.
    let one = build(&fixture("steer"), &opts(64, 64, 8));
    assert_eq!(count(&one, "workgroupUniformLoad"), 3, "{}", one.wgsl);
}

#[test]
fn other_reduction_kernels_validate_on_narrowed_layouts() {
    // Layer norm's loops, 2-D axis reductions with a transpose, argmax's two-operand combiner.
    for (name, threads) in
        [("05_layer_norm_fwd", 32), ("tile_stats_2d", 128), ("argmax", 128), ("argmax_flat", 256)]
    {
        for sg in [8, 32] {
            let k = compile_ttir(&fixture(name), None, &opts(threads, sg, 8))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            common::validate_coop(&k).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(k.workgroup_size >= sg.min(threads), "{name}: {}", k.workgroup_size);
        }
    }
}
