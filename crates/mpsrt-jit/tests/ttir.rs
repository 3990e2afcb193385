//! Triton's own TTIR (committed fixtures written by real Triton 3.9 from the kernels in
//! python/tests/test_triton_backend.py, see `tests/ttir/generate.py`) compiles to WGSL that naga
//! validates and translates to MSL; no `triton` is needed here.

mod common;

use common::validate;
use mpsrt_core::DType::{Bool, F16, F32, I32};
use mpsrt_jit::{compile_ttir, Access, CompileOptions, CompiledKernel, UniformKind};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/ttir/{name}.ttir", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn compile(name: &str, max_wg: u32) -> CompiledKernel {
    let opts = CompileOptions { max_workgroup_size: max_wg, ..CompileOptions::default() };
    let k = compile_ttir(&fixture(name), None, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
    validate(&k).unwrap_or_else(|e| panic!("{name}: {e}"));
    k
}

fn scalars(k: &CompiledKernel) -> Vec<(usize, mpsrt_core::DType)> {
    k.uniform_layout
        .iter()
        .filter_map(|f| match f.kind {
            UniformKind::Scalar { arg, dtype } => Some((arg, dtype)),
            _ => None,
        })
        .collect()
}

#[test]
fn tutorial_01_vector_add() {
    let k = compile("01_vector_add", 256);
    assert_eq!(k.name, "add_kernel");
    assert_eq!(k.workgroup_size, 256);
    let access: Vec<Access> = k.bindings.iter().map(|b| b.access).collect();
    assert_eq!(access, [Access::Read, Access::Read, Access::ReadWrite]);
    assert_eq!(scalars(&k), [(3, I32)]);
    // The splatted base pointer plus offsets is the offsets themselves: no extra arrays.
    assert!(!k.wgsl.contains("workgroupBarrier"), "{}", k.wgsl);
    assert_eq!(k.workgroup_bytes, 0);
}

#[test]
fn tutorial_02_fused_softmax() {
    let k = compile("02_fused_softmax", 256);
    assert_eq!(k.bindings.len(), 2);
    assert_eq!(scalars(&k), [(2, I32), (3, I32), (4, I32), (5, I32)]);
    assert!(k.wgsl.contains("workgroupUniformLoad"), "reductions go through workgroup memory");
    assert!(k.wgsl.contains("exp("));
    assert!(k.workgroup_bytes > 0);
}

#[test]
fn workgroup_widens_to_keep_blocks_in_registers() {
    // A 1024-element row at num_warps = 2 (64 invocations) would be 16 elements each; widening
    // (up to the device limit) gives 256 invocations of 4 (`WIDEN_TO`), never beyond the limit.
    let opts = CompileOptions { max_workgroup_size: 64, ..CompileOptions::default() };
    let text = fixture("02_fused_softmax");
    let k = mpsrt_jit::compile_ttir_widening(&text, None, &opts, 1024).unwrap();
    validate(&k).unwrap();
    assert_eq!(k.workgroup_size, mpsrt_jit::MIN_WIDE as u32);
    // 4096 columns at num_warps = 8: 256 invocations of 16 (unrolled), not 1024 of 4.
    let wide = text.replace("1024", "4096");
    let eight = CompileOptions { max_workgroup_size: 256, ..CompileOptions::default() };
    let k = mpsrt_jit::compile_ttir_widening(&wide, None, &eight, 1024).unwrap();
    validate(&k).unwrap();
    assert_eq!(k.workgroup_size, 256);
    assert!(k.wgsl.contains("let i = 15u;") && !k.wgsl.contains("for (var i = 0u"), "{}", k.wgsl);
    // Loads and stores recompute their pointer from the element index (no pointer array read).
    assert!(k.wgsl.contains("= ld1(t2 + (i32(e) + 0i));"), "{}", k.wgsl);
    let old = mpsrt_jit::compile_ttir_widening_to(&wide, None, &eight, 1024, 4).unwrap();
    assert_eq!(old.workgroup_size, 1024);
    assert_eq!(
        mpsrt_jit::compile_ttir_widening(&text, None, &opts, 128).unwrap().workgroup_size,
        128
    );
    assert_eq!(
        mpsrt_jit::compile_ttir_widening(&text, None, &opts, 64).unwrap().workgroup_size,
        64
    );
    assert_eq!(compile_ttir(&text, None, &opts).unwrap().workgroup_size, 64);
}

#[test]
fn tutorial_03_matmul() {
    for name in ["03_matmul", "03_matmul_leaky_relu"] {
        let k = compile(name, 128);
        assert_eq!(k.bindings.iter().map(|b| b.dtype).collect::<Vec<_>>(), [F16, F16, F16]);
        assert_eq!(k.bindings[2].wgsl_elem, "atomic<u32>");
        assert!(k.wgsl.contains("fma("), "tl.dot on the register-tiled path");
        // 64x32 A tile + 32x32 B tile, as f32 words.
        assert_eq!(k.workgroup_bytes, (64 * 32 + 32 * 32) * 4);
    }
    let leaky = compile("03_matmul_leaky_relu", 128);
    assert!(leaky.wgsl.contains("select("), "leaky_relu's tl.where");
}

#[test]
fn tutorial_05_layer_norm_forward() {
    let k = compile("05_layer_norm_fwd", 128);
    assert_eq!(k.bindings.len(), 6);
    assert_eq!(scalars(&k), [(6, I32), (7, I32), (8, F32)]);
    assert!(k.wgsl.contains("sqrt("));
}

#[test]
fn two_d_grid_where_reductions_and_transpose() {
    let k = compile("tile_stats_2d", 256);
    assert!(k.wgsl.contains("pid1"), "program_id(1)");
    assert_eq!(k.workgroup_size, 128, "the 16x8 tile gives 128 invocations");
}

#[test]
fn cumsum_scans_in_workgroup_memory() {
    let k = compile("cumsum", 256);
    assert_eq!(k.bindings.iter().map(|b| b.dtype).collect::<Vec<_>>(), [I32, I32, I32]);
    assert!(k.wgsl.contains("wg1["), "ping-pong scan buffers");
}

#[test]
fn unsupported_op_names_the_op_and_the_python_line() {
    let e = compile_ttir(&fixture("unsupported_op"), None, &CompileOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("tt.histogram"), "{e}");
    assert!(e.contains("test_triton_backend.py:"), "{e}");
}

#[test]
fn small_hand_written_ttir() {
    // Ops the fixtures do not cover: scf.if with results, casts, i1 arguments, cmpf, math ops.
    let text = r#"
module {
  tt.func public @k(%arg0: !tt.ptr<f32>, %arg1: !tt.ptr<i32>, %arg2: i1, %arg3: f32) attributes {noinline = false} {
    %c0 = arith.constant 0 : i32
    %0 = tt.get_program_id y : i32
    %1 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %2 = tt.splat %arg0 : !tt.ptr<f32> -> tensor<64x!tt.ptr<f32>>
    %3 = tt.addptr %2, %1 : tensor<64x!tt.ptr<f32>>, tensor<64xi32>
    %4 = tt.load %3 : tensor<64x!tt.ptr<f32>>
    %5 = scf.if %arg2 -> (tensor<64xf32>) {
      %a = math.exp2 %4 : tensor<64xf32>
      scf.yield %a : tensor<64xf32>
    } else {
      %b = tt.splat %arg3 : f32 -> tensor<64xf32>
      scf.yield %b : tensor<64xf32>
    }
    %6 = arith.cmpf ogt, %5, %4 : tensor<64xf32>
    %7 = arith.extui %6 : tensor<64xi1> to tensor<64xi32>
    %8 = arith.fptosi %5 : tensor<64xf32> to tensor<64xi32>
    %9 = arith.addi %7, %8 : tensor<64xi32>
    %10 = tt.splat %arg1 : !tt.ptr<i32> -> tensor<64x!tt.ptr<i32>>
    %11 = tt.addptr %10, %1 : tensor<64x!tt.ptr<i32>>, tensor<64xi32>
    tt.store %11, %9 : tensor<64x!tt.ptr<i32>>
    tt.return
  }
}
"#;
    let k = compile_ttir(text, None, &CompileOptions::default()).unwrap();
    validate(&k).unwrap();
    assert_eq!(scalars(&k), [(2, Bool), (3, F32)]);
    assert_eq!(k.workgroup_size, 64);
    let bad = text.replace("math.exp2", "math.cbrt");
    let e = compile_ttir(&bad, None, &CompileOptions::default()).unwrap_err().to_string();
    assert!(e.contains("math.cbrt") && e.contains("TTIR line 11"), "{e}");
}

#[test]
fn full_blocks_load_and_store_without_mask_tests() {
    // `offsets < n_elements` with offsets = pid * 1024 + arange(0, 1024): every program but the
    // last is full, so the loads and stores branch once on a uniform condition.
    let k = compile("01_vector_add", 256);
    let cond = "let full1: bool = (((pid0 * 1024i) + 0i) + 1023i) < (P.s3 + 0i);";
    assert!(k.wgsl.contains(cond) || k.wgsl.contains("let full"), "{}", k.wgsl);
    assert_eq!(k.wgsl.matches("if (full").count(), 3, "two loads and a store: {}", k.wgsl);
    // Softmax: the column mask `col_offsets < n_cols` of each row.
    let k = compile("02_fused_softmax", 256);
    assert!(k.wgsl.contains("if (full"), "{}", k.wgsl);
}

#[test]
fn argmax_argmin_reduce_two_operands_through_a_combiner_function() {
    // tl.argmax / tl.argmin / tl.max(return_indices=True): tt.reduce of (values, indices) with
    // a tie-breaking combiner region, along both axes of a 2-D block and over a whole 1-D one.
    for name in ["argmax", "argmax_flat"] {
        let k = compile(name, 256);
        assert!(k.wgsl.contains("fn comb"), "{}", k.wgsl);
        assert!(k.wgsl.contains("struct C"), "{}", k.wgsl);
    }
}

#[test]
fn atomics_on_i32_and_f32_buffers() {
    // i32 add/max, f32 add (compare-exchange loop), Triton's float max/min (signed max / unsigned
    // min on the bits through a bitcast pointer), exchange and compare-and-swap.
    let k = compile("atomics", 256);
    let elems: Vec<&str> = k.bindings.iter().map(|b| b.wgsl_elem.as_str()).collect();
    assert_eq!(
        elems,
        ["f32", "i32", "atomic<i32>", "atomic<u32>", "atomic<i32>", "atomic<u32>", "atomic<u32>"]
    );
    for f in ["atomicAdd(", "atomicMax(", "atomicMin(", "atomicCompareExchangeWeak("] {
        assert!(k.wgsl.contains(f), "{f}: {}", k.wgsl);
    }
    let k = compile("xchg_cas", 256);
    assert!(k.wgsl.contains("atomicExchange(") && k.wgsl.contains("fn at2_cas_i32"), "{}", k.wgsl);
}

#[test]
fn tensor_descriptors_and_int64_offsets() {
    // Triton's rewrite of tl.make_tensor_descriptor: int64 offsets and int64 bounds compares,
    // computed in 32 bits (exact in the int32 range); unsigned int64 ops are refused by name.
    let k = compile("tensor_descriptor", 256);
    assert_eq!(k.bindings.len(), 2);
    let text =
        fixture("tensor_descriptor").replace("arith.cmpi slt, %x_13", "arith.cmpi ult, %x_13");
    let e = compile_ttir(&text, None, &CompileOptions::default()).unwrap_err().to_string();
    assert!(e.contains("`arith.cmpi` on int64 values is not supported"), "{e}");
}

#[test]
fn dot_on_cooperative_matrices_and_the_forced_fallback() {
    // Tutorial 03 (64x32 @ 32x32 f16 tiles, f32 accumulator) with a 16x16 f16 configuration and
    // 32-lane subgroups: tl.dot runs coopMultiplyAdd; without a configuration (lavapipe, or
    // MPSRT_COOP_MATMUL=0) the same TTIR takes the register-tiled path.
    let coop = mpsrt_jit::CoopConfig { size: 16, subgroup: 32 };
    let opts = CompileOptions {
        max_workgroup_size: 128,
        coop: Some(coop),
        stage_dot: false,
        ..Default::default()
    };
    let k = compile_ttir(&fixture("03_matmul"), None, &opts).unwrap();
    common::validate_coop(&k).unwrap_or_else(|e| panic!("{e}"));
    assert!(k.wgsl.starts_with("enable f16;\nenable wgpu_cooperative_matrix;"), "{}", k.wgsl);
    assert!(k.wgsl.contains("coopMultiplyAdd(") && k.wgsl.contains("@builtin(subgroup_id)"));
    // A/B staged as f16; C (f32) read out after the loop in two passes of one tile row each
    // (the accumulator starts from tl.zeros), so its staging array is half the block.
    assert_eq!(k.workgroup_bytes, (64 * 32 + 32 * 32) * 2 + 64 * 32 * 4 / 2, "{}", k.wgsl);
    // The loop-carried accumulator stays in cooperative matrices: 8 tiles of 16x16 over 4
    // subgroups, 2 each (unrolled variables), loaded once before the K loop and stored once
    // after it; the loop body only stages A/B and multiplies.
    assert!(k.wgsl.contains("_1: coop_mat16x16<f32, C>;") && !k.wgsl.contains("_2: coop_mat"));
    assert_eq!(k.wgsl.matches("coopLoadT<coop_mat16x16<f32, C>>").count(), 2, "{}", k.wgsl);
    assert_eq!(k.wgsl.matches("coopStoreT(").count(), 2, "{}", k.wgsl);
    let body = &k.wgsl[k.wgsl.find("for (var iv").unwrap()..k.wgsl.find("coopStoreT(").unwrap()];
    assert!(
        !body.contains("coop_mat16x16<f32, C>>") && body.contains("coopMultiplyAdd("),
        "{body}"
    );
    let eight = CompileOptions {
        coop: Some(mpsrt_jit::CoopConfig { size: 8, subgroup: 32 }),
        ..opts.clone()
    };
    let k8 = compile_ttir(&fixture("03_matmul"), None, &eight).unwrap();
    common::validate_coop(&k8).unwrap_or_else(|e| panic!("{e}"));
    assert!(k8.wgsl.contains("coop_mat8x8<f16, A>"));
    let fallback = compile("03_matmul", 128);
    assert!(!fallback.wgsl.contains("coop") && fallback.wgsl.contains("fma("));
}

#[test]
fn reductions_on_subgroups_where_the_adapter_has_them() {
    // Tutorial 02's max and sum with subgroups: each is subgroupMax/subgroupAdd, one barrier and
    // a uniform load, not a log2(workgroup) tree; layer norm's sums likewise. The tree stays
    // the fallback (no subgroups, or bool reductions).
    let opts =
        CompileOptions { max_workgroup_size: 1024, subgroups: true, ..CompileOptions::default() };
    let k = compile_ttir(&fixture("02_fused_softmax"), None, &opts).unwrap();
    common::validate_coop(&k).unwrap_or_else(|e| panic!("{e}"));
    assert!(k.wgsl.contains("subgroupMax(") && k.wgsl.contains("subgroupAdd("), "{}", k.wgsl);
    assert!(k.wgsl.contains("@builtin(num_subgroups) nsg"), "{}", k.wgsl);
    assert_eq!(k.wgsl.matches("workgroupBarrier()").count(), 2, "{}", k.wgsl);
    assert!(k.workgroup_bytes >= (k.workgroup_size + 1) * 4);
    let tree = compile("02_fused_softmax", 1024);
    assert!(!tree.wgsl.contains("subgroup") && tree.wgsl.matches("workgroupBarrier()").count() > 4);
    let ln = compile_ttir(&fixture("05_layer_norm_fwd"), None, &opts).unwrap();
    common::validate_coop(&ln).unwrap_or_else(|e| panic!("{e}"));
    assert!(ln.wgsl.contains("subgroupAdd("), "{}", ln.wgsl);
}

#[test]
fn broadcasts_of_index_arithmetic_are_recomputed_not_exchanged() {
    // Tutorial 03's K loop broadcasts two masks built from tl.arange (`offs_k[None, :] < K - k *
    // BLOCK_SIZE_K`): recomputed per element, the loop body needs no workgroup exchange, so
    // with cooperative accumulators it has exactly the two barriers around the staged A and B.
    let coop = mpsrt_jit::CoopConfig { size: 16, subgroup: 32 };
    let opts = CompileOptions {
        max_workgroup_size: 128,
        coop: Some(coop),
        stage_dot: false,
        ..Default::default()
    };
    let k = compile_ttir(&fixture("03_matmul"), None, &opts).unwrap();
    common::validate_coop(&k).unwrap_or_else(|e| panic!("{e}"));
    let body = &k.wgsl[k.wgsl.find("for (var iv").unwrap()..k.wgsl.find("coopStoreT(").unwrap()];
    assert_eq!(body.matches("workgroupBarrier()").count(), 2, "{body}");
    assert!(!body.contains("wg0["), "{body}");
    // The register path computes the same masks the same way.
    let plain = compile("03_matmul", 128);
    assert!(!plain.wgsl.contains("wg0[0u * 32u"), "{}", plain.wgsl);
}

#[test]
fn widening_keeps_the_dot_on_cooperative_matrices() {
    // Tutorial 03's 64x32 output block widened to 512 invocations would leave 16 subgroups for
    // 8 tiles of 16x16 (the register path); the workgroup narrows to 256 so each subgroup owns
    // one tile and tl.dot stays on the matrix units.
    let coop = mpsrt_jit::CoopConfig { size: 16, subgroup: 32 };
    let opts = CompileOptions {
        max_workgroup_size: 128,
        coop: Some(coop),
        stage_dot: false,
        ..Default::default()
    };
    let k = mpsrt_jit::compile_ttir_widening(&fixture("03_matmul"), None, &opts, 1024).unwrap();
    common::validate_coop(&k).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(k.workgroup_size, 256);
    assert!(k.wgsl.contains("coopMultiplyAdd("), "{}", k.wgsl);
}

#[test]
fn tiles_of_one_column_share_their_b_fragment() {
    // 64x32 at 128 invocations: 4 subgroups, 8 tiles (2 per row): each subgroup's two tiles
    // (sg and sg + 4) sit in one column, so each K step loads B once for both.
    let coop = mpsrt_jit::CoopConfig { size: 16, subgroup: 32 };
    let opts = CompileOptions {
        max_workgroup_size: 128,
        coop: Some(coop),
        stage_dot: false,
        ..Default::default()
    };
    let k = compile_ttir(&fixture("03_matmul"), None, &opts).unwrap();
    common::validate_coop(&k).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(k.wgsl.matches("<f16, B>>").count(), 1, "{}", k.wgsl);
    assert_eq!(k.wgsl.matches("<f16, A>>").count(), 2, "{}", k.wgsl);
    assert!(k.wgsl.contains("coopMultiplyAdd(ma1, mb, "), "{}", k.wgsl);
}
