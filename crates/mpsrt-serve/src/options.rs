//! Command-line options of `mpsrt serve` (a clap `Args` the CLI crate flattens).

use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// How the model repository is managed, as Triton's `--model-control-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum ModelControlMode {
    /// Load everything at startup; no load/unload API.
    #[default]
    None,
    /// Load everything and rescan the repository every `--repository-poll-secs`.
    Poll,
    /// Load only `--load-model` models; clients load/unload through the API.
    Explicit,
}

/// Options of `mpsrt serve`.
#[derive(Debug, Clone, Args)]
pub struct ServerOptions {
    /// Triton-layout model repository (`<repo>/<model>/config.pbtxt`, `<repo>/<model>/1/model.onnx`).
    #[arg(long, value_name = "DIR")]
    pub model_repository: PathBuf,
    /// HTTP/REST port (0 picks a free port).
    #[arg(long, default_value_t = 8000)]
    pub http_port: u16,
    /// gRPC port (0 picks a free port).
    #[arg(long, default_value_t = 8001)]
    pub grpc_port: u16,
    /// Prometheus metrics port (0 picks a free port).
    #[arg(long, default_value_t = 8002)]
    pub metrics_port: u16,
    /// Address the three listeners bind to.
    #[arg(long, default_value = "0.0.0.0")]
    pub host: String,
    #[arg(long, value_enum, default_value_t = ModelControlMode::None)]
    pub model_control_mode: ModelControlMode,
    /// Model to load at startup in explicit mode (repeatable; `*` loads all).
    #[arg(long = "load-model", value_name = "NAME")]
    pub load_model: Vec<String>,
    /// Rescan interval in poll mode.
    #[arg(long, default_value_t = 15)]
    pub repository_poll_secs: u64,
    /// Verbose logging level (0 = off).
    #[arg(long, default_value_t = 0)]
    pub log_verbose: u32,
    /// Largest accepted HTTP request body (after decompression) and gRPC message, in bytes.
    /// A larger declared `Content-Length` is answered 413 before the body is read.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    pub max_request_bytes: usize,
    /// Budget of request bytes being received or decoded at once, over all connections; a request
    /// that would exceed it is refused with 429 / RESOURCE_EXHAUSTED (default: 4 x max-request-bytes).
    #[arg(long, value_name = "BYTES")]
    pub max_inflight_request_bytes: Option<usize>,
    /// On SIGINT/SIGTERM: seconds to let in-flight requests finish before every connection is
    /// closed (as Triton's `--exit-timeout-secs`).
    #[arg(long, default_value_t = 30)]
    pub exit_timeout_secs: u64,
    /// Most open connections per HTTP and per gRPC listener (the metrics listener allows 32);
    /// further clients wait in the accept backlog.
    #[arg(long, default_value_t = 512)]
    pub max_connections: usize,
    /// Seconds a client has to send an HTTP request's headers; also closes idle keep-alive connections.
    #[arg(long, default_value_t = 30)]
    pub http_header_timeout_secs: u64,
    /// Seconds a client has to send a whole HTTP request body.
    #[arg(long, default_value_t = 60)]
    pub request_body_timeout_secs: u64,
    /// A connection whose socket makes no progress for this many seconds is closed (0: never).
    /// Stalled response writes count on HTTP; on gRPC stalled reads too (keep-alive pings keep
    /// healthy connections busy).
    #[arg(long, default_value_t = 300)]
    pub idle_timeout_secs: u64,
    /// Most instances one model may ask for (sum of its `instance_group` counts). Default:
    /// 4 x the machine's CPU threads, at least 16.
    #[arg(long, value_name = "N")]
    pub max_instances_per_model: Option<usize>,
    /// Most instances over all models together (they share the executor pool). Default: 16 x the
    /// machine's CPU threads, at least 64.
    #[arg(long, value_name = "N")]
    pub max_total_instances: Option<usize>,
    /// Batches executing at once over the whole server: the threads of the executor pool all
    /// model instances share. Default: 2 x the machine's CPU threads, at least 8.
    #[arg(long, value_name = "N")]
    pub executor_threads: Option<usize>,
    /// Largest `max_batch_size` a model config may set.
    #[arg(long, default_value_t = 4096)]
    pub max_batch_size_limit: usize,
    /// Requests of one gRPC ModelStreamInfer stream executed at once (responses stay in order).
    #[arg(long, default_value_t = 16)]
    pub max_stream_inflight: usize,
}

impl ServerOptions {
    /// Options for a repository with Triton's default ports.
    pub fn new(model_repository: impl Into<PathBuf>) -> Self {
        Self {
            model_repository: model_repository.into(),
            http_port: 8000,
            grpc_port: 8001,
            metrics_port: 8002,
            host: "0.0.0.0".into(),
            model_control_mode: ModelControlMode::None,
            load_model: Vec::new(),
            repository_poll_secs: 15,
            log_verbose: 0,
            max_request_bytes: 64 * 1024 * 1024,
            max_inflight_request_bytes: None,
            exit_timeout_secs: 30,
            max_connections: 512,
            http_header_timeout_secs: 30,
            request_body_timeout_secs: 60,
            idle_timeout_secs: 300,
            max_instances_per_model: None,
            max_total_instances: None,
            executor_threads: None,
            max_batch_size_limit: 4096,
            max_stream_inflight: 16,
        }
    }

    /// The in-flight request-bytes budget in effect.
    pub fn inflight_budget(&self) -> usize {
        self.max_inflight_request_bytes.unwrap_or(self.max_request_bytes.saturating_mul(4)).max(1)
    }

    /// The server-wide instance bound in effect.
    pub fn total_instance_limit(&self) -> usize {
        self.max_total_instances.unwrap_or_else(|| {
            let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
            (16 * cpus).max(64)
        })
    }

    /// The executor pool's size in effect.
    pub fn executor_thread_limit(&self) -> usize {
        self.executor_threads
            .unwrap_or_else(|| {
                let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
                (2 * cpus).max(8)
            })
            .max(1)
    }

    /// The per-model instance bound in effect.
    pub fn instance_limit(&self) -> usize {
        self.max_instances_per_model.unwrap_or_else(|| {
            let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
            (4 * cpus).max(16)
        })
    }
}
