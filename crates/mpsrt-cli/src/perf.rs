//! `mpsrt perf`: a native load generator for `mpsrt serve` (and any KServe-v2 / Triton server),
//! in the spirit of Triton's `perf_analyzer`.
//!
//! Why native: the Python client in `bench/serve_load.py` costs ~0.2-0.3 ms per request itself,
//! which hides the server's own per-request overhead. Here each worker owns one kept-alive
//! HTTP/1.1 connection (a bare hyper connection, no pool) or one gRPC channel and sends requests
//! back to back; a request is timed from just before it is written until its whole body has
//! arrived, and the response is validated afterwards, outside the timed span.
//!
//! Per concurrency level it reports throughput, latency percentiles and errors, and the server's
//! own view (Triton's statistics extension: queue / compute input / infer / output per request).
//! With `--direct MODEL.onnx` it also times the engine in-process on the same inputs, the way the
//! server's backend calls it, so `client p50 - direct p50` is the server's overhead per request.

mod direct;
mod grpc;
mod http;
mod instances;
mod report;

use crate::model_cmd::Device;
use mpsrt::{Error, Result};
use mpsrt_serve::TritonDType;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Barrier, Mutex};

/// Wire protocol of the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    Http,
    Grpc,
}

#[derive(clap::Args)]
pub struct PerfArgs {
    /// Model name in the server's repository.
    #[arg(short = 'm', long)]
    model: String,
    /// Model version (default: the server's choice).
    #[arg(short = 'x', long = "model-version")]
    version: Option<String>,
    /// Server address HOST:PORT (default 127.0.0.1:8000 for HTTP, 127.0.0.1:8001 for gRPC).
    #[arg(short = 'u', long = "url")]
    url: Option<String>,
    /// Protocol: http (KServe v2 REST) or grpc (Triton's GRPCInferenceService).
    #[arg(short = 'i', long, value_enum, default_value = "http")]
    protocol: Protocol,
    /// Concurrency levels START:END[:STEP] (inclusive, linear step), as perf_analyzer takes them.
    #[arg(
        long = "concurrency-range",
        value_name = "START:END[:STEP]",
        conflicts_with = "concurrency"
    )]
    concurrency_range: Option<String>,
    /// Concurrency levels as a list, e.g. 1,8,32 (default 1).
    #[arg(long, value_name = "C1,C2,...")]
    concurrency: Option<String>,
    /// Timed requests per concurrency level (shared by its workers).
    #[arg(long, default_value_t = 1000)]
    requests: usize,
    /// Untimed requests per concurrency level before timing (warms the connections and the server's plan for these shapes).
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    /// Batch size substituted for the model's dynamic batch dim (-1 first dim).
    #[arg(short = 'b', long = "batch-size", default_value_t = 1)]
    batch_size: usize,
    /// Send and receive tensors as binary data (Triton's binary tensor extension; the default).
    #[arg(long, conflicts_with = "json")]
    binary: bool,
    /// Send and receive tensors as JSON `data` arrays instead (HTTP only).
    #[arg(long)]
    json: bool,
    /// Also time this ONNX model in-process (same inputs, batch and device) at concurrency 1 and
    /// report the server overhead p50 = client p50 - direct p50.
    #[arg(long, value_name = "MODEL.onnx")]
    direct: Option<PathBuf>,
    /// Device of the --direct run; match the server's instance kind (default: GPU if any).
    #[arg(long, value_enum)]
    device: Option<Device>,
    /// Print one JSON object per line instead of a table.
    #[arg(long = "json-output")]
    json_output: bool,
    /// The server's metrics endpoint HOST:PORT, read for executions per instance (default: the
    /// server's host, port 8002); `none` to skip.
    #[arg(long = "metrics-url", value_name = "HOST:PORT")]
    metrics_url: Option<String>,
}

/// One input or output as the server's model metadata describes it.
#[derive(Clone, Debug)]
pub struct TensorMeta {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
}

/// The parts of `GET /v2/models/{m}` the load needs.
#[derive(Clone, Debug)]
pub struct ModelMeta {
    pub inputs: Vec<TensorMeta>,
    pub outputs: Vec<TensorMeta>,
}

/// One generated input tensor: concrete shape, little-endian bytes, and the same values as JSON.
#[derive(Clone, Debug)]
pub struct Input {
    pub name: String,
    pub datatype: TritonDType,
    pub shape: Vec<i64>,
    pub raw: Vec<u8>,
    pub json: Vec<serde_json::Value>,
}

/// A `(count, total ns)` pair of Triton's statistics extension.
#[derive(Clone, Copy, Debug, Default)]
pub struct Dur {
    pub count: u64,
    pub ns: u64,
}

/// A model's cumulative server-side statistics (summed over its versions).
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerStats {
    pub success: Dur,
    pub queue: Dur,
    pub compute_input: Dur,
    pub compute_infer: Dur,
    pub compute_output: Dur,
    pub inference_count: u64,
    pub execution_count: u64,
}

/// What the server's statistics say about the requests between two snapshots.
#[derive(Clone, Copy, Debug)]
pub struct ServerSummary {
    pub requests: u64,
    pub request_us: f64,
    pub queue_us: f64,
    pub compute_input_us: f64,
    pub compute_infer_us: f64,
    pub compute_output_us: f64,
    /// Batch elements per model execution (> 1 when dynamic batching merged requests).
    pub avg_batch: f64,
}

impl ServerStats {
    fn since(&self, before: &ServerStats) -> Option<ServerSummary> {
        let avg = |a: Dur, b: Dur| {
            let n = a.count.saturating_sub(b.count);
            if n == 0 {
                0.0
            } else {
                a.ns.saturating_sub(b.ns) as f64 / n as f64 / 1e3
            }
        };
        let requests = self.success.count.saturating_sub(before.success.count);
        if requests == 0 {
            return None;
        }
        let execs = self.execution_count.saturating_sub(before.execution_count);
        let infers = self.inference_count.saturating_sub(before.inference_count);
        Some(ServerSummary {
            requests,
            request_us: avg(self.success, before.success),
            queue_us: avg(self.queue, before.queue),
            compute_input_us: avg(self.compute_input, before.compute_input),
            compute_infer_us: avg(self.compute_infer, before.compute_infer),
            compute_output_us: avg(self.compute_output, before.compute_output),
            avg_batch: if execs == 0 { 0.0 } else { infers as f64 / execs as f64 },
        })
    }
}

/// Where to send the load, resolved once.
#[derive(Clone, Debug)]
pub struct Target {
    /// As the user gave it (or the default), for messages.
    pub given: String,
    /// `host:port`, for the HTTP Host header and the gRPC URI.
    pub authority: String,
    pub addr: SocketAddr,
    pub model: String,
    pub version: String,
}

/// A response received in full; validated after the clock stopped.
pub enum Reply {
    Http {
        status: u16,
        header_len: Option<usize>,
        body: bytes::Bytes,
    },
    Grpc(Box<mpsrt_serve::proto::inference::ModelInferResponse>),
    /// A complete answer that is a failure (a gRPC status): the connection stays usable.
    Failed(String),
}

/// One worker's connection.
pub enum Conn {
    Http(http::HttpConn),
    Grpc(grpc::GrpcConn),
}

/// What is sent on every request of a run, built once.
pub enum Payload {
    Http(http::InferBody),
    Grpc(Box<mpsrt_serve::proto::inference::ModelInferRequest>),
}

impl Conn {
    async fn open(t: &Target, protocol: Protocol) -> std::result::Result<Conn, String> {
        Ok(match protocol {
            Protocol::Http => Conn::Http(http::HttpConn::connect(t).await?),
            Protocol::Grpc => Conn::Grpc(grpc::GrpcConn::connect(t).await?),
        })
    }

    /// Sends one inference request and waits for the whole response. Err = transport failure.
    async fn send(&mut self, p: &Payload) -> std::result::Result<Reply, String> {
        match (self, p) {
            (Conn::Http(c), Payload::Http(b)) => c.infer(b).await,
            (Conn::Grpc(c), Payload::Grpc(r)) => c.infer(r).await,
            _ => Err("internal: payload does not match the protocol".into()),
        }
    }

    async fn metadata(&mut self, t: &Target) -> Result<ModelMeta> {
        match self {
            Conn::Http(c) => c.metadata(t).await,
            Conn::Grpc(c) => c.metadata(t).await,
        }
    }

    /// The model's statistics, or `None` when the server does not provide them.
    async fn stats(&mut self, t: &Target) -> Option<ServerStats> {
        match self {
            Conn::Http(c) => c.stats(t).await,
            Conn::Grpc(c) => c.stats(t).await,
        }
    }
}

/// Checks a reply: status, every expected output present, sizes consistent with shapes.
fn check(reply: &Reply, outputs: &[TensorMeta]) -> std::result::Result<(), String> {
    match reply {
        Reply::Http { status, header_len, body } => {
            http::check_infer(*status, *header_len, body, outputs)
        }
        Reply::Grpc(r) => grpc::check_infer(r, outputs),
        Reply::Failed(e) => Err(e.clone()),
    }
}

/// Bytes of `elems` elements of `datatype` on the wire, when fixed-size.
pub fn wire_bytes(datatype: &str, shape: &[i64]) -> Option<usize> {
    let size = TritonDType::parse(datatype)?.size()?;
    let elems =
        shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))?;
    elems.checked_mul(size)
}

/// `HOST:PORT` (optionally `http://HOST:PORT/`) → host and port, or an error naming the format.
fn parse_url(given: &str) -> Result<(String, u16)> {
    let bad = |why: &str| {
        Error::invalid(
            "perf",
            format!("-u {given:?}: {why}; expected HOST:PORT, e.g. 127.0.0.1:8000"),
        )
    };
    let s = given.trim();
    if s.starts_with("https://") {
        return Err(bad("https is not supported"));
    }
    let s = s.strip_prefix("http://").or_else(|| s.strip_prefix("grpc://")).unwrap_or(s);
    let s = s.trim_end_matches('/');
    if s.contains('/') {
        return Err(bad("give only the address, without a path"));
    }
    let (host, port) = s.rsplit_once(':').ok_or_else(|| bad("no port"))?;
    let port: u16 =
        port.parse().map_err(|_| bad(&format!("port {port:?} is not a number in 1..65535")))?;
    if host.is_empty() || port == 0 {
        return Err(bad("empty host or port 0"));
    }
    Ok((host.to_string(), port))
}

async fn resolve(a: &PerfArgs) -> Result<Target> {
    let default = match a.protocol {
        Protocol::Http => "127.0.0.1:8000",
        Protocol::Grpc => "127.0.0.1:8001",
    };
    let given = a.url.clone().unwrap_or_else(|| default.to_string());
    let (host, port) = parse_url(&given)?;
    let authority = format!("{host}:{port}");
    let addr = tokio::net::lookup_host(authority.as_str())
        .await
        .ok()
        .and_then(|mut it| it.next())
        .ok_or_else(|| {
            Error::invalid("perf", format!("-u {given:?}: cannot resolve host {host:?}"))
        })?;
    Ok(Target {
        given,
        authority,
        addr,
        model: a.model.clone(),
        version: a.version.clone().unwrap_or_default(),
    })
}

/// Concurrency levels from `--concurrency-range START:END[:STEP]` or `--concurrency A,B,C`.
fn concurrency_levels(a: &PerfArgs) -> Result<Vec<usize>> {
    let num = |flag: &str, s: &str| -> Result<usize> {
        match s.trim().parse::<usize>() {
            Ok(n) if (1..=4096).contains(&n) => Ok(n),
            _ => Err(Error::invalid(
                "perf",
                format!("{flag}: {s:?} is not a concurrency in 1..4096"),
            )),
        }
    };
    if let Some(r) = &a.concurrency_range {
        let flag = format!("--concurrency-range {r}");
        let parts: Vec<&str> = r.split(':').collect();
        if !(2..=3).contains(&parts.len()) {
            return Err(Error::invalid("perf", format!("{flag}: expected START:END[:STEP]")));
        }
        let (start, end) = (num(&flag, parts[0])?, num(&flag, parts[1])?);
        let step = if parts.len() == 3 { num(&flag, parts[2])? } else { 1 };
        if end < start {
            return Err(Error::invalid("perf", format!("{flag}: END is smaller than START")));
        }
        return Ok((start..=end).step_by(step).collect());
    }
    match &a.concurrency {
        Some(list) => {
            let flag = format!("--concurrency {list}");
            list.split(',').map(|s| num(&flag, s)).collect()
        }
        None => Ok(vec![1]),
    }
}

/// SplitMix64: a tiny deterministic generator, so runs are repeatable without a rand dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1), 24 bits (exact in f32).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Concrete shapes (a -1 first dim becomes the batch size, other -1 dims 1) and deterministic
/// random values: floats in [0, 1), integers in 0..16 (small, so index-like inputs stay valid).
fn make_inputs(meta: &ModelMeta, batch: usize, model: &str) -> Result<Vec<Input>> {
    let batched = meta.inputs.iter().all(|i| i.shape.first() == Some(&-1));
    if batch > 1 && !batched {
        return Err(Error::invalid(
            "perf",
            format!(
                "-b {batch}: model '{model}' has no batch dimension (its inputs' shapes: {:?}); \
                     use -b 1 or a model with max_batch_size > 0",
                meta.inputs.iter().map(|i| &i.shape).collect::<Vec<_>>()
            ),
        ));
    }
    let mut out = Vec::with_capacity(meta.inputs.len());
    for (k, m) in meta.inputs.iter().enumerate() {
        let dt =
            TritonDType::parse(&m.datatype).filter(|d| d.size().is_some()).ok_or_else(|| {
                Error::unsupported(
                    "perf",
                    format!(
                        "input '{}' has datatype {}; only fixed-size numeric types are generated",
                        m.name, m.datatype
                    ),
                )
            })?;
        let shape: Vec<i64> = m
            .shape
            .iter()
            .enumerate()
            .map(|(i, &d)| {
                if d >= 0 {
                    d
                } else if i == 0 && batched {
                    batch as i64
                } else {
                    1
                }
            })
            .collect();
        let n = wire_bytes(dt.as_str(), &shape).unwrap_or(0) / dt.size().unwrap_or(1);
        let mut rng = Rng(0x6d70_7372_7400 + k as u64);
        let mut raw = Vec::with_capacity(n * dt.size().unwrap_or(1));
        let mut json = Vec::with_capacity(n);
        for _ in 0..n {
            let int = (rng.next() % 16) as i64;
            let x = rng.unit();
            let v: serde_json::Value = match dt {
                TritonDType::Bool => {
                    raw.push(u8::from(int & 1 == 1));
                    (int & 1 == 1).into()
                }
                TritonDType::Uint8 | TritonDType::Int8 => {
                    raw.push(int as u8);
                    int.into()
                }
                TritonDType::Uint16 | TritonDType::Int16 => {
                    raw.extend_from_slice(&(int as u16).to_le_bytes());
                    int.into()
                }
                TritonDType::Uint32 | TritonDType::Int32 => {
                    raw.extend_from_slice(&(int as u32).to_le_bytes());
                    int.into()
                }
                TritonDType::Uint64 | TritonDType::Int64 => {
                    raw.extend_from_slice(&(int as u64).to_le_bytes());
                    int.into()
                }
                TritonDType::Fp16 => {
                    let h = half::f16::from_f32(x);
                    raw.extend_from_slice(&h.to_le_bytes());
                    h.to_f32().into()
                }
                TritonDType::Bf16 => {
                    let h = half::bf16::from_f32(x);
                    raw.extend_from_slice(&h.to_le_bytes());
                    h.to_f32().into()
                }
                TritonDType::Fp32 => {
                    raw.extend_from_slice(&x.to_le_bytes());
                    x.into()
                }
                TritonDType::Fp64 => {
                    raw.extend_from_slice(&f64::from(x).to_le_bytes());
                    f64::from(x).into()
                }
                TritonDType::Bytes => unreachable!("filtered above: BYTES has no fixed size"),
            };
            json.push(v);
        }
        out.push(Input { name: m.name.clone(), datatype: dt, shape, raw, json });
    }
    Ok(out)
}

/// Latencies (µs) and counts of one concurrency level.
pub struct Level {
    pub concurrency: usize,
    pub latencies_us: Vec<f64>,
    pub errors: usize,
    pub first_error: Option<String>,
    pub wall_s: f64,
    pub server: Option<ServerSummary>,
    /// (instance, device, executions) over the timed requests, when the server reports them.
    pub instances: Vec<(String, String, u64)>,
}

/// Shared by the workers of one level.
struct Shared {
    warm_left: AtomicUsize,
    left: AtomicUsize,
    /// Workers wait here after warm-up; the coordinator then snapshots the server's stats.
    warmed: Barrier,
    /// ...and releases them here to start the timed phase.
    go: Barrier,
    abort: AtomicBool,
    warm_error: Mutex<Option<String>>,
}

/// Takes one request from a shared budget; false when it is spent.
fn claim(n: &AtomicUsize) -> bool {
    n.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1)).is_ok()
}

struct WorkerOut {
    latencies_us: Vec<f64>,
    errors: usize,
    first_error: Option<String>,
    start: Instant,
    end: Instant,
}

async fn worker(
    mut conn: Conn,
    target: Arc<Target>,
    protocol: Protocol,
    payload: Arc<Payload>,
    outputs: Arc<Vec<TensorMeta>>,
    sh: Arc<Shared>,
) -> WorkerOut {
    // Warm-up: same connection, untimed. A failure here aborts the level with its message.
    while claim(&sh.warm_left) {
        let r = conn.send(&payload).await.and_then(|rep| check(&rep, &outputs));
        if let Err(e) = r {
            sh.warm_error.lock().await.get_or_insert(e);
            break;
        }
    }
    sh.warmed.wait().await;
    sh.go.wait().await;
    let mut out = WorkerOut {
        latencies_us: Vec::new(),
        errors: 0,
        first_error: None,
        start: Instant::now(),
        end: Instant::now(),
    };
    if sh.abort.load(Ordering::Acquire) {
        return out;
    }
    while claim(&sh.left) {
        let t0 = Instant::now();
        let sent = conn.send(&payload).await;
        let us = t0.elapsed().as_secs_f64() * 1e6;
        let r = match sent {
            Ok(rep) => check(&rep, &outputs),
            Err(e) => {
                // The connection is gone (server restarted, closed it): open a new one for the
                // next request; if that fails too, the next request reports it.
                if let Ok(c) = Conn::open(&target, protocol).await {
                    conn = c;
                }
                Err(e)
            }
        };
        match r {
            Ok(()) => out.latencies_us.push(us),
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert(e);
            }
        }
    }
    out.end = Instant::now();
    out
}

/// The model's statistics now. The server may have closed the idle control connection during a
/// long level, so one retry goes over a new connection.
async fn snapshot(control: &mut Conn, t: &Target, protocol: Protocol) -> Option<ServerStats> {
    if let Some(s) = control.stats(t).await {
        return Some(s);
    }
    *control = Conn::open(t, protocol).await.ok()?;
    control.stats(t).await
}

/// Preallocation for `n` latencies, bounded so a huge --requests cannot abort on allocation.
pub fn capacity(n: usize) -> usize {
    n.min(1 << 20)
}

/// Where to read per-instance counts: `--metrics-url`, else the server's host on port 8002.
fn metrics_addr(a: &PerfArgs, t: &Target) -> Option<String> {
    match a.metrics_url.as_deref() {
        Some("none") => None,
        Some(u) => Some(u.trim_start_matches("http://").trim_end_matches('/').to_string()),
        None => Some(format!("{}:8002", t.addr.ip())),
    }
}

/// Runs one concurrency level: warm-up, stats snapshot, timed requests, stats snapshot.
async fn run_level(
    a: &PerfArgs,
    target: &Arc<Target>,
    payload: &Arc<Payload>,
    outputs: &Arc<Vec<TensorMeta>>,
    control: &mut Conn,
    concurrency: usize,
) -> Result<Level> {
    let mut conns = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        conns.push(Conn::open(target, a.protocol).await.map_err(|e| Error::io("perf", e))?);
    }
    let sh = Arc::new(Shared {
        warm_left: AtomicUsize::new(a.warmup),
        left: AtomicUsize::new(a.requests),
        warmed: Barrier::new(concurrency + 1),
        go: Barrier::new(concurrency + 1),
        abort: AtomicBool::new(false),
        warm_error: Mutex::new(None),
    });
    let handles: Vec<_> = conns
        .into_iter()
        .map(|c| {
            let fut =
                worker(c, target.clone(), a.protocol, payload.clone(), outputs.clone(), sh.clone());
            tokio::spawn(fut)
        })
        .collect();
    sh.warmed.wait().await;
    let warm_error = sh.warm_error.lock().await.clone();
    let before =
        if warm_error.is_none() { snapshot(control, target, a.protocol).await } else { None };
    let metrics = metrics_addr(a, target);
    let inst_before = match &metrics {
        Some(m) if warm_error.is_none() => instances::scrape(m, &target.model).await,
        _ => None,
    };
    sh.abort.store(warm_error.is_some(), Ordering::Release);
    sh.go.wait().await;
    let mut outs = Vec::with_capacity(concurrency);
    for h in handles {
        outs.push(h.await.map_err(|e| Error::device("perf", format!("worker failed: {e}")))?);
    }
    if let Some(e) = warm_error {
        return Err(Error::invalid(
            "perf",
            format!("warm-up request to model '{}' at {} failed: {e}", target.model, target.given),
        ));
    }
    let after = snapshot(control, target, a.protocol).await;
    let inst_after = match (&metrics, &inst_before) {
        (Some(m), Some(_)) => instances::scrape(m, &target.model).await,
        _ => None,
    };
    let start = outs.iter().map(|o| o.start).min().unwrap_or_else(Instant::now);
    let end = outs.iter().map(|o| o.end).max().unwrap_or_else(Instant::now);
    let mut level = Level {
        concurrency,
        latencies_us: Vec::with_capacity(capacity(a.requests)),
        errors: 0,
        first_error: None,
        wall_s: end.saturating_duration_since(start).as_secs_f64(),
        server: match (before, after) {
            (Some(b), Some(a)) => a.since(&b),
            _ => None,
        },
        instances: match (inst_before, inst_after) {
            (Some(b), Some(a)) => instances::since(&b, &a),
            _ => Vec::new(),
        },
    };
    for o in outs {
        level.latencies_us.extend(o.latencies_us);
        level.errors += o.errors;
        if level.first_error.is_none() {
            level.first_error = o.first_error;
        }
    }
    level.latencies_us.sort_by(|x, y| x.total_cmp(y));
    Ok(level)
}

pub fn run(a: PerfArgs) -> Result<()> {
    let levels = concurrency_levels(&a)?;
    if a.requests == 0 {
        return Err(Error::invalid("perf", "--requests 0: give at least one request per level"));
    }
    if a.batch_size == 0 {
        return Err(Error::invalid("perf", "-b 0: the batch size must be at least 1"));
    }
    if a.json && a.protocol == Protocol::Grpc {
        return Err(Error::invalid(
            "perf",
            "--json applies to HTTP only; gRPC always sends raw tensor contents",
        ));
    }
    if a.direct.is_some() && !levels.contains(&1) {
        return Err(Error::invalid(
            "perf",
            format!("--direct is compared with the client at concurrency 1, but the levels are {levels:?}; include 1"),
        ));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::device("perf", format!("cannot start the async runtime: {e}")))?;
    let (target, mut control, meta) = rt.block_on(async {
        let target = resolve(&a).await?;
        let mut control =
            Conn::open(&target, a.protocol).await.map_err(|e| Error::io("perf", e))?;
        let meta = control.metadata(&target).await?;
        Ok::<_, Error>((target, control, meta))
    })?;
    let inputs = make_inputs(&meta, a.batch_size, &a.model)?;
    let binary = !a.json;
    let payload = Arc::new(match a.protocol {
        Protocol::Http => Payload::Http(http::InferBody::new(&target, &inputs, binary)?),
        Protocol::Grpc => Payload::Grpc(Box::new(grpc::infer_request(&target, &inputs))),
    });
    let rep = report::Reporter::new(&a, &target, binary);
    rep.header(&levels);
    // The in-process run goes first, while the server is idle, and fails fast on a bad path.
    let direct = match &a.direct {
        Some(path) => {
            let d = direct::time(path, a.device, &inputs, a.warmup, a.requests)?;
            rep.direct(&d);
            Some(d)
        }
        None => None,
    };
    rep.table_header();
    let target = Arc::new(target);
    let outputs = Arc::new(meta.outputs.clone());
    let mut failed = (0usize, 0usize, None::<String>);
    let mut c1_p50 = None;
    for &c in &levels {
        let level = rt.block_on(run_level(&a, &target, &payload, &outputs, &mut control, c))?;
        rep.level(&level);
        if c == 1 {
            c1_p50 = Some(report::pct(&level.latencies_us, 0.5));
        }
        failed.0 += level.errors;
        failed.1 += level.errors + level.latencies_us.len();
        if failed.2.is_none() {
            failed.2 = level.first_error.clone();
        }
        // Let the server settle between levels (closing connections, idle batchers).
        std::thread::sleep(Duration::from_millis(50));
    }
    rep.footer();
    if let (Some(d), Some(client)) = (&direct, c1_p50) {
        rep.overhead(client, report::pct(&d.latencies_us, 0.5));
    }
    if failed.0 > 0 {
        return Err(Error::io(
            "perf",
            format!(
                "{} of {} requests to model '{}' at {} failed; first error: {}",
                failed.0,
                failed.1,
                a.model,
                target.given,
                failed.2.unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_name_the_expected_form() {
        assert_eq!(parse_url("127.0.0.1:8000").unwrap(), ("127.0.0.1".into(), 8000));
        assert_eq!(parse_url("http://localhost:8100/").unwrap(), ("localhost".into(), 8100));
        assert_eq!(parse_url("[::1]:9").unwrap(), ("[::1]".into(), 9));
        for bad in ["localhost", "host:abc", ":80", "https://x:1", "x:1/v2", "x:0"] {
            let e = parse_url(bad).unwrap_err().to_string();
            assert!(e.contains("HOST:PORT"), "{bad}: {e}");
        }
    }

    #[test]
    fn generated_inputs_are_deterministic_and_batched() {
        let meta = ModelMeta {
            inputs: vec![TensorMeta {
                name: "x".into(),
                datatype: "FP16".into(),
                shape: vec![-1, 3],
            }],
            outputs: vec![],
        };
        let a = make_inputs(&meta, 4, "m").unwrap();
        let b = make_inputs(&meta, 4, "m").unwrap();
        assert_eq!(a[0].shape, vec![4, 3]);
        assert_eq!(a[0].raw.len(), 4 * 3 * 2);
        assert_eq!(a[0].raw, b[0].raw);
        let fixed = ModelMeta {
            inputs: vec![TensorMeta { name: "x".into(), datatype: "INT32".into(), shape: vec![2] }],
            outputs: vec![],
        };
        assert!(make_inputs(&fixed, 2, "m").unwrap_err().to_string().contains("no batch"));
    }
}
