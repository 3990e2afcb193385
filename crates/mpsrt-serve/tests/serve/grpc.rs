//! gRPC methods through the tonic-generated client, including streaming and error codes.

use crate::common::*;
use mpsrt_serve::proto::health::{health_client::HealthClient, HealthCheckRequest};
use mpsrt_serve::proto::inference::{
    self as pb,
    grpc_inference_service_client::GrpcInferenceServiceClient,
    model_infer_request::{InferInputTensor, InferRequestedOutputTensor},
};
use tonic::Code;

fn input(
    name: &str,
    dt: &str,
    shape: &[i64],
    contents: Option<pb::InferTensorContents>,
) -> InferInputTensor {
    InferInputTensor {
        name: name.into(),
        datatype: dt.into(),
        shape: shape.to_vec(),
        contents,
        ..Default::default()
    }
}

fn simple_raw(id: &str, a: &[i32], b: &[i32]) -> pb::ModelInferRequest {
    let n = a.len() as i64 / 16;
    pb::ModelInferRequest {
        model_name: "simple".into(),
        id: id.into(),
        inputs: vec![
            input("INPUT0", "INT32", &[n, 16], None),
            input("INPUT1", "INT32", &[n, 16], None),
        ],
        raw_input_contents: vec![le_i32(a), le_i32(b)],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_grpc_method() {
    let s = start(options(&standard_repo())).await;
    let url = format!("http://{}", s.grpc_addr);
    let mut c = GrpcInferenceServiceClient::connect(url.clone()).await.unwrap();

    assert!(c.server_live(pb::ServerLiveRequest {}).await.unwrap().into_inner().live);
    assert!(c.server_ready(pb::ServerReadyRequest {}).await.unwrap().into_inner().ready);
    let ready = |name: &str, version: &str| pb::ModelReadyRequest {
        name: name.into(),
        version: version.into(),
    };
    assert!(c.model_ready(ready("simple", "1")).await.unwrap().into_inner().ready);
    assert!(!c.model_ready(ready("simple", "2")).await.unwrap().into_inner().ready);
    let md = c.server_metadata(pb::ServerMetadataRequest {}).await.unwrap().into_inner();
    assert_eq!(md.name, "mpsrt");
    assert!(md.extensions.iter().any(|e| e == "statistics"));

    let mm = c
        .model_metadata(pb::ModelMetadataRequest { name: "simple".into(), version: String::new() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(mm.versions, ["1"]);
    assert_eq!(mm.inputs[0].shape, [-1, 16]);
    assert_eq!(mm.outputs[0].datatype, "INT32");

    let cfg = c
        .model_config(pb::ModelConfigRequest { name: "simple".into(), version: "1".into() })
        .await
        .unwrap()
        .into_inner()
        .config
        .unwrap();
    assert_eq!(cfg.max_batch_size, 8);
    assert_eq!(cfg.input[1].name, "INPUT1");

    // Raw contents, batch of 2; output OUTPUT1 only.
    let a: Vec<i32> = (0..32).collect();
    let b: Vec<i32> = (0..32).map(|x| x * 3).collect();
    let mut req = simple_raw("r1", &a, &b);
    req.outputs = vec![InferRequestedOutputTensor { name: "OUTPUT1".into(), ..Default::default() }];
    let r = c.model_infer(req).await.unwrap().into_inner();
    assert_eq!((r.id.as_str(), r.model_version.as_str()), ("r1", "1"));
    assert_eq!(r.outputs.len(), 1);
    assert_eq!(r.outputs[0].shape, [2, 16]);
    let want: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x - y).collect();
    assert_eq!(from_le_i32(&r.raw_output_contents[0]), want);

    // Typed contents: INT32 and BYTES/FP32 through echo.
    let typed =
        |v: &[i32]| pb::InferTensorContents { int_contents: v.to_vec(), ..Default::default() };
    let req = pb::ModelInferRequest {
        model_name: "simple".into(),
        inputs: vec![
            input("INPUT0", "INT32", &[1, 16], Some(typed(&[2; 16]))),
            input("INPUT1", "INT32", &[1, 16], Some(typed(&[5; 16]))),
        ],
        ..Default::default()
    };
    let r = c.model_infer(req).await.unwrap().into_inner();
    assert_eq!(from_le_i32(&r.raw_output_contents[0]), vec![7; 16]);
    assert_eq!(from_le_i32(&r.raw_output_contents[1]), vec![-3; 16]);
    let req = pb::ModelInferRequest {
        model_name: "echo".into(),
        inputs: vec![
            input(
                "INPUT0",
                "BYTES",
                &[1, 2],
                Some(pb::InferTensorContents {
                    bytes_contents: vec![b"x".to_vec(), b"yz".to_vec()],
                    ..Default::default()
                }),
            ),
            input(
                "INPUT1",
                "FP32",
                &[1, 1],
                Some(pb::InferTensorContents { fp32_contents: vec![0.5], ..Default::default() }),
            ),
        ],
        ..Default::default()
    };
    let r = c.model_infer(req).await.unwrap().into_inner();
    assert_eq!(r.raw_output_contents[0], [1, 0, 0, 0, b'x', 2, 0, 0, 0, b'y', b'z']);
    assert_eq!(r.raw_output_contents[1], 0.5f32.to_le_bytes());

    // Errors carry the right codes and the server keeps serving.
    let mut bad = simple_raw("bad", &a[..16], &b[..16]);
    bad.model_name = "nope".into();
    assert_eq!(c.model_infer(bad).await.unwrap_err().code(), Code::NotFound);
    let mut bad = simple_raw("bad", &a[..16], &b[..16]);
    bad.inputs[0].shape = vec![1, 8, 2];
    assert_eq!(c.model_infer(bad).await.unwrap_err().code(), Code::InvalidArgument);
    let mut bad = simple_raw("bad", &a[..16], &b[..16]);
    bad.raw_input_contents[1].pop();
    assert_eq!(c.model_infer(bad).await.unwrap_err().code(), Code::InvalidArgument);
    let err = c
        .repository_model_load(pb::RepositoryModelLoadRequest {
            model_name: "simple".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);

    // Streaming: 20 requests on one stream, answers matched by id; one bad request in the middle.
    let reqs: Vec<pb::ModelInferRequest> = (0..20)
        .map(|i| {
            let mut r = simple_raw(&format!("s{i}"), &[i; 16], &[1; 16]);
            if i == 7 {
                r.inputs[0].datatype = "FP32".into();
            }
            r
        })
        .collect();
    let mut stream = c.model_stream_infer(tokio_stream::iter(reqs)).await.unwrap().into_inner();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(msg) = stream.message().await.unwrap() {
        let r = msg.infer_response.unwrap();
        let i: i32 = r.id[1..].parse().unwrap();
        if i == 7 {
            assert!(msg.error_message.contains("data-type"), "{}", msg.error_message);
        } else {
            assert_eq!(msg.error_message, "");
            assert_eq!(from_le_i32(&r.raw_output_contents[0]), vec![i + 1; 16]);
        }
        seen.insert(i);
    }
    assert_eq!(seen.len(), 20);

    let st = c
        .model_statistics(pb::ModelStatisticsRequest {
            name: "simple".into(),
            version: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let ms = &st.model_stats[0];
    assert_eq!(ms.inference_stats.as_ref().unwrap().success.as_ref().unwrap().count, 21);
    assert!(ms.inference_stats.as_ref().unwrap().fail.as_ref().unwrap().count >= 3);
    assert_eq!(ms.inference_count, 22);

    let idx = c
        .repository_index(pb::RepositoryIndexRequest { ready: true, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(idx.models.len(), 4);
    let err = c
        .repository_model_unload(pb::RepositoryModelUnloadRequest {
            model_name: "simple".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);

    use pb::log_settings_request::{setting_value::ParameterChoice as In, SettingValue};
    let upd = pb::LogSettingsRequest {
        settings: [(
            "log_verbose_level".to_string(),
            SettingValue { parameter_choice: Some(In::Uint32Param(1)) },
        )]
        .into(),
    };
    let ls = c.log_settings(upd).await.unwrap().into_inner();
    assert_eq!(
        ls.settings["log_verbose_level"].parameter_choice,
        Some(pb::log_settings_response::setting_value::ParameterChoice::Uint32Param(1))
    );
    let bad = pb::LogSettingsRequest {
        settings: [(
            "log_info".to_string(),
            SettingValue { parameter_choice: Some(In::Uint32Param(1)) },
        )]
        .into(),
    };
    assert_eq!(c.log_settings(bad).await.unwrap_err().code(), Code::InvalidArgument);

    let mut h = HealthClient::connect(url).await.unwrap();
    let hs = h.check(HealthCheckRequest { service: String::new() }).await.unwrap().into_inner();
    assert_eq!(hs.status, 1); // SERVING
    drop((c, h));
    s.shutdown().await.unwrap();
}
