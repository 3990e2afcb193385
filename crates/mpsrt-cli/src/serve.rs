//! `mpsrt serve`: the Triton-compatible server with the ONNX engine installed. Prints Triton's
//! model table and endpoints once ready; SIGINT/SIGTERM stop it (in-flight requests drain for up
//! to `--exit-timeout-secs`, then remaining connections are closed).

use mpsrt::{Error, Result};
use mpsrt_engine::triton::EngineBackend;
use mpsrt_serve::{GpuMemoryInfo, ServeBackends, ServerOptions};
use std::sync::Arc;

#[derive(clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub server: ServerOptions,
}

/// `TRITON_MPS_VERBOSE=1` (the seed's switch) turns on verbose logging like `--log-verbose 1`;
/// verbose logging needs the server's info-level log lines, so the filter gains them unless
/// RUST_LOG chose otherwise.
pub fn apply_env(a: &mut ServeArgs, filter: &mut String) {
    let seed_verbose = std::env::var("TRITON_MPS_VERBOSE")
        .is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "off"));
    if seed_verbose {
        a.server.log_verbose = a.server.log_verbose.max(1);
    }
    if a.server.log_verbose > 0 && std::env::var("RUST_LOG").is_err() {
        filter.push_str(",mpsrt_serve=info");
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

fn gpu_memory() -> Vec<GpuMemoryInfo> {
    (0..mpsrt::device::device_count())
        .filter_map(|i| mpsrt::device::gpu_device(i).ok().map(|d| (i, d)))
        .map(|(i, d)| {
            let p = d.properties();
            GpuMemoryInfo {
                gpu: format!("mps:{i} {}", p.name),
                total_bytes: p.total_memory,
                used_bytes: d.memory_stats().allocated,
            }
        })
        .collect()
}

pub fn run(a: ServeArgs) -> Result<()> {
    let gpus: Vec<u32> = (0..mpsrt::device::device_count() as u32).collect();
    let backends = ServeBackends::new()
        .with_backend(Arc::new(EngineBackend::default()))
        .with_gpus(gpus)
        .with_gpu_memory(Arc::new(gpu_memory));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::device("serve", format!("cannot start the async runtime: {e}")))?;
    let exit_timeout = a.server.exit_timeout_secs;
    rt.block_on(async move {
        let server = mpsrt_serve::start(a.server, backends).await?;
        // What Triton prints at its default log level once it is ready.
        println!("{}", server.ready_banner());
        shutdown_signal().await;
        eprintln!(
            "mpsrt serve: shutting down (draining in-flight requests for up to {exit_timeout} s)"
        );
        server.shutdown().await
    })
    .map_err(|e| Error::device("serve", e.to_string()))
}
