//! A loaded model version: its config, scheduler and statistics, and request validation against it.

use crate::config::{client_shape, dtype_of};
use crate::proto::inference::{model_config::SchedulingChoice, ModelConfig};
use crate::scheduler::{BatchPolicy, Pending, Scheduler, DEFAULT_MAX_QUEUE};
use crate::stats::ModelStats;
use crate::types::{HostTensor, ServeError, TritonDType};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Input/output of the serving protocol (what metadata shows).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorMeta {
    pub name: String,
    pub datatype: TritonDType,
    pub shape: Vec<i64>,
}

/// One ready model version.
pub struct LoadedModel {
    pub name: String,
    pub version: i64,
    pub config: Arc<ModelConfig>,
    pub stats: Arc<ModelStats>,
    pub scheduler: Scheduler,
}

/// The batching policy a config asks for.
pub fn batch_policy(config: &ModelConfig) -> BatchPolicy {
    let max_batch = usize::try_from(config.max_batch_size).unwrap_or(0);
    match &config.scheduling_choice {
        Some(SchedulingChoice::DynamicBatching(db)) => {
            let max_queue = db
                .default_queue_policy
                .as_ref()
                .map(|q| q.max_queue_size)
                .filter(|&n| n > 0)
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(DEFAULT_MAX_QUEUE);
            BatchPolicy {
                max_batch,
                dynamic: max_batch > 0,
                preferred: db
                    .preferred_batch_size
                    .iter()
                    .filter_map(|&p| usize::try_from(p).ok())
                    .collect(),
                max_delay: Duration::from_micros(db.max_queue_delay_microseconds),
                max_queue,
            }
        }
        _ => BatchPolicy { max_batch, max_queue: DEFAULT_MAX_QUEUE, ..Default::default() },
    }
}

impl LoadedModel {
    pub fn version_str(&self) -> String {
        self.version.to_string()
    }

    /// Inputs as metadata shows them (leading -1 when batching).
    pub fn inputs_meta(&self) -> Vec<TensorMeta> {
        let c = &self.config;
        c.input
            .iter()
            .filter_map(|i| {
                let datatype = dtype_of(c, &i.name, i.data_type).ok()?;
                Some(TensorMeta { name: i.name.clone(), datatype, shape: client_shape(c, &i.dims) })
            })
            .collect()
    }

    /// Outputs as metadata shows them.
    pub fn outputs_meta(&self) -> Vec<TensorMeta> {
        let c = &self.config;
        c.output
            .iter()
            .filter_map(|o| {
                let datatype = dtype_of(c, &o.name, o.data_type).ok()?;
                Some(TensorMeta { name: o.name.clone(), datatype, shape: client_shape(c, &o.dims) })
            })
            .collect()
    }

    /// Validates, queues and awaits one request. Front-end failures count in the statistics here;
    /// execution failures are counted by the executor.
    pub async fn infer(
        &self,
        inputs: Vec<HostTensor>,
        outputs: Vec<String>,
    ) -> Result<Vec<HostTensor>, ServeError> {
        let start = Instant::now();
        let queued = self.validate(inputs, &outputs).and_then(|(inputs, batch)| {
            let (tx, rx) = oneshot::channel();
            let p = Pending { inputs, outputs, batch, enqueued: Instant::now(), reply: tx };
            self.scheduler.enqueue(p).map(|()| rx)
        });
        let rx = match queued {
            Ok(rx) => rx,
            Err(e) => {
                self.stats.record_failure(start.elapsed());
                return Err(e);
            }
        };
        match rx.await {
            Ok(Ok(outs)) => Ok(self.reshape_outputs(outs)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ServeError::internal("model executor stopped before answering")),
        }
    }

    /// Checks names, dtypes, shapes, sizes and batch; applies input `reshape`. Returns the batch size.
    fn validate(
        &self,
        mut inputs: Vec<HostTensor>,
        outputs: &[String],
    ) -> Result<(Vec<HostTensor>, usize), ServeError> {
        let c = &self.config;
        let m = &self.name;
        let batching = c.max_batch_size > 0;
        for (k, o) in outputs.iter().enumerate() {
            if outputs[..k].contains(o) {
                return Err(ServeError::invalid(format!(
                    "output '{o}' is requested more than once for model '{m}'"
                )));
            }
            if !c.output.iter().any(|x| &x.name == o) {
                return Err(ServeError::invalid(format!(
                    "unexpected inference output '{o}' for model '{m}'"
                )));
            }
        }
        for (i, t) in inputs.iter().enumerate() {
            if inputs[..i].iter().any(|u| u.name == t.name) {
                return Err(ServeError::invalid(format!("input '{}' given twice", t.name)));
            }
        }
        let required = c.input.iter().filter(|i| !i.optional).count();
        if inputs.len() < required || inputs.len() > c.input.len() {
            for t in &inputs {
                if !c.input.iter().any(|i| i.name == t.name) {
                    return Err(ServeError::invalid(format!(
                        "unexpected inference input '{}' for model '{m}'",
                        t.name
                    )));
                }
            }
            return Err(ServeError::invalid(format!(
                "expected {} inputs but got {} inputs for model '{m}'",
                required,
                inputs.len()
            )));
        }
        let mut batch: Option<i64> = None;
        for t in &mut inputs {
            let Some(ci) = c.input.iter().find(|i| i.name == t.name) else {
                return Err(ServeError::invalid(format!(
                    "unexpected inference input '{}' for model '{m}'",
                    t.name
                )));
            };
            let want = dtype_of(c, &ci.name, ci.data_type)?;
            if t.datatype != want {
                return Err(ServeError::invalid(format!(
                    "inference input '{}' data-type is '{}', but model '{m}' expects '{}'",
                    t.name, t.datatype, want
                )));
            }
            let expected = client_shape(c, &ci.dims);
            let shape_ok = t.shape.len() == expected.len()
                && t.shape.iter().zip(&expected).all(|(&g, &e)| g >= 0 && (e == -1 || g == e));
            if !shape_ok {
                return Err(ServeError::invalid(format!(
                    "unexpected shape for input '{}' for model '{m}'. Expected {}, got {}",
                    t.name,
                    fmt_shape(&expected),
                    fmt_shape(&t.shape)
                )));
            }
            if batching {
                let b = t.shape[0];
                if b < 1 || b > i64::from(c.max_batch_size) {
                    return Err(ServeError::invalid(format!(
                        "inference request batch-size must be <= {} for '{m}'",
                        c.max_batch_size
                    )));
                }
                if let Some(prev) = batch.filter(|&p| p != b) {
                    return Err(ServeError::invalid(format!(
                        "input '{}' has batch size {b} but other inputs have {prev} for model '{m}'",
                        t.name
                    )));
                }
                batch = Some(b);
            }
            t.check_size()?;
            if let Some(r) = &ci.reshape {
                t.shape = reshaped(&t.shape, &r.shape, batching).ok_or_else(|| {
                    ServeError::invalid(format!(
                        "input '{}' of shape {} cannot be reshaped to {:?}",
                        t.name,
                        fmt_shape(&t.shape),
                        r.shape
                    ))
                })?;
            }
        }
        let batch = batch.and_then(|b| usize::try_from(b).ok()).unwrap_or(1);
        Ok((inputs, batch))
    }

    /// Outputs with a `reshape` are shown to clients with the config's `dims`.
    fn reshape_outputs(&self, mut outs: Vec<HostTensor>) -> Vec<HostTensor> {
        let c = &self.config;
        for o in &mut outs {
            if let Some(co) = c.output.iter().find(|x| x.name == o.name) {
                if co.reshape.is_some() && co.dims.iter().all(|&d| d >= 0) {
                    o.shape = if c.max_batch_size > 0 {
                        let b = o.shape.first().copied().unwrap_or(1);
                        std::iter::once(b).chain(co.dims.iter().copied()).collect()
                    } else {
                        co.dims.clone()
                    };
                }
            }
        }
        outs
    }
}

fn reshaped(shape: &[i64], target: &[i64], batching: bool) -> Option<Vec<i64>> {
    let (prefix, rest) = if batching { shape.split_at(1) } else { shape.split_at(0) };
    let n = HostTensor::element_count(rest)?;
    let known = target
        .iter()
        .filter(|&&d| d >= 0)
        .try_fold(1usize, |a, &d| usize::try_from(d).ok().and_then(|d| a.checked_mul(d)))?;
    let mut out: Vec<i64> = prefix.to_vec();
    for &d in target {
        if d == -1 {
            if known == 0 || n % known != 0 {
                return None;
            }
            out.push(i64::try_from(n / known).ok()?);
        } else {
            out.push(d);
        }
    }
    (HostTensor::element_count(&out[prefix.len()..])? == n).then_some(out)
}

/// Triton prints shapes as `[1,16]`.
pub fn fmt_shape(s: &[i64]) -> String {
    let parts: Vec<String> = s.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(","))
}
