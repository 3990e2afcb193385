//! Test double backend and helpers. `TestBackend` is NOT the ONNX engine: its "model files" are
//! one-word text files naming a built-in behaviour, so the server can be tested on its own.

use mpsrt_serve::proto::inference::ModelConfig;
use mpsrt_serve::{
    Backend, HostTensor, InstanceDevice, ModelInstance, ModelIo, RunningServer, ServeBackends,
    ServeError, ServerOptions, TensorData, TensorIo, TritonDType,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub const SIMPLE_CONFIG: &str = r#"
name: "simple"
platform: "test_platform"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "note" value: { string_value: "test double" } }
"#;

pub const ECHO_CONFIG: &str = r#"
name: "echo"
backend: "testbackend"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] }
]
"#;

/// One request at a time, 400 ms each, queue of 1: the third concurrent request must be refused.
pub const SLOW_CONFIG: &str = r#"
name: "slow"
platform: "test_platform"
max_batch_size: 1
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
dynamic_batching { default_queue_policy { max_queue_size: 1 } }
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "delay_ms" value: { string_value: "400" } }
"#;

/// Every instance the test backend loaded: (model name, device), for instance_group checks.
pub static LOADED_DEVICES: std::sync::Mutex<Vec<(String, InstanceDevice)>> =
    std::sync::Mutex::new(Vec::new());

/// The test double: behaviours "simple" (sum/difference), "echo", "echo_fp32" (auto-complete), "broken".
pub struct TestBackend;

fn behaviour(path: &Path) -> Result<String, ServeError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| ServeError::internal(format!("cannot read {}: {e}", path.display())))
}

impl Backend for TestBackend {
    fn name(&self) -> &str {
        "testbackend"
    }
    fn platform(&self) -> &str {
        "test_platform"
    }
    fn default_model_filename(&self) -> &str {
        "model.test"
    }
    fn model_io(&self, path: &Path) -> Result<ModelIo, ServeError> {
        let io = |n: &str, dt, dims: &[i64]| TensorIo {
            name: n.into(),
            datatype: dt,
            dims: dims.to_vec(),
        };
        match behaviour(path)?.as_str() {
            "echo_fp32" => Ok(ModelIo {
                inputs: vec![io("INPUT0", TritonDType::Fp32, &[-1, 4])],
                outputs: vec![io("OUTPUT0", TritonDType::Fp32, &[-1, 4])],
            }),
            "simple" => Ok(ModelIo {
                inputs: vec![
                    io("INPUT0", TritonDType::Int32, &[-1, 16]),
                    io("INPUT1", TritonDType::Int32, &[-1, 16]),
                ],
                outputs: vec![
                    io("OUTPUT0", TritonDType::Int32, &[-1, 16]),
                    io("OUTPUT1", TritonDType::Int32, &[-1, 16]),
                ],
            }),
            // Unsupported: the server then leaves a written config unchecked against the file.
            other => {
                Err(ServeError::unsupported(format!("test backend cannot describe '{other}'")))
            }
        }
    }
    fn load(
        &self,
        path: &Path,
        config: &ModelConfig,
        device: InstanceDevice,
    ) -> Result<Box<dyn ModelInstance>, ServeError> {
        let kind = behaviour(path)?;
        LOADED_DEVICES.lock().unwrap().push((config.name.clone(), device));
        if kind == "broken" {
            return Err(ServeError::internal("test backend: this model is broken on purpose"));
        }
        let delay = config
            .parameters
            .get("delay_ms")
            .and_then(|p| p.string_value.parse::<u64>().ok())
            .map(Duration::from_millis)
            .unwrap_or_default();
        Ok(Box::new(TestInstance { kind, delay }))
    }
}

struct TestInstance {
    kind: String,
    delay: Duration,
}

fn i32s(t: &HostTensor) -> Vec<i32> {
    match &t.data {
        TensorData::Raw(b) => {
            b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
        }
        TensorData::Bytes(_) => Vec::new(),
    }
}

fn from_i32s(name: &str, shape: &[i64], v: &[i32]) -> HostTensor {
    HostTensor {
        name: name.into(),
        datatype: TritonDType::Int32,
        shape: shape.to_vec(),
        data: TensorData::Raw(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
    }
}

impl ModelInstance for TestInstance {
    fn execute(
        &mut self,
        inputs: Vec<HostTensor>,
        _req: &[String],
    ) -> Result<Vec<HostTensor>, ServeError> {
        std::thread::sleep(self.delay);
        if self.kind == "panic" {
            panic!("test backend: panicking on purpose");
        }
        if self.kind == "simple" {
            let a = inputs
                .iter()
                .find(|t| t.name == "INPUT0")
                .ok_or_else(|| ServeError::internal("no INPUT0"))?;
            let b = inputs
                .iter()
                .find(|t| t.name == "INPUT1")
                .ok_or_else(|| ServeError::internal("no INPUT1"))?;
            let (x, y) = (i32s(a), i32s(b));
            let sum: Vec<i32> = x.iter().zip(&y).map(|(p, q)| p.wrapping_add(*q)).collect();
            let dif: Vec<i32> = x.iter().zip(&y).map(|(p, q)| p.wrapping_sub(*q)).collect();
            return Ok(vec![
                from_i32s("OUTPUT0", &a.shape, &sum),
                from_i32s("OUTPUT1", &a.shape, &dif),
            ]);
        }
        Ok(inputs
            .into_iter()
            .map(|mut t| {
                t.name = t.name.replace("INPUT", "OUTPUT");
                t
            })
            .collect())
    }
}

/// A fresh repository directory under the system temp dir.
/// (model name, config.pbtxt text if any, [(version, behaviour written as the model file)]).
pub type ModelSpec<'a> = (&'a str, Option<&'a str>, &'a [(i64, &'a str)]);

pub fn repo(models: &[ModelSpec<'_>]) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "mpsrt-serve-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    for (name, config, versions) in models {
        let m = dir.join(name);
        std::fs::create_dir_all(&m).unwrap();
        if let Some(c) = config {
            std::fs::write(m.join("config.pbtxt"), c).unwrap();
        }
        for (v, kind) in versions.iter() {
            let vd = m.join(v.to_string());
            std::fs::create_dir_all(&vd).unwrap();
            std::fs::write(vd.join("model.test"), kind).unwrap();
        }
    }
    dir
}

/// The standard repository: simple, echo, autofloat (no config.pbtxt), slow.
pub fn standard_repo() -> PathBuf {
    repo(&[
        ("simple", Some(SIMPLE_CONFIG), &[(1, "simple")]),
        ("echo", Some(ECHO_CONFIG), &[(1, "echo")]),
        ("autofloat", None, &[(1, "echo_fp32")]),
        ("slow", Some(SLOW_CONFIG), &[(1, "simple")]),
    ])
}

pub fn options(repo: &Path) -> ServerOptions {
    let mut o = ServerOptions::new(repo);
    o.host = "127.0.0.1".into();
    o.http_port = 0;
    o.grpc_port = 0;
    o.metrics_port = 0;
    o.max_request_bytes = 1 << 20;
    o
}

pub fn backends() -> ServeBackends {
    ServeBackends::new().with_backend(Arc::new(TestBackend))
}

pub async fn start(opts: ServerOptions) -> RunningServer {
    mpsrt_serve::start(opts, backends()).await.unwrap()
}

pub fn http(server: &RunningServer) -> String {
    format!("http://{}", server.http_addr)
}

pub fn client() -> reqwest::Client {
    reqwest::Client::new()
}

/// Little-endian bytes of i32 values.
pub fn le_i32(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn from_le_i32(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
