//! `mpsrt perf` against a real `mpsrt serve` child process on the example repository (CPU, free
//! ports): JSON lines per concurrency level, the --direct overhead line, and clear errors (no
//! panic) for a wrong model name, a server that is not there, and a malformed address.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::free_ports;

fn mpsrt() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mpsrt"));
    c.env("MPSRT_DEVICE", "cpu");
    c
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `mpsrt serve` on the example repository; killed and reaped on drop.
struct Server {
    child: Child,
    http: u16,
    metrics: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `simple` (the model perf drives) is ready. Not /v2/health/ready: with the GPU
/// disabled the example `mps_model` (KIND_GPU, the seed's config) is UNAVAILABLE, as in Triton.
fn ready(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let req =
        "GET /v2/models/simple/ready HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let mut resp = String::new();
    s.set_read_timeout(Some(Duration::from_secs(2))).ok();
    s.write_all(req.as_bytes()).is_ok()
        && s.read_to_string(&mut resp).is_ok()
        && resp.starts_with("HTTP/1.1 200")
}

fn start_server() -> Server {
    let (http, grpc, metrics) = free_ports();
    let child = mpsrt()
        .arg("serve")
        .arg("--model-repository")
        .arg(root().join("examples/model_repository"))
        .args(["--http-port", &http.to_string(), "--grpc-port", &grpc.to_string()])
        .args(["--metrics-port", &metrics.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Server { child, http, metrics };
    let t0 = Instant::now();
    while !ready(http) {
        if let Ok(Some(st)) = server.child.try_wait() {
            panic!("mpsrt serve exited early: {st}");
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "server not ready after 120 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn perf_measures_simple_and_reports_the_overhead() {
    let server = start_server();
    let url = format!("127.0.0.1:{}", server.http);
    let out = mpsrt()
        .args(["perf", "-m", "simple", "-u", &url, "--requests", "50", "--warmup", "5"])
        .args(["--metrics-url", &format!("127.0.0.1:{}", server.metrics)])
        .args(["--concurrency-range", "1:2", "--json-output", "--device", "cpu", "--direct"])
        .arg(root().join("examples/model_repository/simple/1/model.onnx"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let loads: Vec<&serde_json::Value> = lines.iter().filter(|v| v["kind"] == "load").collect();
    assert_eq!(loads.len(), 2, "{}", text(&out));
    for (v, c) in loads.iter().zip([1, 2]) {
        assert_eq!(v["concurrency"], c, "{v}");
        assert_eq!(v["requests"], 50, "{v}");
        assert_eq!(v["errors"], 0, "{v}");
        let (p50, p99) = (v["p50_us"].as_f64().unwrap(), v["p99_us"].as_f64().unwrap());
        assert!(p50 > 0.0 && p50 <= p99, "{v}");
        assert!(v["throughput_rps"].as_f64().unwrap() > 0.0, "{v}");
        // mpsrt serve has the statistics extension: the timed requests show up there.
        assert_eq!(v["server"]["requests"], 50, "{v}");
        // And its per-instance series: simple's one instance (on the CPU here) ran them all,
        // one execution per request at concurrency 1, batched at most 2 by 2 at concurrency 2.
        let inst = v["instances"].as_array().unwrap();
        assert_eq!(inst.len(), 1, "{v}");
        assert_eq!(
            (inst[0]["instance"].as_str(), inst[0]["device"].as_str()),
            (Some("simple_0"), Some("cpu"))
        );
        let n = inst[0]["executions"].as_u64().unwrap();
        assert!(if c == 1 { n == 50 } else { (25..=50).contains(&n) }, "{v}");
    }
    let direct = lines.iter().find(|v| v["kind"] == "direct").expect("direct line");
    assert_eq!(direct["requests"], 50);
    let o = lines.iter().find(|v| v["kind"] == "overhead").expect("overhead line");
    let client = o["client_p50_us"].as_f64().unwrap();
    let engine = o["direct_p50_us"].as_f64().unwrap();
    let overhead = o["server_overhead_p50_us"].as_f64().unwrap();
    assert!((client - engine - overhead).abs() < 0.2, "{o}");
    assert_eq!(o["client_p50_us"], loads[0]["p50_us"]);

    // JSON tensors and the table output work too.
    let out = mpsrt()
        .args(["perf", "-m", "simple", "-u", &url, "--requests", "20", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("req/s"), "{}", text(&out));

    // A wrong model name: a clear error listing the repository, non-zero exit, no panic.
    let out = mpsrt().args(["perf", "-m", "nope", "-u", &url, "--requests", "5"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(err.contains("'nope'") && err.contains("not available"), "{err}");
    assert!(err.contains("simple"), "the repository's models are listed: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn perf_errors_name_the_address_without_a_server() {
    let port = free_port();
    let out = mpsrt()
        .args(["perf", "-m", "simple", "-u", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(err.contains(&format!("127.0.0.1:{port}")) && err.contains("cannot connect"), "{err}");
    for (flag, value) in
        [("-u", "localhost"), ("--concurrency-range", "4:1"), ("--concurrency", "1,x")]
    {
        let out = mpsrt().args(["perf", "-m", "simple", flag, value]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flag} {value}: {}", text(&out));
        assert!(err.contains(value) && !err.contains("panicked"), "{flag} {value}: {err}");
    }
}
