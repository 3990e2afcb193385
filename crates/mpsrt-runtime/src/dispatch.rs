//! Recording one dispatch: argument checks, the metadata slot, the bind group (from
//! `bind_cache` when the pipeline's layout allows) and the pass commands, skipping
//! `set_pipeline` / `set_bind_group` when the open pass already has them bound.
//!
//! This is the eager hot path: a 16-element op spends nearly all of its time here and in
//! wgpu-core, so it avoids per-dispatch allocations on a cache hit.

use crate::bind_cache::{key_hash, BindCacheStats, BufferRange};
use crate::device::{fmt_bytes, Binding, GpuDevice, State};
use crate::pipeline::Pipeline;
use mpsrt_core::{Error, Result};
use std::num::NonZeroU64;
use std::sync::atomic::Ordering;

/// Bytes bound per `max_ops_per_batch` dispatches below which a batch counts as small work.
const SMALL_BATCH_BYTES: u64 = 1 << 20;

/// One dispatch seen by [`capture_launches`]: what `GpuDevice::dispatch` was given, with each
/// binding's buffer named by its address (for the caller to map back to its own tensors).
#[derive(Clone)]
pub struct Launch {
    pub device: usize,
    pub pipeline: Pipeline,
    /// `(address of the GpuBuffer, window)` per storage binding, in order.
    pub bindings: Vec<(usize, Option<(u64, u64)>)>,
    pub meta: Vec<u8>,
    pub workgroups: [u32; 3],
}

thread_local! {
    static CAPTURE: std::cell::RefCell<Option<Vec<Launch>>> = const { std::cell::RefCell::new(None) };
}

/// Run `f` and return, besides its result, the dispatches it recorded on this thread (they are
/// recorded as usual). For a caller that launches the same work many times with other buffers
/// of the same shapes (a framework plugin's eager ops): it can replay a captured launch with
/// `GpuDevice::dispatch` instead of planning it again. Not nestable (an inner capture takes
/// the dispatches).
pub fn capture_launches<R>(f: impl FnOnce() -> R) -> (R, Vec<Launch>) {
    struct Stop;
    impl Drop for Stop {
        fn drop(&mut self) {
            CAPTURE.with(|c| c.borrow_mut().take());
        }
    }
    CAPTURE.with(|c| *c.borrow_mut() = Some(Vec::new()));
    let stop = Stop;
    let r = f();
    let launches = CAPTURE.with(|c| c.borrow_mut().take()).unwrap_or_default();
    drop(stop);
    (r, launches)
}

fn capture_dispatch(
    device: usize,
    pipeline: &Pipeline,
    bindings: &[Binding<'_>],
    meta: &[u8],
    workgroups: [u32; 3],
) {
    CAPTURE.with(|c| {
        if let Some(v) = c.borrow_mut().as_mut() {
            v.push(Launch {
                device,
                pipeline: pipeline.clone(),
                bindings: bindings
                    .iter()
                    .map(|b| (b.buffer as *const crate::GpuBuffer as usize, b.window))
                    .collect(),
                meta: meta.to_vec(),
                workgroups,
            });
        }
    });
}

impl GpuDevice {
    /// Record one dispatch. Storage buffers are bound at 0..n in order; if `meta` is non-empty it
    /// is bound as a uniform at binding n.
    pub fn dispatch(
        &self,
        op: &str,
        pipeline: &Pipeline,
        bindings: &[Binding<'_>],
        meta: &[u8],
        workgroups: [u32; 3],
    ) -> Result<()> {
        let max_wg = self.props.max_compute_workgroups_per_dimension;
        if workgroups.iter().any(|&w| w > max_wg) {
            return Err(Error::invalid(op, format!("dispatch of {workgroups:?} workgroups exceeds the adapter's limit of {max_wg} per dimension")));
        }
        if workgroups.contains(&0) {
            return Ok(());
        }
        let max_bind = self.props.max_storage_buffer_binding_size;
        let align = self.props.min_storage_buffer_offset_alignment as u64;
        for b in bindings {
            let (offset, size) = b.range();
            if size > max_bind {
                return Err(Error::oom(
                    op,
                    format!(
                        "a tensor of {} exceeds the adapter's max_storage_buffer_binding_size of {} ({}); \
                         split the work into smaller tensors",
                        fmt_bytes(size),
                        fmt_bytes(max_bind),
                        self.props.display_name()
                    ),
                ));
            }
            if offset % align != 0 || offset >= b.buffer.binding_size() {
                return Err(Error::invalid(
                    op,
                    format!(
                        "binding window at byte {offset} of a {} buffer is out of range or not \
                         a multiple of min_storage_buffer_offset_alignment ({align})",
                        fmt_bytes(b.buffer.size())
                    ),
                ));
            }
        }
        crate::replay::on_dispatch(self.index(), pipeline, bindings, meta, workgroups);
        capture_dispatch(self.index(), pipeline, bindings, meta, workgroups);
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let serial = st.batch.serial;
        let meta_slot = (!meta.is_empty()).then(|| st.batch.push_meta(&self.device, meta));
        let meta_size = (meta.len() as u64).next_multiple_of(16);
        let ranges = bindings.iter().map(|b| {
            let (o, s) = b.range();
            (&b.buffer.buffer, o, s)
        });
        // A derived layout binds the metadata at a fixed offset: such bind groups are per
        // dispatch, never cached.
        let cacheable = pipeline.dynamic_meta || meta_slot.is_none();
        let meta_key = meta_slot.map(|(arena, _)| (&st.batch.arenas[arena].buffer, meta_size));
        let hash = key_hash(pipeline.layout_id, ranges.clone(), meta_key);
        let fresh;
        let (group, group_id) = match cacheable
            .then(|| st.binds.get(hash, pipeline.layout_id, ranges.clone(), meta_key))
            .flatten()
        {
            Some(f) => (f.group, f.id),
            None => {
                let meta_offset =
                    if pipeline.dynamic_meta { 0 } else { meta_slot.map_or(0, |m| m.1) };
                let mut entries: Vec<wgpu::BindGroupEntry<'_>> = ranges
                    .clone()
                    .enumerate()
                    .map(|(i, (buffer, offset, size))| wgpu::BindGroupEntry {
                        binding: i as u32,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer,
                            offset,
                            size: NonZeroU64::new(size),
                        }),
                    })
                    .collect();
                if let Some((buffer, size)) = meta_key {
                    entries.push(wgpu::BindGroupEntry {
                        binding: bindings.len() as u32,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer,
                            offset: meta_offset,
                            size: NonZeroU64::new(size),
                        }),
                    });
                }
                let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &pipeline.layout,
                    entries: &entries,
                });
                if cacheable {
                    let buffers: Vec<BufferRange> =
                        ranges.map(|(b, o, s)| (b.clone(), o, s)).collect();
                    let meta_owned = meta_key.map(|(b, s)| (b.clone(), s));
                    let f = st.binds.insert(hash, pipeline.layout_id, buffers, meta_owned, group);
                    (f.group, f.id)
                } else {
                    fresh = group;
                    (&fresh, st.binds.uncached_id())
                }
            }
        };
        let (mut bytes, mut touched) = (0, 0);
        for b in bindings {
            b.buffer.last_use.store(serial, Ordering::Release);
            bytes += b.buffer.size();
            touched += b.range().1;
        }
        let dynamic = (pipeline.dynamic_meta && meta_slot.is_some())
            .then(|| meta_slot.map_or(0, |m| m.1 as u32));
        let batch = &mut st.batch;
        if batch.pass.is_none() {
            batch.end_pass();
        }
        let rebind_pipeline = batch.bound_pipeline != pipeline.id;
        let rebind_group = batch.bound_group != Some((group_id, dynamic));
        let pass = batch.pass(&self.device);
        if rebind_pipeline {
            pass.set_pipeline(&pipeline.pipeline);
        }
        if rebind_group {
            pass.set_bind_group(0, group, dynamic.as_slice());
        }
        pass.dispatch_workgroups(workgroups[0], workgroups[1], workgroups[2]);
        batch.bound_pipeline = pipeline.id;
        batch.bound_group = Some((group_id, dynamic));
        batch.ops += 1;
        batch.bytes += bytes;
        batch.touched += touched;
        st.timing.dispatches += 1;
        if st.batch.bytes >= self.config.max_bytes_per_batch || self.batch_full_locked(st) {
            self.submit_locked(st);
        }
        Ok(())
    }

    /// Whether the open batch has dispatches enough to submit. At each multiple of
    /// `max_ops_per_batch` it goes, unless its work is small (under [`SMALL_BATCH_BYTES`] bound
    /// per `max_ops_per_batch` dispatches: tiny eager ops, whose GPU time is per-dispatch
    /// overhead) or the GPU still has two batches queued (a non-blocking poll refreshes what
    /// has completed; behind them an earlier submit would not start the GPU sooner); such a
    /// batch grows up to `max_ops_per_long_batch`. Each submit costs the host a fixed share
    /// (wgpu-core, the driver): on the 2-core dev VM with lavapipe, tiny eager Paddle adds cost
    /// ~3 µs less with 512 dispatches per batch than with 64. A sync submits whatever is open.
    pub(crate) fn batch_full_locked(&self, st: &mut State) -> bool {
        let ops = st.batch.ops;
        let soft = self.config.max_ops_per_batch;
        if ops >= self.config.max_ops_per_long_batch.max(soft) {
            return true;
        }
        if ops < st.batch.next_check.max(soft) {
            return false;
        }
        let small = st.batch.touched < SMALL_BATCH_BYTES * (ops / soft) as u64;
        if !small && st.batch.submitted.len() >= 2 {
            let _ = self.device.poll(wgpu::PollType::Poll);
            self.reap_locked(st);
        }
        if small || st.batch.submitted.len() >= 2 {
            st.batch.next_check = ops - ops % soft + soft;
            return false;
        }
        true
    }

    /// Counters of the bind-group cache since the device was opened.
    pub fn bind_cache_stats(&self) -> BindCacheStats {
        self.state.lock().binds.stats()
    }
}
