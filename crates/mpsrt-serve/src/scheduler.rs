//! Per-model request queue and dynamic batcher; execution happens on the server's shared
//! executor pool (`pool.rs`).
//!
//! Each free instance forms its own batch from the queue head, which is how Triton's dynamic
//! batcher behaves from the client's point of view: batches grow while instances are busy.

use crate::backend::{InstanceDevice, ModelInstance};
use crate::pool::ExecPool;
use crate::stats::{BatchTimes, ModelStats};
use crate::types::{HostTensor, ServeError, TensorData};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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

/// An instance parked between batches, with its counters.
pub(crate) type Slot = (Box<dyn ModelInstance>, Arc<InstanceStats>);

pub(crate) struct State {
    items: VecDeque<Pending>,
    closed: bool,
    /// Instances not executing now, least recently used first (requests spread over instances).
    pub(crate) idle: VecDeque<Slot>,
    /// Instances a pool thread is executing on.
    pub(crate) busy: usize,
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

/// One model version's queue and parked instances, shared with the executor pool.
pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    /// Signalled when an instance is parked again (shutdown waits for the drain on it).
    pub(crate) done: Condvar,
    policy: BatchPolicy,
    stats: Arc<ModelStats>,
    pub(crate) model: String,
    pub(crate) instance_count: usize,
}

/// Queue and instances of one model version, executed by the server's pool.
pub struct Scheduler {
    shared: Arc<Shared>,
    pool: Arc<ExecPool>,
    instances: Vec<Arc<InstanceStats>>,
}

impl Scheduler {
    /// Parks the instances and registers the queue with the executor pool.
    pub fn start(
        model: &str,
        instances: Vec<(Box<dyn ModelInstance>, InstanceDevice)>,
        policy: BatchPolicy,
        stats: Arc<ModelStats>,
        pool: &Arc<ExecPool>,
    ) -> Result<Self, ServeError> {
        let mut slots = Vec::new();
        let mut stats_list = Vec::new();
        for (i, (instance, device)) in instances.into_iter().enumerate() {
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
            stats_list.push(st.clone());
            slots.push((instance, st));
        }
        let count = slots.len();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                items: VecDeque::new(),
                closed: false,
                idle: slots.into(),
                busy: 0,
            }),
            done: Condvar::new(),
            policy,
            stats,
            model: model.to_string(),
            instance_count: count,
        });
        pool.register(shared.clone(), count);
        Ok(Self { shared, pool: pool.clone(), instances: stats_list })
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
        // Pool threads re-check: a model waiting out its batching delay may now have a full batch.
        self.pool.notify();
        Ok(())
    }

    /// Stops accepting; queued requests are still executed.
    pub fn close(&self) {
        self.shared.state.lock().closed = true;
        self.pool.notify();
    }

    /// Closes, waits for the queue to drain and the instances to be parked, then releases them
    /// (blocking: call off the async runtime).
    pub fn shutdown(&self) {
        self.close();
        let idle = {
            let mut st = self.shared.state.lock();
            while !st.items.is_empty() || st.busy > 0 {
                self.shared.done.wait(&mut st);
            }
            std::mem::take(&mut st.idle)
        };
        self.pool.deregister(&self.shared);
        // Instances (and their GPU memory) are released here, not on a pool thread.
        drop(idle);
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        // The pool keeps the queue until it is drained, then drops it with its instances.
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

/// What a pool thread can do with one model now.
pub(crate) enum Take {
    /// Run this batch on this instance (already counted busy).
    Job(Slot, Vec<Pending>),
    /// Work is queued but the batching delay has not passed: look again at this instant.
    WaitUntil(Instant),
    /// Nothing to run (empty queue or no idle instance).
    Nothing,
    /// Closed and drained with no instance executing: the pool may drop the model.
    Finished,
}

/// Forms the next batch of a model for an idle instance, as a dedicated executor would: with
/// dynamic batching and a delay, it waits until the oldest request has waited `max_queue_delay`
/// or the batch is full (a closed model drains at once).
pub(crate) fn take_job(sh: &Shared, st: &mut State, now: Instant) -> Take {
    if st.items.is_empty() {
        return if st.closed && st.busy == 0 { Take::Finished } else { Take::Nothing };
    }
    if st.idle.is_empty() {
        return Take::Nothing;
    }
    let policy = &sh.policy;
    if policy.dynamic && policy.max_batch > 0 && !policy.max_delay.is_zero() && !st.closed {
        let full = policy.preferred.iter().max().copied().unwrap_or(policy.max_batch);
        let (_, total) = batch_prefix(&st.items, policy);
        if let Some(d) = st.items.front().map(|p| p.enqueued + policy.max_delay) {
            if total < full.min(policy.max_batch) && now < d {
                return Take::WaitUntil(d);
            }
        }
    }
    let Some(slot) = st.idle.pop_front() else { return Take::Nothing };
    let (n, _) = batch_prefix(&st.items, policy);
    let batch: Vec<Pending> = st.items.drain(..n).collect();
    st.busy += 1;
    Take::Job(slot, batch)
}

pub(crate) fn run_batch(
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
        let s = Scheduler::start("m", Vec::new(), pol, stats, &ExecPool::new(2)).unwrap();
        s.enqueue(pending(1, 1, 0).0).unwrap();
        let e = s.enqueue(pending(1, 1, 0).0).unwrap_err();
        assert_eq!(
            (e.kind, e.message.as_str()),
            (crate::types::ErrorKind::Unavailable, "Exceeds maximum queue size")
        );
        s.close();
        assert!(s.enqueue(pending(1, 1, 0).0).unwrap_err().message.contains("unloaded"));
    }

    /// Sleeps, echoes its input and records how many executions overlap.
    struct Slow(Arc<(std::sync::atomic::AtomicUsize, std::sync::atomic::AtomicUsize)>);
    impl ModelInstance for Slow {
        fn execute(
            &mut self,
            inputs: Vec<HostTensor>,
            _: &[String],
        ) -> Result<Vec<HostTensor>, ServeError> {
            let now = self.0 .0.fetch_add(1, Ordering::SeqCst) + 1;
            self.0 .1.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(20));
            self.0 .0.fetch_sub(1, Ordering::SeqCst);
            Ok(inputs)
        }
    }

    #[test]
    fn many_instances_share_a_bounded_pool_and_every_request_is_answered() {
        let pool = ExecPool::new(3);
        let seen = Arc::new(Default::default());
        let mut models = Vec::new();
        for m in 0..2 {
            // 40 instances per model: before the pool this meant 80 threads.
            let inst = (0..40)
                .map(|_| {
                    (
                        Box::new(Slow(Arc::clone(&seen))) as Box<dyn ModelInstance>,
                        InstanceDevice::Cpu,
                    )
                })
                .collect();
            let pol = BatchPolicy { max_queue: 100, ..Default::default() };
            let stats = Arc::new(ModelStats::default());
            models.push(Scheduler::start(&format!("m{m}"), inst, pol, stats, &pool).unwrap());
        }
        assert_eq!(pool.threads(), 3);
        let mut rxs = Vec::new();
        for k in 0..24 {
            let (p, rx) = pending(1, 1, k);
            models[k as usize % 2].enqueue(p).unwrap();
            rxs.push((k, rx));
        }
        for (k, rx) in rxs {
            let out = rx.blocking_recv().unwrap().unwrap();
            assert_eq!(out[0].data, TensorData::Raw(k.to_le_bytes().to_vec()), "request {k}");
        }
        // Bounded by the pool, and the pool was used in parallel.
        let peak = seen.1.load(Ordering::SeqCst);
        assert!((2..=3).contains(&peak), "peak concurrency {peak}");
        // Requests spread over the instances (least recently used first).
        let used = models[0].instances().iter().filter(|i| i.executions.load(Ordering::SeqCst) > 0);
        assert!(used.count() >= 6);
        for m in &models {
            m.shutdown();
        }
        // With no model left the threads exit.
        let t = Instant::now();
        while pool.threads() > 0 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(pool.threads(), 0);
    }

    #[test]
    fn dynamic_batching_delay_still_groups_requests_on_the_pool() {
        let pool = ExecPool::new(2);
        let seen = Arc::new(Default::default());
        let inst = vec![(Box::new(Slow(seen)) as Box<dyn ModelInstance>, InstanceDevice::Cpu)];
        let pol = BatchPolicy {
            max_batch: 8,
            dynamic: true,
            max_delay: Duration::from_millis(200),
            max_queue: 100,
            ..Default::default()
        };
        let stats = Arc::new(ModelStats::default());
        let s = Scheduler::start("d", inst, pol, stats, &pool).unwrap();
        let rxs: Vec<_> = (0..8)
            .map(|k| {
                let (p, rx) = pending(1, 1, k);
                s.enqueue(p).unwrap();
                rx
            })
            .collect();
        for (k, rx) in rxs.into_iter().enumerate() {
            let out = rx.blocking_recv().unwrap().unwrap();
            assert_eq!(out[0].data, TensorData::Raw((k as i32).to_le_bytes().to_vec()));
        }
        // A full batch of 8 ran as one execution, without waiting out the 200 ms delay first.
        assert_eq!(s.instances()[0].executions.load(Ordering::SeqCst), 1);
        s.shutdown();
    }
}
