//! `mpsrt serve`'s real stack: the Triton-protocol server with the ONNX engine as its backend,
//! serving the committed example repository (`examples/model_repository`: Triton's `simple` with a
//! config.pbtxt, `relu_fp32` with its config auto-completed from the ONNX graph). Answers are
//! checked against values computed here, per request, under concurrency; with
//! `MPSRT_TRITONCLIENT_PYTHON` set, the real `tritonclient` (HTTP and gRPC) drives it too.

use mpsrt_engine::triton::EngineBackend;
use mpsrt_serve::{RunningServer, ServeBackends, ServerOptions};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/model_repository")
}

async fn start() -> RunningServer {
    let mut o = ServerOptions::new(repo());
    o.host = "127.0.0.1".into();
    o.http_port = 0;
    o.grpc_port = 0;
    o.metrics_port = 0;
    // As `mpsrt serve` does: the example `mps_model` (the seed's config) asks for KIND_GPU gpus [0].
    let gpus = (0..mpsrt_runtime::device_count() as u32).collect();
    let backends =
        ServeBackends::new().with_backend(Arc::new(EngineBackend::default())).with_gpus(gpus);
    mpsrt_serve::start(o, backends).await.expect("server starts on the example repository")
}

async fn post(c: &reqwest::Client, url: &str, body: Value) -> (u16, Value) {
    let r = c.post(url).json(&body).send().await.expect("request is answered");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn output<'a>(resp: &'a Value, name: &str) -> &'a Value {
    resp["outputs"]
        .as_array()
        .and_then(|o| o.iter().find(|t| t["name"] == name))
        .unwrap_or_else(|| panic!("no output {name} in {resp}"))
}

fn ints(v: &Value) -> Vec<i64> {
    v["data"].as_array().expect("data array").iter().map(|x| x.as_i64().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn example_repository_served_by_the_engine() {
    let s = start().await;
    let base = format!("http://{}", s.http_addr);
    let c = reqwest::Client::new();

    let ready = c.get(format!("{base}/v2/health/ready")).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 200);
    for m in ["simple", "relu_fp32"] {
        let r = c.get(format!("{base}/v2/models/{m}/ready")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{m} is not ready");
    }
    // relu_fp32 has no config.pbtxt: inputs/outputs and batching come from the ONNX graph.
    let cfg: Value = c
        .get(format!("{base}/v2/models/relu_fp32/config"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(cfg["input"][0]["name"], "INPUT0", "{cfg}");
    assert!(cfg["max_batch_size"].as_i64().unwrap_or(0) > 0, "{cfg}");

    // `simple`: many concurrent clients, each request with its own values.
    let mut tasks = Vec::new();
    for client in 0..8i64 {
        let (c, base) = (c.clone(), base.clone());
        tasks.push(tokio::spawn(async move {
            for req in 0..25i64 {
                let a: Vec<i64> = (0..16).map(|i| client * 1000 + req * 16 + i).collect();
                let b: Vec<i64> = (0..16).map(|i| (i * 7 + req) % 11 - 5).collect();
                let body = json!({
                    "id": format!("{client}-{req}"),
                    "inputs": [
                        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": a},
                        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": b},
                    ]
                });
                let (st, r) = post(&c, &format!("{base}/v2/models/simple/infer"), body).await;
                assert_eq!(st, 200, "{r}");
                assert_eq!(r["id"], format!("{client}-{req}"));
                let sum: Vec<i64> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
                let diff: Vec<i64> = a.iter().zip(&b).map(|(x, y)| x - y).collect();
                assert_eq!(ints(output(&r, "OUTPUT0")), sum);
                assert_eq!(ints(output(&r, "OUTPUT1")), diff);
            }
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }

    // relu_fp32 with a batch of 3.
    let x: Vec<f32> = (0..24).map(|i| (i as f32 - 11.5) * 0.25).collect();
    let body =
        json!({"inputs": [{"name": "INPUT0", "shape": [3, 8], "datatype": "FP32", "data": x}]});
    let (st, r) = post(&c, &format!("{base}/v2/models/relu_fp32/infer"), body).await;
    assert_eq!(st, 200, "{r}");
    let y: Vec<f64> = output(&r, "OUTPUT0")["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let want: Vec<f64> = x.iter().map(|&v| v.max(0.0) as f64).collect();
    assert_eq!(y, want);

    // Wrong input name and wrong shape: 400 with an error body, and the server keeps serving.
    let bad = json!({"inputs": [{"name": "NOPE", "shape": [1, 8], "datatype": "FP32", "data": vec![0.0f32; 8]}]});
    let (st, r) = post(&c, &format!("{base}/v2/models/relu_fp32/infer"), bad).await;
    assert_eq!(st, 400, "{r}");
    assert!(r["error"].is_string(), "{r}");
    let bad = json!({"inputs": [{"name": "INPUT0", "shape": [1, 5], "datatype": "FP32", "data": vec![0.0f32; 5]}]});
    let (st, r) = post(&c, &format!("{base}/v2/models/relu_fp32/infer"), bad).await;
    assert_eq!(st, 400, "{r}");

    // Statistics saw the successful requests.
    let stats: Value =
        c.get(format!("{base}/v2/models/simple/stats")).send().await.unwrap().json().await.unwrap();
    let ok = &stats["model_stats"][0]["inference_stats"]["success"]["count"];
    assert!(ok.as_u64().unwrap_or(0) >= 200, "{stats}");

    if let Ok(python) = std::env::var("MPSRT_TRITONCLIENT_PYTHON") {
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/tools/tritonclient_engine.py");
        let (h, g) = (s.http_addr.to_string(), s.grpc_addr.to_string());
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(python).arg(script).args([&h, &g]).output().unwrap()
        })
        .await
        .unwrap();
        let log = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success() && log.contains("ALL OK"), "{log}");
    } else {
        eprintln!("tritonclient part not run: set MPSRT_TRITONCLIENT_PYTHON (make test does)");
    }
    s.shutdown().await.expect("graceful shutdown");
}
