//! A GPU device opened through wgpu: buffers from the caching allocator, batched dispatches,
//! copies in and out (mapped directly on unified-memory adapters), the pipeline cache and
//! memory statistics.

use crate::adapters::{self, DeviceProperties};
use crate::allocator::{size_class, Allocator, MemoryStats};
use crate::batch::Batch;
use crate::bind_cache::BindCache;
use crate::env::RuntimeConfig;
pub use crate::pipeline::{Kernel, Pipeline};
use crate::pipeline::{SharedLayout, Slot};
use mpsrt_core::{Error, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

pub(crate) struct State {
    pub alloc: Allocator,
    pub batch: Batch,
    pub timing: SubmitTiming,
    pub binds: BindCache,
    /// `alloc.releases()` when `binds` was last checked against it.
    pub releases_seen: u64,
}

/// Where host time goes at submission points (for `mpsrt bench` and tuning): totals since the
/// device was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubmitTiming {
    /// Batches submitted.
    pub submits: u64,
    /// Dispatches recorded.
    pub dispatches: u64,
    /// Nanoseconds in `queue.submit` (including the metadata upload).
    pub submit_ns: u64,
    /// Nanoseconds in the non-blocking poll that runs completion callbacks.
    pub poll_ns: u64,
    /// Nanoseconds blocked by backpressure (waiting for in-flight batches).
    pub backpressure_ns: u64,
    /// Nanoseconds blocked in `synchronize()` and reads.
    pub sync_ns: u64,
    /// Command buffers recorded by parallel replay parts (`replay_par.rs`).
    pub replay_parts: u64,
    /// Early submits inside serial replays (`MPSRT_REPLAY_EARLY`).
    pub replay_early_submits: u64,
    /// Nanoseconds of `submit_ns` in `CommandEncoder::finish` (wgpu-core encodes the recorded
    /// passes there: state tracking, barriers, the driver's command recording).
    pub finish_ns: u64,
    /// Nanoseconds of `submit_ns` in `Queue::submit` itself.
    pub queue_submit_ns: u64,
    /// Replays recorded ([`GpuDevice::replay_range`] calls).
    pub replays: u64,
    /// Nanoseconds in [`GpuDevice::replay_range`] (the record loop, and its early submits,
    /// whose time is also in `submit_ns`).
    pub replay_ns: u64,
    /// Nanoseconds of `replay_ns` (and `submit_ns`) in the replays' early submits.
    pub early_submit_ns: u64,
    /// Waits for the GPU that outlasted the sync spin (`MPSRT_SYNC_SPIN_US`) and blocked in
    /// the driver (the thread slept).
    pub sync_blocked: u64,
}

impl SubmitTiming {
    /// The counts and times since `earlier` (a snapshot of the same device).
    pub fn since(&self, earlier: &SubmitTiming) -> SubmitTiming {
        SubmitTiming {
            submits: self.submits - earlier.submits,
            dispatches: self.dispatches - earlier.dispatches,
            submit_ns: self.submit_ns - earlier.submit_ns,
            poll_ns: self.poll_ns - earlier.poll_ns,
            backpressure_ns: self.backpressure_ns - earlier.backpressure_ns,
            sync_ns: self.sync_ns - earlier.sync_ns,
            replay_parts: self.replay_parts - earlier.replay_parts,
            replay_early_submits: self.replay_early_submits - earlier.replay_early_submits,
            finish_ns: self.finish_ns - earlier.finish_ns,
            queue_submit_ns: self.queue_submit_ns - earlier.queue_submit_ns,
            replays: self.replays - earlier.replays,
            replay_ns: self.replay_ns - earlier.replay_ns,
            early_submit_ns: self.early_submit_ns - earlier.early_submit_ns,
            sync_blocked: self.sync_blocked - earlier.sync_blocked,
        }
    }
}

/// One wgpu device. Shared as `Arc<GpuDevice>`; every method is thread-safe.
pub struct GpuDevice {
    index: usize,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) props: DeviceProperties,
    pub(crate) config: RuntimeConfig,
    usage: wgpu::BufferUsages,
    mappable: bool,
    pub(crate) state: Mutex<State>,
    pub(crate) pipelines: Mutex<HashMap<u64, Arc<Pipeline>>>,
    /// [`GpuDevice::static_pipeline`]'s cache, keyed by the addresses of `'static` source and
    /// entry strings (which never move or change), so a hot call site skips hashing its source.
    pub(crate) static_pipelines: Mutex<HashMap<(usize, usize, usize), Arc<Pipeline>>>,
    /// Explicit bind group layouts by binding signature (`pipeline.rs`).
    pub(crate) layouts: Mutex<HashMap<Vec<Slot>, Arc<SharedLayout>>>,
    /// Highest batch serial known to have completed on the GPU (set by submission callbacks).
    pub(crate) completed: Arc<AtomicU64>,
    /// Errors wgpu reported outside an error scope; surfaced at the next sync point.
    errors: Arc<Mutex<Vec<String>>>,
    /// Recording threads and fewest commands per thread of a replay (`replay_par.rs`).
    pub(crate) replay_threads: AtomicUsize,
    pub(crate) replay_chunk: AtomicUsize,
    /// Commands before a serial replay's first early submit (0: off; `replay.rs`).
    pub(crate) replay_early: AtomicUsize,
    /// Growth factor of the early parts and most early submits per replay (`replay.rs`).
    pub(crate) replay_early_growth: AtomicUsize,
    pub(crate) replay_early_max: AtomicUsize,
    /// Whether early parts follow the GPU's queued work (`replay/early.rs`).
    pub(crate) replay_early_adapt: std::sync::atomic::AtomicBool,
    /// Replay tail threads and their percent of the commands (`replay_par.rs`).
    pub(crate) replay_tail: AtomicUsize,
    pub(crate) replay_tail_pct: AtomicUsize,
    pub(crate) replay_tail_min: AtomicUsize,
    /// The last completed batch serials and when their callbacks ran (`replay/early.rs` clock).
    pub(crate) completed_at: Arc<Mutex<crate::replay::Completions>>,
    /// Native Vulkan replay: its switch and device side (`replay/native.rs`).
    #[cfg_attr(not(native_vk), allow(dead_code))]
    pub(crate) native: crate::replay::NativeSlot,
    this: Weak<GpuDevice>,
}

/// A device buffer owned by one tensor. Dropping it hands the buffer back to the allocator,
/// which holds it until the GPU has finished the last batch that used it.
pub struct GpuBuffer {
    device: Arc<GpuDevice>,
    pub(crate) buffer: wgpu::Buffer,
    size: u64,
    class: u64,
    pub(crate) last_use: AtomicU64,
}

impl GpuBuffer {
    /// Bytes requested for this buffer (the binding size; the class size may be larger).
    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn device(&self) -> &Arc<GpuDevice> {
        &self.device
    }
    /// The bytes bound to a kernel: the requested size, at least 4 and a multiple of 4.
    pub(crate) fn binding_size(&self) -> u64 {
        self.size.max(4).next_multiple_of(4)
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        self.device.release(self.buffer.clone(), self.class, self.last_use.load(Ordering::Acquire));
    }
}

/// One storage-buffer argument of a dispatch: a whole tensor buffer, or a byte window of it
/// (how a kernel reaches into a buffer larger than `max_storage_buffer_binding_size`).
#[derive(Clone, Copy)]
pub struct Binding<'a> {
    pub buffer: &'a GpuBuffer,
    /// `(offset, size)` in bytes; `None` binds the whole buffer.
    pub window: Option<(u64, u64)>,
}

impl<'a> From<&'a GpuBuffer> for Binding<'a> {
    fn from(buffer: &'a GpuBuffer) -> Self {
        Binding { buffer, window: None }
    }
}

impl<'a> Binding<'a> {
    /// Binds `size` bytes from `offset`; the offset must be a multiple of the adapter's
    /// `min_storage_buffer_offset_alignment` (checked at dispatch).
    pub fn window(buffer: &'a GpuBuffer, offset: u64, size: u64) -> Self {
        Binding { buffer, window: Some((offset, size)) }
    }

    /// `(offset, size)` actually bound.
    pub(crate) fn range(&self) -> (u64, u64) {
        match self.window {
            Some((o, s)) => (o, s.max(4).next_multiple_of(4).min(self.buffer.binding_size() - o)),
            None => (0, self.buffer.binding_size()),
        }
    }
}

pub(crate) fn fmt_bytes(b: u64) -> String {
    const G: f64 = (1u64 << 30) as f64;
    const M: f64 = (1u64 << 20) as f64;
    if b as f64 >= G {
        format!("{:.2} GiB", b as f64 / G)
    } else {
        format!("{:.2} MiB", b as f64 / M)
    }
}

impl GpuDevice {
    /// Open `adapter` as device `index`, requesting every limit and the optional features we use.
    pub(crate) fn open(
        index: usize,
        adapter: &wgpu::Adapter,
        config: RuntimeConfig,
    ) -> Result<Arc<Self>> {
        let info = adapter.get_info();
        let unified =
            matches!(info.device_type, wgpu::DeviceType::IntegratedGpu | wgpu::DeviceType::Cpu)
                || info.backend == wgpu::Backend::Metal;
        // Timestamps only feed `--profile` (`timing.rs`); asking costs nothing elsewhere.
        let mut wanted = wgpu::Features::SHADER_F16 | wgpu::Features::TIMESTAMP_QUERY;
        wanted |= wgpu::Features::SUBGROUP | wgpu::Features::SUBGROUP_BARRIER;
        if unified && config.unified_fast_path {
            wanted |= wgpu::Features::MAPPABLE_PRIMARY_BUFFERS;
        }
        // Matrix units (issue 23): only where the adapter has them; `MPSRT_COOP_MATMUL=0` keeps
        // the experimental feature off entirely (an escape hatch should a driver misbehave).
        if std::env::var("MPSRT_COOP_MATMUL").map_or(true, |v| v.trim() != "0") {
            wanted |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        }
        let features = adapter.features() & wanted;
        let experimental = if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            // SAFETY: wgpu's opt-in for experimental features; the only shaders using them are
            // the cooperative GEMM's (mpsrt-kernels/matmul_coop.rs), which stay inside the
            // staged workgroup tiles, and are validated by naga and tested against references.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let desc = wgpu::DeviceDescriptor {
            label: Some("mpsrt"),
            required_features: features,
            required_limits: adapter.limits(),
            experimental_features: experimental,
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc)).map_err(|e| {
            Error::device(
                "device",
                format!(
                    "cannot open {} ({}): {e}",
                    info.name,
                    adapters::backend_name(info.backend)
                ),
            )
        })?;
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| sink.lock().push(e.to_string())));
        let mut props = adapters::properties(index, adapter, &device);
        if let Some(b) = config.max_binding_bytes {
            props.max_storage_buffer_binding_size = props.max_storage_buffer_binding_size.min(b);
        }
        let mappable = features.contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS);
        let mut usage = wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_SRC
            | wgpu::BufferUsages::COPY_DST;
        if mappable {
            usage |= wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::MAP_WRITE;
        }
        // Default limit: what the device can hold, leaving room for the driver (and, on unified
        // memory, for the rest of the system).
        let limit = config.memory_limit.unwrap_or(if props.unified_memory {
            props.total_memory / 4 * 3
        } else {
            props.total_memory / 10 * 9
        });
        let alloc = Allocator::new(limit, config.max_pool_size, config.max_buffer_age);
        // Batch and in-flight windows are byte counts of bound buffers: keep them to a quarter
        // of the device so a small GPU never queues more work than it can hold.
        let mut config = config;
        let quarter = (props.total_memory / 4).max(64 << 20);
        config.max_bytes_per_batch = config.max_bytes_per_batch.min(quarter);
        config.max_inflight_bytes = config.max_inflight_bytes.min(quarter);
        let spin_us = if props.device_type == "cpu" { 0 } else { 1000 };
        config.sync_spin = config.sync_spin.or(Some(std::time::Duration::from_micros(spin_us)));
        // Parallel replay recording stays opt-in until measured on a discrete GPU's host.
        config.replay_threads = config.replay_threads.or(Some(1));
        let (replay_threads, replay_chunk) =
            (config.replay_threads.unwrap_or(1), config.replay_chunk);
        let replay_early = config.replay_early.unwrap_or(if props.device_type == "cpu" {
            0
        } else {
            crate::env::DEFAULT_REPLAY_EARLY
        });
        let (early_growth, early_max) = (config.replay_early_growth, config.replay_early_max);
        let early_adapt = config.replay_early_adapt;
        let tail_threads = config.replay_tail.unwrap_or(if props.device_type == "cpu" {
            0
        } else {
            crate::env::DEFAULT_REPLAY_TAIL
        });
        let tail = (tail_threads, config.replay_tail_pct, config.replay_tail_min);
        tracing::debug!(device = %props.display_name(), limit, "opened GPU device");
        Ok(Arc::new_cyclic(|this| GpuDevice {
            index,
            device,
            queue,
            props,
            config,
            usage,
            mappable,
            state: Mutex::new(State {
                alloc,
                batch: Batch::new(),
                timing: SubmitTiming::default(),
                binds: BindCache::default(),
                releases_seen: 0,
            }),
            pipelines: Mutex::default(),
            static_pipelines: Mutex::default(),
            layouts: Mutex::default(),
            completed: Arc::default(),
            errors,
            replay_threads: AtomicUsize::new(replay_threads),
            replay_chunk: AtomicUsize::new(replay_chunk),
            replay_early: AtomicUsize::new(replay_early),
            replay_early_growth: AtomicUsize::new(early_growth),
            replay_early_max: AtomicUsize::new(early_max),
            replay_early_adapt: std::sync::atomic::AtomicBool::new(early_adapt),
            replay_tail: AtomicUsize::new(tail.0),
            replay_tail_pct: AtomicUsize::new(tail.1),
            replay_tail_min: AtomicUsize::new(tail.2),
            completed_at: Arc::default(),
            native: crate::replay::NativeSlot::new(),
            this: this.clone(),
        }))
    }

    pub fn index(&self) -> usize {
        self.index
    }
    pub fn properties(&self) -> &DeviceProperties {
        &self.props
    }
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }
    /// Whether downloads map storage buffers directly (unified memory fast path).
    pub fn uses_mapped_fast_path(&self) -> bool {
        self.mappable
    }

    pub(crate) fn arc(&self) -> Arc<GpuDevice> {
        // `this` is set by `Arc::new_cyclic` and the device is only reachable through that Arc.
        self.this
            .upgrade()
            .unwrap_or_else(|| unreachable!("GpuDevice used after its Arc was dropped"))
    }

    pub(crate) fn take_errors(&self, op: &str) -> Result<()> {
        let mut errs = self.errors.lock();
        if errs.is_empty() {
            return Ok(());
        }
        let msg = errs.join("; ");
        errs.clear();
        Err(Error::device(op, format!("the GPU reported: {msg}")))
    }

    /// Allocate `bytes` of device memory (contents undefined).
    pub fn alloc(&self, op: &str, bytes: u64) -> Result<GpuBuffer> {
        let class = size_class(bytes);
        if class > self.props.max_buffer_size {
            return Err(Error::oom(
                op,
                format!(
                    "cannot allocate {} on {}: the adapter's max_buffer_size is {}",
                    fmt_bytes(bytes),
                    self.props.display_name(),
                    fmt_bytes(self.props.max_buffer_size)
                ),
            ));
        }
        // A capturing thread reuses the buffers its capture freed (replay.rs).
        if let Some((buffer, class, last_use)) = crate::replay::on_alloc(self.index, class) {
            return Ok(GpuBuffer {
                device: self.arc(),
                buffer,
                size: bytes,
                class,
                last_use: AtomicU64::new(last_use),
            });
        }
        let mut st = self.state.lock();
        let mut last_use = 0;
        let cached = st.alloc.take_cached(class).or_else(|| {
            st.alloc.take_pending(class).map(|(b, c, serial)| {
                last_use = serial;
                (b, c)
            })
        });
        let (buffer, class) = match cached {
            Some(hit) => hit,
            None => {
                if !st.alloc.fits(class) {
                    st.alloc.empty_cache();
                    Self::drop_stale_bind_groups(&mut st);
                }
                if !st.alloc.fits(class) {
                    let s = st.alloc.stats();
                    return Err(Error::oom(
                        op,
                        format!(
                            "out of memory on mps:{} ({}): tried to allocate {}; {} already allocated by live tensors, \
                             limit {}. Free tensors or raise the limit with MPSRT_MEMORY_LIMIT=<bytes>",
                            self.index,
                            self.props.display_name(),
                            fmt_bytes(bytes),
                            fmt_bytes(s.allocated),
                            fmt_bytes(s.limit)
                        ),
                    ));
                }
                let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
                let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("mpsrt tensor"),
                    size: class,
                    usage: self.usage,
                    mapped_at_creation: false,
                });
                if let Some(e) = pollster::block_on(scope.pop()) {
                    return Err(Error::oom(
                        op,
                        format!("the driver could not allocate {}: {e}", fmt_bytes(class)),
                    ));
                }
                st.alloc.note_alloc(class, false);
                (buffer, class)
            }
        };
        drop(st);
        crate::replay::on_alloc_new(self.index, &buffer);
        Ok(GpuBuffer {
            device: self.arc(),
            buffer,
            size: bytes,
            class,
            // A reused pending buffer keeps its last use, so `write` waits for that batch.
            last_use: AtomicU64::new(last_use),
        })
    }

    pub(crate) fn release(&self, buffer: wgpu::Buffer, class: u64, last_use: u64) {
        let Some((buffer, class, last_use)) =
            crate::replay::on_release(self.index, buffer, class, last_use)
        else {
            return; // kept by this thread's capture
        };
        let completed = self.completed.load(Ordering::Acquire);
        let mut st = self.state.lock();
        st.alloc.release(buffer, class, last_use, completed);
        Self::drop_stale_bind_groups(&mut st);
    }

    /// Clear the bind-group cache if the allocator has dropped buffers since the last check:
    /// a cached bind group must not keep a released buffer's memory alive.
    fn drop_stale_bind_groups(st: &mut State) {
        let r = st.alloc.releases();
        if r != st.releases_seen {
            st.releases_seen = r;
            st.binds.clear();
        }
    }

    /// Allocate and fill a buffer from host bytes.
    pub fn upload(&self, op: &str, data: &[u8]) -> Result<GpuBuffer> {
        let buf = self.alloc(op, data.len() as u64)?;
        self.write(&buf, 0, data)?;
        Ok(buf)
    }

    /// Overwrite bytes at `offset` (a multiple of 4). Ordered after every op recorded so far.
    pub fn write(&self, buf: &GpuBuffer, offset: u64, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        if !offset.is_multiple_of(4) {
            return Err(Error::invalid("write", format!("offset {offset} is not a multiple of 4")));
        }
        crate::replay::on_write(self.index, &buf.buffer, offset, data);
        let mut st = self.state.lock();
        // `write_buffer` lands before the next submission's commands; if already-recorded work
        // uses this buffer, submit it first so the write cannot overtake it.
        if buf.last_use.load(Ordering::Acquire) == st.batch.serial {
            self.submit_locked(&mut st);
        }
        if data.len().is_multiple_of(4) {
            self.queue.write_buffer(&buf.buffer, offset, data);
        } else {
            let mut padded = data.to_vec();
            padded.resize(data.len().next_multiple_of(4), 0);
            self.queue.write_buffer(&buf.buffer, offset, &padded);
        }
        drop(st);
        self.take_errors("write")
    }

    /// Read `len` bytes at `offset` back to the host. Waits for all recorded work.
    pub fn read(&self, buf: &GpuBuffer, offset: u64, len: u64) -> Result<Vec<u8>> {
        if self.mappable {
            return self.read_mapped(buf, offset, len);
        }
        Ok(self.read_many(&[(buf, offset, len)])?.pop().unwrap_or_default())
    }

    /// Read several `(buffer, offset, len)` ranges with one submission and one wait: a model
    /// with several outputs costs one GPU round trip, not one per output. Unified-memory
    /// adapters (buffers mapped directly) read each range in turn.
    pub fn read_many(&self, parts: &[(&GpuBuffer, u64, u64)]) -> Result<Vec<Vec<u8>>> {
        crate::replay::on_read(self.index);
        if self.mappable {
            return parts.iter().map(|&(b, o, n)| self.read_mapped(b, o, n)).collect();
        }
        // Each part: its aligned source window and where it lands in the staging buffer.
        let mut layout = Vec::with_capacity(parts.len());
        let mut total = 0u64;
        for &(_, offset, len) in parts {
            let start = offset & !(wgpu::MAP_ALIGNMENT - 1);
            let end = (offset + len).next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT);
            let size = if len == 0 { 0 } else { end - start };
            layout.push((start, size, total));
            total += size.next_multiple_of(wgpu::MAP_ALIGNMENT);
        }
        if total == 0 {
            return Ok(vec![Vec::new(); parts.len()]);
        }
        let mut st = self.state.lock();
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("mpsrt readback"),
            size: total,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        for (&(buf, _, _), &(start, size, at)) in parts.iter().zip(&layout) {
            if size > 0 {
                st.batch.encoder(&self.device).copy_buffer_to_buffer(
                    &buf.buffer,
                    start,
                    &staging,
                    at,
                    size,
                );
                buf.last_use.store(st.batch.serial, Ordering::Release);
            }
        }
        self.submit_locked(&mut st);
        self.map_and_wait(&mut st, &staging, 0..total)?;
        let out = {
            let view = staging
                .get_mapped_range(..)
                .map_err(|e| Error::device("read", format!("mapped range unavailable: {e}")))?;
            parts
                .iter()
                .zip(&layout)
                .map(|(&(_, offset, len), &(start, _, at))| {
                    let skip = (at + offset - start) as usize;
                    view[skip..skip + len as usize].to_vec()
                })
                .collect()
        };
        staging.unmap();
        drop(st);
        self.take_errors("read")?;
        Ok(out)
    }

    /// The unified-memory fast path of `read`: map the tensor's own buffer.
    fn read_mapped(&self, buf: &GpuBuffer, offset: u64, len: u64) -> Result<Vec<u8>> {
        crate::replay::on_read(self.index);
        if len == 0 {
            return Ok(Vec::new());
        }
        let start = offset & !(wgpu::MAP_ALIGNMENT - 1);
        let end = (offset + len).next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT);
        let mut st = self.state.lock();
        self.submit_locked(&mut st);
        self.map_and_wait(&mut st, &buf.buffer, start..end)?;
        let out = {
            let view = buf
                .buffer
                .get_mapped_range(start..end)
                .map_err(|e| Error::device("read", format!("mapped range unavailable: {e}")))?;
            let skip = (offset - start) as usize;
            view[skip..skip + len as usize].to_vec()
        };
        buf.buffer.unmap();
        drop(st);
        self.take_errors("read")?;
        Ok(out)
    }

    /// Map `range` of `buffer` for reading and wait for all submitted work (and the mapping).
    pub(crate) fn map_and_wait(
        &self,
        st: &mut State,
        buffer: &wgpu::Buffer,
        range: std::ops::Range<u64>,
    ) -> Result<()> {
        let slot: Arc<Mutex<Option<std::result::Result<(), wgpu::BufferAsyncError>>>> =
            Arc::default();
        let s2 = slot.clone();
        buffer.map_async(wgpu::MapMode::Read, range, move |r| *s2.lock() = Some(r));
        self.wait_locked(st)?;
        let mapped = slot.lock().take();
        match mapped {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(Error::device("read", format!("mapping the buffer failed: {e}"))),
            None => Err(Error::device("read", "the GPU never completed the readback")),
        }
    }

    /// Record a device-to-device copy; offsets and length must be multiples of 4.
    pub fn copy(
        &self,
        src: &GpuBuffer,
        src_offset: u64,
        dst: &GpuBuffer,
        dst_offset: u64,
        len: u64,
    ) -> Result<()> {
        if !(src_offset | dst_offset | len).is_multiple_of(4) {
            return Err(Error::invalid(
                "copy",
                format!(
                    "offsets ({src_offset}, {dst_offset}) and length {len} must be multiples of 4"
                ),
            ));
        }
        if len == 0 {
            return Ok(());
        }
        crate::replay::on_copy(self.index, &src.buffer, src_offset, &dst.buffer, dst_offset, len);
        let mut st = self.state.lock();
        st.batch.encoder(&self.device).copy_buffer_to_buffer(
            &src.buffer,
            src_offset,
            &dst.buffer,
            dst_offset,
            len,
        );
        let serial = st.batch.serial;
        src.last_use.store(serial, Ordering::Release);
        dst.last_use.store(serial, Ordering::Release);
        st.batch.bytes += len;
        Ok(())
    }

    pub(crate) fn submit_locked(&self, st: &mut State) {
        self.submit_locked_with(st, true);
    }

    /// Submits the open batch; with `maintain`, then runs the finished submissions' callbacks
    /// (non-blocking poll), recycles what they freed and applies backpressure. A replay's
    /// early submits skip that: more of the run is recorded right after, and its final flush
    /// maintains.
    pub(crate) fn submit_locked_with(&self, st: &mut State, maintain: bool) {
        let batch = &mut st.batch;
        batch.end_pass();
        if batch.encoder.is_none() && batch.arenas.is_empty() && batch.finished.is_empty() {
            return;
        }
        let t0 = std::time::Instant::now();
        for a in &batch.arenas {
            self.queue.write_buffer(&a.buffer, 0, &a.data);
        }
        let encoder = batch.encoder.take().unwrap_or_else(|| {
            self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("mpsrt batch"),
            })
        });
        let serial = batch.serial;
        // Command buffers a parallel replay recorded come first, in order (`replay_par.rs`).
        let mut buffers = std::mem::take(&mut batch.finished);
        let tf = std::time::Instant::now();
        buffers.push(encoder.finish());
        let tq = std::time::Instant::now();
        let index = self.queue.submit(buffers);
        let tq1 = std::time::Instant::now();
        st.timing.finish_ns += (tq - tf).as_nanos() as u64;
        st.timing.queue_submit_ns += (tq1 - tq).as_nanos() as u64;
        let batch = &mut st.batch;
        batch.submitted.push_back((serial, index, batch.bytes.max(1)));
        let done = self.completed.clone();
        let at = self.completed_at.clone();
        self.queue.on_submitted_work_done(move || {
            done.fetch_max(serial, Ordering::AcqRel);
            at.lock().push(serial);
        });
        batch.reset_after_submit();
        batch.retire_arenas(serial);
        batch.serial += 1;
        batch.ops = 0;
        batch.next_check = 0;
        batch.bytes = 0;
        batch.touched = 0;
        let t1 = std::time::Instant::now();
        if !maintain {
            st.timing.submits += 1;
            st.timing.submit_ns += (t1 - t0).as_nanos() as u64;
            return;
        }
        // Non-blocking: run callbacks of finished submissions so their buffers become reusable.
        let _ = self.device.poll(wgpu::PollType::Poll);
        self.reap_locked(st);
        let t2 = std::time::Instant::now();
        st.timing.submits += 1;
        st.timing.submit_ns += (t1 - t0).as_nanos() as u64;
        st.timing.poll_ns += (t2 - t1).as_nanos() as u64;
        // Backpressure: while too many batches or bytes are in flight, wait for the oldest one,
        // but never for the batch just submitted (the GPU always has the next batch queued).
        let max_batches = self.config.max_inflight_batches as usize;
        while st.batch.submitted.len() > 1
            && (st.batch.submitted.len() > max_batches
                || st.batch.inflight_bytes() > self.config.max_inflight_bytes)
        {
            let Some((_, index, _)) = st.batch.submitted.front().cloned() else { break };
            if self
                .device
                .poll(wgpu::PollType::Wait { submission_index: Some(index), timeout: None })
                .is_err()
            {
                break;
            }
            self.reap_locked(st);
            // The completion callback has run by now; drop the entry even if it raced.
            st.batch.submitted.pop_front();
        }
        st.timing.backpressure_ns += t2.elapsed().as_nanos() as u64;
    }

    pub(crate) fn reap_locked(&self, st: &mut State) {
        let c = self.completed.load(Ordering::Acquire);
        st.alloc.reap(c);
        st.batch.reap(c);
        Self::drop_stale_bind_groups(st);
    }

    fn wait_locked(&self, st: &mut State) -> Result<()> {
        let t0 = std::time::Instant::now();
        // Spin on the completion counter first (`MPSRT_SYNC_SPIN_US`): the non-blocking poll
        // runs the submission callbacks that advance `completed`.
        let last = st.batch.serial.saturating_sub(1);
        while self.completed.load(Ordering::Acquire) < last
            && t0.elapsed() < self.config.sync_spin.unwrap_or_default()
        {
            let _ = self.device.poll(wgpu::PollType::Poll);
            std::hint::spin_loop();
        }
        if self.completed.load(Ordering::Acquire) < last {
            st.timing.sync_blocked += 1;
        }
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| {
            Error::device("synchronize", format!("waiting for the GPU failed: {e}"))
        })?;
        self.reap_locked(st);
        st.timing.sync_ns += t0.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// Submit recorded work without waiting.
    pub fn flush(&self) -> Result<()> {
        let mut st = self.state.lock();
        self.submit_locked(&mut st);
        drop(st);
        self.take_errors("flush")
    }

    /// Submit recorded work and block until the GPU has finished all of it.
    pub fn synchronize(&self) -> Result<()> {
        let mut st = self.state.lock();
        self.submit_locked(&mut st);
        self.wait_locked(&mut st)?;
        drop(st);
        self.take_errors("synchronize")
    }

    /// Host-side timing of submissions since the device was opened.
    pub fn submit_timing(&self) -> SubmitTiming {
        self.state.lock().timing
    }

    pub fn memory_stats(&self) -> MemoryStats {
        self.state.lock().alloc.stats()
    }

    /// Release every cached buffer back to the driver (live tensors are untouched).
    pub fn empty_cache(&self) {
        let mut st = self.state.lock();
        self.reap_locked(&mut st);
        st.alloc.empty_cache();
        Self::drop_stale_bind_groups(&mut st);
    }

    pub fn reset_peak_memory(&self) {
        self.state.lock().alloc.reset_peak();
    }
}
