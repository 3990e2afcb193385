//! Shared test helpers: compiling fixtures and checking the WGSL with naga (validation and
//! translation to MSL, which is how Metal breakage is caught without a Mac).

#![allow(dead_code)]

use mpsrt_core::DType;
use mpsrt_jit::{compile, ArgSpec, CompileOptions, CompiledKernel, ConstValue, KernelSignature};

pub fn ptr(dtype: DType) -> ArgSpec {
    ArgSpec::Pointer { dtype }
}
pub fn scalar(dtype: DType) -> ArgSpec {
    ArgSpec::Scalar { dtype }
}
pub fn int(v: i64) -> ArgSpec {
    ArgSpec::Constexpr { value: ConstValue::Int(v) }
}
pub fn string(v: &str) -> ArgSpec {
    ArgSpec::Constexpr { value: ConstValue::Str(v.into()) }
}

pub fn fixture(name: &str) -> String {
    let path = format!("{}/tests/kernels/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Compiles and checks the result with naga; panics with the WGSL on failure.
pub fn compile_ok(source: &str, kernel: Option<&str>, args: Vec<ArgSpec>) -> CompiledKernel {
    check(source, kernel, args).unwrap_or_else(|e| panic!("{e}"))
}

/// Compiles and validates; the error says which stage failed, with the numbered WGSL.
pub fn check(
    source: &str,
    kernel: Option<&str>,
    args: Vec<ArgSpec>,
) -> Result<CompiledKernel, String> {
    let k = compile(source, kernel, &KernelSignature { args }, &CompileOptions::default())
        .map_err(|e| format!("compile failed: {e}"))?;
    validate(&k)?;
    Ok(k)
}

/// Parses and validates the WGSL and translates it to MSL.
pub fn validate(k: &CompiledKernel) -> Result<(), String> {
    validate_caps(k, CAPS, (1, 0))
}

/// [`validate`] for kernels on cooperative matrices: f16, subgroups and
/// `wgpu_cooperative_matrix` allowed, MSL 2.4 (simdgroup matrices).
pub fn validate_coop(k: &CompiledKernel) -> Result<(), String> {
    use naga::valid::Capabilities as C;
    let caps = CAPS | C::SHADER_FLOAT16 | C::SUBGROUP | C::COOPERATIVE_MATRIX;
    validate_caps(k, caps, (2, 4))
}

fn validate_caps(
    k: &CompiledKernel,
    caps: naga::valid::Capabilities,
    msl: (u8, u8),
) -> Result<(), String> {
    let module = naga::front::wgsl::parse_str(&k.wgsl).map_err(|e| {
        format!("WGSL parse error:\n{}\n{}", e.emit_to_string(&k.wgsl), numbered(&k.wgsl))
    })?;
    let mut v = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps);
    let info = v.validate(&module).map_err(|e| {
        format!("naga validation error:\n{}\n{}", e.emit_to_string(&k.wgsl), numbered(&k.wgsl))
    })?;
    // SPIR-V too (what wgpu hands Vulkan): naga's writers can fail, even panic, on modules the
    // validator accepts (mpsrt-kernels' validate.rs found one in a cooperative-matrix kernel).
    let spv = std::panic::catch_unwind(|| {
        naga::back::spv::write_vec(&module, &info, &naga::back::spv::Options::default(), None)
    });
    match spv {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(format!("SPIR-V translation error: {e}\n{}", numbered(&k.wgsl))),
        Err(_) => {
            return Err(format!("SPIR-V translation panicked in naga\n{}", numbered(&k.wgsl)))
        }
    }
    let (msl, _) = naga::back::msl::write_string(
        &module,
        &info,
        &naga::back::msl::Options { lang_version: msl, ..Default::default() },
        &naga::back::msl::PipelineOptions::default(),
    )
    .map_err(|e| format!("MSL translation error: {e:?}\n{}", numbered(&k.wgsl)))?;
    if !msl.contains("kernel void") {
        return Err("MSL has no kernel entry point".into());
    }
    Ok(())
}

/// wgpu grants `pack2x16float`/`unpack2x16float` (SHADER_FLOAT16_IN_FLOAT32) on Vulkan and Metal;
/// nothing else beyond the baseline is allowed.
const CAPS: naga::valid::Capabilities = naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32;

fn numbered(s: &str) -> String {
    s.lines().enumerate().map(|(i, l)| format!("{:4} {l}\n", i + 1)).collect()
}
