//! gRPC front end: Triton's `inference.GRPCInferenceService` and `grpc.health.v1.Health` (tonic).

use crate::codec;
use crate::config::parse_json;
use crate::http::stats_message;
use crate::proto::health::{
    health_check_response::ServingStatus,
    health_server::{Health, HealthServer},
    HealthCheckRequest, HealthCheckResponse,
};
use crate::proto::inference::grpc_inference_service_server::{
    GrpcInferenceService, GrpcInferenceServiceServer,
};
use crate::proto::inference::{self as pb, model_repository_parameter::ParameterChoice};
use crate::server::{State, EXTENSIONS, SERVER_NAME};
use crate::types::{HostTensor, ServeError, TensorData, TritonDType};
use futures_util::StreamExt;
use std::pin::Pin;
use std::sync::Arc;
use tonic::{Request, Response, Status, Streaming};

type Res<T> = Result<Response<T>, Status>;
type BoxStream<T> = Pin<Box<dyn futures_util::Stream<Item = Result<T, Status>> + Send>>;

/// The gRPC service set, ready to serve on a listener.
pub fn router(
    state: Arc<State>,
) -> tonic::transport::server::Router<
    tower::layer::util::Stack<crate::grpc_budget::BudgetLayer, tower::layer::util::Identity>,
> {
    // tonic refuses messages over its own bound by ending the whole stream, so its bound is set
    // above ours (twice `--max-request-bytes`): a message between the two is answered with an
    // error for that message alone, and a stream goes on after it.
    let limit = state.options.max_request_bytes;
    let svc = GrpcInferenceServiceServer::new(GrpcService { state: state.clone() })
        .max_decoding_message_size(limit.saturating_mul(2))
        .max_encoding_message_size(usize::MAX);
    let keepalive = (state.options.idle_timeout_secs > 0).then(|| {
        std::time::Duration::from_secs((state.options.idle_timeout_secs / 2).clamp(1, 60))
    });
    tonic::transport::Server::builder()
        .http2_keepalive_interval(keepalive)
        .http2_keepalive_timeout(Some(std::time::Duration::from_secs(20)))
        .max_concurrent_streams(Some(256))
        .layer(crate::grpc_budget::BudgetLayer::new(state.clone()))
        .add_service(svc)
        .add_service(HealthServer::new(HealthService { state }))
}

struct GrpcService {
    state: Arc<State>,
}

struct HealthService {
    state: Arc<State>,
}

fn st(e: ServeError) -> Status {
    e.to_status()
}

/// Typed `contents` to raw little-endian bytes (FP16/BF16 have no typed field: raw only).
fn from_contents(
    name: &str,
    dt: TritonDType,
    c: &pb::InferTensorContents,
) -> Result<TensorData, ServeError> {
    fn narrow<T: TryFrom<i64>>(name: &str, dt: TritonDType, v: i64) -> Result<T, ServeError> {
        T::try_from(v)
            .map_err(|_| ServeError::invalid(format!("input '{name}': {v} out of range for {dt}")))
    }
    let mut out = Vec::new();
    match dt {
        TritonDType::Bool => out.extend(c.bool_contents.iter().map(|&b| u8::from(b))),
        TritonDType::Int8 => {
            for &v in &c.int_contents {
                out.extend(narrow::<i8>(name, dt, v.into())?.to_le_bytes());
            }
        }
        TritonDType::Int16 => {
            for &v in &c.int_contents {
                out.extend(narrow::<i16>(name, dt, v.into())?.to_le_bytes());
            }
        }
        TritonDType::Int32 => c.int_contents.iter().for_each(|v| out.extend(v.to_le_bytes())),
        TritonDType::Int64 => c.int64_contents.iter().for_each(|v| out.extend(v.to_le_bytes())),
        TritonDType::Uint8 => {
            for &v in &c.uint_contents {
                out.extend(narrow::<u8>(name, dt, v.into())?.to_le_bytes());
            }
        }
        TritonDType::Uint16 => {
            for &v in &c.uint_contents {
                out.extend(narrow::<u16>(name, dt, v.into())?.to_le_bytes());
            }
        }
        TritonDType::Uint32 => c.uint_contents.iter().for_each(|v| out.extend(v.to_le_bytes())),
        TritonDType::Uint64 => c.uint64_contents.iter().for_each(|v| out.extend(v.to_le_bytes())),
        TritonDType::Fp32 => c.fp32_contents.iter().for_each(|v| out.extend(v.to_le_bytes())),
        TritonDType::Fp64 => c.fp64_contents.iter().for_each(|v| out.extend(v.to_le_bytes())),
        TritonDType::Bytes => return Ok(TensorData::Bytes(c.bytes_contents.clone())),
        TritonDType::Fp16 | TritonDType::Bf16 => {
            return Err(ServeError::invalid(format!(
                "input '{name}': {dt} data must be sent in raw_input_contents"
            )))
        }
    }
    Ok(TensorData::Raw(out))
}

/// Refuses known parameters of the wrong type (`timeout` given as a string is a 400).
fn check_params(
    params: &std::collections::HashMap<String, pb::InferParameter>,
    whose: &str,
) -> Result<(), ServeError> {
    use pb::infer_parameter::ParameterChoice as P;
    for (k, v) in params {
        let c = &v.parameter_choice;
        let (ok, want) = match k.as_str() {
            "timeout" | "priority" | "binary_data_size" | "class_count" => (
                matches!(c, Some(P::Uint64Param(_)))
                    || matches!(c, Some(P::Int64Param(x)) if *x >= 0),
                "a non-negative integer",
            ),
            "sequence_id" => (
                matches!(c, Some(P::Uint64Param(_) | P::Int64Param(_) | P::StringParam(_))),
                "an integer or a string",
            ),
            "sequence_start" | "sequence_end" | "binary_data_output" | "binary_data" => {
                (matches!(c, Some(P::BoolParam(_))), "a boolean")
            }
            _ => (true, ""),
        };
        if !ok {
            return Err(ServeError::invalid(format!(
                "{whose}parameter '{k}' must be {want}, got {c:?}"
            )));
        }
    }
    Ok(())
}

/// Decodes a gRPC ModelInferRequest into host tensors and the requested output names.
pub fn decode_request(
    r: pb::ModelInferRequest,
) -> Result<(Vec<HostTensor>, Vec<String>), ServeError> {
    check_params(&r.parameters, "")?;
    for o in &r.outputs {
        check_params(&o.parameters, &format!("output '{}': ", o.name))?;
    }
    let use_raw = !r.raw_input_contents.is_empty();
    if use_raw && r.raw_input_contents.len() != r.inputs.len() {
        return Err(ServeError::invalid(format!(
            "expected {} raw_input_contents (one per input), got {}",
            r.inputs.len(),
            r.raw_input_contents.len()
        )));
    }
    let mut inputs = Vec::with_capacity(r.inputs.len());
    for (idx, i) in r.inputs.into_iter().enumerate() {
        check_params(&i.parameters, &format!("input '{}': ", i.name))?;
        if i.parameters.contains_key("shared_memory_region") {
            return Err(ServeError::unsupported(format!(
                "input '{}': shared memory is not supported by mpsrt",
                i.name
            )));
        }
        let datatype = TritonDType::parse(&i.datatype).ok_or_else(|| {
            ServeError::invalid(format!("input '{}' has invalid datatype '{}'", i.name, i.datatype))
        })?;
        let data = match (use_raw, &i.contents) {
            (true, Some(_)) => {
                return Err(ServeError::invalid(format!(
                    "input '{}': contents and raw_input_contents cannot be mixed",
                    i.name
                )))
            }
            (true, None) => codec::from_raw(&i.name, datatype, &r.raw_input_contents[idx])?,
            (false, Some(c)) => from_contents(&i.name, datatype, c)?,
            (false, None) => {
                return Err(ServeError::invalid(format!("input '{}' has no data", i.name)))
            }
        };
        if let TensorData::Bytes(v) = &data {
            let n = HostTensor::element_count(&i.shape).unwrap_or(usize::MAX);
            if v.len() != n {
                return Err(ServeError::invalid(format!(
                    "unexpected number of elements for input '{}': got {}, shape {:?} needs {n}",
                    i.name,
                    v.len(),
                    i.shape
                )));
            }
        }
        inputs.push(HostTensor { name: i.name, datatype, shape: i.shape, data });
    }
    Ok((inputs, r.outputs.into_iter().map(|o| o.name).collect()))
}

/// Runs one ModelInfer request; outputs come back in `raw_output_contents` as Triton sends them.
async fn infer(
    state: &State,
    r: pb::ModelInferRequest,
) -> Result<pb::ModelInferResponse, ServeError> {
    use prost::Message;
    let size = r.encoded_len();
    let limit = state.options.max_request_bytes;
    if size > limit {
        return Err(ServeError::too_large(format!(
            "request message of {size} bytes exceeds the limit of {limit} bytes (--max-request-bytes)"
        )));
    }
    let mut held = crate::http::Charge::none();
    crate::http::charge(state, &mut held, size)?;
    let model = state.manager.get(&r.model_name, &r.model_version)?;
    if state.verbose.load(std::sync::atomic::Ordering::Relaxed) > 0 {
        tracing::info!(model = %r.model_name, version = %model.version, id = %r.id, "gRPC infer");
    }
    let (name, id) = (r.model_name.clone(), r.id.clone());
    let (inputs, outputs) = match decode_request(r) {
        Ok(x) => x,
        Err(e) => {
            model.stats.record_failure(std::time::Duration::ZERO);
            return Err(e);
        }
    };
    let outs = model.infer(inputs, outputs).await?;
    let mut resp = pb::ModelInferResponse {
        model_name: name,
        model_version: model.version_str(),
        id,
        ..Default::default()
    };
    for o in outs {
        resp.raw_output_contents.push(codec::raw_bytes(&o));
        resp.outputs.push(pb::model_infer_response::InferOutputTensor {
            name: o.name,
            datatype: o.datatype.as_str().to_string(),
            shape: o.shape,
            ..Default::default()
        });
    }
    Ok(resp)
}

fn unimplemented_rpc<T>(what: &str) -> Res<T> {
    Err(Status::unimplemented(format!("{what} is not supported by mpsrt")))
}

#[tonic::async_trait]
impl GrpcInferenceService for GrpcService {
    async fn server_live(&self, _: Request<pb::ServerLiveRequest>) -> Res<pb::ServerLiveResponse> {
        Ok(Response::new(pb::ServerLiveResponse { live: self.state.live() }))
    }

    async fn server_ready(
        &self,
        _: Request<pb::ServerReadyRequest>,
    ) -> Res<pb::ServerReadyResponse> {
        Ok(Response::new(pb::ServerReadyResponse { ready: self.state.ready() }))
    }

    async fn model_ready(&self, r: Request<pb::ModelReadyRequest>) -> Res<pb::ModelReadyResponse> {
        let r = r.into_inner();
        let ready = self.state.manager.get(&r.name, &r.version).is_ok();
        Ok(Response::new(pb::ModelReadyResponse { ready }))
    }

    async fn server_metadata(
        &self,
        _: Request<pb::ServerMetadataRequest>,
    ) -> Res<pb::ServerMetadataResponse> {
        Ok(Response::new(pb::ServerMetadataResponse {
            name: SERVER_NAME.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: EXTENSIONS.iter().map(|s| s.to_string()).collect(),
        }))
    }

    async fn model_metadata(
        &self,
        r: Request<pb::ModelMetadataRequest>,
    ) -> Res<pb::ModelMetadataResponse> {
        let r = r.into_inner();
        let model = self.state.manager.get(&r.name, &r.version).map_err(st)?;
        let t = |x: Vec<crate::model::TensorMeta>| {
            x.into_iter()
                .map(|t| pb::model_metadata_response::TensorMetadata {
                    name: t.name,
                    datatype: t.datatype.as_str().into(),
                    shape: t.shape,
                })
                .collect()
        };
        Ok(Response::new(pb::ModelMetadataResponse {
            name: r.name.clone(),
            versions: self.state.manager.versions(&r.name),
            platform: model.config.platform.clone(),
            inputs: t(model.inputs_meta()),
            outputs: t(model.outputs_meta()),
        }))
    }

    async fn model_infer(&self, r: Request<pb::ModelInferRequest>) -> Res<pb::ModelInferResponse> {
        infer(&self.state, r.into_inner()).await.map(Response::new).map_err(st)
    }

    type ModelStreamInferStream = BoxStream<pb::ModelStreamInferResponse>;

    async fn model_stream_infer(
        &self,
        r: Request<Streaming<pb::ModelInferRequest>>,
    ) -> Res<Self::ModelStreamInferStream> {
        // Requests run at most `--max-stream-inflight` at a time and their responses go out in
        // request order (`buffered`); no task per request. A message the server refuses gets an
        // error response of its own; an error from the transport ends the stream with that status.
        let inbound = r.into_inner();
        let state = self.state.clone();
        let n = state.options.max_stream_inflight.max(1);
        let out = inbound
            .map(move |item| {
                let state = state.clone();
                async move {
                    let req = item?;
                    let (name, id) = (req.model_name.clone(), req.id.clone());
                    Ok(match infer(&state, req).await {
                        Ok(resp) => pb::ModelStreamInferResponse {
                            error_message: String::new(),
                            infer_response: Some(resp),
                        },
                        Err(e) => pb::ModelStreamInferResponse {
                            error_message: e.message,
                            infer_response: Some(pb::ModelInferResponse {
                                model_name: name,
                                id,
                                ..Default::default()
                            }),
                        },
                    })
                }
            })
            .buffered(n);
        Ok(Response::new(Box::pin(out)))
    }

    async fn model_config(
        &self,
        r: Request<pb::ModelConfigRequest>,
    ) -> Res<pb::ModelConfigResponse> {
        let r = r.into_inner();
        let model = self.state.manager.get(&r.name, &r.version).map_err(st)?;
        Ok(Response::new(pb::ModelConfigResponse { config: Some((*model.config).clone()) }))
    }

    async fn model_statistics(
        &self,
        r: Request<pb::ModelStatisticsRequest>,
    ) -> Res<pb::ModelStatisticsResponse> {
        let r = r.into_inner();
        stats_message(&self.state, &r.name, &r.version).map(Response::new).map_err(st)
    }

    async fn repository_index(
        &self,
        r: Request<pb::RepositoryIndexRequest>,
    ) -> Res<pb::RepositoryIndexResponse> {
        let models = self
            .state
            .manager
            .index(r.into_inner().ready)
            .into_iter()
            .map(|x| pb::repository_index_response::ModelIndex {
                name: x.name,
                version: x.version,
                state: x.state,
                reason: x.reason,
            })
            .collect();
        Ok(Response::new(pb::RepositoryIndexResponse { models }))
    }

    async fn repository_model_load(
        &self,
        r: Request<pb::RepositoryModelLoadRequest>,
    ) -> Res<pb::RepositoryModelLoadResponse> {
        let r = r.into_inner();
        self.state.check_explicit().map_err(st)?;
        let over = match r.parameters.get("config").and_then(|p| p.parameter_choice.as_ref()) {
            None => None,
            Some(ParameterChoice::StringParam(s)) => Some(parse_json(s).map_err(st)?),
            Some(ParameterChoice::BytesParam(b)) => {
                Some(parse_json(&String::from_utf8_lossy(b)).map_err(st)?)
            }
            Some(_) => {
                return Err(Status::invalid_argument("'config' parameter must be a JSON string"))
            }
        };
        self.state.manager.load(&r.model_name, over).await.map_err(st)?;
        Ok(Response::new(pb::RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        r: Request<pb::RepositoryModelUnloadRequest>,
    ) -> Res<pb::RepositoryModelUnloadResponse> {
        self.state.check_explicit().map_err(st)?;
        self.state.manager.unload(&r.into_inner().model_name).await.map_err(st)?;
        Ok(Response::new(pb::RepositoryModelUnloadResponse {}))
    }

    async fn system_shared_memory_status(
        &self,
        _: Request<pb::SystemSharedMemoryStatusRequest>,
    ) -> Res<pb::SystemSharedMemoryStatusResponse> {
        unimplemented_rpc("system shared memory")
    }

    async fn system_shared_memory_register(
        &self,
        _: Request<pb::SystemSharedMemoryRegisterRequest>,
    ) -> Res<pb::SystemSharedMemoryRegisterResponse> {
        unimplemented_rpc("system shared memory")
    }

    async fn system_shared_memory_unregister(
        &self,
        _: Request<pb::SystemSharedMemoryUnregisterRequest>,
    ) -> Res<pb::SystemSharedMemoryUnregisterResponse> {
        unimplemented_rpc("system shared memory")
    }

    async fn cuda_shared_memory_status(
        &self,
        _: Request<pb::CudaSharedMemoryStatusRequest>,
    ) -> Res<pb::CudaSharedMemoryStatusResponse> {
        unimplemented_rpc("CUDA shared memory")
    }

    async fn cuda_shared_memory_register(
        &self,
        _: Request<pb::CudaSharedMemoryRegisterRequest>,
    ) -> Res<pb::CudaSharedMemoryRegisterResponse> {
        unimplemented_rpc("CUDA shared memory")
    }

    async fn cuda_shared_memory_unregister(
        &self,
        _: Request<pb::CudaSharedMemoryUnregisterRequest>,
    ) -> Res<pb::CudaSharedMemoryUnregisterResponse> {
        unimplemented_rpc("CUDA shared memory")
    }

    async fn trace_setting(
        &self,
        _: Request<pb::TraceSettingRequest>,
    ) -> Res<pb::TraceSettingResponse> {
        unimplemented_rpc("tracing")
    }

    async fn log_settings(
        &self,
        r: Request<pb::LogSettingsRequest>,
    ) -> Res<pb::LogSettingsResponse> {
        use pb::log_settings_request::setting_value::ParameterChoice as In;
        use pb::log_settings_response::{setting_value::ParameterChoice as Out, SettingValue};
        let mut cur = self.state.log.lock().clone();
        for (k, v) in r.into_inner().settings {
            let bad = || Status::invalid_argument(format!("invalid value for log setting '{k}'"));
            match (k.as_str(), v.parameter_choice) {
                ("log_info", Some(In::BoolParam(b))) => cur.log_info = b,
                ("log_warning", Some(In::BoolParam(b))) => cur.log_warning = b,
                ("log_error", Some(In::BoolParam(b))) => cur.log_error = b,
                ("log_verbose_level", Some(In::Uint32Param(n))) => cur.log_verbose_level = n,
                ("log_file", Some(In::StringParam(s))) => cur.log_file = s,
                ("log_format", Some(In::StringParam(s))) => cur.log_format = s,
                (
                    "log_info" | "log_warning" | "log_error" | "log_verbose_level" | "log_file"
                    | "log_format",
                    _,
                ) => return Err(bad()),
                _ => return Err(Status::invalid_argument(format!("unknown log setting '{k}'"))),
            }
        }
        self.state.verbose.store(cur.log_verbose_level, std::sync::atomic::Ordering::Relaxed);
        *self.state.log.lock() = cur.clone();
        let v = |c: Out| SettingValue { parameter_choice: Some(c) };
        let settings = [
            ("log_file", v(Out::StringParam(cur.log_file))),
            ("log_info", v(Out::BoolParam(cur.log_info))),
            ("log_warning", v(Out::BoolParam(cur.log_warning))),
            ("log_error", v(Out::BoolParam(cur.log_error))),
            ("log_verbose_level", v(Out::Uint32Param(cur.log_verbose_level))),
            ("log_format", v(Out::StringParam(cur.log_format))),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        Ok(Response::new(pb::LogSettingsResponse { settings }))
    }
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(&self, _: Request<HealthCheckRequest>) -> Res<HealthCheckResponse> {
        let status =
            if self.state.ready() { ServingStatus::Serving } else { ServingStatus::NotServing };
        Ok(Response::new(HealthCheckResponse { status: status as i32 }))
    }

    type WatchStream = BoxStream<HealthCheckResponse>;

    async fn watch(&self, _: Request<HealthCheckRequest>) -> Res<Self::WatchStream> {
        unimplemented_rpc("Health/Watch")
    }
}
