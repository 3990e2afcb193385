//! The Triton backend's defaults on NVIDIA (session 13): the staged dot's `vec4<f16>` slabs
//! (`CompileOptions::slab_vec4`, the built-in GEMM's `vs4`: operands bound as `vec4<f16>`, two
//! 8-byte loads per run of 8 halves stored as they are, fragments loaded through vector
//! pointers) and self-bounded modules (`CompileOptions::self_bounded`: every storage index
//! clamped by the compiler, so the pipeline is built without wgpu's runtime checks). Checked
//! with naga (validation, SPIR-V, MSL); lavapipe's `test_tutorial_03_staged_dot_emulated` and
//! the GPU runs check the numbers.

mod common;

use mpsrt_jit::{compile_ttir_widening, CompileOptions, CompiledKernel, CoopConfig};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/ttir/{name}.ttir", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn opts(threads: u32, size: u32) -> CompileOptions {
    CompileOptions {
        max_workgroup_size: threads,
        coop: Some(CoopConfig { size, subgroup: 32 }),
        subgroups: true,
        max_workgroup_storage: 64 * 1024,
        slab_vec4: true,
        self_bounded: true,
        ..Default::default()
    }
}

fn compile(name: &str, o: &CompileOptions) -> CompiledKernel {
    let k = compile_ttir_widening(&fixture(name), None, o, 1024).unwrap();
    common::validate_coop(&k).unwrap_or_else(|e| panic!("{name}: {e}"));
    k
}

/// The K loop's body (from the loop header to the first store of an accumulator tile).
fn loop_body(k: &CompiledKernel) -> &str {
    &k.wgsl[k.wgsl.find("for (var iv").unwrap()..k.wgsl.find("coopStoreT(").unwrap()]
}

/// Every `buf<k>[` indexing in `wgsl` whose index is not `ix<k>(..)`.
fn unclamped(wgsl: &str) -> Vec<String> {
    let mut bad = Vec::new();
    let mut rest = wgsl;
    while let Some(at) = rest.find("buf") {
        let tail = rest[at + 3..].strip_prefix('v').unwrap_or(&rest[at + 3..]);
        let v = if rest[at + 3..].starts_with('v') { "v" } else { "" };
        let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
        let after = &tail[digits.len()..];
        if !digits.is_empty() && after.starts_with('[') {
            let want = format!("[ix{v}{digits}(");
            if !after.starts_with(&want) {
                bad.push(after.lines().next().unwrap_or("").to_string());
            }
        }
        rest = &rest[at + 3..];
    }
    bad
}

#[test]
fn vec4_slabs_take_whole_vectors() {
    // (Each step's own loads; the prefetched form is `ttir_staged`'s prefetch test.)
    let k =
        compile("03_matmul_128x128", &CompileOptions { prefetch_stage: false, ..opts(256, 16) });
    // Slabs in vectors: A 128 x (32 + 8) halves, B 32 x (128 + 8).
    assert!(k.wgsl.contains(": array<vec4<f16>, 1280>;"), "{}", k.wgsl);
    assert!(k.wgsl.contains(": array<vec4<f16>, 1088>;"), "{}", k.wgsl);
    // Both operands bound twice: as words (every other read: the last halves of a buffer
    // are past a vector binding's rounded-down length) and as vec4<f16> (whole runs).
    for k4 in [0, 1] {
        let words = format!("var<storage, read> buf{k4}: array<u32>;");
        let vecs = format!("var<storage, read> bufv{k4}: array<vec4<f16>>;");
        assert!(k.wgsl.contains(&words) && k.wgsl.contains(&vecs), "{}", k.wgsl);
    }
    let args: Vec<usize> = k.bindings.iter().map(|b| b.arg_index).collect();
    assert_eq!(args, [0, 0, 1, 1, 2], "the launcher binds each operand twice");
    assert_eq!(k.uniform_binding, 5);
    let body = loop_body(&k);
    // 512 runs of 8 halves per operand over 256 invocations: 2 runs each, two vector loads a
    // run, stored as they are (no unpacking on the fast path).
    for k4 in [0, 1] {
        for j in [0, 1] {
            let v = format!("let sv{k4}_{j}_0 = bufv{k4}[ixv{k4}((u32(");
            assert_eq!(body.matches(&v).count(), 1, "{body}");
            assert_eq!(body.matches(&format!("let sv{k4}_{j}_1 = bufv{k4}[ixv{k4}(")).count(), 1);
        }
    }
    assert_eq!(body.matches(") >> 2u) + 1u)];").count(), 4, "{body}");
    let fast = &body[..body.find("} else {").unwrap()];
    assert!(!fast.contains("unpack2x16float") && !fast.contains("h.x"), "{fast}");
    // Both operands' global loads come before any slab store, under one branch (`stage_emit`).
    let first_store = fast.find("caa").unwrap();
    assert!(fast.rfind("= bufv1[").unwrap() < first_store, "{fast}");
    assert_eq!(fast.matches("if (").count(), 1, "{fast}");
    // The slab index of a run is a multiple of 8 halves, in vectors.
    let e0 = "((lid + 256u) * 8u)";
    assert!(body.contains(&format!("let at = (({e0} / 32u) * 40u + {e0} % 32u) >> 2u;")));
    assert!(body.contains(&format!("let at = (({e0} / 128u) * 136u + {e0} % 128u) >> 2u;")));
    // Fragments through vector pointers, strides in vectors (40 / 4, 136 / 4).
    assert_eq!(body.matches(") >> 2u], 10u);").count(), 8, "{body}");
    assert_eq!(body.matches(") >> 2u], 34u);").count(), 4, "{body}");
    // The edge path stores pairs into vector components.
    assert!(body.contains("[at >> 2u][at & 3u] = h.x;"), "{body}");
    assert!(body.contains("[at >> 2u][(at & 3u) + 1u] = h.y;"), "{body}");
    // ... from words of the word binding.
    assert!(k.wgsl.contains("fn wd0(j: u32) -> u32 {\n    return buf0[ix0(j)];"), "{}", k.wgsl);
    assert!(k
        .wgsl
        .contains("fn ixv0(i: u32) -> u32 {\n    return min(i, arrayLength(&bufv0) - 1u);"));
}

#[test]
fn vec4_slabs_need_16x16_tiles() {
    // 8x8 tiles (Apple's simdgroup matrices): naga's MSL writer passes element pointers to
    // simdgroup_load, so the slabs stay f16 there.
    let k = compile("03_matmul", &opts(128, 8));
    assert!(!k.wgsl.contains("vec4<f16>"), "{}", k.wgsl);
    assert!(k.wgsl.contains("coop_mat8x8<f16, A>"));
    // And without vec4 slabs (`MPSRT_TRITON_VEC4_SLAB=0`) the 16-byte loads stay words.
    let k = compile("03_matmul_128x128", &CompileOptions { slab_vec4: false, ..opts(256, 16) });
    assert!(k.wgsl.contains("var<storage, read> bufv0: array<vec4<u32>>;"), "{}", k.wgsl);
    assert!(k.wgsl.contains(": array<f16, 5120>;"));
}

#[test]
fn self_bounded_modules_clamp_every_storage_index() {
    // Every fixture (loads, masked stores, packed f16 stores, atomics, reductions, the staged
    // dot on both slab types), with and without cooperative matrices.
    let names = [
        "01_vector_add",
        "02_fused_softmax",
        "03_matmul",
        "03_matmul_128x128",
        "03_matmul_leaky_relu",
        "05_layer_norm_fwd",
        "argmax",
        "argmax_flat",
        "atomics",
        "cumsum",
        "tile_stats_2d",
        "xchg_cas",
    ];
    for name in names {
        for o in [
            opts(128, 16),
            CompileOptions { slab_vec4: false, ..opts(128, 16) },
            CompileOptions { coop: None, ..opts(128, 16) },
        ] {
            // validate_coop: subgroups (the reductions) and f16 allowed.
            let k = compile(name, &o);
            assert!(k.wgsl.contains(mpsrt_jit::SELF_BOUNDED_MARKER), "{name}");
            let bad = unclamped(&k.wgsl);
            assert!(bad.is_empty(), "{name}: unclamped storage indices {bad:?}\n{}", k.wgsl);
            // One clamp per buffer the kernel touches.
            assert!(
                k.wgsl.contains(
                    "fn ix0(i: u32) -> u32 {\n    return min(i, arrayLength(&buf0) - 1u);"
                ),
                "{name}"
            );
        }
    }
    // The scan itself sees an unclamped index (the checked default has no clamps).
    let plain = CompileOptions { self_bounded: false, ..opts(128, 16) };
    let k = compile_ttir_widening(&fixture("01_vector_add"), None, &plain, 1024).unwrap();
    assert!(!k.wgsl.contains(mpsrt_jit::SELF_BOUNDED_MARKER) && !k.wgsl.contains("ix0("));
    assert!(!unclamped(&k.wgsl).is_empty(), "{}", k.wgsl);
}

#[test]
fn write_only_blocks_leave_the_k_loop() {
    // The carried pointer blocks and the K mask block are read through their templates: their
    // per-invocation arrays (an integer modulo by a runtime value per element, every K step)
    // are pruned with the loops that filled them (`CompileOptions::prune_dead`).
    let k = compile("03_matmul_128x128", &opts(128, 16));
    let body = loop_body(&k);
    // Before the staging (the edge path recomputes its pointers per pair, by design).
    let head = &body[..body.find("if (").unwrap()];
    assert!(!head.contains("var t") && !head.contains("% P.s"), "{head}");
    // Nor in the staging, up to the products.
    let staging = &body[..body.find("coopLoadT").unwrap()];
    assert!(!staging.contains("var t") && !staging.contains("for (var i ="), "{staging}");
    let kept = compile("03_matmul_128x128", &CompileOptions { prune_dead: false, ..opts(128, 16) });
    let body = loop_body(&kept);
    assert!(body.contains("var t") && body.contains("% P.s"), "{body}");
}

#[test]
fn whole_run_flag_is_subgroup_uniform() {
    // With subgroups, the loop-invariant "every run contiguous and aligned" flag is ANDed over
    // the subgroup, so the per-step branch is subgroup-uniform (`uniform_fast`).
    let k = compile("03_matmul_128x128", &opts(128, 16));
    let pre = &k.wgsl[..k.wgsl.find("for (var iv").unwrap()];
    assert_eq!(pre.matches("_ok = subgroupAll(").count(), 2, "{pre}");
    let plain =
        compile("03_matmul_128x128", &CompileOptions { uniform_fast: false, ..opts(128, 16) });
    assert!(!plain.wgsl.contains("subgroupAll("));
    let no_sg = compile("03_matmul_128x128", &CompileOptions { subgroups: false, ..opts(128, 16) });
    assert!(!no_sg.wgsl.contains("subgroupAll("));
}

#[test]
fn row_loop_loads_are_issued_one_iteration_early() {
    // Tutorial 02's row loop: the next row's load goes out at the top of the body, into the
    // `var` the prologue filled with the first row (`ttir::pipeline`).
    let k = compile("02_fused_softmax", &opts(128, 16));
    let head = &k.wgsl[..k.wgsl.find("for (var iv").unwrap()];
    assert!(head.contains("var pre"), "{}", k.wgsl);
    let body = &k.wgsl[k.wgsl.find("for (var iv").unwrap()..];
    let first = body.lines().nth(1).unwrap().trim();
    assert!(first.starts_with("let cur") && first.contains("= pre"), "{}", k.wgsl);
    assert!(body.contains("+ i32(P.np0)) * P.s"), "next row's address: {}", k.wgsl);
    // Tutorial 05: its three column loops load X, X, then W, B and X (the last one stores Y).
    let ln = compile("05_layer_norm_fwd", &opts(128, 16));
    assert_eq!(ln.wgsl.matches("var pre").count(), 5, "{}", ln.wgsl);
    // Off with the prefetch option.
    for name in ["02_fused_softmax", "05_layer_norm_fwd"] {
        let k = compile(name, &CompileOptions { prefetch_stage: false, ..opts(128, 16) });
        assert!(!k.wgsl.contains("var pre"), "{name}");
    }
}

#[test]
fn loads_from_a_buffer_the_loop_stores_to_stay_in_place() {
    // The softmax writing its rows into its input: a load moved before an earlier iteration's
    // store could read stale data, so nothing is pipelined.
    let src =
        fixture("02_fused_softmax").replace("tt.addptr %output_ptr,", "tt.addptr %input_ptr,");
    assert!(src.contains("tt.addptr %input_ptr, %output_row_start_ptr"), "fixture changed");
    let k = compile_ttir_widening(&src, None, &opts(128, 16), 1024).unwrap();
    common::validate_coop(&k).unwrap();
    assert!(!k.wgsl.contains("var pre"), "{}", k.wgsl);
}
