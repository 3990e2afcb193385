//! Metal readiness without a Mac: parse WGSL with naga, validate it, and translate it to MSL.
//! Used by the tests of every crate that produces WGSL.

/// Validate `source` and translate it to Metal Shading Language; the error says which step failed.
pub fn wgsl_to_msl(source: &str) -> Result<String, String> {
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|e| format!("WGSL parse: {}", e.emit_to_string(source)))?;
    let mut validator = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    );
    let info = validator
        .validate(&module)
        .map_err(|e| format!("validation: {}", e.emit_to_string(source)))?;
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
