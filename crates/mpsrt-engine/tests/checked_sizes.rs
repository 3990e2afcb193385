//! Issue 19 at the engine: a model whose outputs would be huge fails its run with an error
//! (out of memory, or a shape error when the count overflows) and the same session keeps
//! serving normal requests — what `mpsrt serve` needs from its backend; and a bounded fuzz of
//! crafted protobufs (huge dims, initializers shorter than their dims, attributes of the wrong
//! type) through load, planning and a CPU run, which must return errors, never panic or abort.

use mpsrt_core::{ErrorKind, Place};
use mpsrt_engine::{Session, SessionOptions};
use mpsrt_onnx::proto::attribute_proto::AttributeType;
use mpsrt_onnx::proto::tensor_shape_proto::{dimension, Dimension};
use mpsrt_onnx::proto::{
    type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use mpsrt_tensor::Tensor;
use proptest::prelude::*;
use prost::Message;
use std::collections::HashMap;

const FLOAT: i32 = 1;
const INT64: i32 = 7;

fn vi(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| Dimension { value: Some(dimension::Value::DimValue(d)), ..Default::default() })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(op: &str, ins: &[&str], outs: &[&str], attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        attribute,
        ..Default::default()
    }
}

fn ti64(name: &str, dims: &[i64], data: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(INT64),
        int64_data: data.to_vec(),
        ..Default::default()
    }
}

fn tf32(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(FLOAT),
        float_data: data.to_vec(),
        ..Default::default()
    }
}

fn model(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    out: &[&str],
    inits: Vec<TensorProto>,
) -> Vec<u8> {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: nodes,
            input: inputs,
            output: out
                .iter()
                .map(|o| ValueInfoProto { name: Some(o.to_string()), ..Default::default() })
                .collect(),
            initializer: inits,
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn feeds(pairs: &[(&str, Tensor)]) -> HashMap<String, Tensor> {
    pairs.iter().map(|(n, t)| (n.to_string(), t.clone())).collect()
}

/// `ConstantOfShape` fed its shape per request: a huge request fails, then a normal one is
/// served by the same session (and on the GPU when there is one).
#[test]
fn a_request_for_huge_outputs_fails_and_the_session_keeps_serving() {
    let value = AttributeProto {
        name: Some("value".into()),
        t: Some(tf32("v", &[1], &[1.5])),
        r#type: Some(AttributeType::Tensor as i32),
        ..Default::default()
    };
    let m = model(
        vec![node("ConstantOfShape", &["s"], &["y"], vec![value])],
        vec![vi("s", INT64, &[2])],
        &["y"],
        vec![],
    );
    let mut places = vec![Place::Cpu];
    if mpsrt_runtime::gpu_available() {
        places.push(Place::Gpu(0));
    }
    for place in places {
        let s = Session::load_bytes(&m, place, SessionOptions::default()).unwrap();
        let shape = |v: &[i64]| feeds(&[("s", Tensor::from_slice(v, &[2], Place::Cpu).unwrap())]);
        let cases: &[(&[i64], ErrorKind)] = &[
            (&[1 << 20, 1 << 20], ErrorKind::OutOfMemory),
            (&[1 << 32, 1 << 32], ErrorKind::Shape),
            (&[1 << 40, 1 << 30], ErrorKind::Shape),
        ];
        for (dims, kind) in cases {
            let e = s.run(&shape(dims)).expect_err("refused");
            assert_eq!(e.kind, *kind, "{place} {dims:?}: {e}");
            assert!(e.to_string().contains("\"y\""), "names the value: {e}");
            let ok = s.run(&shape(&[2, 3])).expect("the session still serves");
            assert_eq!(ok[0].1.shape(), &[2, 3]);
            assert_eq!(ok[0].1.to_f64_vec().unwrap(), vec![1.5; 6], "{place}");
        }
    }
}

/// Huge, negative and odd dims for crafted shapes.
fn hostile_dim() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0i64),
        Just(1),
        Just(3),
        Just(-1),
        Just(1 << 20),
        Just(1 << 31),
        Just(1 << 32),
        Just(1 << 40),
        Just(1 << 62),
        Just(i64::MAX),
        Just(i64::MIN),
    ]
}

/// An attribute named `name` of a type chosen by `kind` (mostly not the one the op expects).
fn attr_of_kind(name: &str, kind: u8, v: i64) -> AttributeProto {
    let mut a = AttributeProto { name: Some(name.into()), ..Default::default() };
    match kind % 5 {
        0 => {
            a.i = Some(v);
            a.r#type = Some(AttributeType::Int as i32);
        }
        1 => {
            a.f = Some(v as f32);
            a.r#type = Some(AttributeType::Float as i32);
        }
        2 => {
            a.s = Some(b"\xffbogus".to_vec());
            a.r#type = Some(AttributeType::String as i32);
        }
        3 => {
            a.ints = vec![v, v, v, v];
            a.r#type = Some(AttributeType::Ints as i32);
        }
        _ => {
            a.t = Some(ti64("t", &[2], &[v]));
            a.r#type = Some(AttributeType::Tensor as i32);
        }
    }
    a
}

/// Loads, plans and runs on the CPU (inputs of ones shaped as declared when that is small).
fn exercise(bytes: &[u8]) {
    let Ok(s) = Session::load_bytes(bytes, Place::Cpu, SessionOptions::default()) else { return };
    let mut f = HashMap::new();
    for io in s.inputs() {
        let dims: Vec<usize> = io.shape.iter().map(|d| d.known().unwrap_or(2)).collect();
        if dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).is_none_or(|n| n > 1 << 16) {
            return;
        }
        let Ok(t) = mpsrt_tensor::ones(&dims, io.dtype, Place::Cpu) else { return };
        f.insert(io.name.clone(), t);
    }
    let _ = s.run(&f);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("MPSRT_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256), failure_persistence: None, ..ProptestConfig::default() })]

    /// One-node models with hostile shapes, short initializers and wrong-typed attributes.
    #[test]
    fn crafted_models_never_panic_or_abort(
        op in 0usize..10,
        dims in proptest::collection::vec(hostile_dim(), 1..4),
        short in any::<bool>(),
        kind in 0u8..5,
        v in hostile_dim(),
    ) {
        // Huge requests must be refused by the limit, not by the machine running out.
        mpsrt_runtime::set_cpu_memory_limit(Some(256 << 20));
        let n = dims.len() as i64;
        // The "shape"/"pads"/"repeats" initializer: its dims say `n` values; `short` gives fewer.
        let data: Vec<i64> = if short { dims[..dims.len() / 2].to_vec() } else { dims.clone() };
        let sh = ti64("sh", &[n], &data);
        let x = vi("x", FLOAT, &[2, 3]);
        let (nodes, inputs, inits) = match op {
            0 => (vec![node("ConstantOfShape", &["sh"], &["y"], vec![])], vec![], vec![sh]),
            1 => (vec![node("Expand", &["x", "sh"], &["y"], vec![])], vec![x], vec![sh]),
            2 => (vec![node("Reshape", &["x", "sh"], &["y"], vec![])], vec![x], vec![sh]),
            3 => (vec![node("Tile", &["x", "sh"], &["y"], vec![])], vec![x], vec![sh]),
            4 => (vec![node("Pad", &["x", "sh"], &["y"], vec![])], vec![x], vec![sh]),
            5 => {
                // A float initializer whose dims promise more data than it holds.
                let w = tf32("w", &dims, if short { &[1.0] } else { &[] });
                (vec![node("Add", &["x", "w"], &["y"], vec![])], vec![x], vec![w])
            }
            6 => (vec![node("Flatten", &["x"], &["y"], vec![attr_of_kind("axis", kind, v)])], vec![x], vec![]),
            7 => (vec![node("Transpose", &["x"], &["y"], vec![attr_of_kind("perm", kind, v)])], vec![x], vec![]),
            8 => {
                let a = vec![attr_of_kind("kernel_shape", kind, v), attr_of_kind("strides", kind + 3, v)];
                (vec![node("MaxPool", &["x4"], &["y"], a)], vec![vi("x4", FLOAT, &[1, 1, 4, 4])], vec![])
            }
            _ => {
                let a = vec![attr_of_kind("axis", kind, v), attr_of_kind("split", kind + 3, v)];
                (vec![node("Split", &["x"], &["y", "z"], a)], vec![x], vec![])
            }
        };
        exercise(&model(nodes, inputs, &["y"], inits));
    }
}

/// The same model behind `mpsrt serve`'s real stack (HTTP, scheduler, engine backend): a request
/// whose output would be huge gets an error response, and the server keeps serving — the next
/// request to the same model and the health endpoints answer normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_survives_a_request_for_huge_outputs() {
    use mpsrt_engine::triton::EngineBackend;
    use mpsrt_serve::{ServeBackends, ServerOptions};
    use serde_json::{json, Value};
    use std::sync::Arc;

    let value = AttributeProto {
        name: Some("value".into()),
        t: Some(tf32("v", &[1], &[1.5])),
        r#type: Some(AttributeType::Tensor as i32),
        ..Default::default()
    };
    let m = model(
        vec![node("ConstantOfShape", &["s"], &["y"], vec![value])],
        vec![vi("s", INT64, &[2])],
        &["y"],
        vec![],
    );
    let repo = std::env::temp_dir().join(format!("mpsrt-huge-{}", std::process::id()));
    let dir = repo.join("huge").join("1");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("model.onnx"), &m).unwrap();
    std::fs::write(
        repo.join("huge").join("config.pbtxt"),
        "name: \"huge\"\nplatform: \"onnxruntime_onnx\"\nmax_batch_size: 0\n\
         instance_group [ { count: 1 kind: KIND_CPU } ]\n",
    )
    .unwrap();

    let mut o = ServerOptions::new(repo.clone());
    o.host = "127.0.0.1".into();
    (o.http_port, o.grpc_port, o.metrics_port) = (0, 0, 0);
    let backends = ServeBackends::new().with_backend(Arc::new(EngineBackend::default()));
    let s = mpsrt_serve::start(o, backends).await.expect("server starts");
    let base = format!("http://{}", s.http_addr);
    let c = reqwest::Client::new();
    let ready = c.get(format!("{base}/v2/models/huge/ready")).send().await.unwrap();
    let index = c.post(format!("{base}/v2/repository/index")).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 200, "huge is not ready: {}", index.text().await.unwrap());

    let infer = |dims: [i64; 2]| {
        let (c, url) = (c.clone(), format!("{base}/v2/models/huge/infer"));
        async move {
            let body = json!({"inputs": [{"name": "s", "shape": [2], "datatype": "INT64",
                                          "data": dims}]});
            let r = c.post(url).json(&body).send().await.expect("answered");
            (r.status().as_u16(), r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    for dims in [[1 << 20, 1 << 20], [1 << 32, 1 << 32], [1 << 40, 1 << 30]] {
        let (status, body) = infer(dims).await;
        assert!(status >= 400, "{dims:?}: {status} {body}");
        let err = body["error"].as_str().unwrap_or_default();
        assert!(err.contains("\"y\""), "{dims:?}: the error names the value: {body}");
        let (status, body) = infer([2, 3]).await;
        assert_eq!(status, 200, "still serving after {dims:?}: {body}");
        let data: Vec<f64> = body["outputs"][0]["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_f64)
            .collect();
        assert_eq!(data, vec![1.5; 6], "{body}");
    }
    let health = c.get(format!("{base}/v2/health/live")).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    s.shutdown().await.expect("clean shutdown");
    let _ = std::fs::remove_dir_all(&repo);
}
