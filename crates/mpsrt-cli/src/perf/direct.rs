//! `mpsrt perf --direct MODEL.onnx`: the engine timed in-process on the load's inputs.
//!
//! It goes through the same entry point the server's scheduler calls (`EngineBackend::load`,
//! then `ModelInstance::execute` on host tensors), so what it measures is what the server's
//! `compute_infer` statistic covers: host bytes → tensors on the device, the session run, and
//! outputs back to host bytes. Everything the server adds on top (HTTP, JSON/binary decoding and
//! encoding, scheduling) is then `client latency - direct latency`.

use super::Input;
use crate::model_cmd::{place, Device};
use mpsrt::{Error, Place, Result};
use mpsrt_engine::triton::EngineBackend;
use mpsrt_serve::proto::inference::ModelConfig;
use mpsrt_serve::{Backend, HostTensor, InstanceDevice, TensorData};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Latencies (µs, sorted) of the in-process runs.
pub struct Direct {
    pub path: PathBuf,
    pub place: Place,
    pub latencies_us: Vec<f64>,
}

pub fn time(
    path: &Path,
    device: Option<Device>,
    inputs: &[Input],
    warmup: usize,
    runs: usize,
) -> Result<Direct> {
    let what = format!("--direct {}", path.display());
    if !path.is_file() {
        return Err(Error::io(
            "perf",
            format!("{what}: no such file; expected the ONNX model the server serves, e.g. examples/model_repository/simple/1/model.onnx"),
        ));
    }
    let place = place(device);
    let instance_device = match place {
        Place::Cpu => InstanceDevice::Cpu,
        Place::Gpu(i) => InstanceDevice::Gpu(u32::try_from(i).unwrap_or(u32::MAX)),
    };
    let err = |e: mpsrt_serve::ServeError| Error::invalid("perf", format!("{what}: {e}"));
    let backend = EngineBackend::default();
    // The served model and this file must agree on input names, or the comparison is moot.
    let io = backend.model_io(path).map_err(err)?;
    for i in inputs {
        if !io.inputs.iter().any(|t| t.name == i.name) {
            let names: Vec<&str> = io.inputs.iter().map(|t| t.name.as_str()).collect();
            return Err(Error::invalid(
                "perf",
                format!("{what}: the served model's input '{}' is not an input of this file (its inputs: {names:?}); is it the same model?", i.name),
            ));
        }
    }
    let mut instance = backend.load(path, &ModelConfig::default(), instance_device).map_err(err)?;
    let host: Vec<HostTensor> = inputs
        .iter()
        .map(|i| HostTensor {
            name: i.name.clone(),
            datatype: i.datatype,
            shape: i.shape.clone(),
            data: TensorData::Raw(i.raw.clone()),
        })
        .collect();
    for _ in 0..warmup {
        instance.execute(host.clone(), &[]).map_err(err)?;
    }
    let mut latencies_us = Vec::with_capacity(super::capacity(runs));
    for _ in 0..runs {
        // The server hands the backend owned tensors it decoded; copying ours is not timed.
        let feeds = host.clone();
        let t0 = Instant::now();
        let outs = instance.execute(feeds, &[]).map_err(err)?;
        latencies_us.push(t0.elapsed().as_secs_f64() * 1e6);
        drop(outs);
    }
    latencies_us.sort_by(|x, y| x.total_cmp(y));
    Ok(Direct { path: path.to_path_buf(), place, latencies_us })
}
