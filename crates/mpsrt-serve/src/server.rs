//! Server lifecycle: shared state, startup of the HTTP/gRPC/metrics listeners, graceful shutdown.

use crate::backend::{GpuMemoryFn, ServeBackends};
use crate::net::ConnLimits;
use crate::options::{ModelControlMode, ServerOptions};
use crate::repository::ModelManager;
use crate::types::ServeError;
use parking_lot::Mutex;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

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
    /// One permit per request byte being received or decoded (`--max-inflight-request-bytes`).
    pub budget: Arc<Semaphore>,
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
    kill: CancellationToken,
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
    let manager =
        Arc::new(ModelManager::new(options.model_repository.clone(), backends).with_limits(
            crate::repository::LoadLimits {
                max_instances: options.instance_limit(),
                max_total_instances: options.total_instance_limit(),
                max_batch_size: options.max_batch_size_limit,
                executor_threads: options.executor_thread_limit(),
            },
        ));
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
    let options_budget = options.inflight_budget();
    let secs = |s: u64| Duration::from_secs(s);
    let idle = (options.idle_timeout_secs > 0).then(|| secs(options.idle_timeout_secs));
    let http_limits = ConnLimits {
        max_connections: options.max_connections,
        header_timeout: secs(options.http_header_timeout_secs.max(1)),
        idle_timeout: idle,
        idle_reads: false,
    };
    let metrics_limits = ConnLimits { max_connections: 32, ..http_limits };
    let grpc_limits = ConnLimits { idle_reads: true, ..http_limits };
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
        // Counted in KiB, as `http::charge` takes it.
        budget: Arc::new(Semaphore::new(options_budget.div_ceil(1024).min(Semaphore::MAX_PERMITS))),
        accepting: AtomicBool::new(true),
    });
    let (stop, stop_rx) = watch::channel(false);
    let kill = CancellationToken::new();
    let signal = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let (http_addr, grpc_addr, metrics_addr) =
        (local(&http_l)?, local(&grpc_l)?, local(&metrics_l)?);
    let mut tasks = Vec::new();
    let http_app = crate::http::router(state.clone());
    tasks.push(tokio::spawn(crate::net::serve_http(
        http_l,
        http_app,
        http_limits,
        stop_rx.clone(),
        kill.clone(),
    )));
    let metrics_app = crate::metrics::router(state.clone());
    tasks.push(tokio::spawn(crate::net::serve_http(
        metrics_l,
        metrics_app,
        metrics_limits,
        stop_rx.clone(),
        kill.clone(),
    )));
    let grpc = crate::grpc::router(state.clone());
    let rx = stop_rx.clone();
    let incoming = crate::net::incoming(grpc_l, grpc_limits, stop_rx.clone(), kill.clone());
    tasks.push(tokio::spawn(async move {
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
    Ok(RunningServer { http_addr, grpc_addr, metrics_addr, state, stop, kill, tasks, poller })
}

impl RunningServer {
    /// Stops accepting, lets in-flight requests finish for up to `--exit-timeout-secs`, then
    /// closes every remaining connection (a client that never finishes its request cannot block
    /// shutdown), and stops the models.
    pub async fn shutdown(self) -> Result<(), ServeError> {
        self.state.accepting.store(false, Ordering::Relaxed);
        let _ = self.stop.send(true);
        if let Some(p) = self.poller {
            let _ = p.await;
        }
        let deadline =
            tokio::time::Instant::now() + Duration::from_secs(self.state.options.exit_timeout_secs);
        let mut first_err = None;
        let mut late = Vec::new();
        for mut t in self.tasks {
            match tokio::time::timeout_at(deadline, &mut t).await {
                Ok(r) => first_err = first_err.or(task_error(r)),
                Err(_) => late.push(t),
            }
        }
        if !late.is_empty() {
            tracing::warn!(
                "exit timeout of {} s reached: closing the connections still open",
                self.state.options.exit_timeout_secs
            );
            // Every guarded socket now fails its I/O, so the servers' connection tasks end.
            self.kill.cancel();
            for mut t in late {
                if tokio::time::timeout(Duration::from_secs(2), &mut t).await.is_err() {
                    t.abort();
                }
            }
        }
        self.state.manager.shutdown().await;
        first_err.map_or(Ok(()), Err)
    }
}

fn task_error(r: Result<Result<(), ServeError>, tokio::task::JoinError>) -> Option<ServeError> {
    match r {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(e) => Some(ServeError::internal(format!("server task: {e}"))),
    }
}

/// The model table Triton prints once it is ready: one row per model version, the reason of an
/// UNAVAILABLE model after its status (`UNAVAILABLE: reason`), as Triton writes it.
pub fn ready_table(rows: &[crate::repository::IndexEntry]) -> String {
    let cells: Vec<[String; 3]> = rows
        .iter()
        .map(|r| {
            let status = if r.reason.is_empty() {
                r.state.clone()
            } else {
                format!("{}: {}", r.state, r.reason.replace('\n', " "))
            };
            let version = if r.version.is_empty() { "-".to_string() } else { r.version.clone() };
            [r.name.clone(), version, status]
        })
        .collect();
    let head = ["Model".to_string(), "Version".to_string(), "Status".to_string()];
    let mut w = head.clone().map(|h| h.chars().count());
    for c in &cells {
        for (k, x) in c.iter().enumerate() {
            w[k] = w[k].max(x.chars().count());
        }
    }
    let line = format!("+{}+\n", w.map(|n| "-".repeat(n + 2)).join("+"));
    let row = |c: &[String; 3]| {
        let parts: Vec<String> = c
            .iter()
            .zip(w)
            .map(|(x, n)| format!(" {x}{} ", " ".repeat(n - x.chars().count())))
            .collect();
        format!("|{}|\n", parts.join("|"))
    };
    let mut out = String::new();
    out.push_str(&line);
    out.push_str(&row(&head));
    out.push_str(&line);
    for c in &cells {
        out.push_str(&row(c));
    }
    out.push_str(&line);
    out
}

impl RunningServer {
    /// What Triton prints when it is ready: the model table and the three endpoints.
    pub fn ready_banner(&self) -> String {
        format!(
            "{}Started GRPCInferenceService at {}\nStarted HTTPService at {}\nStarted Metrics Service at {}\n",
            ready_table(&self.state.manager.index(false)),
            self.grpc_addr,
            self.http_addr,
            self.metrics_addr
        )
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
