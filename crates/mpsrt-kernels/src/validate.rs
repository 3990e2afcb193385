//! Metal readiness without a Mac: parse WGSL with naga, validate it, and translate it to MSL —
//! and to SPIR-V, the form wgpu hands Vulkan, because naga's backends can fail on a module the
//! validator accepts (the first cooperative-matrix GEMM "generation 2" validated and translated
//! to MSL, then panicked in naga's SPIR-V writer on the H100). Used by the tests of every crate
//! that produces WGSL.

/// Validate `source`, translate it to SPIR-V (the check only) and to Metal Shading Language; the
/// error says which step failed. A naga backend that panics is reported as an error too.
pub fn wgsl_to_msl(source: &str) -> Result<String, String> {
    let (module, info) = parse_validate(source)?;
    spv_check(&module, &info)?;
    let options = naga::back::msl::Options { lang_version: (2, 4), ..Default::default() };
    let (msl, _) = naga::back::msl::write_string(
        &module,
        &info,
        &options,
        &naga::back::msl::PipelineOptions::default(),
    )
    .map_err(|e| format!("MSL translation: {e}"))?;
    Ok(msl)
}

/// Validate `source` and translate it to SPIR-V only (the form wgpu hands Vulkan), for
/// kernels whose tests check the Vulkan path on its own.
pub fn wgsl_to_spv(source: &str) -> Result<(), String> {
    let (module, info) = parse_validate(source)?;
    spv_check(&module, &info)
}

fn parse_validate(source: &str) -> Result<(naga::Module, naga::valid::ModuleInfo), String> {
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|e| format!("WGSL parse: {}", e.emit_to_string(source)))?;
    let mut validator = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    );
    let info = validator
        .validate(&module)
        .map_err(|e| format!("validation: {}", e.emit_to_string(source)))?;
    Ok((module, info))
}

/// naga's SPIR-V writer on a validated module; a panic in it is reported as an error.
fn spv_check(module: &naga::Module, info: &naga::valid::ModuleInfo) -> Result<(), String> {
    let spv = std::panic::catch_unwind(|| {
        naga::back::spv::write_vec(module, info, &naga::back::spv::Options::default(), None)
    });
    match spv {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("SPIR-V translation: {e}")),
        Err(p) => {
            let why = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("SPIR-V translation panicked in naga: {why}"))
        }
    }
}
