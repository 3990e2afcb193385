//! No user source makes the compiler panic: mutilated versions of the tutorial kernels (a line
//! deleted, the text cut short, tokens swapped) must each return an error or valid WGSL.

mod common;

use common::*;
use mpsrt_core::DType::{F16, F32, I32};
use mpsrt_jit::{compile, ArgSpec, CompileOptions, KernelSignature};

fn cases() -> Vec<(String, Vec<ArgSpec>)> {
    let mut mm = vec![ptr(F16), ptr(F16), ptr(F16)];
    mm.extend(std::iter::repeat_n(scalar(I32), 9));
    mm.extend([int(32), int(32), int(32), int(8), string("leaky_relu")]);
    vec![
        (fixture("01_vector_add.py"), vec![ptr(F32), ptr(F32), ptr(F32), scalar(I32), int(1024)]),
        (
            fixture("02_fused_softmax.py"),
            vec![
                ptr(F32),
                ptr(F32),
                scalar(I32),
                scalar(I32),
                scalar(I32),
                scalar(I32),
                int(1024),
                int(2),
            ],
        ),
        (fixture("03_matmul.py"), mm),
    ]
}

fn try_compile(src: &str, args: &[ArgSpec]) {
    let _ =
        compile(src, None, &KernelSignature { args: args.to_vec() }, &CompileOptions::default());
}

#[test]
fn mutilated_sources_never_panic() {
    let swaps = [
        ("+", "*"),
        ("<", "<<"),
        ("tl.float32", "tl.int32"),
        ("axis=0", "axis=1"),
        ("(", "[("),
        ("0", "-1"),
    ];
    for (src, args) in cases() {
        let lines: Vec<&str> = src.lines().collect();
        for i in 0..lines.len() {
            let mut v = lines.clone();
            v.remove(i);
            try_compile(&v.join("\n"), &args);
        }
        for cut in (0..src.len()).step_by(41).filter(|&c| src.is_char_boundary(c)) {
            try_compile(&src[..cut], &args);
        }
        for (a, b) in swaps {
            for (pos, _) in src.match_indices(a).take(40) {
                let mutated = format!("{}{b}{}", &src[..pos], &src[pos + a.len()..]);
                try_compile(&mutated, &args);
            }
        }
    }
}
