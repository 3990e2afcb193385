//! gRPC side of `mpsrt perf`: Triton's `GRPCInferenceService` through the tonic client that
//! `mpsrt-serve` already generates from the vendored protos; one channel (one HTTP/2
//! connection) per worker. Tensors always travel as `raw_input_contents` / `raw_output_contents`.

use super::{Dur, Input, ModelMeta, Reply, ServerStats, Target, TensorMeta};
use mpsrt::{Error, Result};
use mpsrt_serve::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use mpsrt_serve::proto::inference::model_infer_request::InferInputTensor;
use mpsrt_serve::proto::inference::{
    ModelInferRequest, ModelInferResponse, ModelMetadataRequest, ModelStatisticsRequest,
    RepositoryIndexRequest, StatisticDuration,
};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);

pub struct GrpcConn {
    client: GrpcInferenceServiceClient<Channel>,
}

/// The request every worker sends (raw little-endian tensors, all outputs).
pub fn infer_request(t: &Target, inputs: &[Input]) -> ModelInferRequest {
    ModelInferRequest {
        model_name: t.model.clone(),
        model_version: t.version.clone(),
        inputs: inputs
            .iter()
            .map(|i| InferInputTensor {
                name: i.name.clone(),
                datatype: i.datatype.as_str().to_string(),
                shape: i.shape.clone(),
                ..Default::default()
            })
            .collect(),
        raw_input_contents: inputs.iter().map(|i| i.raw.clone()).collect(),
        ..Default::default()
    }
}

impl GrpcConn {
    pub async fn connect(t: &Target) -> std::result::Result<GrpcConn, String> {
        let uri = format!("http://{}", t.authority);
        let hint = format!("cannot connect to {} (-u {}) over gRPC: ", t.addr, t.given);
        let ep = Endpoint::from_shared(uri).map_err(|e| format!("{hint}{e}"))?;
        let channel =
            ep.connect_timeout(CONTROL_TIMEOUT).tcp_nodelay(true).connect().await.map_err(|e| {
                format!("{hint}{e}; is `mpsrt serve` running with --grpc-port {}?", t.addr.port())
            })?;
        Ok(GrpcConn { client: GrpcInferenceServiceClient::new(channel) })
    }

    pub async fn infer(&mut self, r: &ModelInferRequest) -> std::result::Result<Reply, String> {
        match self.client.model_infer(r.clone()).await {
            Ok(resp) => Ok(Reply::Grpc(Box::new(resp.into_inner()))),
            // A status is a complete answer, not a broken connection (tonic's channel
            // reconnects by itself), so the worker keeps its channel.
            Err(s) => Ok(Reply::Failed(format!("gRPC {:?}: {}", s.code(), s.message()))),
        }
    }

    pub async fn metadata(&mut self, t: &Target) -> Result<ModelMeta> {
        let req = ModelMetadataRequest { name: t.model.clone(), version: t.version.clone() };
        let r = tokio::time::timeout(CONTROL_TIMEOUT, self.client.model_metadata(req)).await;
        let m = match r {
            Err(_) => {
                return Err(Error::io(
                    "perf",
                    format!("ModelMetadata at {}: no answer within {CONTROL_TIMEOUT:?}", t.given),
                ))
            }
            Ok(Err(s)) => {
                let mut msg = format!(
                    "model '{}' is not available at {} (gRPC ModelMetadata: {})",
                    t.model,
                    t.given,
                    s.message()
                );
                if let Some(list) = self.repository_models().await {
                    msg.push_str(&format!("; the repository has: {list}"));
                }
                return Err(Error::invalid("perf", msg));
            }
            Ok(Ok(m)) => m.into_inner(),
        };
        let conv =
            |v: Vec<mpsrt_serve::proto::inference::model_metadata_response::TensorMetadata>| {
                v.into_iter()
                    .map(|t| TensorMeta { name: t.name, datatype: t.datatype, shape: t.shape })
                    .collect()
            };
        Ok(ModelMeta { inputs: conv(m.inputs), outputs: conv(m.outputs) })
    }

    async fn repository_models(&mut self) -> Option<String> {
        let req = RepositoryIndexRequest::default();
        let r = tokio::time::timeout(CONTROL_TIMEOUT, self.client.repository_index(req)).await;
        let models = r.ok()?.ok()?.into_inner().models;
        let names: Vec<String> =
            models.iter().map(|m| format!("{} ({})", m.name, m.state)).collect();
        Some(if names.is_empty() { "no models".into() } else { names.join(", ") })
    }

    pub async fn stats(&mut self, t: &Target) -> Option<ServerStats> {
        let req = ModelStatisticsRequest { name: t.model.clone(), version: t.version.clone() };
        let r = tokio::time::timeout(CONTROL_TIMEOUT, self.client.model_statistics(req)).await;
        let resp = r.ok()?.ok()?.into_inner();
        let mut s = ServerStats::default();
        let add = |d: &mut Dur, x: &Option<StatisticDuration>| {
            if let Some(x) = x {
                d.count += x.count;
                d.ns += x.ns;
            }
        };
        for m in &resp.model_stats {
            let st = m.inference_stats.as_ref()?;
            add(&mut s.success, &st.success);
            add(&mut s.queue, &st.queue);
            add(&mut s.compute_input, &st.compute_input);
            add(&mut s.compute_infer, &st.compute_infer);
            add(&mut s.compute_output, &st.compute_output);
            s.inference_count += m.inference_count;
            s.execution_count += m.execution_count;
        }
        Some(s)
    }
}

/// Every expected output present, raw contents sized as their shapes say.
pub fn check_infer(
    r: &ModelInferResponse,
    expected: &[TensorMeta],
) -> std::result::Result<(), String> {
    if !r.raw_output_contents.is_empty() && r.raw_output_contents.len() != r.outputs.len() {
        return Err(format!(
            "{} outputs but {} raw output contents",
            r.outputs.len(),
            r.raw_output_contents.len()
        ));
    }
    for (k, o) in r.outputs.iter().enumerate() {
        let want = super::wire_bytes(&o.datatype, &o.shape);
        let got = r.raw_output_contents.get(k).map(Vec::len);
        if let (Some(w), Some(g)) = (want, got) {
            if w != g {
                return Err(format!(
                    "output '{}' {} {:?}: {g} raw bytes, expected {w}",
                    o.name, o.datatype, o.shape
                ));
            }
        }
    }
    for e in expected {
        if !r.outputs.iter().any(|o| o.name == e.name) {
            return Err(format!("output '{}' missing from the response", e.name));
        }
    }
    Ok(())
}
