//! Model repository: explicit/poll control modes, load/unload, config override, failures, versions.

use crate::common::*;
use mpsrt_serve::config::parse_pbtxt;
use mpsrt_serve::ModelControlMode;
use serde_json::{json, Value};

async fn index(c: &reqwest::Client, base: &str) -> Vec<Value> {
    let v: Value =
        c.post(format!("{base}/v2/repository/index")).send().await.unwrap().json().await.unwrap();
    v.as_array().unwrap().clone()
}

fn state_of(idx: &[Value], name: &str) -> (String, String) {
    let r = idx.iter().find(|r| r["name"] == name).unwrap();
    (r["state"].as_str().unwrap().to_string(), r["reason"].as_str().unwrap_or("").to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_mode_load_unload_override_and_failure() {
    let dir = repo(&[
        ("simple", Some(SIMPLE_CONFIG), &[(1, "simple")]),
        ("echo", Some(ECHO_CONFIG), &[(1, "echo")]),
        (
            "broken",
            Some(SIMPLE_CONFIG.replace("\"simple\"", "\"broken\"").as_str()),
            &[(1, "broken")],
        ),
    ]);
    let mut o = options(&dir);
    o.model_control_mode = ModelControlMode::Explicit;
    o.load_model = vec!["simple".into()];
    let s = start(o).await;
    let (c, base) = (client(), http(&s));
    let idx = index(&c, &base).await;
    assert_eq!(state_of(&idx, "simple").0, "READY");
    assert_eq!(state_of(&idx, "echo").0, "UNAVAILABLE");
    assert_eq!(c.get(format!("{base}/v2/models/echo/ready")).send().await.unwrap().status(), 400);

    let r = c.post(format!("{base}/v2/repository/models/echo/load")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(c.get(format!("{base}/v2/models/echo/ready")).send().await.unwrap().status(), 200);
    let r = c.post(format!("{base}/v2/repository/models/echo/unload")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(c.get(format!("{base}/v2/models/echo/ready")).send().await.unwrap().status(), 400);
    let r = c.post(format!("{base}/v2/models/echo/infer")).body("{}").send().await.unwrap();
    assert_eq!(r.status(), 503);

    // A model that fails to load is UNAVAILABLE with its reason; the others keep serving.
    let r = c.post(format!("{base}/v2/repository/models/broken/load")).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"].as_str().unwrap().contains("broken on purpose"), "{v}");
    let (state, reason) = state_of(&index(&c, &base).await, "broken");
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("broken on purpose"));
    assert_eq!(c.get(format!("{base}/v2/models/simple/ready")).send().await.unwrap().status(), 200);
    assert_eq!(c.get(format!("{base}/v2/health/ready")).send().await.unwrap().status(), 400);
    let r = c.post(format!("{base}/v2/repository/models/missing/load")).send().await.unwrap();
    assert_eq!(r.status(), 400);

    // Load with a config override (protobuf JSON): simple reloaded with max_batch_size 2.
    let cfg = json!({
        "name": "simple", "platform": "test_platform", "max_batch_size": 2,
        "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [16]}, {"name": "INPUT1", "data_type": "TYPE_INT32", "dims": [16]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [16]}, {"name": "OUTPUT1", "data_type": "TYPE_INT32", "dims": [16]}]
    });
    let r = c
        .post(format!("{base}/v2/repository/models/simple/load"))
        .json(&json!({"parameters": {"config": cfg.to_string()}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let v: Value = c
        .get(format!("{base}/v2/models/simple/config"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["max_batch_size"], 2);
    let r = c
        .post(format!("{base}/v2/repository/models/simple/load"))
        .json(&json!({"parameters": {"config": "{\"max_batch_size\": \"many\"}"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let mut unknown_platform = cfg.clone();
    unknown_platform["platform"] = json!("no_such_platform");
    let r = c
        .post(format!("{base}/v2/repository/models/simple/load"))
        .json(&json!({"parameters": {"config": unknown_platform.to_string()}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("no_such_platform"));
    // The failed reload left the serving version in place.
    let v: Value = c
        .get(format!("{base}/v2/models/simple/config"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["max_batch_size"], 2);
    assert_eq!(c.get(format!("{base}/v2/models/simple/ready")).send().await.unwrap().status(), 200);
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_policy_and_poll_mode() {
    let cfg_all = format!("{SIMPLE_CONFIG}\nversion_policy: {{ all {{ }} }}");
    let dir = repo(&[
        (
            "latest",
            Some(SIMPLE_CONFIG.replace("\"simple\"", "\"latest\"").as_str()),
            &[(1, "simple"), (3, "simple")],
        ),
        (
            "all",
            Some(cfg_all.replace("\"simple\"", "\"all\"").as_str()),
            &[(1, "simple"), (2, "simple")],
        ),
    ]);
    let mut o = options(&dir);
    o.model_control_mode = ModelControlMode::Poll;
    o.repository_poll_secs = 1;
    let s = start(o).await;
    let (c, base) = (client(), http(&s));
    let v: Value =
        c.get(format!("{base}/v2/models/latest")).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["versions"], json!(["3"]));
    let v: Value =
        c.get(format!("{base}/v2/models/all")).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["versions"], json!(["1", "2"]));
    assert_eq!(
        c.get(format!("{base}/v2/models/latest/versions/1/ready")).send().await.unwrap().status(),
        400
    );

    // Poll mode picks up a new model directory without a restart.
    let m = dir.join("echo");
    std::fs::create_dir_all(m.join("1")).unwrap();
    std::fs::write(m.join("config.pbtxt"), ECHO_CONFIG).unwrap();
    std::fs::write(m.join("1/model.test"), "echo").unwrap();
    let mut ready = false;
    for _ in 0..60 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if c.get(format!("{base}/v2/models/echo/ready")).send().await.unwrap().status() == 200 {
            ready = true;
            break;
        }
    }
    assert!(ready, "poll mode did not load the new model");
    s.shutdown().await.unwrap();
}

#[test]
fn pbtxt_parsing_is_protobuf_text_format() {
    let c = parse_pbtxt(SIMPLE_CONFIG).unwrap();
    assert_eq!(c.name, "simple");
    assert_eq!(c.input[0].dims, [16]);
    assert_eq!(c.instance_group[0].count, 2);
    let cases = [
        ("max_batch_size: \"x\"", "failed to parse config.pbtxt"),
        ("no_such_field: 1", "failed to parse config.pbtxt"),
        ("input [ { name: \"a\" data_type: TYPE_NOPE } ]", "failed to parse config.pbtxt"),
    ];
    for (text, want) in cases {
        let e = parse_pbtxt(text).unwrap_err();
        assert!(e.message.contains(want), "{text}: {}", e.message);
    }
}

#[test]
fn example_repository_config_parses() {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/model_repository/simple/config.pbtxt");
    let c = parse_pbtxt(&std::fs::read_to_string(p).unwrap()).unwrap();
    assert_eq!(
        (c.name.as_str(), c.platform.as_str(), c.max_batch_size),
        ("simple", "onnxruntime_onnx", 8)
    );
    assert_eq!(c.input.len(), 2);
    assert!(c.scheduling_choice.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_groups_pick_devices_and_counts() {
    use mpsrt_serve::InstanceDevice::{self, Cpu, Gpu};
    let groups = |name: &str, groups: &str| {
        SIMPLE_CONFIG
            .replace("\"simple\"", &format!("\"{name}\""))
            .replace("instance_group [ { count: 2 kind: KIND_CPU } ]", groups)
    };
    let mixed = groups(
        "devices",
        "instance_group [ { count: 3 kind: KIND_GPU }, { kind: KIND_CPU }, { count: 1 kind: KIND_GPU gpus: [ 1 ] } ]",
    );
    let bad_index =
        groups("badindex", "instance_group [ { count: 1 kind: KIND_GPU gpus: [ 5 ] } ]");
    let gpu_less = groups("nogpu", "instance_group [ { count: 1 kind: KIND_GPU } ]");
    let auto = groups("autodev", "instance_group [ { count: 2 kind: KIND_AUTO } ]");
    let auto_cpu = groups("autocpu", "instance_group [ { count: 2 kind: KIND_AUTO } ]");
    let loaded = |name: &str| -> Vec<InstanceDevice> {
        LOADED_DEVICES.lock().unwrap().iter().filter(|(n, _)| n == name).map(|(_, d)| *d).collect()
    };
    let dir = repo(&[
        ("devices", Some(mixed.as_str()), &[(1, "simple")]),
        ("autodev", Some(auto.as_str()), &[(1, "simple")]),
        ("badindex", Some(bad_index.as_str()), &[(1, "simple")]),
    ]);
    let s = mpsrt_serve::start(options(&dir), backends().with_gpus(vec![0, 1])).await.unwrap();
    // As Triton: `count` instances on each GPU the group lists (all GPUs when it lists none).
    assert_eq!(loaded("devices"), [Gpu(0), Gpu(0), Gpu(0), Gpu(1), Gpu(1), Gpu(1), Cpu, Gpu(1)]);
    assert_eq!(loaded("autodev"), [Gpu(0), Gpu(0), Gpu(1), Gpu(1)]);
    let (state, reason) = state_of(&index(&client(), &http(&s)).await, "badindex");
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("lists GPU 5, but this server has GPUs mps:0, mps:1"), "{reason}");
    assert!(loaded("badindex").is_empty(), "no instance may load for a bad index");
    s.shutdown().await.unwrap();

    // Without GPUs, KIND_GPU cannot be honoured (UNAVAILABLE with the reason); KIND_AUTO uses the CPU.
    let dir = repo(&[
        ("nogpu", Some(gpu_less.as_str()), &[(1, "simple")]),
        ("autocpu", Some(auto_cpu.as_str()), &[(1, "simple")]),
    ]);
    let s = start(options(&dir)).await;
    let (state, reason) = state_of(&index(&client(), &http(&s)).await, "nogpu");
    assert_eq!(state, "UNAVAILABLE");
    assert!(reason.contains("no GPU is available"), "{reason}");
    assert_eq!(loaded("autocpu"), [Cpu, Cpu]);
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_returns_ok_after_the_shutdown_signal() {
    let dir = repo(&[("simple", Some(SIMPLE_CONFIG), &[(1, "simple")])]);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(mpsrt_serve::serve(options(&dir), backends(), async move {
        let _ = rx.await;
    }));
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    tx.send(()).unwrap();
    let res =
        tokio::time::timeout(std::time::Duration::from_secs(10), task).await.unwrap().unwrap();
    assert_eq!(res, Ok(()));
}
