//! Runtime knobs read from the environment once per device. Names follow the seed documents
//! (`MPS_MAX_POOL_SIZE`, `MPS_MAX_BUFFER_AGE`) and mpsrt's own `MPSRT_*` variables.

use mpsrt_core::{Error, Result};
use std::time::Duration;

/// Tunables for one GPU device.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Cached-but-unused bytes kept by the allocator (`MPS_MAX_POOL_SIZE`, default 1 GiB).
    pub max_pool_size: u64,
    /// Cached buffers unused for longer are released (`MPS_MAX_BUFFER_AGE` in ms, default 60000).
    pub max_buffer_age: Duration,
    /// Hard limit on bytes held by live tensors (`MPSRT_MEMORY_LIMIT`); `None` = derived from the device.
    pub memory_limit: Option<u64>,
    /// Dispatches recorded before a batch is submitted (`MPSRT_MAX_OPS_PER_BATCH`, default 64),
    /// unless the batch may grow to `max_ops_per_long_batch` (see `GpuDevice::batch_full_locked`).
    pub max_ops_per_batch: usize,
    /// Dispatches a batch may grow to while its work is small (under 1 MiB bound per
    /// `max_ops_per_batch` dispatches: tiny eager ops) or the GPU still has two batches queued
    /// (`MPSRT_MAX_OPS_PER_LONG_BATCH`, default 512; at most `max_ops_per_batch` turns this
    /// off). A submit costs the host a fixed ~100-250 µs (wgpu-core's submission and encoder
    /// bookkeeping, the driver's submit), which longer batches spread over more dispatches.
    pub max_ops_per_long_batch: usize,
    /// Bytes written by recorded work before a batch is submitted (`MPSRT_MAX_MB_PER_BATCH`,
    /// default 4096, at most a quarter of the device's memory).
    pub max_bytes_per_batch: u64,
    /// Submitted batches allowed to be unfinished before recording waits (`MPSRT_MAX_INFLIGHT_BATCHES`,
    /// default 8): backpressure, so a fast host cannot queue unbounded work and memory.
    pub max_inflight_batches: u64,
    /// Bytes touched by submitted, unfinished batches before recording waits
    /// (`MPSRT_MAX_INFLIGHT_MB`, default 4096, at most a quarter of the device's memory). Freed
    /// outputs of in-flight work are reused in stream order (invariant 3), so a wide window no
    /// longer piles up pending buffers; measured on an H100, 64M-element adds in a loop reach
    /// 2.72–2.89 TB/s with a 4 GiB window against 2.44–2.71 TB/s with 1 GiB.
    pub max_inflight_bytes: u64,
    /// Map storage buffers directly on unified-memory adapters (`MPSRT_UNIFIED_FAST_PATH`, default on).
    pub unified_fast_path: bool,
    /// Lowers the storage-binding limit the kernels plan for (`MPSRT_MAX_BINDING_BYTES`): tests
    /// exercise the large-operand paths with small tensors; never raises the adapter's limit.
    pub max_binding_bytes: Option<u64>,
    /// How long a host wait (`synchronize()`, reads) polls the GPU's completion counter in a busy
    /// loop before blocking in the driver (`MPSRT_SYNC_SPIN_US`, microseconds). A blocking wait
    /// sleeps until the driver wakes the thread, which can cost more than a short kernel;
    /// spinning trades a busy core for that latency, as CUDA's default schedule does. Unset:
    /// 1000 µs on GPUs (measured on an H100: ResNet-50 at batch 1 2.25–2.30 → 2.05–2.08 ms,
    /// BENCHMARKS.md), 0 on CPU adapters (lavapipe), whose workers need the host's cores.
    pub sync_spin: Option<Duration>,
    /// Threads that record one plan replay's commands in parallel, each into its own command
    /// encoder (`MPSRT_REPLAY_THREADS`, default 1: off until measured on a discrete GPU's host;
    /// on the loaded 2-core dev VM with lavapipe it could not be timed). wgpu-core encodes a
    /// pass (usage scopes, barriers, the driver's commands) in `CommandEncoder::finish`, on the
    /// thread that calls it, so this splits the host cost of a long replay (issue 22).
    pub replay_threads: Option<usize>,
    /// Threads that record and finish the tail of a serial replay while the calling thread
    /// records its head with early submits (`MPSRT_REPLAY_TAIL`, 0: off; unset:
    /// `DEFAULT_REPLAY_TAIL` on GPUs, off on CPU adapters, whose workers need the cores;
    /// `replay_par.rs`).
    pub replay_tail: Option<usize>,
    /// Percent of a replay's commands that go to the tail threads (`MPSRT_REPLAY_TAIL_PCT`,
    /// default 60).
    pub replay_tail_pct: usize,
    /// Fewest commands of one tail part (`MPSRT_REPLAY_TAIL_MIN`, default 80): shorter plans
    /// record serially.
    pub replay_tail_min: usize,
    /// Fewest commands a replay gives one recording thread (`MPSRT_REPLAY_CHUNK`, default 48):
    /// shorter replays are recorded on the calling thread alone.
    pub replay_chunk: usize,
    /// Commands of a serial replay recorded before the first early submit
    /// (`MPSRT_REPLAY_EARLY`, 0: off; unset: `DEFAULT_REPLAY_EARLY` on GPUs, off on CPU
    /// adapters, whose workers share the host's cores): the first N commands are submitted at
    /// once, so the GPU starts on them while the host records the rest (at batch 1 the host's
    /// recording is otherwise all in front of the GPU's work); later parts follow
    /// `replay_early_adapt` / `replay_early_growth`.
    pub replay_early: Option<usize>,
    /// Factor by which each early part of a serial replay is larger than the one before
    /// (`MPSRT_REPLAY_EARLY_GROWTH`, default 2, at least 2). Every early submit costs the host a
    /// `queue.submit`; the GPU runs a batch-1 command several times longer than the host takes
    /// to record one, so parts may grow faster than doubling without starving the GPU.
    pub replay_early_growth: usize,
    /// Most early submits in one serial replay (`MPSRT_REPLAY_EARLY_MAX`, default unbounded);
    /// the rest of the replay goes with the run's final submit.
    pub replay_early_max: usize,
    /// Whether the early parts after the first are sized from the GPU's queued work and the
    /// host's recording speed, measured on the recording's previous replay
    /// (`MPSRT_REPLAY_EARLY_ADAPT`, default 1; 0: parts grow by `replay_early_growth`).
    pub replay_early_adapt: bool,
}

/// `MPSRT_REPLAY_EARLY` when unset, on GPUs (H200, 2026-11-26, three fresh processes each:
/// EfficientNet-B0 batch 1 1.32–1.34 → 1.17–1.18 ms, ResNet-50 1.38–1.55 → 1.30–1.32).
pub(crate) const DEFAULT_REPLAY_EARLY: usize = 8;

/// `MPSRT_REPLAY_TAIL` when unset, on GPUs: DenseNet-121 b1 on an H100 (2026-11-26, ninth
/// session, fresh processes) read 2.30–3.10 µs per step in 8 of 8 processes with 2 tail
/// threads at 60% vs 2.69–5.27 without (4 of 8 over 4), p50 2.52–2.64 vs 2.49–2.58 ms.
pub(crate) const DEFAULT_REPLAY_TAIL: usize = 2;

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            max_pool_size: 1 << 30,
            max_buffer_age: Duration::from_millis(60_000),
            memory_limit: None,
            max_ops_per_batch: 64,
            max_ops_per_long_batch: 512,
            max_bytes_per_batch: 4 << 30,
            max_inflight_batches: 8,
            max_inflight_bytes: 4 << 30,
            unified_fast_path: true,
            max_binding_bytes: None,
            sync_spin: None,
            replay_threads: None,
            replay_tail: None,
            replay_tail_pct: 60,
            replay_tail_min: 80,
            replay_chunk: 48,
            replay_early: None,
            replay_early_growth: 2,
            replay_early_max: usize::MAX,
            replay_early_adapt: true,
        }
    }
}

fn var_u64(name: &str) -> Result<Option<u64>> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse::<u64>().map(Some).map_err(|_| {
            Error::invalid("env", format!("{name}={v:?} is not a non-negative integer"))
        }),
        _ => Ok(None),
    }
}

impl RuntimeConfig {
    /// Defaults overridden by the environment; a malformed value is an error naming the variable.
    pub fn from_env() -> Result<Self> {
        let mut c = RuntimeConfig::default();
        if let Some(v) = var_u64("MPS_MAX_POOL_SIZE")? {
            c.max_pool_size = v;
        }
        if let Some(v) = var_u64("MPS_MAX_BUFFER_AGE")? {
            c.max_buffer_age = Duration::from_millis(v);
        }
        c.memory_limit = var_u64("MPSRT_MEMORY_LIMIT")?;
        if let Some(v) = var_u64("MPSRT_MAX_OPS_PER_BATCH")? {
            c.max_ops_per_batch = v.max(1) as usize;
        }
        if let Some(v) = var_u64("MPSRT_MAX_OPS_PER_LONG_BATCH")? {
            c.max_ops_per_long_batch = v.max(1) as usize;
        }
        if let Some(v) = var_u64("MPSRT_MAX_MB_PER_BATCH")? {
            c.max_bytes_per_batch = v.max(1) << 20;
        }
        if let Some(v) = var_u64("MPSRT_MAX_INFLIGHT_BATCHES")? {
            c.max_inflight_batches = v.max(1);
        }
        if let Some(v) = var_u64("MPSRT_MAX_INFLIGHT_MB")? {
            c.max_inflight_bytes = v.max(1) << 20;
        }
        c.max_binding_bytes = var_u64("MPSRT_MAX_BINDING_BYTES")?;
        if let Some(v) = var_u64("MPSRT_SYNC_SPIN_US")? {
            c.sync_spin = Some(Duration::from_micros(v));
        }
        if let Some(v) = var_u64("MPSRT_REPLAY_THREADS")? {
            c.replay_threads = Some(v.clamp(1, 64) as usize);
        }
        if let Some(v) = var_u64("MPSRT_REPLAY_TAIL")? {
            c.replay_tail = Some(v.min(16) as usize);
        }
        if let Some(v) = var_u64("MPSRT_REPLAY_TAIL_PCT")? {
            c.replay_tail_pct = v.min(95) as usize;
        }
        if let Some(v) = var_u64("MPSRT_REPLAY_TAIL_MIN")? {
            c.replay_tail_min = v.max(1) as usize;
        }
        if let Some(v) = var_u64("MPSRT_REPLAY_CHUNK")? {
            c.replay_chunk = v.max(1) as usize;
        }
        if let Some(v) = var_u64("MPSRT_REPLAY_EARLY")? {
            c.replay_early = Some(v.min(1 << 20) as usize);
        }
        if let Some(v) = var_u64("MPSRT_REPLAY_EARLY_GROWTH")? {
            c.replay_early_growth = v.clamp(2, 1 << 20) as usize;
        }
        if let Some(v) = var_u64("MPSRT_REPLAY_EARLY_MAX")? {
            c.replay_early_max = v.min(1 << 20) as usize;
        }
        if let Some(v) = var_u64("MPSRT_REPLAY_EARLY_ADAPT")? {
            c.replay_early_adapt = v != 0;
        }
        if let Some(v) = var_u64("MPSRT_UNIFIED_FAST_PATH")? {
            c.unified_fast_path = v != 0;
        }
        Ok(c)
    }
}
