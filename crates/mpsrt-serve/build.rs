//! Compiles the vendored Triton and gRPC-health protos with protox (pure Rust, no system protoc),
//! keeps the FileDescriptorSet for prost-reflect, and generates prost/tonic code from it.

use prost::Message;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/grpc_service.proto", "proto/model_config.proto", "proto/health.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    // The descriptor set is embedded so config.pbtxt can be parsed against model_config.proto at run time.
    std::fs::write(out.join("descriptors.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(fds)?;
    Ok(())
}
