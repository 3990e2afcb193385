//! Prints the WGSL `mpsrt-jit` generates for a kernel file, for reading and profiling:
//! `cargo run -p mpsrt-jit --example dump_wgsl -- FILE.py KERNEL [f32|f16|i32|int|float|N]...`
//! (one spec per parameter: a pointer's element type, a runtime scalar, or a constexpr int).
//!
//! Triton TTIR: `dump_wgsl FILE.ttir [threads=N] [device_max=N] [widen=N] [subgroups] [coop=S]
//! [vec2] [vec4] [bounded] [nostage] [separate] [noprefetch] [f16store] [sg=N] [narrow=N]
//! [twobarrier]`
//! compiles like the Triton backend does on an adapter with those properties (`threads` is
//! `num_warps * 32`; `coop=16` is a 16x16 f16 cooperative-matrix configuration on 32-lane
//! subgroups; `sg=32` a fixed subgroup size, which the layout choice `narrow` needs), e.g. the
//! H100/H200: `threads=256 device_max=1024 subgroups coop=16 sg=32 bounded`.

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
    if args[0].ends_with(".ttir") {
        return ttir(&src, &args[1..]);
    }
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

fn ttir(src: &str, flags: &[String]) {
    let mut opts = CompileOptions { max_workgroup_storage: u32::MAX, ..Default::default() };
    let (mut device_max, mut widen) = (0u32, mpsrt_jit::WIDEN_TO);
    for f in flags {
        let (k, v) = f.split_once('=').unwrap_or((f.as_str(), ""));
        let n = v.parse::<u32>().unwrap_or(0);
        match k {
            "threads" => opts.max_workgroup_size = n,
            "device_max" => device_max = n,
            "widen" => widen = n as usize,
            "subgroups" => opts.subgroups = true,
            "vec2" => opts.slab_vec2 = true,
            "vec4" => opts.slab_vec4 = true,
            "bounded" => opts.self_bounded = true,
            "nostage" => opts.stage_dot = false,
            "separate" => opts.joint_stage = false,
            "noprefetch" => opts.prefetch_stage = false,
            "f16store" => opts.f16_store = true,
            "sg" => opts.subgroup_size = n,
            "narrow" => opts.narrow_to = n,
            "twobarrier" => opts.one_barrier = false,
            "coop" => opts.coop = Some(mpsrt_jit::CoopConfig { size: n, subgroup: 32 }),
            _ => {
                eprintln!("unknown flag {f:?}");
                std::process::exit(2);
            }
        }
    }
    let device_max = device_max.max(opts.max_workgroup_size);
    match mpsrt_jit::compile_ttir_widening_to(src, None, &opts, device_max, widen) {
        Ok(k) => println!(
            "{}\n// workgroup_size {} workgroup_bytes {}",
            k.wgsl, k.workgroup_size, k.workgroup_bytes
        ),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
