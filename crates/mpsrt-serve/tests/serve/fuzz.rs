//! Bounded fuzzing (proptest, a few hundred cases each, well under a second) of the HTTP and gRPC
//! request decoders: arbitrary bytes and structured-but-hostile requests must be answered with
//! an error or a consistent tensor, never a panic; typed JSON decoding matches a plain reference.

use mpsrt_serve::proto::inference::{self as pb, model_infer_request::InferInputTensor};
use mpsrt_serve::wire::{decode_grpc, decode_http, json_tensor};
use mpsrt_serve::{HostTensor, TensorData, TritonDType};
use proptest::prelude::*;
use serde_json::{json, Value};

const DTYPES: &[&str] = &[
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16",
    "FP32", "FP64", "BYTES", "BF16", "INT33", "",
];

fn cfg() -> ProptestConfig {
    ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() }
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-300i64..300).prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        "[a-z]{0,4}".prop_map(Value::from),
        Just(Value::Null),
    ]
}

/// Nested arrays of scalars (and the odd object), as hostile `data` fields look.
fn data() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![scalar(), Just(json!({"x": 1}))];
    leaf.prop_recursive(4, 64, 8, |inner| prop::collection::vec(inner, 0..8).prop_map(Value::from))
}

fn param_value() -> impl Strategy<Value = Value> {
    prop_oneof![scalar(), Just(json!([1])), Just(json!({}))]
}

fn input() -> impl Strategy<Value = Value> {
    (
        "[A-Z0-9]{1,6}",
        prop::sample::select(DTYPES),
        prop::collection::vec(prop_oneof![-2i64..6, any::<i64>()], 0..4),
        data(),
        prop::option::of(("[a-z_]{1,20}", param_value())),
    )
        .prop_map(|(name, dt, shape, data, p)| {
            let mut v = json!({"name": name, "datatype": dt, "shape": shape, "data": data});
            if let Some((k, pv)) = p {
                v["parameters"] = json!({ k: pv });
            }
            v
        })
}

fn request() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(input(), 0..4),
        prop::option::of(("binary_data_output|timeout|priority|x", param_value())),
        prop::option::of(prop::collection::vec("[A-Z0-9]{1,6}", 0..3)),
    )
        .prop_map(|(inputs, p, outs)| {
            let mut v = json!({ "inputs": inputs });
            if let Some((k, pv)) = p {
                v["parameters"] = json!({ k: pv });
            }
            if let Some(o) = outs {
                v["outputs"] =
                    Value::from(o.into_iter().map(|n| json!({"name": n})).collect::<Vec<_>>());
            }
            v
        })
}

/// Every decoded tensor holds exactly what its shape and dtype say.
fn consistent(t: &HostTensor) -> bool {
    let Some(n) = HostTensor::element_count(&t.shape) else { return false };
    match (&t.data, t.datatype.size()) {
        (TensorData::Raw(b), Some(sz)) => b.len() == n * sz,
        (TensorData::Bytes(v), None) => v.len() == n,
        _ => false,
    }
}

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn http_decoder_survives_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..400), cut in 0usize..400) {
        let k = cut.min(bytes.len());
        let _ = decode_http(&bytes[..k], &bytes[k..]);
    }

    #[test]
    fn http_decoder_answers_hostile_requests_consistently(req in request(), tail in prop::collection::vec(any::<u8>(), 0..16)) {
        let body = serde_json::to_vec(&req).unwrap();
        for binary in [&[][..], &tail[..]] {
            if let Ok(d) = decode_http(&body, binary) {
                for t in &d.inputs {
                    prop_assert!(consistent(t), "{t:?} from {req}");
                }
            }
        }
    }

    #[test]
    fn typed_json_equals_the_reference(vals in prop::collection::vec(-40000i64..40000, 0..50), nest in 1usize..4) {
        // INT16 reference: in range -> little-endian bytes, else an error naming the value.
        let cols = nest.min(vals.len().max(1));
        let rows = vals.len() / cols;
        let vals = &vals[..rows * cols];
        let fits = vals.iter().all(|v| i16::try_from(*v).is_ok());
        let nested: Vec<Value> = vals.chunks(cols).map(|c| Value::from(c.to_vec())).collect();
        let text = Value::from(nested).to_string();
        let got = json_tensor("t", TritonDType::Int16, &[rows as i64, cols as i64], vals.len(), &text);
        if fits {
            let want: Vec<u8> = vals.iter().flat_map(|v| (*v as i16).to_le_bytes()).collect();
            prop_assert_eq!(got.unwrap(), TensorData::Raw(want));
        } else {
            prop_assert!(got.unwrap_err().message.contains("not a valid INT16"));
        }
    }

    #[test]
    fn grpc_decoder_survives_arbitrary_messages(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        use prost::Message;
        if let Ok(r) = pb::ModelInferRequest::decode(bytes.as_slice()) {
            let _ = decode_grpc(r);
        }
    }

    #[test]
    fn grpc_decoder_answers_hostile_requests_consistently(
        ins in prop::collection::vec((prop::sample::select(DTYPES), prop::collection::vec(-2i64..5, 0..3), prop::collection::vec(any::<u8>(), 0..24), prop::collection::vec(any::<i32>(), 0..6)), 0..4),
        raw in any::<bool>(),
        extra_raw in any::<bool>(),
    ) {
        let mut r = pb::ModelInferRequest { model_name: "m".into(), ..Default::default() };
        for (k, (dt, shape, bytes, ints)) in ins.iter().enumerate() {
            let contents = (!raw).then(|| pb::InferTensorContents {
                int_contents: ints.clone(),
                fp32_contents: ints.iter().map(|&x| x as f32).collect(),
                bytes_contents: bytes.chunks(3).map(<[u8]>::to_vec).collect(),
                ..Default::default()
            });
            r.inputs.push(InferInputTensor {
                name: format!("I{k}"),
                datatype: dt.to_string(),
                shape: shape.clone(),
                contents,
                ..Default::default()
            });
            if raw {
                r.raw_input_contents.push(bytes.clone());
            }
        }
        if extra_raw {
            r.raw_input_contents.push(vec![1, 2, 3]);
        }
        if let Ok((inputs, _)) = decode_grpc(r) {
            for t in &inputs {
                // Sizes of fixed-size tensors are checked against the model later; BYTES now.
                if t.datatype == TritonDType::Bytes {
                    prop_assert!(consistent(t), "{t:?}");
                }
            }
        }
    }
}
