//! Per-model-version inference statistics, shared by the statistics API and the Prometheus metrics.

use crate::proto::inference::{
    InferBatchStatistics, InferStatistics, ModelStatistics, StatisticDuration,
};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A count and a total duration, updated without locks.
#[derive(Debug, Default)]
pub struct Counter {
    count: AtomicU64,
    ns: AtomicU64,
}

impl Counter {
    pub fn add(&self, d: Duration) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.ns.fetch_add(duration_ns(d), Ordering::Relaxed);
    }
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
    pub fn ns(&self) -> u64 {
        self.ns.load(Ordering::Relaxed)
    }
    fn snapshot(&self) -> StatisticDuration {
        StatisticDuration { count: self.count(), ns: self.ns() }
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Durations of one executed batch, as Triton's `batch_stats` keeps them.
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchTimes {
    pub compute_input: Duration,
    pub compute_infer: Duration,
    pub compute_output: Duration,
}

/// Statistics of one model version.
#[derive(Debug, Default)]
pub struct ModelStats {
    pub success: Counter,
    pub fail: Counter,
    pub queue: Counter,
    pub compute_input: Counter,
    pub compute_infer: Counter,
    pub compute_output: Counter,
    /// Requests (not batches) answered successfully, counting each batch element.
    pub inference_count: AtomicU64,
    pub execution_count: AtomicU64,
    pub last_inference_ms: AtomicU64,
    /// Requests queued or executing, for `nv_inference_pending_request_count`.
    pub pending: AtomicU64,
    batches: Mutex<BTreeMap<u64, [(u64, u64); 3]>>,
}

impl ModelStats {
    /// Records one executed batch of `batch_size` elements (one execution).
    pub fn record_batch(&self, batch_size: u64, t: BatchTimes) {
        self.execution_count.fetch_add(1, Ordering::Relaxed);
        let mut b = self.batches.lock();
        let e = b.entry(batch_size).or_default();
        for (slot, d) in e.iter_mut().zip([t.compute_input, t.compute_infer, t.compute_output]) {
            slot.0 += 1;
            slot.1 += duration_ns(d);
        }
    }

    /// Records one request answered successfully, with its per-request share of the timings.
    pub fn record_success(
        &self,
        batch_elems: u64,
        total: Duration,
        queue: Duration,
        t: BatchTimes,
    ) {
        self.success.add(total);
        self.queue.add(queue);
        self.compute_input.add(t.compute_input);
        self.compute_infer.add(t.compute_infer);
        self.compute_output.add(t.compute_output);
        self.inference_count.fetch_add(batch_elems, Ordering::Relaxed);
        self.touch();
    }

    /// Records one failed request.
    pub fn record_failure(&self, total: Duration) {
        self.fail.add(total);
        self.touch();
    }

    fn touch(&self) {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        self.last_inference_ms.store(ms, Ordering::Relaxed);
    }

    /// The statistics message for this version.
    pub fn snapshot(&self, name: &str, version: &str) -> ModelStatistics {
        let batch_stats = self
            .batches
            .lock()
            .iter()
            .map(|(&size, e)| {
                let d = |i: usize| Some(StatisticDuration { count: e[i].0, ns: e[i].1 });
                InferBatchStatistics {
                    batch_size: size,
                    compute_input: d(0),
                    compute_infer: d(1),
                    compute_output: d(2),
                }
            })
            .collect();
        ModelStatistics {
            name: name.to_string(),
            version: version.to_string(),
            last_inference: self.last_inference_ms.load(Ordering::Relaxed),
            inference_count: self.inference_count.load(Ordering::Relaxed),
            execution_count: self.execution_count.load(Ordering::Relaxed),
            inference_stats: Some(InferStatistics {
                success: Some(self.success.snapshot()),
                fail: Some(self.fail.snapshot()),
                queue: Some(self.queue.snapshot()),
                compute_input: Some(self.compute_input.snapshot()),
                compute_infer: Some(self.compute_infer.snapshot()),
                compute_output: Some(self.compute_output.snapshot()),
                cache_hit: Some(StatisticDuration::default()),
                cache_miss: Some(StatisticDuration::default()),
            }),
            batch_stats,
            memory_usage: Vec::new(),
            response_stats: Default::default(),
        }
    }
}
