//! Concurrency: many clients with dynamic batching, a full queue, shutdown with requests in flight.

use crate::common::*;
use serde_json::{json, Value};

fn binary_request(a: &[i32], b: &[i32]) -> (Vec<u8>, usize) {
    let rows = a.len() / 16;
    let hdr = serde_json::to_vec(&json!({
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [rows, 16], "parameters": {"binary_data_size": a.len() * 4}},
            {"name": "INPUT1", "datatype": "INT32", "shape": [rows, 16], "parameters": {"binary_data_size": b.len() * 4}}
        ],
        "parameters": {"binary_data_output": true}
    }))
    .unwrap();
    let mut body = hdr.clone();
    body.extend(le_i32(a));
    body.extend(le_i32(b));
    (body, hdr.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_clients_two_hundred_requests_each() {
    let s = start(options(&standard_repo())).await;
    let url = format!("{}/v2/models/simple/infer", http(&s));
    let mut tasks = Vec::new();
    for client_id in 0..32i32 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let c = client();
            for n in 0..200i32 {
                // Batch sizes 1..=3 so the batcher merges requests of different sizes and must
                // split them back; values unique to (client, request, element) catch any mix-up.
                let rows = 1 + (n % 3);
                let a: Vec<i32> =
                    (0..16 * rows).map(|k| client_id * 1_000_000 + n * 1000 + k).collect();
                let b: Vec<i32> = (0..16 * rows).map(|k| k - n).collect();
                let (body, hl) = binary_request(&a, &b);
                let r = c
                    .post(&url)
                    .header("Inference-Header-Content-Length", hl)
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                let hl: usize = r.headers()["inference-header-content-length"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                let bytes = r.bytes().await.unwrap();
                let half = 64 * rows as usize;
                let sum = from_le_i32(&bytes[hl..hl + half]);
                let dif = from_le_i32(&bytes[hl + half..]);
                let want_sum: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
                let want_dif: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x - y).collect();
                assert_eq!((sum, dif), (want_sum, want_dif), "client {client_id} request {n}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let st: Value = client()
        .get(format!("{}/v2/models/simple/stats", http(&s)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let m = &st["model_stats"][0];
    // 32 clients x (67 x 1 + 67 x 2 + 66 x 3) batch elements.
    assert_eq!(m["inference_count"], 32 * (67 + 134 + 198));
    assert_eq!(m["inference_stats"]["success"]["count"], 6400);
    let exec = m["execution_count"].as_u64().unwrap();
    assert!(exec < 6400, "no request was batched: {exec} executions");
    let max_batch = m["batch_stats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["batch_size"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(max_batch > 1, "largest batch {max_batch}");
    assert!(max_batch <= 8);
    let metrics = client()
        .get(format!("http://{}/metrics", s.metrics_addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics
        .contains(&format!("nv_inference_count{{model=\"simple\",version=\"1\"}} {}", 32 * 399)));
    assert!(metrics.contains("nv_inference_request_success{model=\"simple\",version=\"1\"} 6400"));
    assert!(metrics
        .contains(&format!("nv_inference_exec_count{{model=\"simple\",version=\"1\"}} {exec}")));
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_is_refused_with_unavailable() {
    let s = start(options(&standard_repo())).await;
    let url = format!("{}/v2/models/slow/infer", http(&s));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let (body, hl) = binary_request(&[i; 16], &[0; 16]);
            let r = client()
                .post(&url)
                .header("Inference-Header-Content-Length", hl)
                .body(body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.bytes().await.unwrap())
        }));
    }
    let mut ok = 0;
    let mut refused = 0;
    for t in tasks {
        let (status, body) = t.await.unwrap();
        match status {
            200 => ok += 1,
            503 => {
                let v: Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(v["error"], "Exceeds maximum queue size");
                refused += 1;
            }
            other => panic!("unexpected status {other}"),
        }
    }
    assert!(ok >= 1 && refused >= 1, "ok {ok} refused {refused}");
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_requests_in_flight() {
    let slow_simple = SIMPLE_CONFIG.replace(
        "parameters { key: \"note\" value: { string_value: \"test double\" } }",
        "parameters { key: \"delay_ms\" value: { string_value: \"200\" } }",
    );
    let dir = repo(&[("simple", Some(slow_simple.as_str()), &[(1, "simple")])]);
    let s = start(options(&dir)).await;
    let url = format!("{}/v2/models/simple/infer", http(&s));
    let mut tasks = Vec::new();
    for i in 0..12 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let (body, hl) = binary_request(&[i; 16], &[1; 16]);
            let r = client()
                .post(&url)
                .header("Inference-Header-Content-Length", hl)
                .body(body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let hl: usize =
                r.headers()["inference-header-content-length"].to_str().unwrap().parse().unwrap();
            let bytes = r.bytes().await.unwrap();
            (status, from_le_i32(&bytes[hl..hl + 64]), i)
        }));
    }
    // Shut down only once every request is queued or executing, so all are truly in flight.
    let model = s.state.manager.get("simple", "").unwrap();
    for _ in 0..500 {
        if model.stats.pending.load(std::sync::atomic::Ordering::Relaxed) == 12 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    drop(model);
    s.shutdown().await.unwrap();
    for t in tasks {
        let (status, sum, i) = t.await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(sum, vec![i + 1; 16]);
    }
}
