//! `com.microsoft` contrib ops: the rewrites into default-domain ONNX nodes live in the importer
//! (`mpsrt_onnx::contrib`), so `mpsrt run`, `mpsrt.onnx.InferenceSession` and this EP accept
//! the same ORT-optimized models. `GetCapability` offers a contrib node when it has a rewrite;
//! the trial import then refuses the variants the rewrite does not cover (the error names the
//! op and why), and ORT keeps those nodes.

pub(crate) use mpsrt_onnx::contrib::is_contrib;
