//! HTTP/REST endpoints: happy paths and a table of bad requests.

use crate::common::*;
use serde_json::{json, Value};
use std::io::Write;

async fn get_json(c: &reqwest::Client, url: String) -> (u16, Value) {
    let r = c.get(url).send().await.unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

fn simple_request(a: &[i32], b: &[i32]) -> Value {
    let n = a.len() as i64 / 16;
    json!({
        "id": "req-1",
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [n, 16], "data": a},
            {"name": "INPUT1", "datatype": "INT32", "shape": [n, 16], "data": b}
        ]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_health_config_and_admin_endpoints() {
    let s = start(options(&standard_repo())).await;
    let (c, base) = (client(), http(&s));
    for path in [
        "/v2/health/live",
        "/v2/health/ready",
        "/v2/models/simple/ready",
        "/v2/models/simple/versions/1/ready",
    ] {
        assert_eq!(c.get(format!("{base}{path}")).send().await.unwrap().status(), 200, "{path}");
    }
    assert_eq!(c.get(format!("{base}/v2/models/nope/ready")).send().await.unwrap().status(), 400);

    let (st, v) = get_json(&c, format!("{base}/v2")).await;
    assert_eq!(st, 200);
    assert_eq!(v["name"], "mpsrt");
    assert!(v["extensions"].as_array().unwrap().contains(&json!("binary_tensor_data")));

    for path in ["/v2/models/simple", "/v2/models/simple/versions/1"] {
        let (st, v) = get_json(&c, format!("{base}{path}")).await;
        assert_eq!(st, 200);
        assert_eq!(v["name"], "simple");
        assert_eq!(v["versions"], json!(["1"]));
        assert_eq!(v["platform"], "test_platform");
        assert_eq!(
            v["inputs"][0],
            json!({"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]})
        );
        assert_eq!(v["outputs"][1]["name"], "OUTPUT1");
    }

    let (st, cfg) = get_json(&c, format!("{base}/v2/models/simple/config")).await;
    assert_eq!(st, 200);
    assert_eq!(cfg["max_batch_size"], 8);
    assert_eq!(cfg["input"][0]["dims"], json!([16]));
    assert_eq!(cfg["input"][0]["data_type"], "TYPE_INT32");
    assert_eq!(cfg["instance_group"][0]["count"], 2);
    assert_eq!(cfg["instance_group"][0]["kind"], "KIND_CPU");
    assert_eq!(cfg["parameters"]["note"]["string_value"], "test double");
    assert_eq!(cfg["dynamic_batching"]["max_queue_delay_microseconds"], 2000);

    // No config.pbtxt: auto-completed from the model file, batching because dim 0 is dynamic.
    let (st, auto) = get_json(&c, format!("{base}/v2/models/autofloat/config")).await;
    assert_eq!(st, 200);
    assert_eq!(auto["max_batch_size"], 4);
    assert!(auto["dynamic_batching"].is_object());
    assert_eq!(auto["input"][0]["dims"], json!([4]));
    assert_eq!(auto["backend"], "testbackend");
    let (_, meta) = get_json(&c, format!("{base}/v2/models/autofloat")).await;
    assert_eq!(meta["inputs"][0]["shape"], json!([-1, 4]));

    let idx: Value =
        c.post(format!("{base}/v2/repository/index")).send().await.unwrap().json().await.unwrap();
    let names: Vec<&str> =
        idx.as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["autofloat", "echo", "simple", "slow"]);
    assert!(idx.as_array().unwrap().iter().all(|r| r["state"] == "READY"));

    let (st, log) = get_json(&c, format!("{base}/v2/logging")).await;
    assert_eq!((st, log["log_verbose_level"].clone()), (200, json!(0)));
    let r = c
        .post(format!("{base}/v2/logging"))
        .json(&json!({"log_verbose_level": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["log_verbose_level"], 2);
    let (st, tr) = get_json(&c, format!("{base}/v2/trace/setting")).await;
    assert_eq!((st, tr["trace_level"].clone()), (200, json!(["OFF"])));
    let r = c
        .post(format!("{base}/v2/trace/setting"))
        .json(&json!({"trace_level": ["TIMESTAMPS"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 501);

    let metrics = c
        .get(format!("http://{}/metrics", s.metrics_addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("nv_inference_request_success{model=\"simple\",version=\"1\"} 0"),
        "{metrics}"
    );
    assert!(metrics.contains("# TYPE nv_inference_pending_request_count gauge"));
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infer_json_binary_bytes_and_compression() {
    let s = start(options(&standard_repo())).await;
    let (c, base) = (client(), http(&s));
    let a: Vec<i32> = (0..16).collect();
    let b: Vec<i32> = (0..16).map(|x| 100 - x).collect();
    let url = format!("{base}/v2/models/simple/infer");

    // JSON in, JSON out.
    let r: Value =
        c.post(&url).json(&simple_request(&a, &b)).send().await.unwrap().json().await.unwrap();
    assert_eq!(r["id"], "req-1");
    assert_eq!(r["model_name"], "simple");
    assert_eq!(r["model_version"], "1");
    let sum: Vec<i64> = a.iter().zip(&b).map(|(x, y)| (x + y) as i64).collect();
    let dif: Vec<i64> = a.iter().zip(&b).map(|(x, y)| (x - y) as i64).collect();
    assert_eq!(r["outputs"][0]["data"], json!(sum));
    assert_eq!(r["outputs"][1]["data"], json!(dif));
    assert_eq!(r["outputs"][0]["shape"], json!([1, 16]));

    // Binary in, one binary output requested (the other JSON), explicit version path.
    let hdr = json!({
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}}
        ],
        "outputs": [{"name": "OUTPUT1", "parameters": {"binary_data": true}}, {"name": "OUTPUT0"}]
    });
    let hbytes = serde_json::to_vec(&hdr).unwrap();
    let mut body = hbytes.clone();
    body.extend(le_i32(&a));
    body.extend(le_i32(&b));
    let r = c
        .post(format!("{base}/v2/models/simple/versions/1/infer"))
        .header("Inference-Header-Content-Length", hbytes.len())
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let hl: usize =
        r.headers()["inference-header-content-length"].to_str().unwrap().parse().unwrap();
    let bytes = r.bytes().await.unwrap();
    let head: Value = serde_json::from_slice(&bytes[..hl]).unwrap();
    assert_eq!(head["outputs"][0]["name"], "OUTPUT1");
    assert_eq!(head["outputs"][0]["parameters"]["binary_data_size"], 64);
    assert_eq!(head["outputs"][1]["data"], json!(sum));
    let got: Vec<i64> = from_le_i32(&bytes[hl..]).into_iter().map(i64::from).collect();
    assert_eq!(got, dif);

    // binary_data_output for all outputs, request body gzip-compressed, response gzip on request.
    let mut req = simple_request(&a, &b);
    req["parameters"] = json!({"binary_data_output": true});
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&serde_json::to_vec(&req).unwrap()).unwrap();
    let r = c
        .post(&url)
        .header("Content-Encoding", "gzip")
        .body(gz.finish().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let hl: usize =
        r.headers()["inference-header-content-length"].to_str().unwrap().parse().unwrap();
    let bytes = r.bytes().await.unwrap();
    assert_eq!(bytes.len(), hl + 128);
    let r = c
        .post(&url)
        .header("Accept-Encoding", "gzip")
        .json(&simple_request(&a, &b))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let mut plain = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(&r.bytes().await.unwrap()[..]),
        &mut plain,
    )
    .unwrap();
    assert_eq!(serde_json::from_str::<Value>(&plain).unwrap()["outputs"][0]["data"], json!(sum));

    // BYTES and FP32 through the echo model, JSON then binary.
    let req = json!({"inputs": [
        {"name": "INPUT0", "datatype": "BYTES", "shape": [1, 3], "data": ["héllo", "", "world"]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 2], "data": [[1.5, -2.25]]}
    ]});
    let r: Value = c
        .post(format!("{base}/v2/models/echo/infer"))
        .json(&req)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["outputs"][0]["data"], json!(["héllo", "", "world"]), "{r}");
    assert_eq!(r["outputs"][1]["data"], json!([1.5, -2.25]));
    let mut blob = Vec::new();
    for s in ["ab", "c"] {
        blob.extend((s.len() as u32).to_le_bytes());
        blob.extend(s.as_bytes());
    }
    let hdr = serde_json::to_vec(&json!({
        "inputs": [
            {"name": "INPUT0", "datatype": "BYTES", "shape": [1, 2], "parameters": {"binary_data_size": blob.len()}},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 1], "data": [3.0]}
        ],
        "parameters": {"binary_data_output": true}
    }))
    .unwrap();
    let mut body = hdr.clone();
    body.extend(&blob);
    let r = c
        .post(format!("{base}/v2/models/echo/infer"))
        .header("Inference-Header-Content-Length", hdr.len())
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let hl: usize =
        r.headers()["inference-header-content-length"].to_str().unwrap().parse().unwrap();
    let bytes = r.bytes().await.unwrap();
    assert_eq!(&bytes[hl..hl + blob.len()], &blob[..]);
    assert_eq!(&bytes[hl + blob.len()..], &3.0f32.to_le_bytes());

    // Statistics reflect the requests above.
    let st: Value =
        c.get(format!("{base}/v2/models/simple/stats")).send().await.unwrap().json().await.unwrap();
    let m = &st["model_stats"][0];
    assert_eq!(m["name"], "simple");
    assert_eq!(m["version"], "1");
    assert_eq!(m["inference_count"], 4);
    assert_eq!(m["inference_stats"]["success"]["count"], 4);
    assert!(m["inference_stats"]["compute_infer"]["ns"].as_u64().unwrap() > 0);
    assert!(m["last_inference"].as_u64().unwrap() > 0);
    assert_eq!(m["batch_stats"][0]["batch_size"], 1);
    let all: Value =
        c.get(format!("{base}/v2/models/stats")).send().await.unwrap().json().await.unwrap();
    assert_eq!(all["model_stats"].as_array().unwrap().len(), 4);
    s.shutdown().await.unwrap();
}

/// One bad request: method+path, headers, body; expected status and a fragment of the error.
struct Bad {
    what: &'static str,
    path: &'static str,
    header_len: Option<usize>,
    body: Vec<u8>,
    status: u16,
    error: &'static str,
}

fn binary_body(declared: usize, actual: usize) -> (Vec<u8>, usize) {
    let hdr = serde_json::to_vec(&json!({"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": declared}},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": vec![0; 16]}
    ]}))
    .unwrap();
    let mut body = hdr.clone();
    body.extend(vec![0u8; actual]);
    (body, hdr.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_triton_errors_and_server_keeps_serving() {
    let s = start(options(&standard_repo())).await;
    let (c, base) = (client(), http(&s));
    let ok16: Vec<i32> = vec![1; 16];
    let j = |v: Value| serde_json::to_vec(&v).unwrap();
    let with = |f: &dyn Fn(&mut Value)| {
        let mut v = simple_request(&ok16, &ok16);
        f(&mut v);
        j(v)
    };
    let (short, short_len) = binary_body(64, 60);
    let (long, long_len) = binary_body(64, 70);
    let (decl_short, decl_short_len) = binary_body(60, 60);
    let cases = vec![
        Bad {
            what: "unknown model",
            path: "/v2/models/nope/infer",
            header_len: None,
            body: with(&|_| {}),
            status: 404,
            error: "unknown model",
        },
        Bad {
            what: "unknown version",
            path: "/v2/models/simple/versions/7/infer",
            header_len: None,
            body: with(&|_| {}),
            status: 404,
            error: "version 7",
        },
        Bad {
            what: "unknown metadata",
            path: "/v2/models/nope",
            header_len: None,
            body: vec![],
            status: 404,
            error: "unknown model",
        },
        Bad {
            what: "wrong input name",
            path: "/v2/models/simple/infer",
            header_len: None,
            body: with(&|v| v["inputs"][1]["name"] = json!("INPUTX")),
            status: 400,
            error: "unexpected inference input 'INPUTX'",
        },
        Bad {
            what: "missing input",
            path: "/v2/models/simple/infer",
            header_len: None,
            body: with(&|v| {
                v["inputs"].as_array_mut().unwrap().pop();
            }),
            status: 400,
            error: "expected 2 inputs but got 1",
        },
        Bad {
            what: "wrong shape",
            path: "/v2/models/simple/infer",
            header_len: None,
            body: with(&|v| {
                v["inputs"][0]["shape"] = json!([2, 8]);
            }),
            status: 400,
            error: "unexpected shape for input 'INPUT0'",
        },
        Bad {
            what: "wrong dtype",
            path: "/v2/models/simple/infer",
            header_len: None,
            body: with(&|v| v["inputs"][0]["datatype"] = json!("FP32")),
            status: 400,
            error: "data-type is 'FP32'",
        },
        Bad {
            what: "unknown dtype",
            path: "/v2/models/simple/infer",
            header_len: None,
            body: with(&|v| v["inputs"][0]["datatype"] = json!("INT33")),
            status: 400,
            error: "invalid datatype",
        },
        Bad {
            what: "element count",
            path: "/v2/models/simple/infer",
            header_len: None,
            body: with(&|v| v["inputs"][0]["data"] = json!([1, 2, 3])),
            status: 400,
            error: "number of elements",
        },
        Bad {
            what: "value type",
            path: "/v2/models/simple/infer",
            header_len: None,
            body: with(&|v| v["inputs"][0]["data"][0] = json!("x")),
            status: 400,
            error: "not a valid INT32",
        },
        Bad {
            what: "malformed JSON",
            path: "/v2/models/simple/infer",
            header_len: None,
            body: b"{\"inputs\": [".to_vec(),
            status: 400,
            error: "failed to parse the request JSON",
        },
        Bad {
            what: "unknown output",
            path: "/v2/models/simple/infer",
            header_len: None,
            body: with(&|v| v["outputs"] = json!([{"name": "OUT9"}])),
            status: 400,
            error: "unexpected inference output 'OUT9'",
        },
        Bad {
            what: "batch over max",
            path: "/v2/models/simple/infer",
            header_len: None,
            body: j(simple_request(&[1; 16 * 9], &[1; 16 * 9])),
            status: 400,
            error: "batch-size must be <= 8",
        },
        Bad {
            what: "binary shorter than declared",
            path: "/v2/models/simple/infer",
            header_len: Some(short_len),
            body: short,
            status: 400,
            error: "binary_data_size 64",
        },
        Bad {
            what: "binary longer than declared",
            path: "/v2/models/simple/infer",
            header_len: Some(long_len),
            body: long,
            status: 400,
            error: "unexpected additional input data",
        },
        Bad {
            what: "declared size not the tensor size",
            path: "/v2/models/simple/infer",
            header_len: Some(decl_short_len),
            body: decl_short,
            status: 400,
            error: "unexpected total byte size 60",
        },
        Bad {
            what: "header length past body",
            path: "/v2/models/simple/infer",
            header_len: Some(1 << 19),
            body: with(&|_| {}),
            status: 400,
            error: "exceeds the request body size",
        },
        Bad {
            what: "body over the limit",
            path: "/v2/models/simple/infer",
            header_len: None,
            body: vec![b' '; (1 << 20) + 10],
            status: 413,
            error: "exceeds the limit",
        },
        Bad {
            what: "load in none mode",
            path: "/v2/repository/models/simple/load",
            header_len: None,
            body: vec![],
            status: 501,
            error: "not allowed",
        },
        Bad {
            what: "classification",
            path: "/v2/models/simple/infer",
            header_len: None,
            body: with(&|v| {
                v["outputs"] = json!([{"name": "OUTPUT0", "parameters": {"class_count": 3}}])
            }),
            status: 501,
            error: "classification",
        },
        Bad {
            what: "shared memory",
            path: "/v2/models/simple/infer",
            header_len: None,
            body: with(&|v| v["inputs"][0]["parameters"] = json!({"shared_memory_region": "r"})),
            status: 501,
            error: "shared memory",
        },
        Bad {
            what: "unknown route",
            path: "/v3/whatever",
            header_len: None,
            body: vec![],
            status: 404,
            error: "Not Found",
        },
    ];
    for case in cases {
        let mut r = if case.path == "/v2/models/nope" {
            c.get(format!("{base}{}", case.path))
        } else {
            c.post(format!("{base}{}", case.path)).body(case.body)
        };
        if let Some(n) = case.header_len {
            r = r.header("Inference-Header-Content-Length", n);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        assert_eq!(status, case.status, "{}: {v}", case.what);
        let msg =
            v["error"].as_str().unwrap_or_else(|| panic!("{}: no error field in {v}", case.what));
        assert!(msg.contains(case.error), "{}: '{msg}' lacks '{}'", case.what, case.error);
    }
    // Still serving, and the failures were counted.
    let r = c
        .post(format!("{base}/v2/models/simple/infer"))
        .json(&simple_request(&ok16, &ok16))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let st: Value =
        c.get(format!("{base}/v2/models/simple/stats")).send().await.unwrap().json().await.unwrap();
    assert!(st["model_stats"][0]["inference_stats"]["fail"]["count"].as_u64().unwrap() >= 10);
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_backend_gpu_metrics_and_deflate() {
    let dir = repo(&[
        ("simple", Some(SIMPLE_CONFIG), &[(1, "simple")]),
        (
            "panicky",
            Some(SIMPLE_CONFIG.replace("\"simple\"", "\"panicky\"").as_str()),
            &[(1, "panic")],
        ),
    ]);
    let mem: mpsrt_serve::GpuMemoryFn = std::sync::Arc::new(|| {
        vec![mpsrt_serve::GpuMemoryInfo { gpu: "GPU-0".into(), total_bytes: 1000, used_bytes: 250 }]
    });
    let s = mpsrt_serve::start(options(&dir), backends().with_gpu_memory(mem)).await.unwrap();
    let (c, base) = (client(), http(&s));
    let ok16 = [3; 16];
    for _ in 0..2 {
        // The executor thread survives a panicking backend and answers INTERNAL each time.
        let r = c
            .post(format!("{base}/v2/models/panicky/infer"))
            .json(&simple_request(&ok16, &ok16))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 500);
        assert_eq!(r.json::<Value>().await.unwrap()["error"], "model execution panicked");
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&serde_json::to_vec(&simple_request(&ok16, &ok16)).unwrap()).unwrap();
    let r = c
        .post(format!("{base}/v2/models/simple/infer"))
        .header("Content-Encoding", "deflate")
        .body(z.finish().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["outputs"][0]["data"], json!(vec![6; 16]));
    let r = c
        .post(format!("{base}/v2/models/simple/infer"))
        .header("Content-Encoding", "gzip")
        .body("not gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let metrics = c
        .get(format!("http://{}/metrics", s.metrics_addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("nv_gpu_memory_total_bytes{gpu_uuid=\"GPU-0\"} 1000"), "{metrics}");
    assert!(metrics.contains("nv_gpu_memory_used_bytes{gpu_uuid=\"GPU-0\"} 250"));
    assert!(metrics.contains("nv_inference_request_failure{model=\"panicky\",version=\"1\"} 2"));
    s.shutdown().await.unwrap();
}
