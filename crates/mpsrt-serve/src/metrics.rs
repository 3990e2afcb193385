//! Prometheus text metrics on the metrics port, with Triton's metric names and labels.

use crate::server::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Routes of the metrics endpoint (`GET /metrics`).
pub fn router(state: Arc<State>) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|axum::extract::State(s): axum::extract::State<Arc<State>>| async move {
                ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], render(&s)).into_response()
            }),
        )
        .with_state(state)
}

/// Renders every metric family in Prometheus text exposition format.
pub fn render(state: &State) -> String {
    let models = state.manager.all_ready();
    type Getter = fn(&crate::stats::ModelStats) -> u64;
    let families: [(&str, &str, &str, Getter); 10] = [
        ("nv_inference_request_success", "counter", "Number of successful inference requests, all batch sizes", |s| s.success.count()),
        ("nv_inference_request_failure", "counter", "Number of failed inference requests, all batch sizes", |s| s.fail.count()),
        ("nv_inference_count", "counter", "Number of inferences performed (does not include cached requests)", |s| s.inference_count.load(Ordering::Relaxed)),
        ("nv_inference_exec_count", "counter", "Number of model executions performed (does not include cached requests)", |s| s.execution_count.load(Ordering::Relaxed)),
        ("nv_inference_request_duration_us", "counter", "Cumulative inference request duration in microseconds (includes cached requests)", |s| (s.success.ns() + s.fail.ns()) / 1000),
        ("nv_inference_queue_duration_us", "counter", "Cumulative inference queuing duration in microseconds (includes cached requests)", |s| s.queue.ns() / 1000),
        ("nv_inference_compute_input_duration_us", "counter", "Cumulative compute input duration in microseconds (does not include cached requests)", |s| s.compute_input.ns() / 1000),
        ("nv_inference_compute_infer_duration_us", "counter", "Cumulative compute inference duration in microseconds (does not include cached requests)", |s| s.compute_infer.ns() / 1000),
        ("nv_inference_compute_output_duration_us", "counter", "Cumulative inference compute output duration in microseconds (does not include cached requests)", |s| s.compute_output.ns() / 1000),
        ("nv_inference_pending_request_count", "gauge", "Instantaneous number of pending requests awaiting execution per-model.", |s| s.pending.load(Ordering::Relaxed)),
    ];
    let mut out = String::new();
    for (name, kind, help, get) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for m in &models {
            let _ = writeln!(
                out,
                "{name}{{model=\"{}\",version=\"{}\"}} {}",
                escape(&m.name),
                m.version,
                get(&m.stats)
            );
        }
    }
    // Per instance (not a Triton family): how requests spread over instances and devices.
    type InstGetter = fn(&crate::scheduler::InstanceStats) -> u64;
    let per_instance: [(&str, &str, InstGetter); 3] = [
        (
            "mpsrt_instance_exec_count",
            "Number of model executions performed by this instance",
            |i| i.executions.load(Ordering::Relaxed),
        ),
        (
            "mpsrt_instance_inference_count",
            "Number of inferences (batch elements) performed by this instance",
            |i| i.inferences.load(Ordering::Relaxed),
        ),
        (
            "mpsrt_instance_compute_infer_duration_us",
            "Cumulative compute inference duration of this instance in microseconds",
            |i| i.infer_ns.load(Ordering::Relaxed) / 1000,
        ),
    ];
    for (name, help, get) in per_instance {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for m in &models {
            for i in m.scheduler.instances() {
                let _ = writeln!(
                    out,
                    "{name}{{model=\"{}\",version=\"{}\",instance=\"{}\",device=\"{}\"}} {}",
                    escape(&m.name),
                    m.version,
                    escape(&i.name),
                    i.device,
                    get(i)
                );
            }
        }
    }
    if let Some(f) = &state.gpu_memory {
        let gpus = f();
        for (name, help, total) in [
            ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", true),
            ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", false),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for g in &gpus {
                let v = if total { g.total_bytes } else { g.used_bytes };
                let _ = writeln!(out, "{name}{{gpu_uuid=\"{}\"}} {v}", escape(&g.gpu));
            }
        }
    }
    out
}

/// Label values escape backslash, quote and newline.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
