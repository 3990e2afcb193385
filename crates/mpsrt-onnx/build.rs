//! Compiles the vendored `proto/onnx.proto` with protox (pure Rust, so builds need no system
//! `protoc`) and generates prost types for it.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    let fds = protox::compile(["onnx.proto"], ["proto"])?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
