//! Server lifecycle: shared state, startup of the HTTP/gRPC/metrics listeners, graceful shutdown.

use crate::backend::{GpuMemoryFn, ServeBackends};
use crate::options::{ModelControlMode, ServerOptions};
use crate::repository::ModelManager;
use crate::types::ServeError;
use axum::serve::ListenerExt;
use parking_lot::Mutex;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Server name reported by `GET /v2` and ServerMetadata.
pub const SERVER_NAME: &str = "mpsrt";
/// Protocol extensions implemented (a subset of Triton's list; only what works).
pub const EXTENSIONS: &[&str] = &[
    "binary_tensor_data",
    "model_repository",
    "model_configuration",
    "schedule_policy",
    "statistics",
    "logging",
];

/// `/v2/logging` settings (kept and reported; `log_verbose_level` drives debug logging).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LogSettings {
    pub log_file: String,
    pub log_info: bool,
    pub log_warning: bool,
    pub log_error: bool,
    pub log_verbose_level: u32,
    pub log_format: String,
}

/// State shared by all front ends.
pub struct State {
    pub manager: Arc<ModelManager>,
    pub options: ServerOptions,
    pub log: Mutex<LogSettings>,
    pub verbose: AtomicU32,
    pub gpu_memory: Option<GpuMemoryFn>,
    accepting: AtomicBool,
}

impl State {
    pub fn live(&self) -> bool {
        true
    }

    /// Ready while accepting requests and every model asked for loaded (Triton's strict readiness).
    pub fn ready(&self) -> bool {
        self.accepting.load(Ordering::Relaxed) && self.manager.all_ready_ok()
    }

    /// Load/unload through the API is only allowed in explicit mode, as in Triton.
    pub fn check_explicit(&self) -> Result<(), ServeError> {
        if self.options.model_control_mode == ModelControlMode::Explicit {
            Ok(())
        } else {
            Err(ServeError::unsupported(
                "explicit model load / unload is not allowed if polling is enabled",
            ))
        }
    }
}

/// A started server: its bound addresses and the handle that stops it.
pub struct RunningServer {
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub state: Arc<State>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<Result<(), ServeError>>>,
    poller: Option<JoinHandle<()>>,
}

async fn bind(host: &str, port: u16, what: &str) -> Result<TcpListener, ServeError> {
    TcpListener::bind((host, port))
        .await
        .map_err(|e| ServeError::unavailable(format!("cannot bind {what} port {host}:{port}: {e}")))
}

fn local(l: &TcpListener) -> Result<SocketAddr, ServeError> {
    l.local_addr().map_err(|e| ServeError::internal(format!("local_addr: {e}")))
}

/// Loads the models the control mode asks for, binds the three ports and starts serving.
pub async fn start(
    options: ServerOptions,
    backends: ServeBackends,
) -> Result<RunningServer, ServeError> {
    if !options.model_repository.is_dir() {
        return Err(ServeError::invalid(format!(
            "model repository '{}' is not a directory",
            options.model_repository.display()
        )));
    }
    let gpu_memory = backends.gpu_memory.clone();
    let manager = Arc::new(ModelManager::new(options.model_repository.clone(), backends));
    match options.model_control_mode {
        ModelControlMode::None | ModelControlMode::Poll => manager.load_all().await,
        ModelControlMode::Explicit => {
            if options.load_model.iter().any(|m| m == "*") {
                manager.load_all().await;
            } else {
                for m in &options.load_model {
                    if let Err(e) = manager.load(m, None).await {
                        tracing::warn!("{e}");
                    }
                }
            }
        }
    }
    let http_l = bind(&options.host, options.http_port, "HTTP").await?;
    let grpc_l = bind(&options.host, options.grpc_port, "gRPC").await?;
    let metrics_l = bind(&options.host, options.metrics_port, "metrics").await?;
    let state = Arc::new(State {
        manager: manager.clone(),
        log: Mutex::new(LogSettings {
            log_file: String::new(),
            log_info: true,
            log_warning: true,
            log_error: true,
            log_verbose_level: options.log_verbose,
            log_format: "default".into(),
        }),
        verbose: AtomicU32::new(options.log_verbose),
        options,
        gpu_memory,
        accepting: AtomicBool::new(true),
    });
    let (stop, stop_rx) = watch::channel(false);
    let signal = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let (http_addr, grpc_addr, metrics_addr) =
        (local(&http_l)?, local(&grpc_l)?, local(&metrics_l)?);
    let mut tasks = Vec::new();
    let http_app = crate::http::router(state.clone());
    let rx = stop_rx.clone();
    tasks.push(tokio::spawn(async move {
        // TCP_NODELAY: small replies go out at once instead of waiting on Nagle's algorithm
        // (axum leaves it off by default).
        let http_l = http_l.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(http_l, http_app)
            .with_graceful_shutdown(signal(rx))
            .await
            .map_err(|e| ServeError::internal(format!("HTTP server: {e}")))
    }));
    let metrics_app = crate::metrics::router(state.clone());
    let rx = stop_rx.clone();
    tasks.push(tokio::spawn(async move {
        axum::serve(metrics_l, metrics_app)
            .with_graceful_shutdown(signal(rx))
            .await
            .map_err(|e| ServeError::internal(format!("metrics server: {e}")))
    }));
    let grpc = crate::grpc::router(state.clone());
    let rx = stop_rx.clone();
    tasks.push(tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(grpc_l);
        grpc.serve_with_incoming_shutdown(incoming, signal(rx))
            .await
            .map_err(|e| ServeError::internal(format!("gRPC server: {e}")))
    }));
    let poller = (state.options.model_control_mode == ModelControlMode::Poll).then(|| {
        let m = manager.clone();
        let every = Duration::from_secs(state.options.repository_poll_secs.max(1));
        let mut rx = stop_rx.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => m.poll().await,
                    _ = rx.changed() => break,
                }
            }
        })
    });
    Ok(RunningServer { http_addr, grpc_addr, metrics_addr, state, stop, tasks, poller })
}

impl RunningServer {
    /// Stops accepting, waits for in-flight requests to be answered, then stops the models.
    pub async fn shutdown(self) -> Result<(), ServeError> {
        self.state.accepting.store(false, Ordering::Relaxed);
        let _ = self.stop.send(true);
        if let Some(p) = self.poller {
            let _ = p.await;
        }
        let mut first_err = None;
        for t in self.tasks {
            match t.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => first_err = first_err.or(Some(e)),
                Err(e) => {
                    first_err =
                        first_err.or(Some(ServeError::internal(format!("server task: {e}"))))
                }
            }
        }
        self.state.manager.shutdown().await;
        first_err.map_or(Ok(()), Err)
    }
}

/// Runs the server until `shutdown_signal` resolves, then shuts down gracefully.
pub async fn serve(
    options: ServerOptions,
    backends: ServeBackends,
    shutdown_signal: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let server = start(options, backends).await?;
    tracing::info!(
        http = %server.http_addr, grpc = %server.grpc_addr, metrics = %server.metrics_addr,
        "mpsrt serve started"
    );
    shutdown_signal.await;
    server.shutdown().await
}
