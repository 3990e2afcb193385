//! Prints the WGSL `mpsrt-jit` generates for a kernel file, for reading and profiling:
//! `cargo run -p mpsrt-jit --example dump_wgsl -- FILE.py KERNEL [f32|f16|i32|int|float|N]...`
//! (one spec per parameter: a pointer's element type, a runtime scalar, or a constexpr int).

use mpsrt_core::DType;
use mpsrt_jit::{compile, ArgSpec, CompileOptions, ConstValue, KernelSignature};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: dump_wgsl FILE.py KERNEL [f32|f16|i32|int|float|N]...");
        std::process::exit(2);
    }
    let src = match std::fs::read_to_string(&args[0]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cannot read {}: {e}", args[0]);
            std::process::exit(2);
        }
    };
    let mut specs = Vec::new();
    for s in &args[2..] {
        specs.push(match s.as_str() {
            "f32" => ArgSpec::Pointer { dtype: DType::F32 },
            "f16" => ArgSpec::Pointer { dtype: DType::F16 },
            "i32" => ArgSpec::Pointer { dtype: DType::I32 },
            "int" => ArgSpec::Scalar { dtype: DType::I32 },
            "float" => ArgSpec::Scalar { dtype: DType::F32 },
            n => match n.parse() {
                Ok(v) => ArgSpec::Constexpr { value: ConstValue::Int(v) },
                Err(_) => {
                    eprintln!("unknown parameter spec {n:?}");
                    std::process::exit(2);
                }
            },
        });
    }
    let sig = KernelSignature { args: specs };
    match compile(&src, Some(&args[1]), &sig, &CompileOptions::default()) {
        Ok(k) => println!("{}\n// workgroup_size {}", k.wgsl, k.workgroup_size),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
