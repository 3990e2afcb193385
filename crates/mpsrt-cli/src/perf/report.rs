//! Output of `mpsrt perf`: a small table, or one JSON object per line (`--json-output`) with
//! `"kind"` = `"load"` (one per concurrency level), `"direct"` and `"overhead"`.

use super::direct::Direct;
use super::{Level, PerfArgs, Protocol, Target};
use serde_json::{json, Value};

/// Nearest-rank percentile of sorted values (as `mpsrt bench` computes it); 0 when empty.
pub fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Rounds to 0.1 µs for JSON, so lines stay readable.
fn r1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

pub struct Reporter {
    json: bool,
    base: Value,
    title: String,
}

impl Reporter {
    pub fn new(a: &PerfArgs, t: &Target, binary: bool) -> Reporter {
        let protocol = match a.protocol {
            Protocol::Http => "http",
            Protocol::Grpc => "grpc",
        };
        let base = json!({
            "model": a.model, "url": t.given, "protocol": protocol,
            "binary": binary || a.protocol == Protocol::Grpc, "batch_size": a.batch_size,
        });
        let wire = match (a.protocol, binary) {
            (Protocol::Grpc, _) => "gRPC (raw tensor contents)",
            (Protocol::Http, true) => "HTTP/1.1 keep-alive (binary tensors)",
            (Protocol::Http, false) => "HTTP/1.1 keep-alive (JSON tensors)",
        };
        let title = format!(
            "mpsrt perf: model '{}' at {} over {wire}, batch {}, {} requests per level after {} warm-up",
            a.model, t.given, a.batch_size, a.requests, a.warmup
        );
        Reporter { json: a.json_output, base, title }
    }

    fn line(&self, kind: &str, fields: Value) {
        let mut v = self.base.clone();
        v["kind"] = kind.into();
        if let (Some(o), Value::Object(f)) = (v.as_object_mut(), fields) {
            o.extend(f);
        }
        println!("{v}");
    }

    pub fn header(&self, levels: &[usize]) {
        if !self.json {
            println!("{}, concurrency {levels:?}", self.title);
        }
    }

    pub fn direct(&self, d: &Direct) {
        let l = &d.latencies_us;
        let (p50, p90, p99, m) = (pct(l, 0.5), pct(l, 0.9), pct(l, 0.99), mean(l));
        if self.json {
            self.line(
                "direct",
                json!({"model_path": d.path.display().to_string(), "place": d.place.to_string(),
                    "requests": l.len(), "p50_us": r1(p50), "p90_us": r1(p90), "p99_us": r1(p99),
                    "mean_us": r1(m)}),
            );
        } else {
            println!(
                "direct: engine in-process on {} ({}), {} runs: p50 {p50:.1} us  p90 {p90:.1} us  p99 {p99:.1} us  mean {m:.1} us",
                d.place,
                d.path.display(),
                l.len()
            );
        }
    }

    pub fn table_header(&self) {
        if !self.json {
            println!();
            println!("{:>58} | server, per request (us)", "client latency (us)");
            println!(
                "{:>5} {:>9} {:>8} {:>8} {:>8} {:>8} {:>6} | {:>6} {:>6} {:>7} {:>6} {:>7} {:>5}",
                "conc",
                "req/s",
                "p50",
                "p90",
                "p99",
                "mean",
                "errors",
                "queue",
                "input",
                "infer",
                "output",
                "total",
                "batch"
            );
        }
    }

    pub fn level(&self, lv: &Level) {
        let l = &lv.latencies_us;
        let (p50, p90, p99, m) = (pct(l, 0.5), pct(l, 0.9), pct(l, 0.99), mean(l));
        let rps = if lv.wall_s > 0.0 { l.len() as f64 / lv.wall_s } else { 0.0 };
        if self.json {
            let server = lv.server.map(|s| {
                json!({"requests": s.requests, "request_us": r1(s.request_us), "queue_us": r1(s.queue_us),
                    "compute_input_us": r1(s.compute_input_us), "compute_infer_us": r1(s.compute_infer_us),
                    "compute_output_us": r1(s.compute_output_us), "avg_batch": (s.avg_batch * 100.0).round() / 100.0})
            });
            self.line(
                "load",
                json!({"concurrency": lv.concurrency, "requests": l.len() + lv.errors,
                    "errors": lv.errors, "first_error": lv.first_error,
                    "throughput_rps": r1(rps), "p50_us": r1(p50), "p90_us": r1(p90),
                    "p99_us": r1(p99), "mean_us": r1(m), "server": server,
                    "instances": lv.instances.iter().map(|(i, d, n)| json!({"instance": i, "device": d, "executions": n})).collect::<Vec<_>>()}),
            );
            return;
        }
        let server = match lv.server {
            Some(s) => format!(
                "{:>6.1} {:>6.1} {:>7.1} {:>6.1} {:>7.1} {:>5.2}",
                s.queue_us,
                s.compute_input_us,
                s.compute_infer_us,
                s.compute_output_us,
                s.request_us,
                s.avg_batch
            ),
            None => "(the server reports no statistics)".to_string(),
        };
        println!(
            "{:>5} {rps:>9.1} {p50:>8.1} {p90:>8.1} {p99:>8.1} {m:>8.1} {:>6} | {server}",
            lv.concurrency, lv.errors
        );
        if let Some(e) = &lv.first_error {
            println!("      first error: {e}");
        }
        if !lv.instances.is_empty() {
            let per: Vec<String> =
                lv.instances.iter().map(|(i, d, n)| format!("{i} on {d}: {n}")).collect();
            println!("      executions per instance: {}", per.join(", "));
        }
    }

    /// The number: what the server adds on top of the engine, per request, at p50.
    pub fn overhead(&self, client_p50: f64, direct_p50: f64) {
        let o = client_p50 - direct_p50;
        if self.json {
            self.line(
                "overhead",
                json!({"concurrency": 1, "client_p50_us": r1(client_p50),
                    "direct_p50_us": r1(direct_p50), "server_overhead_p50_us": r1(o)}),
            );
        } else {
            println!();
            println!(
                "server overhead p50 = client p50 - direct p50 = {client_p50:.1} - {direct_p50:.1} = {o:.1} µs (concurrency 1)"
            );
        }
    }

    /// Column legend after the table (text mode only).
    pub fn footer(&self) {
        if !self.json {
            println!(
                "server columns: the model's statistics over the timed requests (queue, compute input / infer / output; \
                 total = enqueue to reply) per request; batch = elements per model execution"
            );
        }
    }
}
