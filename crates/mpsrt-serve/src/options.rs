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
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    pub max_request_bytes: usize,
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
        }
    }
}
