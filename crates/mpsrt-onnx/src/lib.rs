//! ONNX front end of mpsrt: decodes `.onnx` protobuf (types generated at build time from the
//! vendored `onnx.proto` with protox, so no system `protoc`), maps tensors and dtypes, and converts
//! nodes into an `mpsrt_graph::Graph` through per-family importer tables. Models using ops mpsrt
//! does not support fail at load with the complete list; nothing here executes a graph.
//!
//! ```no_run
//! let model = mpsrt_onnx::load_path("model.onnx")?;
//! let compiled = mpsrt_graph::CompiledGraph::new(model.graph, Default::default())?;
//! let plan = compiled.plan(&[vec![1, 3, 224, 224]])?;
//! # Ok::<(), mpsrt_core::Error>(())
//! ```

pub mod contrib;
mod ctx;
mod import;
pub mod ops;
pub mod tensor;

pub mod proto {
    //! Prost types generated from the vendored `proto/onnx.proto` (package `onnx`).
    #![allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

pub use import::{
    import_model, load_bytes, load_bytes_with_dir, load_path, Model, MAX_OPSET, MIN_OPSET,
};
pub use ops::supported_ops;
