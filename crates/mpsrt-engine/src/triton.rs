//! The engine as a Triton backend for `mpsrt serve`: backend `onnxruntime`, platform
//! `onnxruntime_onnx`, so Triton model repositories written for ONNX Runtime load unchanged; the
//! MPS backend's names (`metal_mps`, `mps`) and its `model.mps` files (ONNX) are accepted too.
//! `KIND_GPU` instances run on `mps:N`, `KIND_CPU` instances on the CPU. A config's
//! `parameters { key: "precision" value: { string_value: "f16" } }` loads the model with
//! `precision=f16` (heavy ops in half precision, inputs and outputs unchanged).

use crate::precision::Precision;
use crate::session::{Session, SessionOptions};
use mpsrt_core::{DType, Place};
use mpsrt_serve::proto::inference::ModelConfig;
use mpsrt_serve::{
    Backend, HostTensor, InstanceDevice, ModelInstance, ModelIo, ServeError, TensorData, TensorIo,
    TritonDType,
};
use mpsrt_tensor::Tensor;
use std::collections::HashMap;
use std::path::Path;

/// Triton wire dtype of an mpsrt dtype.
pub fn triton_dtype(d: DType) -> TritonDType {
    match d {
        DType::Bool => TritonDType::Bool,
        DType::U8 => TritonDType::Uint8,
        DType::I8 => TritonDType::Int8,
        DType::I32 => TritonDType::Int32,
        DType::I64 => TritonDType::Int64,
        DType::F16 => TritonDType::Fp16,
        DType::F32 => TritonDType::Fp32,
        DType::F64 => TritonDType::Fp64,
    }
}

/// mpsrt dtype of a Triton wire dtype, if mpsrt has one.
pub fn mpsrt_dtype(d: TritonDType) -> Option<DType> {
    Some(match d {
        TritonDType::Bool => DType::Bool,
        TritonDType::Uint8 => DType::U8,
        TritonDType::Int8 => DType::I8,
        TritonDType::Int32 => DType::I32,
        TritonDType::Int64 => DType::I64,
        TritonDType::Fp16 => DType::F16,
        TritonDType::Fp32 => DType::F32,
        TritonDType::Fp64 => DType::F64,
        _ => return None,
    })
}

fn serve_err(e: mpsrt_core::Error) -> ServeError {
    match e.kind {
        mpsrt_core::ErrorKind::InvalidArgument
        | mpsrt_core::ErrorKind::Shape
        | mpsrt_core::ErrorKind::DType => ServeError::invalid(e.to_string()),
        mpsrt_core::ErrorKind::Unsupported => ServeError::unsupported(e.to_string()),
        _ => ServeError::internal(e.to_string()),
    }
}

/// The ONNX engine backend.
#[derive(Debug, Clone, Default)]
pub struct EngineBackend {
    pub options: SessionOptions,
}

impl Backend for EngineBackend {
    fn name(&self) -> &str {
        "onnxruntime"
    }
    fn platform(&self) -> &str {
        "onnxruntime_onnx"
    }
    fn default_model_filename(&self) -> &str {
        "model.onnx"
    }
    /// The Triton MPS backend's names (the fourth seed's config says `backend: "metal_mps"`).
    fn aliases(&self) -> &[&str] {
        &["metal_mps", "mps"]
    }
    /// The MPS backend's `.mps` model files are ONNX ("currently the same as ONNX").
    fn alternate_model_filenames(&self) -> &[&str] {
        &["model.mps"]
    }

    fn model_io(&self, model_path: &Path) -> Result<ModelIo, ServeError> {
        let model = mpsrt_onnx::load_path(model_path).map_err(serve_err)?;
        let conv = |sig: Vec<mpsrt_graph::Signature>| -> Vec<TensorIo> {
            sig.into_iter()
                .map(|s| TensorIo {
                    name: s.name,
                    datatype: triton_dtype(s.dtype),
                    dims: s
                        .shape
                        .iter()
                        .flatten()
                        .map(|d| d.known().map_or(-1, |n| n as i64))
                        .collect(),
                })
                .collect()
        };
        Ok(ModelIo {
            inputs: conv(model.graph.input_signature()),
            outputs: conv(model.graph.output_signature()),
        })
    }

    fn load(
        &self,
        model_path: &Path,
        config: &ModelConfig,
        device: InstanceDevice,
    ) -> Result<Box<dyn ModelInstance>, ServeError> {
        let place = match device {
            InstanceDevice::Cpu => Place::Cpu,
            InstanceDevice::Gpu(i) => Place::Gpu(i as usize),
        };
        // `parameters { key: "precision" value: { string_value: "f16" } }` in config.pbtxt.
        let precision = match mpsrt_serve::config::string_parameter(config, "precision") {
            None => Precision::F32,
            Some(v) => v.parse::<Precision>().map_err(|e| {
                ServeError::invalid(format!(
                    "model '{}': config parameters: {}",
                    config.name, e.message
                ))
            })?,
        };
        let session = Session::load_with_precision(model_path, place, self.options, precision)
            .map_err(serve_err)?;
        Ok(Box::new(EngineInstance { session }))
    }
}

/// One loaded session serving requests.
pub struct EngineInstance {
    session: Session,
}

impl EngineInstance {
    /// An instance serving `session` (`EngineBackend::load` makes one per model instance).
    pub fn new(session: Session) -> Self {
        EngineInstance { session }
    }

    /// The instance's session: every request runs on it, so each batch shape gets one plan
    /// and one replay, reused across requests (`Session::replay_status`).
    pub fn session(&self) -> &Session {
        &self.session
    }
}

impl ModelInstance for EngineInstance {
    fn execute(
        &mut self,
        inputs: Vec<HostTensor>,
        requested_outputs: &[String],
    ) -> Result<Vec<HostTensor>, ServeError> {
        let mut feeds = HashMap::new();
        for t in inputs {
            let dtype = mpsrt_dtype(t.datatype).ok_or_else(|| {
                ServeError::invalid(format!(
                    "input '{}': datatype {} is not supported by the mpsrt engine",
                    t.name,
                    t.datatype.as_str()
                ))
            })?;
            let TensorData::Raw(bytes) = &t.data else {
                return Err(ServeError::invalid(format!(
                    "input '{}': BYTES tensors are not supported by the mpsrt engine",
                    t.name
                )));
            };
            let shape: Vec<usize> =
                t.shape.iter().map(|&d| usize::try_from(d)).collect::<Result<_, _>>().map_err(
                    |_| ServeError::invalid(format!("input '{}': negative dim", t.name)),
                )?;
            let tensor = Tensor::from_bytes(bytes, dtype, &shape, Place::Cpu).map_err(serve_err)?;
            feeds.insert(t.name, tensor);
        }
        // Inputs arrive on the host; the session moves them to its place.
        let place = self.session.place();
        let feeds: HashMap<String, Tensor> = feeds
            .into_iter()
            .map(|(k, t)| {
                let t = if place.is_gpu() && t.dtype().gpu_supported() { t.to(place)? } else { t };
                Ok((k, t))
            })
            .collect::<Result<_, mpsrt_core::Error>>()
            .map_err(serve_err)?;
        let outs: Vec<(String, Tensor)> = self
            .session
            .run(&feeds)
            .map_err(serve_err)?
            .into_iter()
            .filter(|(name, _)| requested_outputs.is_empty() || requested_outputs.contains(name))
            .collect();
        // One readback for all outputs (one GPU round trip per request, not one per output).
        let refs: Vec<&Tensor> = outs.iter().map(|(_, t)| t).collect();
        let all_bytes = Tensor::to_bytes_many(&refs).map_err(serve_err)?;
        let mut result = Vec::with_capacity(outs.len());
        for ((name, t), bytes) in outs.into_iter().zip(all_bytes) {
            result.push(HostTensor {
                name,
                datatype: triton_dtype(t.dtype()),
                shape: t.shape().iter().map(|&d| d as i64).collect(),
                data: TensorData::Raw(bytes),
            });
        }
        Ok(result)
    }
}
