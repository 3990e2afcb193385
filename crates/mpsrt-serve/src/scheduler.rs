//! Per-model request queue, dynamic batcher and executor threads (one per model instance).
//!
//! Execution blocks (GPU or CPU work), so it runs on dedicated OS threads, never on tokio workers.
//! Each free instance forms its own batch from the queue head, which is how Triton's dynamic
//! batcher behaves from the client's point of view: batches grow while instances are busy.

use crate::backend::{InstanceDevice, ModelInstance};
use crate::stats::{BatchTimes, ModelStats};
use crate::types::{HostTensor, ServeError, TensorData};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Default queue bound when the config sets none: backpressure instead of unbounded memory.
pub const DEFAULT_MAX_QUEUE: usize = 4096;

/// How requests are grouped, from `max_batch_size` and `dynamic_batching`.
#[derive(Debug, Clone, Default)]
pub struct BatchPolicy {
    /// 0: the model does not batch; requests run one by one.
    pub max_batch: usize,
    /// Whether several requests may be merged (`dynamic_batching` present).
    pub dynamic: bool,
    pub preferred: Vec<usize>,
    pub max_delay: Duration,
    pub max_queue: usize,
}

/// The result channel of one queued request.
pub type Reply = oneshot::Sender<Result<Vec<HostTensor>, ServeError>>;

/// A validated request waiting for an instance.
pub struct Pending {
    pub inputs: Vec<HostTensor>,
    pub outputs: Vec<String>,
    /// Batch elements (dim 0) when the model batches, 1 otherwise.
    pub batch: usize,
    pub enqueued: Instant,
    pub reply: Reply,
}

struct State {
    items: VecDeque<Pending>,
    closed: bool,
}

/// What one instance has run (the `mpsrt_instance_*` metrics): how requests spread over instances.
#[derive(Debug)]
pub struct InstanceStats {
    /// Triton-style instance name, `<model>_<index>`.
    pub name: String,
    /// `cpu` or `mps:N`.
    pub device: String,
    pub executions: AtomicU64,
    pub inferences: AtomicU64,
    pub infer_ns: AtomicU64,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
    policy: BatchPolicy,
    stats: Arc<ModelStats>,
    model: String,
}

/// Queue plus executor threads of one model version.
pub struct Scheduler {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    instances: Vec<Arc<InstanceStats>>,
}

impl Scheduler {
    /// Starts one executor thread per instance.
    pub fn start(
        model: &str,
        instances: Vec<(Box<dyn ModelInstance>, InstanceDevice)>,
        policy: BatchPolicy,
        stats: Arc<ModelStats>,
    ) -> Result<Self, ServeError> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State { items: VecDeque::new(), closed: false }),
            cv: Condvar::new(),
            policy,
            stats,
            model: model.to_string(),
        });
        let mut threads = Vec::new();
        let mut stats = Vec::new();
        for (i, (instance, device)) in instances.into_iter().enumerate() {
            let sh = shared.clone();
            let st = Arc::new(InstanceStats {
                name: format!("{model}_{i}"),
                device: match device {
                    InstanceDevice::Cpu => "cpu".into(),
                    InstanceDevice::Gpu(g) => format!("mps:{g}"),
                },
                executions: AtomicU64::new(0),
                inferences: AtomicU64::new(0),
                infer_ns: AtomicU64::new(0),
            });
            stats.push(st.clone());
            let h = std::thread::Builder::new()
                .name(format!("mpsrt-exec-{model}-{i}"))
                .spawn(move || worker(sh, instance, st))
                .map_err(|e| ServeError::internal(format!("cannot start executor thread: {e}")))?;
            threads.push(h);
        }
        Ok(Self { shared, threads: Mutex::new(threads), instances: stats })
    }

    /// Counters of each instance, in instance order.
    pub fn instances(&self) -> &[Arc<InstanceStats>] {
        &self.instances
    }

    /// Queues a request, or refuses it when the queue is full or the model is unloading.
    pub fn enqueue(&self, p: Pending) -> Result<(), ServeError> {
        let mut st = self.shared.state.lock();
        if st.closed {
            return Err(ServeError::unavailable(format!(
                "model '{}' is not available: it is being unloaded",
                self.shared.model
            )));
        }
        if st.items.len() >= self.shared.policy.max_queue.max(1) {
            return Err(ServeError::unavailable("Exceeds maximum queue size"));
        }
        st.items.push_back(p);
        self.shared.stats.pending.fetch_add(1, Ordering::Relaxed);
        drop(st);
        // Every waiter re-checks: an instance waiting out the batching delay may now have a full batch.
        self.shared.cv.notify_all();
        Ok(())
    }

    /// Stops accepting; queued requests are still executed before the threads exit.
    pub fn close(&self) {
        self.shared.state.lock().closed = true;
        self.shared.cv.notify_all();
    }

    /// Closes and waits for the executors to drain (blocking: call off the async runtime).
    pub fn shutdown(&self) {
        self.close();
        let threads: Vec<_> = std::mem::take(&mut *self.threads.lock());
        for t in threads {
            if t.join().is_err() {
                tracing::error!(model = %self.shared.model, "executor thread panicked");
            }
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        // Threads hold only the shared queue; closing lets them drain and exit on their own.
        self.close();
    }
}

/// Non-batch signature of a request: inputs must agree on it to be concatenated.
fn compatible(a: &Pending, b: &Pending) -> bool {
    a.inputs.len() == b.inputs.len()
        && a.inputs.iter().zip(&b.inputs).all(|(x, y)| {
            x.name == y.name && x.datatype == y.datatype && x.shape.get(1..) == y.shape.get(1..)
        })
}

/// How many queue-head requests fit in one batch, and their total batch size.
fn batch_prefix(items: &VecDeque<Pending>, policy: &BatchPolicy) -> (usize, usize) {
    let Some(first) = items.front() else { return (0, 0) };
    if policy.max_batch == 0 || !policy.dynamic {
        return (1, first.batch);
    }
    let limit = match policy.preferred.iter().max() {
        Some(&p) if p > 0 => p.min(policy.max_batch),
        _ => policy.max_batch,
    };
    let (mut n, mut total) = (0, 0);
    for p in items {
        if total + p.batch > limit || (n > 0 && !compatible(first, p)) {
            break;
        }
        n += 1;
        total += p.batch;
    }
    (n.max(1), total.max(first.batch))
}

fn next_batch(sh: &Shared) -> Option<Vec<Pending>> {
    let mut st = sh.state.lock();
    loop {
        while st.items.is_empty() {
            if st.closed {
                return None;
            }
            sh.cv.wait(&mut st);
        }
        let policy = &sh.policy;
        if policy.dynamic && policy.max_batch > 0 && !policy.max_delay.is_zero() {
            // Wait for more requests until the oldest has waited max_queue_delay or the batch is full.
            let deadline = st.items.front().map(|p| p.enqueued + policy.max_delay);
            let full = policy.preferred.iter().max().copied().unwrap_or(policy.max_batch);
            loop {
                let (_, total) = batch_prefix(&st.items, policy);
                let now = Instant::now();
                match deadline {
                    Some(d) if total < full.min(policy.max_batch) && now < d && !st.closed => {
                        sh.cv.wait_until(&mut st, d);
                        if st.items.is_empty() {
                            break; // Another instance took them.
                        }
                    }
                    _ => break,
                }
            }
            if st.items.is_empty() {
                continue;
            }
        }
        let (n, _) = batch_prefix(&st.items, policy);
        let batch: Vec<Pending> = st.items.drain(..n).collect();
        return Some(batch);
    }
}

fn worker(sh: Arc<Shared>, mut instance: Box<dyn ModelInstance>, st: Arc<InstanceStats>) {
    while let Some(batch) = next_batch(&sh) {
        run_batch(&sh, instance.as_mut(), &st, batch);
    }
}

fn run_batch(
    sh: &Shared,
    instance: &mut dyn ModelInstance,
    st: &InstanceStats,
    batch: Vec<Pending>,
) {
    let start = Instant::now();
    let sizes: Vec<usize> = batch.iter().map(|p| p.batch).collect();
    let total: usize = sizes.iter().sum();
    let mut replies = Vec::with_capacity(batch.len());
    let mut requested: Vec<Vec<String>> = Vec::with_capacity(batch.len());
    let mut inputs_per_req = Vec::with_capacity(batch.len());
    for p in batch {
        replies.push((p.reply, p.enqueued));
        requested.push(p.outputs);
        inputs_per_req.push(p.inputs);
    }
    // One request passes through untouched; several are concatenated along dim 0.
    let merged = if inputs_per_req.len() == 1 {
        inputs_per_req.pop().unwrap_or_default()
    } else {
        concat_inputs(inputs_per_req, total)
    };
    let all_same = requested.windows(2).all(|w| w[0] == w[1]);
    let ask: Vec<String> =
        if all_same { requested.first().cloned().unwrap_or_default() } else { Vec::new() };
    let t_input = start.elapsed();
    let t1 = Instant::now();
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| instance.execute(merged, &ask)))
        .unwrap_or_else(|_| Err(ServeError::internal("model execution panicked")));
    let t_infer = t1.elapsed();
    st.executions.fetch_add(1, Ordering::Relaxed);
    st.inferences.fetch_add(total as u64, Ordering::Relaxed);
    st.infer_ns.fetch_add(u64::try_from(t_infer.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    let t2 = Instant::now();
    let split = result.and_then(|outs| {
        if sizes.len() == 1 {
            Ok(vec![outs])
        } else {
            split_outputs(outs, &sizes, total)
        }
    });
    let t_output = t2.elapsed();
    let times =
        BatchTimes { compute_input: t_input, compute_infer: t_infer, compute_output: t_output };
    let stats = &sh.stats;
    match split {
        Ok(per_req) => {
            stats.record_batch(total as u64, times);
            for (((reply, enq), outs), want) in replies.into_iter().zip(per_req).zip(requested) {
                let res = select_outputs(outs, &want);
                let elapsed = enq.elapsed();
                match &res {
                    Ok(_) => stats.record_success(
                        1,
                        elapsed,
                        start.saturating_duration_since(enq),
                        times,
                    ),
                    Err(_) => stats.record_failure(elapsed),
                }
                stats.pending.fetch_sub(1, Ordering::Relaxed);
                // A client that went away dropped its receiver; nothing to do then.
                let _ = reply.send(res);
            }
            // inference_count counts batch elements, not requests.
            let extra = (total as u64).saturating_sub(sizes.len() as u64);
            stats.inference_count.fetch_add(extra, Ordering::Relaxed);
        }
        Err(e) => {
            for (reply, enq) in replies {
                stats.record_failure(enq.elapsed());
                stats.pending.fetch_sub(1, Ordering::Relaxed);
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

fn concat_inputs(reqs: Vec<Vec<HostTensor>>, total: usize) -> Vec<HostTensor> {
    let mut iter = reqs.into_iter();
    let mut merged = iter.next().unwrap_or_default();
    for t in &mut merged {
        if let Some(d0) = t.shape.first_mut() {
            *d0 = total as i64;
        }
    }
    for req in iter {
        // Requests were grouped only if their inputs line up by position, name and dtype.
        for (m, t) in merged.iter_mut().zip(req) {
            match (&mut m.data, t.data) {
                (TensorData::Raw(a), TensorData::Raw(b)) => a.extend_from_slice(&b),
                (TensorData::Bytes(a), TensorData::Bytes(b)) => a.extend(b),
                _ => {}
            }
        }
    }
    merged
}

fn split_outputs(
    outs: Vec<HostTensor>,
    sizes: &[usize],
    total: usize,
) -> Result<Vec<Vec<HostTensor>>, ServeError> {
    let mut per_req: Vec<Vec<HostTensor>> = sizes.iter().map(|_| Vec::new()).collect();
    for out in outs {
        if out.shape.first().copied() != Some(total as i64) {
            return Err(ServeError::internal(format!(
                "output '{}' has shape {:?}, expected batch dim {total}",
                out.name, out.shape
            )));
        }
        let mut shape = out.shape.clone();
        match out.data {
            TensorData::Raw(bytes) => {
                if total == 0 || bytes.len() % total != 0 {
                    return Err(ServeError::internal(format!(
                        "output '{}' byte size {} is not a multiple of batch {total}",
                        out.name,
                        bytes.len()
                    )));
                }
                let per = bytes.len() / total;
                let mut off = 0;
                for (dst, &n) in per_req.iter_mut().zip(sizes) {
                    shape[0] = n as i64;
                    let data = TensorData::Raw(bytes[off..off + n * per].to_vec());
                    off += n * per;
                    dst.push(HostTensor {
                        name: out.name.clone(),
                        datatype: out.datatype,
                        shape: shape.clone(),
                        data,
                    });
                }
            }
            TensorData::Bytes(elems) => {
                if total == 0 || elems.len() % total != 0 {
                    return Err(ServeError::internal(format!(
                        "output '{}' element count {} is not a multiple of batch {total}",
                        out.name,
                        elems.len()
                    )));
                }
                let per = elems.len() / total;
                let mut it = elems.into_iter();
                for (dst, &n) in per_req.iter_mut().zip(sizes) {
                    shape[0] = n as i64;
                    let data = TensorData::Bytes(it.by_ref().take(n * per).collect());
                    dst.push(HostTensor {
                        name: out.name.clone(),
                        datatype: out.datatype,
                        shape: shape.clone(),
                        data,
                    });
                }
            }
        }
    }
    Ok(per_req)
}

/// Keeps the requested outputs in request order (all outputs when none were named).
fn select_outputs(
    mut outs: Vec<HostTensor>,
    want: &[String],
) -> Result<Vec<HostTensor>, ServeError> {
    if want.is_empty() {
        return Ok(outs);
    }
    want.iter()
        .map(|w| {
            outs.iter()
                .position(|o| &o.name == w)
                .map(|i| outs.swap_remove(i))
                .ok_or_else(|| ServeError::internal(format!("model did not produce output '{w}'")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::TritonDType;

    fn pending(
        batch: usize,
        cols: i64,
        first: i32,
    ) -> (Pending, oneshot::Receiver<Result<Vec<HostTensor>, ServeError>>) {
        let (tx, rx) = oneshot::channel();
        let n = batch * cols as usize;
        let vals: Vec<u8> = (0..n as i32).flat_map(|k| (first + k).to_le_bytes()).collect();
        let t = HostTensor {
            name: "X".into(),
            datatype: TritonDType::Int32,
            shape: vec![batch as i64, cols],
            data: TensorData::Raw(vals),
        };
        let p = Pending {
            inputs: vec![t],
            outputs: vec![],
            batch,
            enqueued: Instant::now(),
            reply: tx,
        };
        (p, rx)
    }

    #[test]
    fn batch_prefix_respects_limits_and_shapes() {
        let policy = |max_batch, dynamic, preferred: &[usize]| BatchPolicy {
            max_batch,
            dynamic,
            preferred: preferred.to_vec(),
            max_delay: Duration::ZERO,
            max_queue: 10,
        };
        // (queue as (batch, cols), policy, expected (requests taken, total batch))
        type Case = (Vec<(usize, i64)>, BatchPolicy, (usize, usize));
        let cases: Vec<Case> = vec![
            (vec![(1, 16), (2, 16), (3, 16)], policy(8, true, &[]), (3, 6)),
            (vec![(4, 16), (4, 16), (1, 16)], policy(8, true, &[]), (2, 8)),
            (vec![(1, 16), (1, 8), (1, 16)], policy(8, true, &[]), (1, 1)),
            (vec![(2, 16), (2, 16), (2, 16)], policy(8, true, &[4]), (2, 4)),
            (vec![(3, 16), (3, 16)], policy(8, false, &[]), (1, 3)),
            (vec![(1, 16), (1, 16)], policy(0, true, &[]), (1, 1)),
        ];
        for (queue, pol, want) in cases {
            let items: VecDeque<Pending> = queue.iter().map(|&(b, c)| pending(b, c, 0).0).collect();
            assert_eq!(batch_prefix(&items, &pol), want, "{queue:?}");
        }
    }

    #[test]
    fn concat_then_split_round_trips_mixed_batches() {
        let sizes = [1usize, 3, 2];
        let reqs: Vec<Vec<HostTensor>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &b)| pending(b, 4, i as i32 * 100).0.inputs)
            .collect();
        let originals = reqs.clone();
        let merged = concat_inputs(reqs, 6);
        assert_eq!(merged[0].shape, [6, 4]);
        let split = split_outputs(merged, &sizes, 6).unwrap();
        for (got, want) in split.iter().zip(&originals) {
            assert_eq!(got, want);
        }
        let bytes = HostTensor {
            name: "S".into(),
            datatype: TritonDType::Bytes,
            shape: vec![3, 1],
            data: TensorData::Bytes(vec![b"a".to_vec(), b"bb".to_vec(), b"".to_vec()]),
        };
        let split = split_outputs(vec![bytes], &[2, 1], 3).unwrap();
        assert_eq!(split[1][0].data, TensorData::Bytes(vec![b"".to_vec()]));
        assert_eq!(split[0][0].shape, [2, 1]);
    }

    #[test]
    fn full_queue_and_closed_queue_are_refused() {
        let stats = Arc::new(ModelStats::default());
        let pol = BatchPolicy { max_queue: 1, ..Default::default() };
        // No instances: nothing drains the queue, so the second request must be refused.
        let s = Scheduler::start("m", Vec::new(), pol, stats).unwrap();
        s.enqueue(pending(1, 1, 0).0).unwrap();
        let e = s.enqueue(pending(1, 1, 0).0).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (crate::types::ErrorKind::Unavailable, "Exceeds maximum queue size")
        );
        s.close();
        assert!(s.enqueue(pending(1, 1, 0).0).unwrap_err().message.contains("unloaded"));
    }
}
