//! Capture and replay of a recorded run (issue 22): the engine runs a plan's steps once with
//! capture on, and every later run of that plan replays the recorded commands — a tight loop of
//! `set_pipeline` / `set_bind_group` / `dispatch` over a prepared list — instead of running each
//! op's host logic (shape checks, window planning, metadata, pipeline and bind-group lookups,
//! allocation) again.
//!
//! What makes a replay valid:
//! - **Buffers are stable.** While a thread captures, buffers it allocates are *owned* by the
//!   capture; when such a buffer is freed during the capture it goes to the capture's own pool
//!   (reused by the capture's later allocations, as the caching allocator would: the plan keeps
//!   its liveness reuse) instead of the allocator, and at the end the recording owns the pool.
//!   Every other buffer a recorded command touches must be handed to [`GpuDevice::end_capture`]
//!   in `keep` (constants, persistent values, input slots, outputs): the recording holds those
//!   alive. So nobody else can ever be handed a buffer the recording writes or reads.
//! - **Host data is constant.** A capture that reads GPU data on the host is refused (its host
//!   logic could depend on the data); everything else the host computes is a function of the plan
//!   (shapes, constants, attributes), so uploads are recorded with their bytes and replayed as
//!   copies from one staging buffer, in order.
//! - **Metadata is constant.** Each dispatch's metadata block is stored once in the recording's
//!   own uniform buffer, and bind groups over it are created once, at the end of the capture.
//!
//! A capture is per thread (a thread-local), so other threads' work on the same device is
//! neither recorded nor disturbed.

mod early;
mod hugepages;
#[cfg(native_vk)]
mod native;
#[cfg(native_vk)]
mod native_rec;
#[cfg(native_vk)]
pub(crate) use native::NativeSlot;
mod native_desc;
#[cfg(not(native_vk))]
pub(crate) use native_desc::NativeSlot;
pub(crate) use native_desc::{GroupDesc, LayoutKind, Meta};

use crate::device::{Binding, GpuBuffer, GpuDevice};
use crate::pipeline::Pipeline;
pub(crate) use early::{now_ns, Completions};
pub use hugepages::{collapse_heap, hugepages_pass, HugePages};
use mpsrt_core::{Error, Result};
use rustc_hash::{FxHashMap, FxHashSet};
use std::cell::RefCell;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const OP: &str = "replay";
/// Alignment of metadata blocks in the recording's uniform buffer (the largest
/// `min_uniform_buffer_offset_alignment` WebGPU allows).
const META_ALIGN: u64 = 256;

struct CapturedDispatch {
    pipeline: Pipeline,
    bindings: Vec<(wgpu::Buffer, u64, u64)>,
    meta: Vec<u8>,
    workgroups: [u32; 3],
    bytes: u64,
}

enum Captured {
    Dispatch(CapturedDispatch),
    Copy { src: wgpu::Buffer, src_offset: u64, dst: wgpu::Buffer, dst_offset: u64, len: u64 },
    Write { dst: wgpu::Buffer, offset: u64, data: Vec<u8> },
}

struct Active {
    device: usize,
    ops: Vec<Captured>,
    /// Buffers allocated by this capture.
    owned: FxHashSet<wgpu::Buffer>,
    /// Owned buffers freed during the capture: (buffer, size class, last use).
    pool: Vec<(wgpu::Buffer, u64, u64)>,
    /// Why the capture cannot be replayed (the first reason found).
    refused: Option<String>,
}

thread_local! {
    static ACTIVE: RefCell<Option<Active>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's capture of `device`, if any.
fn with_active<R>(device: usize, f: impl FnOnce(&mut Active) -> R) -> Option<R> {
    ACTIVE
        .try_with(|a| {
            let mut a = a.try_borrow_mut().ok()?;
            let a = a.as_mut().filter(|a| a.device == device)?;
            Some(f(a))
        })
        .ok()
        .flatten()
}

/// Allocation hook: a buffer of at least `class` bytes from the capture's pool (best fit up to
/// 25% larger, as the allocator), with its size class and last use.
pub(crate) fn on_alloc(device: usize, class: u64) -> Option<(wgpu::Buffer, u64, u64)> {
    with_active(device, |a| {
        let limit = class.saturating_add(class / 4);
        let best = a
            .pool
            .iter()
            .enumerate()
            .filter(|(_, p)| p.1 >= class && p.1 <= limit)
            .min_by_key(|(_, p)| p.1)
            .map(|(i, _)| i)?;
        Some(a.pool.swap_remove(best))
    })
    .flatten()
}

/// Allocation hook: `buffer` was handed out by the allocator to this thread.
pub(crate) fn on_alloc_new(device: usize, buffer: &wgpu::Buffer) {
    with_active(device, |a| a.owned.insert(buffer.clone()));
}

/// Release hook: an owned buffer goes to the capture's pool (returns `None`); any other comes
/// back to be released normally.
pub(crate) fn on_release(
    device: usize,
    buffer: wgpu::Buffer,
    class: u64,
    last_use: u64,
) -> Option<(wgpu::Buffer, u64, u64)> {
    let mut back = Some((buffer, class, last_use));
    with_active(device, |a| {
        if back.as_ref().is_some_and(|b| a.owned.contains(&b.0)) {
            a.pool.extend(back.take());
        }
    });
    back
}

pub(crate) fn on_dispatch(
    device: usize,
    pipeline: &Pipeline,
    bindings: &[Binding<'_>],
    meta: &[u8],
    workgroups: [u32; 3],
) {
    with_active(device, |a| {
        a.ops.push(Captured::Dispatch(CapturedDispatch {
            pipeline: pipeline.clone(),
            bindings: bindings
                .iter()
                .map(|b| {
                    let (o, s) = b.range();
                    (b.buffer.buffer.clone(), o, s)
                })
                .collect(),
            meta: meta.to_vec(),
            workgroups,
            bytes: bindings.iter().map(|b| b.buffer.size()).sum(),
        }))
    });
}

pub(crate) fn on_copy(
    device: usize,
    src: &wgpu::Buffer,
    src_offset: u64,
    dst: &wgpu::Buffer,
    dst_offset: u64,
    len: u64,
) {
    with_active(device, |a| {
        a.ops.push(Captured::Copy {
            src: src.clone(),
            src_offset,
            dst: dst.clone(),
            dst_offset,
            len,
        })
    });
}

pub(crate) fn on_write(device: usize, dst: &wgpu::Buffer, offset: u64, data: &[u8]) {
    with_active(device, |a| {
        let mut data = data.to_vec();
        data.resize(data.len().next_multiple_of(4), 0);
        a.ops.push(Captured::Write { dst: dst.clone(), offset, data })
    });
}

/// Read hook: host logic that looks at GPU data cannot be replayed.
pub(crate) fn on_read(device: usize) {
    with_active(device, |a| {
        a.refused.get_or_insert_with(|| "a step reads GPU data on the host".to_string());
    });
}

/// A capture set aside while the thread runs work that must not be recorded
/// ([`GpuDevice::suspend_capture`]).
pub struct Suspended(Option<Active>);

/// One prepared command of a recording.
pub(crate) enum Cmd {
    Dispatch { pipeline: usize, group: usize, dynamic: Option<u32>, workgroups: [u32; 3] },
    Copy { src: wgpu::Buffer, src_offset: u64, dst: wgpu::Buffer, dst_offset: u64, len: u64 },
}

/// What a replay's open compute pass has bound, so consecutive dispatches of one pipeline or
/// one bind group do not set it again. Shared by the serial replay (`replay_inline`) and the
/// parallel one (`replay_par::record_part`).
pub(crate) struct PassBinding {
    pipeline: u64,
    group: usize,
    dynamic: Option<u32>,
}

impl PassBinding {
    /// Nothing bound (a new pass, or the open pass after a copy ended it).
    pub(crate) const NONE: PassBinding =
        PassBinding { pipeline: 0, group: usize::MAX, dynamic: None };

    /// Records one `Cmd::Dispatch` of `rec` into `pass`.
    pub(crate) fn dispatch(
        &mut self,
        pass: &mut wgpu::ComputePass<'static>,
        rec: &Recording,
        pipeline: usize,
        group: usize,
        dynamic: Option<u32>,
        workgroups: [u32; 3],
    ) {
        let (p, id) = &rec.pipelines[pipeline];
        if self.pipeline != *id {
            pass.set_pipeline(p);
            self.pipeline = *id;
        }
        if self.group != group || self.dynamic != dynamic {
            pass.set_bind_group(0, &rec.groups[group], dynamic.as_slice());
            self.group = group;
            self.dynamic = dynamic;
        }
        pass.dispatch_workgroups(workgroups[0], workgroups[1], workgroups[2]);
    }

    /// The pipeline bound last (0 if none).
    pub(crate) fn pipeline(&self) -> u64 {
        self.pipeline
    }
}

/// A captured run, ready to replay with [`GpuDevice::replay`]. Owns the intermediate buffers
/// of the run and holds every other buffer it touches alive; dropping it gives the buffers back
/// to the allocator.
pub struct Recording {
    device: Arc<GpuDevice>,
    pub(crate) cmds: Vec<Cmd>,
    pub(crate) pipelines: Vec<(wgpu::ComputePipeline, u64)>,
    pub(crate) groups: Vec<wgpu::BindGroup>,
    /// Per pipeline and per group: what a native replay (`replay/native*.rs`) rebuilds them from.
    #[cfg_attr(not(native_vk), allow(dead_code))]
    pub(crate) natives: Vec<Pipeline>,
    #[cfg_attr(not(native_vk), allow(dead_code))]
    pub(crate) group_desc: Vec<GroupDesc>,
    #[cfg(native_vk)]
    native: parking_lot::Mutex<native_rec::NativeState>,
    /// Metadata blocks and write payloads: referenced by the bind groups and copies.
    #[cfg_attr(not(native_vk), allow(dead_code))]
    pub(crate) meta: Option<wgpu::Buffer>,
    _staging: Option<wgpu::Buffer>,
    pool: Vec<(wgpu::Buffer, u64)>,
    keep: Vec<Arc<GpuBuffer>>,
    bytes: u64,
    dispatches: usize,
    /// Serial of the batch the last replay was recorded into.
    last_serial: AtomicU64,
    /// The last full replay's early parts and the GPU time per command learnt from them.
    early: parking_lot::Mutex<early::EarlyLog>,
}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording")
            .field("dispatches", &self.dispatches)
            .field("commands", &self.cmds.len())
            .field("bind_groups", &self.groups.len())
            .field("owned_buffers", &self.pool.len())
            .finish()
    }
}

impl Recording {
    /// Dispatches one replay records.
    pub fn dispatches(&self) -> usize {
        self.dispatches
    }
    /// Commands (dispatches and copies) one replay records.
    pub fn commands(&self) -> usize {
        self.cmds.len()
    }
    /// Bytes of the intermediate buffers the recording owns.
    pub fn owned_bytes(&self) -> u64 {
        self.pool.iter().map(|p| p.1).sum()
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let serial = self.last_serial.load(Ordering::Acquire);
        #[cfg(native_vk)]
        self.native_wait(serial);

        for (buffer, class) in self.pool.drain(..) {
            self.device.release(buffer, class, serial);
        }
    }
}

impl GpuDevice {
    /// Starts capturing this thread's work on this device (see the module docs). Fails if the
    /// thread is already capturing.
    pub fn begin_capture(&self) -> Result<()> {
        ACTIVE.with(|a| {
            let mut a = a.borrow_mut();
            if a.is_some() {
                return Err(Error::invalid(OP, "this thread is already capturing"));
            }
            *a = Some(Active {
                device: self.index(),
                ops: Vec::new(),
                owned: FxHashSet::default(),
                pool: Vec::new(),
                refused: None,
            });
            Ok(())
        })
    }

    fn take_active(&self) -> Option<Active> {
        let a = ACTIVE.with(|a| a.borrow_mut().take())?;
        if a.device != self.index() {
            ACTIVE.with(|slot| *slot.borrow_mut() = Some(a));
            return None;
        }
        Some(a)
    }

    /// Commands captured so far on this thread (the index the next one will have in the
    /// recording), or `None` without a capture.
    pub fn captured_len(&self) -> Option<usize> {
        with_active(self.index(), |a| a.ops.len())
    }

    /// Sets this thread's capture aside: what runs until [`GpuDevice::resume_capture`] is
    /// recorded into the batch as usual but not captured, and allocates from the allocator.
    pub fn suspend_capture(&self) -> Suspended {
        Suspended(self.take_active())
    }

    /// Puts a capture set aside by [`GpuDevice::suspend_capture`] back.
    pub fn resume_capture(&self, s: Suspended) {
        if let Some(a) = s.0 {
            ACTIVE.with(|slot| *slot.borrow_mut() = Some(a));
        }
    }

    /// Ends this thread's capture and throws it away (the pooled buffers go back to the
    /// allocator).
    pub fn abort_capture(&self) {
        if let Some(a) = self.take_active() {
            for (b, class, last) in a.pool {
                self.release(b, class, last);
            }
        }
    }

    /// Ends this thread's capture and prepares it for replay. `keep` must hold every buffer the
    /// captured commands touch that was not allocated and freed during the capture (the
    /// recording keeps them alive). An error says why the run cannot be replayed; the capture is
    /// then discarded.
    // wgpu handles hash and compare by id; their interior mutability does not change that.
    #[allow(clippy::mutable_key_type)]
    pub fn end_capture(&self, keep: Vec<Arc<GpuBuffer>>) -> Result<Recording> {
        let Some(a) = self.take_active() else {
            return Err(Error::invalid(OP, "no capture is active on this thread"));
        };
        let pool: Vec<(wgpu::Buffer, u64)> = a.pool.iter().map(|p| (p.0.clone(), p.1)).collect();
        let pool_last = a.pool.iter().map(|p| p.2).max().unwrap_or(0);
        let release = |pool: Vec<(wgpu::Buffer, u64)>| {
            for (b, class) in pool {
                self.release(b, class, pool_last);
            }
        };
        if let Some(why) = a.refused {
            release(pool);
            return Err(Error::unsupported(OP, why));
        }
        let mut known: FxHashSet<&wgpu::Buffer> = pool.iter().map(|p| &p.0).collect();
        known.extend(keep.iter().map(|k| &k.buffer));
        let touched = a.ops.iter().flat_map(|op| -> Vec<&wgpu::Buffer> {
            match op {
                Captured::Dispatch(d) => d.bindings.iter().map(|b| &b.0).collect(),
                Captured::Copy { src, dst, .. } => vec![src, dst],
                Captured::Write { dst, .. } => vec![dst],
            }
        });
        if touched.into_iter().any(|b| !known.contains(b)) {
            drop(known);
            release(pool);
            return Err(Error::unsupported(
                OP,
                "a step touches a buffer that outlives the run and is not held by the plan",
            ));
        }
        drop(known);
        let rec = self.prepare(a.ops, pool, keep);
        self.take_errors(OP)?;
        // The plan's objects exist now: their memory into huge pages (opt-in, once).
        hugepages::once();
        Ok(rec)
    }

    /// Builds the recording's uniform and staging buffers, bind groups and command list.
    #[allow(clippy::mutable_key_type)] // keys compare wgpu buffers by id
    fn prepare(
        &self,
        ops: Vec<Captured>,
        pool: Vec<(wgpu::Buffer, u64)>,
        keep: Vec<Arc<GpuBuffer>>,
    ) -> Recording {
        // Metadata blocks (equal blocks share a slot) and write payloads, laid out once.
        let mut meta_bytes: Vec<u8> = Vec::new();
        let mut meta_at: FxHashMap<Vec<u8>, u64> = FxHashMap::default();
        let mut staging_bytes: Vec<u8> = Vec::new();
        for op in &ops {
            match op {
                Captured::Dispatch(d) if !d.meta.is_empty() => {
                    meta_at.entry(d.meta.clone()).or_insert_with(|| {
                        let off = meta_bytes.len() as u64;
                        meta_bytes.extend_from_slice(&d.meta);
                        meta_bytes.resize(
                            (off + d.meta.len() as u64).next_multiple_of(META_ALIGN) as usize,
                            0,
                        );
                        off
                    });
                }
                Captured::Write { data, .. } => staging_bytes.extend_from_slice(data),
                _ => {}
            }
        }
        let meta = (!meta_bytes.is_empty()).then(|| {
            let b = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("mpsrt replay meta"),
                size: meta_bytes.len() as u64,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            self.queue.write_buffer(&b, 0, &meta_bytes);
            b
        });
        let staging = (!staging_bytes.is_empty()).then(|| {
            let b = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("mpsrt replay uploads"),
                size: staging_bytes.len() as u64,
                usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            self.queue.write_buffer(&b, 0, &staging_bytes);
            b
        });
        let mut pipelines: Vec<(wgpu::ComputePipeline, u64)> = Vec::new();
        let (mut natives, mut group_desc) = (Vec::new(), Vec::new());
        let mut pipeline_at: FxHashMap<u64, usize> = FxHashMap::default();
        let mut groups: Vec<wgpu::BindGroup> = Vec::new();
        // (layout, storage ranges, fixed meta offset or dynamic) → group index.
        type GroupKey = (u64, Vec<(wgpu::Buffer, u64, u64)>, u64, Option<u64>);
        let mut group_at: FxHashMap<GroupKey, usize> = FxHashMap::default();
        let mut cmds = Vec::with_capacity(ops.len());
        let mut staged = 0u64;
        let mut bytes = 0u64;
        let mut dispatches = 0;
        for op in ops {
            match op {
                Captured::Dispatch(d) => {
                    let dp = &d.pipeline;
                    let p = *pipeline_at.entry(dp.id).or_insert_with(|| {
                        pipelines.push((dp.pipeline.clone(), dp.id));
                        natives.push(dp.clone());
                        pipelines.len() - 1
                    });
                    let meta_off = (!d.meta.is_empty()).then(|| meta_at[d.meta.as_slice()]);
                    let meta_size = (d.meta.len() as u64).next_multiple_of(16);
                    let fixed = meta_off.filter(|_| !dp.dynamic_meta);
                    let key: GroupKey = (dp.layout_id, d.bindings.clone(), meta_size, fixed);
                    let g = match group_at.get(&key) {
                        Some(&g) => g,
                        None => {
                            let mut entries: Vec<wgpu::BindGroupEntry<'_>> = d
                                .bindings
                                .iter()
                                .enumerate()
                                .map(|(i, (buffer, offset, size))| wgpu::BindGroupEntry {
                                    binding: i as u32,
                                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                        buffer,
                                        offset: *offset,
                                        size: NonZeroU64::new(*size),
                                    }),
                                })
                                .collect();
                            if let (Some(off), Some(buffer)) = (meta_off, meta.as_ref()) {
                                entries.push(wgpu::BindGroupEntry {
                                    binding: d.bindings.len() as u32,
                                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                                        buffer,
                                        offset: if dp.dynamic_meta { 0 } else { off },
                                        size: NonZeroU64::new(meta_size),
                                    }),
                                });
                            }
                            groups.push(self.device.create_bind_group(
                                &wgpu::BindGroupDescriptor {
                                    label: Some("mpsrt replay"),
                                    layout: &dp.layout,
                                    entries: &entries,
                                },
                            ));
                            let meta = match meta_off {
                                None => Meta::None,
                                Some(_) if dp.dynamic_meta => Meta::Dynamic,
                                Some(_) => Meta::Fixed,
                            };
                            group_desc.push(GroupDesc {
                                storage: d.bindings.clone(),
                                meta: meta_off.map(|o| (fixed.map_or(0, |_| o), meta_size)),
                                kind: LayoutKind { storage: d.bindings.len() as u32, meta },
                            });
                            group_at.insert(key, groups.len() - 1);
                            groups.len() - 1
                        }
                    };
                    let dynamic = meta_off.filter(|_| dp.dynamic_meta).map(|o| o as u32);
                    cmds.push(Cmd::Dispatch {
                        pipeline: p,
                        group: g,
                        dynamic,
                        workgroups: d.workgroups,
                    });
                    bytes += d.bytes;
                    dispatches += 1;
                }
                Captured::Copy { src, src_offset, dst, dst_offset, len } => {
                    cmds.push(Cmd::Copy { src, src_offset, dst, dst_offset, len });
                    bytes += len;
                }
                Captured::Write { dst, offset, data } => {
                    let len = data.len() as u64;
                    if let Some(s) = &staging {
                        cmds.push(Cmd::Copy {
                            src: s.clone(),
                            src_offset: staged,
                            dst,
                            dst_offset: offset,
                            len,
                        });
                    }
                    staged += len;
                    bytes += len;
                }
            }
        }
        Recording {
            device: self.arc(),
            cmds,
            pipelines,
            groups,
            natives,
            group_desc,
            #[cfg(native_vk)]
            native: parking_lot::Mutex::new(native_rec::NativeState::Untried),
            meta,
            _staging: staging,
            pool,
            keep,
            bytes,
            dispatches,
            last_serial: AtomicU64::new(0),
            early: parking_lot::Mutex::default(),
        }
    }

    /// Sets the commands a serial replay records before its first early submit (0: off; then
    /// parts of twice as many; see `MPSRT_REPLAY_EARLY`). Overrides the environment for this
    /// device.
    pub fn set_replay_early(&self, commands: usize) {
        self.replay_early.store(commands, Ordering::Relaxed);
    }

    /// The setting of [`GpuDevice::set_replay_early`].
    pub fn replay_early(&self) -> usize {
        self.replay_early.load(Ordering::Relaxed)
    }

    /// Sets how the early parts after the first grow (`growth`, at least 2) and how many early
    /// submits one replay makes at most (`MPSRT_REPLAY_EARLY_GROWTH` / `MPSRT_REPLAY_EARLY_MAX`).
    pub fn set_replay_early_growth(&self, growth: usize, max_submits: usize) {
        self.replay_early_growth.store(growth.max(2), Ordering::Relaxed);
        self.replay_early_max.store(max_submits, Ordering::Relaxed);
    }

    /// Whether early parts after the first are sized from the GPU's queued work, learnt from the
    /// recording's previous replay (`MPSRT_REPLAY_EARLY_ADAPT`; off: they grow by `growth`).
    pub fn set_replay_early_adapt(&self, on: bool) {
        self.replay_early_adapt.store(on, Ordering::Relaxed);
    }

    /// The setting of [`GpuDevice::set_replay_early_adapt`].
    pub fn replay_early_adapt(&self) -> bool {
        self.replay_early_adapt.load(Ordering::Relaxed)
    }

    /// `(growth, max_submits)` of [`GpuDevice::set_replay_early_growth`].
    pub fn replay_early_growth(&self) -> (usize, usize) {
        (
            self.replay_early_growth.load(Ordering::Relaxed),
            self.replay_early_max.load(Ordering::Relaxed),
        )
    }

    /// Records one replay of `rec` into the open batch, in order after everything recorded
    /// so far (not submitted: call [`GpuDevice::flush`]). The caller must not let two replays
    /// of one recording interleave with each other's input and output copies.
    pub fn replay(&self, rec: &Recording) -> Result<()> {
        self.replay_range(rec, 0..rec.cmds.len())
    }

    /// [`GpuDevice::replay`] of the commands `range` only (the engine runs steps that depend
    /// on host data between ranges).
    pub fn replay_range(&self, rec: &Recording, range: std::ops::Range<usize>) -> Result<()> {
        let Some(cmds) = rec.cmds.get(range.clone()) else {
            return Err(Error::invalid(
                OP,
                format!("commands {range:?} of a recording of {}", rec.cmds.len()),
            ));
        };
        if !Arc::ptr_eq(&rec.device, &self.arc()) {
            return Err(Error::invalid(OP, "the recording belongs to another device"));
        }
        let t0 = std::time::Instant::now();
        // Native Vulkan command buffer of this range (built outside the device lock).
        #[cfg(native_vk)]
        let native = rec.native_segment(range.clone());
        #[cfg(not(native_vk))]
        let native: Option<std::convert::Infallible> = None;
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let (threads, chunk) = self.replay_split();
        let parts = crate::replay_par::split(cmds.len(), threads, chunk);
        // Dispatches submitted early (serial replays only; see below).
        let mut early = 0;
        let dispatches = if let Some(cb) = native {
            // One pre-recorded command buffer for the whole range: no per-command host work.
            self.execute_native(&mut st.batch, rec, range.clone(), cb)?;
            cmds.iter().filter(|c| matches!(c, Cmd::Dispatch { .. })).count()
        } else if parts.len() > 1 {
            // Long replays: each part recorded (and encoded by wgpu-core) on its own thread
            // into its own command buffer, submitted in order after what the batch has so far.
            let batch = &mut st.batch;
            batch.end_pass();
            if let Some(enc) = batch.encoder.take() {
                batch.finished.push(enc.finish());
            }
            let (buffers, dispatches) = crate::replay_par::record(&self.device, rec, cmds, &parts)?;
            st.timing.replay_parts += buffers.len() as u64;
            batch.finished.extend(buffers);
            dispatches
        } else {
            // Early submits: parts of `early`, 2·`early`, … commands go to the GPU as soon as
            // they are recorded (with what the batch held before them), so the GPU runs the
            // first layers while the host records the rest; the rest stays in the open batch.
            // Only while the GPU has nothing else queued (a latency-bound run): behind earlier
            // work the extra submits would only cost host time.
            let idle = self.completed.load(Ordering::Acquire) + 1 >= st.batch.serial;
            let first = if idle { self.replay_early.load(Ordering::Relaxed) } else { 0 };
            let (growth, max) = self.replay_early_growth();
            // Sized to the GPU's queued work (`replay/early.rs`) for whole replays; ranges
            // between live steps double.
            let whole = range.start == 0 && range.end == rec.cmds.len();
            let adapt = whole && first > 0 && self.replay_early_adapt.load(Ordering::Relaxed);
            let gpu_ns = if adapt {
                let mut log = rec.early.lock();
                if let Some(at) = self.completed_at.lock().at(log.serial) {
                    log.learn(at);
                }
                log.gpu_ns
            } else {
                0.0
            };
            // With `MPSRT_REPLAY_TAIL` threads, the last commands are recorded and finished on
            // those threads meanwhile (`replay_par::tail`), to be submitted after the head.
            // Whole replays only: a range between live steps is short.
            // Whole replays only (a range between live steps is short), and not where the GPU
            // takes far longer per command than the host (batch 32: the head alone keeps it fed).
            let (tail_threads, tail_pct, tail_min) = self.replay_tail();
            let latency_bound = gpu_ns <= 0.0 || gpu_ns < crate::replay_par::TAIL_MAX_GPU_NS;
            let tail_threads = if whole && latency_bound { tail_threads } else { 0 };
            let (head_len, tails) =
                crate::replay_par::tail_split(cmds.len(), tail_threads, tail_pct, tail_min);
            let device = &self.device;
            let (n, tails) = crate::replay_par::with_tail(device, rec, cmds, &tails, || {
                let head = &cmds[..head_len];
                let start = now_ns();
                let mut plan = early::EarlyPlan::new(head.len(), first, growth, max, gpu_ns, start);
                let mut log = Vec::new();
                let mut done = 0;
                while let Some(part) = plan.part(done) {
                    let n = Self::replay_inline(
                        &self.device,
                        &mut st.batch,
                        rec,
                        &head[done..done + part],
                    );
                    early += n;
                    st.batch.ops += n;
                    let (ts, q0) = (std::time::Instant::now(), st.timing.queue_submit_ns);
                    self.submit_locked_with(st, false);
                    st.timing.replay_early_submits += 1;
                    st.timing.early_submit_ns += ts.elapsed().as_nanos() as u64;
                    let now = now_ns();
                    log.push((now, cmds.len() - done));
                    done += part;
                    plan.submitted(part, done, now, st.timing.queue_submit_ns - q0);
                }
                if adapt && !log.is_empty() {
                    // The last part goes with the run's final submit, just after this.
                    log.push((now_ns(), cmds.len() - done));
                    let mut l = rec.early.lock();
                    l.parts = log;
                    l.serial = st.batch.serial;
                }
                Self::replay_inline(&self.device, &mut st.batch, rec, &head[done..])
            });
            n + crate::replay_par::join_tail(st, tails)?
        };
        // The batch the last commands went into (later than any early submit's).
        let serial = st.batch.serial;
        let batch = &mut st.batch;
        batch.ops += dispatches;
        if range.start == 0 {
            batch.bytes += rec.bytes;
        }
        for k in &rec.keep {
            k.last_use.store(serial, Ordering::Release);
        }
        rec.last_serial.store(serial, Ordering::Release);
        st.timing.dispatches += (early + dispatches) as u64;
        st.timing.replays += 1;
        st.timing.replay_ns += t0.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// Records `cmds` into the batch's open pass (and its encoder for copies); returns the
    /// dispatches recorded.
    fn replay_inline(
        device: &wgpu::Device,
        batch: &mut crate::batch::Batch,
        rec: &Recording,
        cmds: &[Cmd],
    ) -> usize {
        if batch.pass.is_none() {
            batch.end_pass();
        }
        let mut bound = PassBinding::NONE;
        let mut dispatches = 0;
        for cmd in cmds {
            match cmd {
                Cmd::Dispatch { pipeline, group, dynamic, workgroups } => {
                    let pass = batch.pass(device);
                    bound.dispatch(pass, rec, *pipeline, *group, *dynamic, *workgroups);
                    dispatches += 1;
                }
                Cmd::Copy { src, src_offset, dst, dst_offset, len } => {
                    batch.encoder(device).copy_buffer_to_buffer(
                        src,
                        *src_offset,
                        dst,
                        *dst_offset,
                        *len,
                    );
                    bound = PassBinding::NONE;
                }
            }
        }
        // The pass stays open for the next dispatch; what it has bound now is a group of ours,
        // unknown to the bind cache, so the next eager dispatch binds its own.
        if batch.pass.is_some() {
            batch.bound_pipeline = bound.pipeline();
        }
        batch.bound_group = None;
        dispatches
    }
}
