//! The seam between the server and model execution: a `Backend` loads `ModelInstance`s.
//!
//! The server never knows how a model runs; the ONNX engine (another crate) implements these traits.

use crate::proto::inference::ModelConfig;
use crate::types::{HostTensor, ServeError, TritonDType};
use std::path::Path;
use std::sync::Arc;

/// One input or output as the model file declares it (`-1` = dynamic dim).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorIo {
    pub name: String,
    pub datatype: TritonDType,
    pub dims: Vec<i64>,
}

/// The model file's signature, used to auto-complete a missing or partial config.pbtxt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelIo {
    pub inputs: Vec<TensorIo>,
    pub outputs: Vec<TensorIo>,
}

/// Where one model instance runs (from `instance_group.kind` / `gpus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceDevice {
    Cpu,
    Gpu(u32),
}

/// A model platform such as `onnxruntime_onnx`.
pub trait Backend: Send + Sync {
    /// The config's `backend` name, e.g. `"onnxruntime"`.
    fn name(&self) -> &str;
    /// The config's `platform` name, e.g. `"onnxruntime_onnx"`.
    fn platform(&self) -> &str;
    /// File loaded from a version folder when the config names none, e.g. `"model.onnx"`.
    fn default_model_filename(&self) -> &str;
    /// Other `backend` names a config may use for this backend (e.g. `metal_mps`).
    fn aliases(&self) -> &[&str] {
        &[]
    }
    /// Other file names tried, in order, when the default file is absent (e.g. `model.mps`).
    fn alternate_model_filenames(&self) -> &[&str] {
        &[]
    }
    /// Inspects the model file to auto-complete the config.
    fn model_io(&self, model_path: &Path) -> Result<ModelIo, ServeError>;
    /// Loads one instance on a device.
    fn load(
        &self,
        model_path: &Path,
        config: &ModelConfig,
        device: InstanceDevice,
    ) -> Result<Box<dyn ModelInstance>, ServeError>;
}

/// One loaded copy of a model; each runs on its own executor thread, so `execute` may block.
pub trait ModelInstance: Send {
    /// Runs a (possibly batched) request. With `max_batch_size > 0` every input and output carries
    /// the batch as dim 0. Returns at least the `requested_outputs` (all outputs if empty).
    fn execute(
        &mut self,
        inputs: Vec<HostTensor>,
        requested_outputs: &[String],
    ) -> Result<Vec<HostTensor>, ServeError>;
}

/// GPU memory of one device for the `nv_gpu_memory_*` metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuMemoryInfo {
    /// Value of the `gpu_uuid` label (any stable device identifier).
    pub gpu: String,
    pub total_bytes: u64,
    pub used_bytes: u64,
}

/// Callback the embedding code supplies (the runtime allocator feeds it).
pub type GpuMemoryFn = Arc<dyn Fn() -> Vec<GpuMemoryInfo> + Send + Sync>;

/// What the embedding program plugs into the server: backends and an optional memory probe.
#[derive(Clone, Default)]
pub struct ServeBackends {
    pub backends: Vec<Arc<dyn Backend>>,
    pub gpu_memory: Option<GpuMemoryFn>,
    /// GPU indices `KIND_GPU`/`KIND_AUTO` instances may use; empty means no GPU (instances go to the CPU).
    pub gpus: Vec<u32>,
}

impl ServeBackends {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn with_backend(mut self, b: Arc<dyn Backend>) -> Self {
        self.backends.push(b);
        self
    }
    pub fn with_gpu_memory(mut self, f: GpuMemoryFn) -> Self {
        self.gpu_memory = Some(f);
        self
    }
    pub fn with_gpus(mut self, gpus: Vec<u32>) -> Self {
        self.gpus = gpus;
        self
    }

    /// Finds the backend a config names through `backend` or `platform`.
    pub fn find(&self, config: &ModelConfig) -> Option<Arc<dyn Backend>> {
        self.backends
            .iter()
            .find(|b| {
                (!config.backend.is_empty()
                    && (config.backend == b.name()
                        || b.aliases().contains(&config.backend.as_str())))
                    || (!config.platform.is_empty() && config.platform == b.platform())
            })
            .cloned()
    }
}
