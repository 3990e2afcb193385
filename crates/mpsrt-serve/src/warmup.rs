//! Triton's `model_warmup`: samples from `config.pbtxt` run on every instance while the model
//! loads, before it is READY. Why: the engine plans (and compiles pipelines for) each input
//! shape on first use, ~1 s for a ResNet-50 batch size on an H200; with dynamic batching every
//! new batch size the batcher forms paid that inside a client's request (p99 1.17 s in the
//! sixth session's two-GPU run). Warming the batch sizes a deployment uses moves the cost to
//! load time, as Triton does for TensorRT engines.
//!
//! Semantics follow Triton's model_config.proto: `batch_size` ≥ 1 (exactly 1 for a model that
//! does not batch) with the sample's `dims` repeated along a leading batch dim when the model
//! batches; every input of the config named once, with its `data_type` and concrete `dims`;
//! `zero_data`, `random_data` (values in [0, 1) for floats, 0..=9 for integers, deterministic
//! across runs) or `input_data_file` (raw row-major bytes, or for BYTES 4-byte little-endian
//! lengths each followed by the string, in the model's `warmup/` directory); `count`
//! executions (0 means once). A sample that fails makes the load fail, naming the sample.
//! The config is hostile input: sizes are checked before anything is allocated, file names
//! cannot leave `warmup/`, and samples, executions and bytes are bounded.

use crate::backend::ModelInstance;
use crate::config::dtype_of;
use crate::proto::inference::model_warmup::input::InputDataType;
use crate::proto::inference::{ModelConfig, ModelWarmup};
use crate::types::{HostTensor, ServeError, TensorData, TritonDType};
use std::path::Path;

/// At most this many samples per config.
pub const MAX_SAMPLES: usize = 64;
/// At most this many executions of one sample (`count`).
pub const MAX_COUNT: u32 = 1000;
/// At most this many bytes of input per sample (all inputs, the batch included).
pub const MAX_SAMPLE_BYTES: usize = 1 << 30;

/// Runs every warmup sample of `config` on `instance` (the model's directory holds `warmup/`).
pub fn run(
    config: &ModelConfig,
    model_dir: &Path,
    instance: &mut dyn ModelInstance,
) -> Result<(), ServeError> {
    if config.model_warmup.len() > MAX_SAMPLES {
        return Err(ServeError::invalid(format!(
            "model '{}': {} model_warmup samples, more than the limit of {MAX_SAMPLES}",
            config.name,
            config.model_warmup.len()
        )));
    }
    for sample in &config.model_warmup {
        let inputs = sample_inputs(config, sample, model_dir)?;
        for _ in 0..sample.count.max(1) {
            instance.execute(inputs.clone(), &[]).map_err(|e| {
                ServeError::invalid(format!(
                    "model '{}': warmup sample '{}' failed: {}",
                    config.name, sample.name, e.message
                ))
            })?;
        }
    }
    Ok(())
}

/// The request one sample describes, checked against the config.
pub fn sample_inputs(
    config: &ModelConfig,
    sample: &ModelWarmup,
    model_dir: &Path,
) -> Result<Vec<HostTensor>, ServeError> {
    let err = |what: String| {
        ServeError::invalid(format!(
            "model '{}': warmup sample '{}': {what}",
            config.name, sample.name
        ))
    };
    if sample.count > MAX_COUNT {
        return Err(err(format!("count {} is above the limit of {MAX_COUNT}", sample.count)));
    }
    let batching = config.max_batch_size > 0;
    let batch = sample.batch_size as usize;
    if batch == 0
        || (!batching && batch != 1)
        || (batching && batch > config.max_batch_size as usize)
    {
        return Err(err(format!(
            "batch_size {} must be between 1 and {} (max_batch_size {})",
            sample.batch_size,
            config.max_batch_size.max(1),
            config.max_batch_size
        )));
    }
    if let Some(extra) = sample.inputs.keys().find(|k| !config.input.iter().any(|i| &i.name == *k))
    {
        return Err(err(format!("the model has no input '{extra}'")));
    }
    let mut total = 0usize;
    let mut out = Vec::with_capacity(config.input.len());
    for (idx, input) in config.input.iter().enumerate() {
        let s = sample
            .inputs
            .get(&input.name)
            .ok_or_else(|| err(format!("input '{}' has no data", input.name)))?;
        let want = dtype_of(config, &input.name, input.data_type)?;
        let given = dtype_of(config, &input.name, s.data_type)?;
        if given != want {
            return Err(err(format!(
                "input '{}' is {} in the sample, {} in the model",
                input.name,
                given.as_str(),
                want.as_str()
            )));
        }
        if s.dims.len() != input.dims.len()
            || s.dims.iter().zip(&input.dims).any(|(&d, &m)| d < 0 || (m >= 0 && d != m))
        {
            return Err(err(format!(
                "input '{}' has dims {:?}; the model's are {:?} (concrete, -1 matches any size)",
                input.name, s.dims, input.dims
            )));
        }
        let mut shape = Vec::with_capacity(s.dims.len() + 1);
        if batching {
            shape.push(batch as i64);
        }
        shape.extend_from_slice(&s.dims);
        let per_item = HostTensor::element_count(&s.dims)
            .ok_or_else(|| err(format!("input '{}' dims overflow", input.name)))?;
        let elems = per_item
            .checked_mul(batch)
            .ok_or_else(|| err(format!("input '{}' overflows", input.name)))?;
        let bytes = match want.size() {
            Some(sz) => elems.checked_mul(sz),
            // BYTES: bounded by the element count (each string at least its length prefix).
            None => elems.checked_mul(4),
        }
        .ok_or_else(|| err(format!("input '{}' overflows", input.name)))?;
        total = total.saturating_add(bytes);
        if total > MAX_SAMPLE_BYTES {
            return Err(err(format!(
                "its inputs need more than {MAX_SAMPLE_BYTES} bytes (limit of a warmup sample)"
            )));
        }
        let one = match &s.input_data_type {
            Some(InputDataType::ZeroData(_)) | None => item_data(want, per_item, None),
            Some(InputDataType::RandomData(_)) => item_data(want, per_item, Some(idx as u64)),
            Some(InputDataType::InputDataFile(f)) => {
                file_data(want, per_item, model_dir, f).map_err(&err)?
            }
        };
        out.push(HostTensor {
            name: input.name.clone(),
            datatype: want,
            shape,
            data: repeat(one, batch),
        });
    }
    Ok(out)
}

/// One batch item's data: zeros (`seed` None) or deterministic values valid for the type.
fn item_data(dt: TritonDType, n: usize, seed: Option<u64>) -> TensorData {
    let mut rng = seed.map(|s| 0x9E37_79B9_7F4A_7C15u64 ^ s.wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut next = move || {
        rng.as_mut().map_or(0u64, |x| {
            // xorshift64*: cheap, deterministic, good enough for warm-up values.
            *x ^= *x >> 12;
            *x ^= *x << 25;
            *x ^= *x >> 27;
            x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11
        })
    };
    let unit = |v: u64| v as f64 / (1u64 << 53) as f64;
    let Some(size) = dt.size() else {
        return TensorData::Bytes(
            (0..n)
                .map(|_| {
                    if seed.is_some() {
                        format!("{}", next() % 10).into_bytes()
                    } else {
                        Vec::new()
                    }
                })
                .collect(),
        );
    };
    let mut b = Vec::with_capacity(n * size);
    for _ in 0..n {
        let v = next();
        match dt {
            TritonDType::Fp32 => b.extend_from_slice(&(unit(v) as f32).to_le_bytes()),
            TritonDType::Fp64 => b.extend_from_slice(&unit(v).to_le_bytes()),
            TritonDType::Fp16 => b.extend_from_slice(&half::f16::from_f64(unit(v)).to_le_bytes()),
            TritonDType::Bf16 => b.extend_from_slice(&half::bf16::from_f64(unit(v)).to_le_bytes()),
            TritonDType::Bool => b.push((v & 1) as u8),
            _ => {
                let digit = (v % 10).to_le_bytes();
                b.extend_from_slice(&digit[..size]);
            }
        }
    }
    TensorData::Raw(b)
}

/// One batch item read from `<model_dir>/warmup/<name>`; the file must hold exactly the item.
fn file_data(
    dt: TritonDType,
    n: usize,
    model_dir: &Path,
    name: &str,
) -> Result<TensorData, String> {
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && !name.starts_with('.');
    if !plain {
        return Err(format!("input_data_file '{name}' must be a file name inside warmup/"));
    }
    let path = model_dir.join("warmup").join(name);
    let limit = match dt.size() {
        Some(sz) => n * sz,
        None => MAX_SAMPLE_BYTES,
    };
    let meta = std::fs::metadata(&path).map_err(|e| format!("cannot read warmup/{name}: {e}"))?;
    if !meta.is_file() || meta.len() > limit as u64 {
        return Err(format!(
            "warmup/{name} has {} bytes; the input needs {}",
            meta.len(),
            if dt.size().is_some() { limit.to_string() } else { format!("at most {limit}") }
        ));
    }
    let bytes = std::fs::read(&path).map_err(|e| format!("cannot read warmup/{name}: {e}"))?;
    match dt.size() {
        Some(_) if bytes.len() == limit => Ok(TensorData::Raw(bytes)),
        Some(_) => Err(format!("warmup/{name} has {} bytes; the input needs {limit}", bytes.len())),
        None => {
            let mut items = Vec::with_capacity(n.min(bytes.len() / 4 + 1));
            let mut rest = bytes.as_slice();
            while items.len() < n {
                let (len, tail) = rest
                    .split_first_chunk::<4>()
                    .ok_or_else(|| format!("warmup/{name} holds fewer than {n} strings"))?;
                let len = u32::from_le_bytes(*len) as usize;
                if tail.len() < len {
                    return Err(format!("warmup/{name}: a string runs past the end of the file"));
                }
                items.push(tail[..len].to_vec());
                rest = &tail[len..];
            }
            Ok(TensorData::Bytes(items))
        }
    }
}

/// One item's data repeated `batch` times along the leading dim.
fn repeat(one: TensorData, batch: usize) -> TensorData {
    match one {
        TensorData::Raw(b) => TensorData::Raw(b.repeat(batch)),
        TensorData::Bytes(v) => {
            TensorData::Bytes((0..batch).flat_map(|_| v.iter().cloned()).collect())
        }
    }
}
