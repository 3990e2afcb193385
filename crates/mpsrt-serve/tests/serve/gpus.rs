//! KIND_GPU instance groups on one adapter (issue 25's CI cases): `gpus: [0]` with `count: 3`
//! spreads requests over three instances, an index the server does not have makes only that
//! model UNAVAILABLE, CPU and GPU groups mix, and metrics carry per-instance and per-GPU series.

use crate::common::*;
use mpsrt_serve::GpuMemoryInfo;
use mpsrt_serve::InstanceDevice::{Cpu, Gpu};
use serde_json::{json, Value};
use std::sync::Arc;

fn cfg(name: &str, groups: &str, delay_ms: u32) -> String {
    SIMPLE_CONFIG
        .replace("\"simple\"", &format!("\"{name}\""))
        .replace("instance_group [ { count: 2 kind: KIND_CPU } ]", groups)
        .replace(
            "parameters { key: \"note\" value: { string_value: \"test double\" } }",
            &format!(
                "parameters {{ key: \"delay_ms\" value: {{ string_value: \"{delay_ms}\" }} }}"
            ),
        )
        // One request per execution, so every request needs a free instance.
        .replace("dynamic_batching { max_queue_delay_microseconds: 2000 }", "")
}

fn devices(name: &str) -> Vec<mpsrt_serve::InstanceDevice> {
    LOADED_DEVICES.lock().unwrap().iter().filter(|(n, _)| n == name).map(|(_, d)| *d).collect()
}

/// `name{labels} value` for a metric line whose labels contain all of `want`.
fn metric(text: &str, name: &str, want: &[&str]) -> Option<u64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| want.iter().all(|w| l.contains(w)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_groups_on_one_adapter() {
    let three = cfg("gpu3", "instance_group [ { count: 3 kind: KIND_GPU gpus: [ 0 ] } ]", 60);
    let bad = cfg("gpubad", "instance_group [ { count: 1 kind: KIND_GPU gpus: [ 0, 3 ] } ]", 0);
    let mixed = cfg(
        "gpumixed",
        "instance_group [ { count: 2 kind: KIND_CPU }, { count: 1 kind: KIND_GPU gpus: [ 0 ] } ]",
        0,
    );
    let dir = repo(&[
        ("gpu3", Some(three.as_str()), &[(1, "simple")]),
        ("gpubad", Some(bad.as_str()), &[(1, "simple")]),
        ("gpumixed", Some(mixed.as_str()), &[(1, "simple")]),
    ]);
    let mem: mpsrt_serve::GpuMemoryFn = Arc::new(|| {
        vec![GpuMemoryInfo {
            gpu: "mps:0 test adapter".into(),
            total_bytes: 1 << 30,
            used_bytes: 7,
        }]
    });
    let b = backends().with_gpus(vec![0]).with_gpu_memory(mem);
    let s = mpsrt_serve::start(options(&dir), b).await.unwrap();
    let (c, base) = (client(), http(&s));

    assert_eq!(devices("gpu3"), [Gpu(0), Gpu(0), Gpu(0)]);
    assert_eq!(devices("gpumixed"), [Cpu, Cpu, Gpu(0)]);
    assert!(devices("gpubad").is_empty());
    let idx: Value =
        c.post(format!("{base}/v2/repository/index")).send().await.unwrap().json().await.unwrap();
    let row = idx.as_array().unwrap().iter().find(|r| r["name"] == "gpubad").unwrap().clone();
    assert_eq!(row["state"], "UNAVAILABLE");
    assert!(
        row["reason"].as_str().unwrap().contains("lists GPU 3, but this server has GPUs mps:0"),
        "{row}"
    );

    // 12 concurrent requests of 60 ms each: a free instance takes the next one, so all three run.
    let mut tasks = Vec::new();
    for model in ["gpu3", "gpumixed"] {
        for i in 0..12 {
            let url = format!("{base}/v2/models/{model}/infer");
            tasks.push(tokio::spawn(async move {
                let body = json!({"inputs": [
                    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": vec![i; 16]},
                    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": vec![1; 16]}
                ]});
                let v: Value =
                    client().post(url).json(&body).send().await.unwrap().json().await.unwrap();
                assert_eq!(v["outputs"][0]["data"], json!(vec![i + 1; 16]), "{v}");
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let m = c
        .get(format!("http://{}/metrics", s.metrics_addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut total = 0;
    for i in 0..3 {
        let inst = format!("instance=\"gpu3_{i}\"");
        let n = metric(&m, "mpsrt_instance_exec_count", &[&inst, "device=\"mps:0\""])
            .unwrap_or_else(|| panic!("no series for gpu3_{i}:\n{m}"));
        assert!(n > 0, "instance gpu3_{i} never ran:\n{m}");
        total += n;
    }
    assert_eq!(total, 12);
    // The mixed model's CPU and GPU instances share its queue: all 12 requests, over its three.
    let mixed_total: u64 = m
        .lines()
        .filter(|l| l.starts_with("mpsrt_instance_exec_count{model=\"gpumixed\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(mixed_total, 12, "{m}");
    for d in ["instance=\"gpumixed_0\",device=\"cpu\"", "instance=\"gpumixed_2\",device=\"mps:0\""]
    {
        assert!(metric(&m, "mpsrt_instance_exec_count", &[d]).is_some(), "{d}:\n{m}");
    }
    assert_eq!(
        metric(&m, "nv_gpu_memory_used_bytes", &["gpu_uuid=\"mps:0 test adapter\""]),
        Some(7),
        "{m}"
    );
    s.shutdown().await.unwrap();
}
