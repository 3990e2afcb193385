//! Triton-Inference-Server-compatible server: model repository, HTTP/gRPC front ends, batching, metrics.
//!
//! Model execution is behind [`Backend`]/[`ModelInstance`]; the server itself never runs a model.
//! Start it with [`serve`] (until a shutdown signal) or [`start`] (returns a handle with the bound
//! addresses, as tests and embedders need).
//!
//! ```no_run
//! # async fn run(engine: std::sync::Arc<dyn mpsrt_serve::Backend>) -> Result<(), mpsrt_serve::ServeError> {
//! use mpsrt_serve::{ServeBackends, ServerOptions};
//! let options = ServerOptions::new("examples/model_repository");
//! let backends = ServeBackends::new().with_backend(engine).with_gpus(vec![0]);
//! // The CLI passes a SIGINT/SIGTERM future; `serve` then drains in-flight requests and returns.
//! mpsrt_serve::serve(options, backends, async { /* wait for a signal */ }).await
//! # }
//! ```

pub mod backend;
mod codec;
pub mod config;
mod grpc;
pub mod grpc_budget;
mod http;
mod http_infer;
mod metrics;
pub mod model;
mod net;
pub mod options;
pub mod pool;
pub mod proto;
pub mod repository;
pub mod scheduler;
pub mod server;
pub mod stats;
pub mod types;
pub mod warmup;
pub mod wire;

pub use backend::{
    Backend, GpuMemoryFn, GpuMemoryInfo, InstanceDevice, ModelInstance, ModelIo, ServeBackends,
    TensorIo,
};
pub use options::{ModelControlMode, ServerOptions};
pub use server::{serve, start, RunningServer};
pub use types::{ErrorKind, HostTensor, ServeError, TensorData, TritonDType};
