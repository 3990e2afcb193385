//! Triton's tutorials 01-03, written as Triton users write them (imports changed only), compile
//! to WGSL that naga validates and translates to MSL.

mod common;

use common::*;
use mpsrt_core::DType::{F16, F32, I32};
use mpsrt_jit::{Access, UniformKind};

#[test]
fn vector_add() {
    let src = fixture("01_vector_add.py");
    let k = compile_ok(
        &src,
        Some("add_kernel"),
        vec![ptr(F32), ptr(F32), ptr(F32), scalar(I32), int(1024)],
    );
    assert_eq!(k.workgroup_size, 256);
    let access: Vec<Access> = k.bindings.iter().map(|b| b.access).collect();
    assert_eq!(access, [Access::Read, Access::Read, Access::ReadWrite]);
    assert_eq!(k.uniform_binding, 3);
    let kinds: Vec<(u32, UniformKind)> =
        k.uniform_layout.iter().map(|f| (f.offset, f.kind.clone())).collect();
    assert_eq!(
        kinds,
        [
            (0, UniformKind::NumPrograms(0)),
            (4, UniformKind::NumPrograms(1)),
            (8, UniformKind::NumPrograms(2)),
            (12, UniformKind::DispatchX),
            (16, UniformKind::DispatchY),
            (20, UniformKind::ViewOffset { arg: 0 }),
            (24, UniformKind::ViewOffset { arg: 1 }),
            (28, UniformKind::ViewOffset { arg: 2 }),
            (32, UniformKind::Scalar { arg: 3, dtype: I32 }),
        ]
    );
    assert_eq!(k.uniform_size, 48);
    // Small blocks shrink the workgroup so every invocation has work.
    let small = compile_ok(&src, None, vec![ptr(F32), ptr(F32), ptr(F32), scalar(I32), int(64)]);
    assert_eq!(small.workgroup_size, 64);
    assert_ne!(small.cache_key, k.cache_key);
}

#[test]
fn vector_add_f16() {
    let src = fixture("01_vector_add.py");
    let k = compile_ok(&src, None, vec![ptr(F16), ptr(F16), ptr(F16), scalar(I32), int(1024)]);
    assert_eq!(k.bindings[2].wgsl_elem, "atomic<u32>");
    assert_eq!(k.bindings[0].wgsl_elem, "u32");
}

#[test]
fn fused_softmax() {
    let src = fixture("02_fused_softmax.py");
    for block in [32, 1024, 4096] {
        let k = compile_ok(
            &src,
            Some("softmax_kernel"),
            vec![
                ptr(F32),
                ptr(F32),
                scalar(I32),
                scalar(I32),
                scalar(I32),
                scalar(I32),
                int(block),
                int(2),
            ],
        );
        assert!(k.wgsl.contains("workgroupUniformLoad"), "reductions go through workgroup memory");
    }
}

fn matmul_args(input: mpsrt_core::DType, activation: &str, bm: i64) -> Vec<mpsrt_jit::ArgSpec> {
    let mut args = vec![ptr(input), ptr(input), ptr(F16)];
    args.extend(std::iter::repeat_n(scalar(I32), 9));
    args.extend([int(bm), int(32), int(32), int(8), string(activation)]);
    args
}

#[test]
fn matmul() {
    let src = fixture("03_matmul.py");
    let plain = compile_ok(&src, Some("matmul_kernel"), matmul_args(F16, "", 32));
    let leaky = compile_ok(&src, Some("matmul_kernel"), matmul_args(F16, "leaky_relu", 32));
    assert_ne!(plain.wgsl, leaky.wgsl, "ACTIVATION specializes the code");
    assert_ne!(plain.cache_key, leaky.cache_key);
    assert!(leaky.wgsl.contains("0.01f"));
    compile_ok(&src, Some("matmul_kernel"), matmul_args(F32, "leaky_relu", 64));
}

/// `cargo test -p mpsrt-jit --test tutorials dump -- --ignored --nocapture` prints the WGSL.
#[test]
#[ignore = "prints generated WGSL for inspection"]
fn dump() {
    let src = fixture("03_matmul.py");
    let k = compile_ok(&src, None, matmul_args(F16, "leaky_relu", 32));
    println!("{}", k.wgsl);
    let src = fixture("02_fused_softmax.py");
    let args = vec![
        ptr(F32),
        ptr(F32),
        scalar(I32),
        scalar(I32),
        scalar(I32),
        scalar(I32),
        int(1024),
        int(2),
    ];
    println!("{}", compile_ok(&src, None, args).wgsl);
}
