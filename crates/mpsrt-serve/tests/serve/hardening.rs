//! Hostile clients (issue 18): repository path traversal, slow-loris against the shutdown
//! deadline, request-byte budgets, huge instance counts, oversize stream messages, wrong-typed
//! parameters, duplicate outputs and configs that do not match the model file.

use crate::common::*;
use mpsrt_serve::proto::inference::{
    self as pb, grpc_inference_service_client::GrpcInferenceServiceClient,
    model_infer_request::InferRequestedOutputTensor,
};
use mpsrt_serve::ModelControlMode;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn index(c: &reqwest::Client, base: &str) -> Vec<Value> {
    let v: Value =
        c.post(format!("{base}/v2/repository/index")).send().await.unwrap().json().await.unwrap();
    v.as_array().unwrap().clone()
}

async fn ready(c: &reqwest::Client, base: &str) -> u16 {
    c.get(format!("{base}/v2/health/ready")).send().await.unwrap().status().as_u16()
}

fn simple_json(outputs: Value, params: Value) -> Value {
    json!({
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": vec![1; 16]},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": vec![2; 16]}
        ],
        "outputs": outputs,
        "parameters": params
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repository_api_cannot_leave_the_repository() {
    // <tmp>/outside holds a valid model and a config named "secret"; the repository is <tmp>/repo.
    let top = repo(&[("outside", None, &[])]);
    let outside = top.join("outside");
    let m2 = outside.join("m2");
    std::fs::create_dir_all(m2.join("1")).unwrap();
    std::fs::write(m2.join("config.pbtxt"), SIMPLE_CONFIG.replace("\"simple\"", "\"secret\""))
        .unwrap();
    std::fs::write(m2.join("1/model.test"), "simple").unwrap();
    let dir = top.join("repo");
    std::fs::create_dir_all(&dir).unwrap();
    let s_dir = dir.join("simple");
    std::fs::create_dir_all(s_dir.join("1")).unwrap();
    std::fs::write(s_dir.join("config.pbtxt"), SIMPLE_CONFIG).unwrap();
    std::fs::write(s_dir.join("1/model.test"), "simple").unwrap();
    // A model directory that is a symlink out, and one whose config.pbtxt links out.
    std::os::unix::fs::symlink(&m2, dir.join("linked")).unwrap();
    let lc = dir.join("linkcfg");
    std::fs::create_dir_all(lc.join("1")).unwrap();
    std::fs::write(lc.join("1/model.test"), "simple").unwrap();
    std::os::unix::fs::symlink(m2.join("config.pbtxt"), lc.join("config.pbtxt")).unwrap();

    let mut o = options(&dir);
    o.model_control_mode = ModelControlMode::Explicit;
    o.load_model = vec!["simple".into()];
    let s = start(o).await;
    let (c, base) = (client(), http(&s));
    assert_eq!(ready(&c, &base).await, 200);
    let secret_path = outside.display().to_string();
    let load = |name: &str, body: Value| {
        let c = c.clone();
        let url = format!("{base}/v2/repository/models/{name}/load");
        async move {
            let r = c.post(url).json(&body).send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.text().await.unwrap())
        }
    };
    let escape_cfg = json!({"parameters": {"config": json!({
        "name": "simple", "platform": "test_platform", "default_model_filename": "../../../../etc/shadow"
    }).to_string()}});
    // (name in the URL, body, status, what the error must say)
    let cases = [
        ("..%2Foutside%2Fm2", json!({}), 400, "invalid model name"),
        ("..%2F..%2Fetc", json!({}), 400, "invalid model name"),
        ("%2Fetc", json!({}), 400, "invalid model name"),
        ("a%5Cb", json!({}), 400, "invalid model name"),
        (".hidden", json!({}), 400, "invalid model name"),
        ("nope", json!({}), 400, "not found in the model repository"),
        ("simple", escape_cfg, 400, "must be a file name inside the version directory"),
        ("linked", json!({}), 400, "resolves outside the model repository"),
    ];
    for (name, body, status, want) in cases {
        let (got, text) = load(name, body).await;
        assert_eq!(got, status, "{name}: {text}");
        assert!(text.contains(want), "{name}: {text}");
        assert!(!text.contains(&secret_path) && !text.contains("secret"), "{name} leaks: {text}");
        // A refused load records nothing: readiness and the serving model are untouched.
        assert_eq!(ready(&c, &base).await, 200, "{name} flipped readiness");
    }
    // A model directory inside whose config links outside: refused without echoing its name.
    let (got, text) = load("linkcfg", json!({})).await;
    assert_eq!(got, 400, "{text}");
    assert!(text.contains("resolves outside the model repository"), "{text}");
    assert!(!text.contains("secret") && !text.contains(&secret_path), "{text}");
    let idx = index(&c, &base).await;
    assert!(idx.iter().all(|r| !r["name"].as_str().unwrap().contains("..")), "{idx:?}");
    assert_eq!(c.get(format!("{base}/v2/models/simple/ready")).send().await.unwrap().status(), 200);

    // gRPC takes the same path.
    let mut g =
        GrpcInferenceServiceClient::connect(format!("http://{}", s.grpc_addr)).await.unwrap();
    let e = g
        .repository_model_load(pb::RepositoryModelLoadRequest {
            model_name: "../outside/m2".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(!e.message().contains(&secret_path));
    let e = g
        .repository_model_unload(pb::RepositoryModelUnloadRequest {
            model_name: "/etc".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    s.shutdown().await.unwrap();
}

/// Reads until the peer closes (Ok(true)) or `wait` passes (Ok(false)).
async fn closed_within(sock: &mut TcpStream, wait: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let end = Instant::now() + wait;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, sock.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_loris_cannot_block_shutdown_or_hold_a_connection() {
    let mut o = options(&standard_repo());
    o.exit_timeout_secs = 1;
    o.http_header_timeout_secs = 1;
    o.request_body_timeout_secs = 60; // the shutdown deadline, not this, must end the body below
    let s = start(o).await;
    // Half a header: closed by the header timeout.
    let mut half_header = TcpStream::connect(s.http_addr).await.unwrap();
    half_header.write_all(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    assert!(closed_within(&mut half_header, Duration::from_secs(4)).await, "header timeout");

    // Headers complete, body never finished; a gRPC connection that never sends its preface.
    let mut half_body = TcpStream::connect(s.http_addr).await.unwrap();
    half_body
        .write_all(
            b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
        )
        .await
        .unwrap();
    let mut grpc_half = TcpStream::connect(s.grpc_addr).await.unwrap();
    grpc_half.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), s.shutdown())
        .await
        .expect("shutdown blocked by slow clients")
        .unwrap();
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(900), "did not wait for the drain: {took:?}");
    assert!(took < Duration::from_secs(5), "shutdown took {took:?} with a 1 s exit timeout");
    assert!(closed_within(&mut half_body, Duration::from_secs(2)).await);
    assert!(closed_within(&mut grpc_half, Duration::from_secs(2)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bytes_over_the_budget_or_limit_are_refused() {
    let mut o = options(&standard_repo());
    o.max_request_bytes = 1 << 20;
    o.max_inflight_request_bytes = Some(64 * 1024);
    o.request_body_timeout_secs = 2;
    let s = start(o).await;
    let (c, base) = (client(), http(&s));
    // A declared length over the limit is answered at once, without waiting for the body.
    let mut sock = TcpStream::connect(s.http_addr).await.unwrap();
    sock.write_all(
        b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 600000000\r\n\r\n{}",
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(2), sock.read(&mut buf))
        .await
        .expect("413 not sent up front")
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");

    // Holding 48 KiB of the 64 KiB budget with a body that has not arrived...
    let mut holder = TcpStream::connect(s.http_addr).await.unwrap();
    holder
        .write_all(
            b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 49152\r\n\r\n{",
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // ...a 32 KiB request is refused with 429 (a well-formed body, under the size limit).
    let mut big = simple_json(json!([]), json!({}));
    big["id"] = json!("x".repeat(32 * 1024));
    let r = c.post(format!("{base}/v2/models/simple/infer")).json(&big).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.text().await.unwrap().contains("--max-inflight-request-bytes"));
    // gRPC is charged from each message's length prefix, before tonic buffers and decodes it.
    let mut g =
        GrpcInferenceServiceClient::connect(format!("http://{}", s.grpc_addr)).await.unwrap();
    let mut req = grpc_simple("big");
    req.id = "x".repeat(32 * 1024);
    let e = g.model_infer(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("a gRPC message of"), "{e:?}");
    // A small message still fits in what is left, on the same connection.
    assert!(g.model_infer(grpc_simple("small")).await.is_ok());
    // The stalled body times out (408), its bytes go back to the budget, the same request passes.
    let mut buf = vec![0u8; 512];
    let n =
        tokio::time::timeout(Duration::from_secs(4), holder.read(&mut buf)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408"));
    let r = c.post(format!("{base}/v2/models/simple/infer")).json(&big).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // Chunked bodies (no Content-Length) are charged as they arrive: the fifth 16 KiB chunk
    // goes past the 64 KiB budget.
    let mut chunked = TcpStream::connect(s.http_addr).await.unwrap();
    chunked
        .write_all(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    let chunk =
        [format!("{:x}\r\n", 16 * 1024).into_bytes(), vec![b' '; 16 * 1024], b"\r\n".to_vec()]
            .concat();
    for _ in 0..6 {
        if chunked.write_all(&chunk).await.is_err() {
            break;
        }
    }
    let n = tokio::time::timeout(Duration::from_secs(4), chunked.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 429"));
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_instance_count_and_bad_configs_fail_at_load() {
    let huge = SIMPLE_CONFIG
        .replace("\"simple\"", "\"huge\"")
        .replace("count: 2 kind", "count: 100000 kind");
    let big_batch = SIMPLE_CONFIG
        .replace("\"simple\"", "\"bigbatch\"")
        .replace("max_batch_size: 8", "max_batch_size: 100000000");
    let wrong_name = SIMPLE_CONFIG.replace("\"simple\"", "\"wrongname\"").replacen(
        "\"INPUT1\"",
        "\"INPUTZ\"",
        1,
    );
    let wrong_type =
        SIMPLE_CONFIG.replace("\"simple\"", "\"wrongtype\"").replacen("TYPE_INT32", "TYPE_FP32", 1);
    let wrong_dims = SIMPLE_CONFIG.replace("\"simple\"", "\"wrongdims\"").replacen(
        "dims: [ 16 ]",
        "dims: [ 8 ]",
        1,
    );
    let wrong_out = SIMPLE_CONFIG.replace("\"simple\"", "\"wrongout\"").replacen(
        "\"OUTPUT1\"",
        "\"OUTPUT7\"",
        1,
    );
    let many =
        SIMPLE_CONFIG.replace("\"simple\"", "\"many\"").replace("count: 2 kind", "count: 3 kind");
    let over = SIMPLE_CONFIG.replace("\"simple\"", "\"zzover\"");
    let dir = repo(&[
        ("simple", Some(SIMPLE_CONFIG), &[(1, "simple")]),
        ("huge", Some(huge.as_str()), &[(1, "simple")]),
        ("bigbatch", Some(big_batch.as_str()), &[(1, "simple")]),
        ("wrongname", Some(wrong_name.as_str()), &[(1, "simple")]),
        ("wrongtype", Some(wrong_type.as_str()), &[(1, "simple")]),
        ("wrongdims", Some(wrong_dims.as_str()), &[(1, "simple")]),
        ("wrongout", Some(wrong_out.as_str()), &[(1, "simple")]),
        ("many", Some(many.as_str()), &[(1, "simple")]),
        ("zzover", Some(over.as_str()), &[(1, "simple")]),
    ]);
    let t = Instant::now();
    let mut o = options(&dir);
    // Loads go in name order: many (3) + simple (2) = 5 fit in 6; zzover (2 more) does not.
    o.max_total_instances = Some(6);
    let s = start(o).await;
    assert!(t.elapsed() < Duration::from_secs(5), "load took {:?}", t.elapsed());
    let (c, base) = (client(), http(&s));
    let idx = index(&c, &base).await;
    let reason = |name: &str| {
        let r = idx.iter().find(|r| r["name"] == name).unwrap();
        assert_eq!(r["state"], "UNAVAILABLE", "{name}: {r}");
        r["reason"].as_str().unwrap().to_string()
    };
    let cases = [
        ("huge", "asks for 100000 instances"),
        ("bigbatch", "max_batch_size 100000000 exceeds the limit"),
        ("wrongname", "'INPUTZ' is not an input of the model file"),
        ("wrongtype", "'INPUT0' is FP32 in the config but INT32 in the model file"),
        ("wrongdims", "dims [8] in the config but [16] in the model file"),
        ("wrongout", "'OUTPUT7' is not an output of the model file"),
        ("zzover", "the 5 other models' instances exceed the server's limit of 6"),
    ];
    for (name, want) in cases {
        let r = reason(name);
        assert!(r.contains(want), "{name}: {r}");
    }
    assert_eq!(c.get(format!("{base}/v2/models/simple/ready")).send().await.unwrap().status(), 200);
    let r = c
        .post(format!("{base}/v2/models/wrongtype/infer"))
        .json(&simple_json(json!([]), json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_outputs_and_wrong_typed_parameters_are_400() {
    let s = start(options(&standard_repo())).await;
    let (c, base) = (client(), http(&s));
    let url = format!("{base}/v2/models/simple/infer");
    let cases = [
        (json!([{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]), json!({}), "requested more than once"),
        (json!([]), json!({"binary_data_output": "yes"}), "'binary_data_output' must be a boolean"),
        (json!([]), json!({"timeout": "abc"}), "'timeout' must be a non-negative integer"),
        (
            json!([{"name": "OUTPUT0", "parameters": {"binary_data": 1}}]),
            json!({}),
            "'binary_data'",
        ),
    ];
    for (outputs, params, want) in cases {
        let r = c.post(&url).json(&simple_json(outputs.clone(), params)).send().await.unwrap();
        assert_eq!(r.status(), 400, "{outputs}");
        let t = r.text().await.unwrap();
        assert!(t.contains(want), "{t}");
    }
    let mut g =
        GrpcInferenceServiceClient::connect(format!("http://{}", s.grpc_addr)).await.unwrap();
    let mut req = grpc_simple("d");
    req.outputs = vec![
        InferRequestedOutputTensor { name: "OUTPUT1".into(), ..Default::default() },
        InferRequestedOutputTensor { name: "OUTPUT1".into(), ..Default::default() },
    ];
    let e = g.model_infer(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    let mut req = grpc_simple("t");
    req.parameters.insert(
        "timeout".into(),
        pb::InferParameter {
            parameter_choice: Some(pb::infer_parameter::ParameterChoice::StringParam("abc".into())),
        },
    );
    let e = g.model_infer(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    s.shutdown().await.unwrap();
}

fn grpc_simple(id: &str) -> pb::ModelInferRequest {
    let t = |name: &str| pb::model_infer_request::InferInputTensor {
        name: name.into(),
        datatype: "INT32".into(),
        shape: vec![1, 16],
        ..Default::default()
    };
    pb::ModelInferRequest {
        model_name: "simple".into(),
        id: id.into(),
        inputs: vec![t("INPUT0"), t("INPUT1")],
        raw_input_contents: vec![le_i32(&[3; 16]), le_i32(&[1; 16])],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_answers_every_request_in_order_despite_an_oversize_one() {
    let mut o = options(&standard_repo());
    o.max_request_bytes = 64 * 1024;
    let s = start(o).await;
    let mut g =
        GrpcInferenceServiceClient::connect(format!("http://{}", s.grpc_addr)).await.unwrap();
    // 40 requests; number 7 is over the 64 KiB limit (but under tonic's hard bound of twice it).
    let reqs: Vec<pb::ModelInferRequest> = (0..40)
        .map(|i| {
            let mut r = grpc_simple(&i.to_string());
            if i == 7 {
                r.parameters.insert(
                    "pad".into(),
                    pb::InferParameter {
                        parameter_choice: Some(pb::infer_parameter::ParameterChoice::StringParam(
                            "p".repeat(100 * 1024),
                        )),
                    },
                );
            }
            r
        })
        .collect();
    let mut resp =
        g.model_stream_infer(futures_util::stream::iter(reqs)).await.unwrap().into_inner();
    let mut got = Vec::new();
    while let Some(m) = resp.message().await.unwrap() {
        got.push(m);
    }
    assert_eq!(got.len(), 40);
    for (i, m) in got.iter().enumerate() {
        let r = m.infer_response.as_ref().unwrap();
        assert_eq!(r.id, i.to_string(), "responses out of order");
        if i == 7 {
            assert!(m.error_message.contains("exceeds the limit of 65536"), "{}", m.error_message);
        } else {
            assert!(m.error_message.is_empty(), "{i}: {}", m.error_message);
            assert_eq!(from_le_i32(&r.raw_output_contents[0]), vec![4; 16]);
        }
    }
    // Over tonic's own bound the stream ends with an error status, never a silent OK.
    let mut huge = grpc_simple("huge");
    huge.raw_input_contents[0] = vec![0; 200 * 1024];
    let reqs = vec![grpc_simple("a"), huge, grpc_simple("b")];
    let mut resp =
        g.model_stream_infer(futures_util::stream::iter(reqs)).await.unwrap().into_inner();
    let first = resp.message().await.unwrap().unwrap();
    assert_eq!(first.infer_response.unwrap().id, "a");
    let end = resp.message().await;
    assert!(end.is_err(), "stream ended silently: {end:?}");
    s.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_limit_holds_extra_clients_until_a_slot_frees() {
    let mut o = options(&standard_repo());
    o.max_connections = 2;
    o.http_header_timeout_secs = 1;
    let s = start(o).await;
    let url = format!("{}/v2/health/live", http(&s));
    // Two silent sockets take both slots; a third client is not served while they hold them...
    let mut a = TcpStream::connect(s.http_addr).await.unwrap();
    let mut b = TcpStream::connect(s.http_addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let quick = reqwest::Client::builder().timeout(Duration::from_millis(400)).build().unwrap();
    assert!(quick.get(&url).send().await.is_err(), "served past the connection limit");
    // ...and is once the header timeout has closed the silent ones.
    assert!(closed_within(&mut a, Duration::from_secs(3)).await);
    assert!(closed_within(&mut b, Duration::from_secs(3)).await);
    assert_eq!(client().get(&url).send().await.unwrap().status(), 200);
    s.shutdown().await.unwrap();
}
