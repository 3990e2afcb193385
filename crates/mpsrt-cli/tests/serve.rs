//! `mpsrt serve` as a user first meets it: Triton's ready table and endpoints on stdout at the
//! default log level, the fourth seed's config (`backend: "metal_mps"`, `model.mps`) served from
//! the example repository, `TRITON_MPS_VERBOSE=1` turning on verbose logs, and SIGTERM ending the
//! process promptly even with a client holding a half-sent request.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::free_ports;

fn post(port: u16, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

#[test]
fn serve_prints_the_ready_table_and_serves_the_seed_config() {
    let (http, grpc, metrics) = free_ports();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/model_repository");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mpsrt"))
        .arg("serve")
        .arg("--model-repository")
        .arg(&repo)
        .args(["--host", "127.0.0.1", "--exit-timeout-secs", "1"])
        .args(["--http-port", &http.to_string(), "--grpc-port", &grpc.to_string()])
        .args(["--metrics-port", &metrics.to_string()])
        .env("TRITON_MPS_VERBOSE", "1")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    let t0 = Instant::now();
    while !banner.contains("Started Metrics Service") {
        assert!(t0.elapsed() < Duration::from_secs(120), "no ready banner: {banner}");
        if out.read_line(&mut banner).unwrap() == 0 {
            panic!("mpsrt serve exited: {banner}");
        }
    }
    for want in [
        "| Model ",
        "| Version |",
        "| Status ",
        "| simple ",
        "| relu_fp32 ",
        &format!("Started GRPCInferenceService at 127.0.0.1:{grpc}"),
        &format!("Started HTTPService at 127.0.0.1:{http}"),
        &format!("Started Metrics Service at 127.0.0.1:{metrics}"),
    ] {
        assert!(banner.contains(want), "'{want}' missing from:\n{banner}");
    }
    let row = banner.lines().find(|l| l.starts_with("| mps_model ")).expect("mps_model row");
    if row.contains("READY") {
        // The seed's config as written: backend metal_mps, model.mps (ONNX), [3,224,224] -> [1000].
        // One image: SqueezeNet on lavapipe in a debug build takes ~10 s per image.
        let x = vec!["0.5"; 3 * 224 * 224].join(",");
        let body = format!(
            r#"{{"inputs":[{{"name":"input","datatype":"FP32","shape":[1,3,224,224],"data":[{x}]}}]}}"#
        );
        let (status, resp) = post(http, "/v2/models/mps_model/infer", &body);
        assert_eq!(status, 200, "{resp}");
        let v: serde_json::Value = serde_json::from_str(&resp).unwrap();
        assert_eq!(v["outputs"][0]["shape"], serde_json::json!([1, 1000]));
        // The light model's weights are all equal (ConstantOfShape 0.02), so every class gets the
        // same logit and the softmax is uniform: 1/1000 each (onnxruntime gives the same).
        let data = v["outputs"][0]["data"].as_array().unwrap();
        assert_eq!(data.len(), 1000);
        assert!(data.iter().all(|p| (p.as_f64().unwrap() - 1e-3).abs() < 1e-6), "{resp}");
    } else {
        // No GPU here: KIND_GPU cannot be honoured, and the table says why (as Triton does).
        assert!(row.contains("UNAVAILABLE"), "{row}");
    }
    // A client that sends half a request must not hold up SIGTERM past the exit timeout.
    let mut loris = TcpStream::connect(("127.0.0.1", http)).unwrap();
    loris
        .write_all(b"POST /v2/models/simple/infer HTTP/1.1\r\nContent-Length: 50\r\n\r\n{")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    let killed = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(killed.success());
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(15), "SIGTERM did not stop mpsrt serve");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    if row.contains("READY") {
        // TRITON_MPS_VERBOSE=1 is verbose logging: each inference is logged.
        assert!(err.contains("HTTP infer"), "{err}");
    }
    assert!(err.contains("shutting down"), "{err}");
}
