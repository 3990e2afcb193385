//! `mpsrt serve`: the Triton-compatible server with the ONNX engine installed; SIGINT/SIGTERM
//! stop it gracefully (in-flight requests are drained).

use mpsrt::{Error, Result};
use mpsrt_engine::triton::EngineBackend;
use mpsrt_serve::{GpuMemoryInfo, ServeBackends, ServerOptions};
use std::sync::Arc;

#[derive(clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub server: ServerOptions,
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
    eprintln!("mpsrt serve: shutting down (draining in-flight requests)");
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
    rt.block_on(mpsrt_serve::serve(a.server, backends, shutdown_signal()))
        .map_err(|e| Error::device("serve", e.to_string()))
}
