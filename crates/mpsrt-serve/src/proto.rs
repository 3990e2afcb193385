//! Generated protocol types: Triton's `inference` package and `grpc.health.v1`.

#[allow(clippy::all, missing_docs)]
pub mod inference {
    tonic::include_proto!("inference");
}

#[allow(clippy::all, missing_docs)]
pub mod health {
    tonic::include_proto!("grpc.health.v1");
}

/// Serialized FileDescriptorSet of the vendored protos, for prost-reflect (text format, JSON).
pub const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));
