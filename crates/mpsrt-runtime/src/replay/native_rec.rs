//! Native Vulkan replay, recording side (issue 22): a [`Recording`]'s commands of one range
//! (the whole plan, or each segment between a plan's live steps) are prepared once, at the
//! range's first native replay, as a list of Vulkan commands — pipelines from `native.rs`,
//! descriptor sets from a per-recording pool pointing at the same buffers, offsets and sizes as
//! the wgpu bind groups, and the barriers the hazards call for. Every replay then appends a
//! command buffer of its own (`GpuDevice::execute_native`; wgpu-core forbids mixing its
//! encoding API with raw commands in one encoder) that either executes a secondary command
//! buffer (`SIMULTANEOUS_USE`) recorded once from the list — the default — or gets the list
//! emitted into it (`MPSRT_REPLAY_NATIVE=direct`: a few Vulkan calls per command).
//!
//! Synchronisation, since wgpu-core does not know what these commands touch:
//! - each range starts with a barrier making every earlier write of the queue (uploads,
//!   wgpu's input copies, `queue.write_buffer` in an earlier command buffer) visible, and ends
//!   with one making its writes visible to, and its reads finished before, everything after;
//! - inside, a compute/transfer memory barrier goes before a command that reads a byte range
//!   written, or writes a range read or written, since the last barrier — as safe as wgpu's
//!   per-dispatch usage scopes, and independent steps run without one.
//!
//! Lifetime: the lists and buffers refer to the recording's wgpu buffers (it owns or holds all
//! of them); the recording waits for its last submission before this state is dropped
//! (`Recording::drop`).

use super::native::NativeDevice;
use super::{Cmd, Meta, Recording};
use ash::vk;
use std::ops::Range;
use std::sync::Arc;
use wgpu::hal::api::Vulkan;

/// Most command ranges one recording keeps native buffers for (a plan's ranges are fixed: one,
/// or one per segment between live steps).
const MAX_SEGMENTS: usize = 64;

/// A recording's native side.
pub(crate) enum NativeState {
    /// Not built yet (built at the first replay with the switch on).
    Untried,
    Ready(NativeRec),
    /// Why this recording keeps the wgpu replay; command buffers recorded before it declined
    /// may still be in flight, so they are kept until the recording drops.
    Declined {
        why: String,
        _kept: Option<NativeRec>,
    },
}

pub(crate) struct NativeRec {
    dev: Arc<NativeDevice>,
    cmd_pool: vk::CommandPool,
    desc_pool: vk::DescriptorPool,
    sets: Vec<vk::DescriptorSet>,
    segments: Vec<Segment>,
    /// Barriers recorded into the segments (for the status line and tests).
    pub barriers: usize,
}

fn raw_buffer(b: &wgpu::Buffer) -> Result<vk::Buffer, String> {
    // SAFETY: the handle is only recorded into command buffers while the recording holds `b`
    // (and waits for the GPU before letting it go); it is never destroyed here.
    unsafe { b.as_hal::<Vulkan>() }
        .map(|h| unsafe { h.raw_handle() })
        .ok_or_else(|| "a buffer is not a Vulkan buffer".to_string())
}

/// One access of a command: (buffer, start, end) and whether it writes.
type Access = ((vk::Buffer, u64, u64), bool);

/// Byte ranges read and written since the last barrier: (buffer, start, end).
#[derive(Default)]
struct Hazards {
    reads: Vec<(vk::Buffer, u64, u64)>,
    writes: Vec<(vk::Buffer, u64, u64)>,
    barriers: usize,
}

fn overlaps(a: &(vk::Buffer, u64, u64), b: &(vk::Buffer, u64, u64)) -> bool {
    a.0 == b.0 && a.1 < b.2 && b.1 < a.2
}

impl Hazards {
    /// Whether accesses `acc` (range, write) must wait for what came before.
    fn conflicts(&self, acc: &[Access]) -> bool {
        acc.iter().any(|(r, w)| {
            self.writes.iter().any(|x| overlaps(x, r))
                || (*w && self.reads.iter().any(|x| overlaps(x, r)))
        })
    }
    /// A barrier into `list` before accesses `acc` if they conflict with those since the last
    /// one; then `acc` joins them.
    fn guard(&mut self, list: &mut Vec<NCmd>, acc: &[Access]) {
        if self.conflicts(acc) {
            list.push(NCmd::Barrier((WORK, WORK_WRITE), (WORK, WORK_ACCESS)));
            self.barriers += 1;
            self.reads.clear();
            self.writes.clear();
        }
        self.add(acc);
    }

    fn add(&mut self, acc: &[Access]) {
        for (r, w) in acc {
            if *w {
                self.writes.push(*r)
            } else {
                self.reads.push(*r)
            }
        }
    }
}

/// Records a global memory barrier into `cb`.
///
/// # Safety
/// `cb` is a command buffer of `raw` in the recording state.
unsafe fn barrier(
    raw: &ash::Device,
    cb: vk::CommandBuffer,
    src: (vk::PipelineStageFlags, vk::AccessFlags),
    dst: (vk::PipelineStageFlags, vk::AccessFlags),
) {
    let mb = [vk::MemoryBarrier::default().src_access_mask(src.1).dst_access_mask(dst.1)];
    // SAFETY: the caller's contract.
    unsafe {
        raw.cmd_pipeline_barrier(cb, src.0, dst.0, vk::DependencyFlags::empty(), &mb, &[], &[])
    };
}

const WORK: vk::PipelineStageFlags = vk::PipelineStageFlags::from_raw(
    vk::PipelineStageFlags::COMPUTE_SHADER.as_raw() | vk::PipelineStageFlags::TRANSFER.as_raw(),
);
const WORK_WRITE: vk::AccessFlags = vk::AccessFlags::from_raw(
    vk::AccessFlags::SHADER_WRITE.as_raw() | vk::AccessFlags::TRANSFER_WRITE.as_raw(),
);
const WORK_ACCESS: vk::AccessFlags = vk::AccessFlags::from_raw(
    WORK_WRITE.as_raw()
        | vk::AccessFlags::SHADER_READ.as_raw()
        | vk::AccessFlags::TRANSFER_READ.as_raw()
        | vk::AccessFlags::UNIFORM_READ.as_raw(),
);
const ALL: (vk::PipelineStageFlags, vk::AccessFlags) = (
    vk::PipelineStageFlags::ALL_COMMANDS,
    vk::AccessFlags::from_raw(
        vk::AccessFlags::MEMORY_READ.as_raw() | vk::AccessFlags::MEMORY_WRITE.as_raw(),
    ),
);

impl NativeRec {
    /// Descriptor sets for every bind group of `rec` (no command buffer yet).
    pub(crate) fn new(dev: Arc<NativeDevice>, rec: &Recording) -> Result<Self, String> {
        let raw = &dev.raw;
        let info = vk::CommandPoolCreateInfo::default().queue_family_index(dev.family);
        // SAFETY: a valid create info; the pool is destroyed in `Drop`.
        let cmd_pool = unsafe { raw.create_command_pool(&info, None) }
            .map_err(|e| format!("vkCreateCommandPool: {e}"))?;
        let mut this = NativeRec {
            dev: dev.clone(),
            cmd_pool,
            desc_pool: vk::DescriptorPool::null(),
            sets: Vec::new(),
            segments: Vec::new(),
            barriers: 0,
        };
        let groups = &rec.group_desc;
        if groups.is_empty() {
            return Ok(this);
        }
        let count = |m: Meta| groups.iter().filter(|g| g.kind.meta == m).count() as u32;
        let storage: u32 = groups.iter().map(|g| g.kind.storage).sum();
        let mut sizes = Vec::new();
        for (ty, n) in [
            (vk::DescriptorType::STORAGE_BUFFER, storage),
            (vk::DescriptorType::UNIFORM_BUFFER, count(Meta::Fixed)),
            (vk::DescriptorType::UNIFORM_BUFFER_DYNAMIC, count(Meta::Dynamic)),
        ] {
            if n > 0 {
                sizes.push(vk::DescriptorPoolSize::default().ty(ty).descriptor_count(n));
            }
        }
        let info = vk::DescriptorPoolCreateInfo::default()
            .max_sets(groups.len() as u32)
            .pool_sizes(&sizes);
        // SAFETY: a valid create info; destroyed in `Drop` (which frees its sets).
        this.desc_pool = unsafe { raw.create_descriptor_pool(&info, None) }
            .map_err(|e| format!("vkCreateDescriptorPool: {e}"))?;
        let layouts: Vec<vk::DescriptorSetLayout> =
            groups.iter().map(|g| dev.layout(g.kind).map(|l| l.0)).collect::<Result<_, _>>()?;
        let info = vk::DescriptorSetAllocateInfo::default()
            .descriptor_pool(this.desc_pool)
            .set_layouts(&layouts);
        // SAFETY: the pool was sized for exactly these sets.
        this.sets = unsafe { raw.allocate_descriptor_sets(&info) }
            .map_err(|e| format!("vkAllocateDescriptorSets: {e}"))?;
        let meta = match &rec.meta {
            Some(m) => Some(raw_buffer(m)?),
            None => None,
        };
        for (g, &set) in groups.iter().zip(&this.sets) {
            let mut infos: Vec<vk::DescriptorBufferInfo> = Vec::new();
            for (b, off, size) in &g.storage {
                let range = if *size == 0 { vk::WHOLE_SIZE } else { *size };
                infos.push(
                    vk::DescriptorBufferInfo::default()
                        .buffer(raw_buffer(b)?)
                        .offset(*off)
                        .range(range),
                );
            }
            if let (Some((off, size)), Some(m)) = (g.meta, meta) {
                infos.push(vk::DescriptorBufferInfo::default().buffer(m).offset(off).range(size));
            }
            let writes: Vec<vk::WriteDescriptorSet<'_>> = infos
                .iter()
                .enumerate()
                .map(|(i, info)| {
                    let ty = if (i as u32) < g.kind.storage {
                        vk::DescriptorType::STORAGE_BUFFER
                    } else if g.kind.meta == Meta::Dynamic {
                        vk::DescriptorType::UNIFORM_BUFFER_DYNAMIC
                    } else {
                        vk::DescriptorType::UNIFORM_BUFFER
                    };
                    vk::WriteDescriptorSet::default()
                        .dst_set(set)
                        .dst_binding(i as u32)
                        .descriptor_type(ty)
                        .buffer_info(std::slice::from_ref(info))
                })
                .collect();
            // SAFETY: the set is ours and not in use by any command buffer yet; every buffer
            // is alive (held by the recording).
            unsafe { raw.update_descriptor_sets(&writes, &[]) };
        }
        Ok(this)
    }

    /// Prepares `rec`'s commands `range` on first use; with `secondary`, also records them
    /// into a secondary command buffer (once) and returns it, else returns a null handle (the
    /// list is emitted into each replay's primary, [`NativeRec::record_into`]).
    pub(crate) fn segment(
        &mut self,
        rec: &Recording,
        range: Range<usize>,
        secondary: bool,
    ) -> Result<vk::CommandBuffer, String> {
        let at = match self.segments.iter().position(|s| s.range == range) {
            Some(at) => at,
            None if self.segments.len() >= MAX_SEGMENTS => {
                return Err(format!("more than {MAX_SEGMENTS} command ranges"));
            }
            None => {
                let (list, barriers) = self.prepare(rec, range.clone())?;
                self.barriers += barriers;
                let cb = vk::CommandBuffer::null();
                self.segments.push(Segment { range, list, cb });
                self.segments.len() - 1
            }
        };
        let seg = &self.segments[at];
        if !secondary || seg.cb != vk::CommandBuffer::null() {
            return Ok(if secondary { seg.cb } else { vk::CommandBuffer::null() });
        }
        let dev = self.dev.clone();
        let raw = &dev.raw;
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(self.cmd_pool)
            .level(vk::CommandBufferLevel::SECONDARY)
            .command_buffer_count(1);
        // SAFETY: our pool, used by this thread only (the caller holds the recording's native
        // lock); freed with the pool.
        let cb = unsafe { raw.allocate_command_buffers(&info) }
            .map_err(|e| format!("vkAllocateCommandBuffers: {e}"))?[0];
        let inherit = vk::CommandBufferInheritanceInfo::default();
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE)
            .inheritance_info(&inherit);
        // SAFETY: `cb` was just allocated; it is recorded once, here, and only executed after
        // it has ended; `list` holds live objects of this device (see `emit`).
        unsafe {
            raw.begin_command_buffer(cb, &begin)
                .map_err(|e| format!("vkBeginCommandBuffer: {e}"))?;
            emit(raw, cb, &seg.list);
            raw.end_command_buffer(cb).map_err(|e| format!("vkEndCommandBuffer: {e}"))?;
        }
        self.segments[at].cb = cb;
        Ok(cb)
    }

    /// Records the prepared commands of `range` (prepared by [`NativeRec::segment`]) into
    /// `cb`, a primary command buffer in the recording state (direct mode).
    ///
    /// # Safety
    /// `cb` is a command buffer of this device in the recording state.
    pub(crate) unsafe fn record_into(&self, cb: vk::CommandBuffer, range: &Range<usize>) -> bool {
        let Some(s) = self.segments.iter().find(|s| s.range == *range) else { return false };
        // SAFETY: the caller's contract; `s.list` holds live objects (see `emit`).
        unsafe { emit(&self.dev.raw, cb, &s.list) };
        true
    }

    /// `rec`'s commands `range` as Vulkan commands between an opening and a closing barrier,
    /// with a barrier before each command that conflicts with those since the last one; and
    /// the number of those barriers.
    fn prepare(&self, rec: &Recording, range: Range<usize>) -> Result<(Vec<NCmd>, usize), String> {
        let dev = &self.dev;
        let Some(cmds) = rec.cmds.get(range) else {
            return Err("command range out of bounds".into());
        };
        let mut list = vec![NCmd::Barrier(ALL, (WORK, WORK_ACCESS))];
        let mut hz = Hazards::default();
        let mut acc: Vec<Access> = Vec::new();
        let (mut bound_pipeline, mut bound_layout) =
            (vk::Pipeline::null(), vk::PipelineLayout::null());
        let mut bound_set: Option<(usize, Option<u32>)> = None;
        for cmd in cmds {
            acc.clear();
            match cmd {
                Cmd::Dispatch { pipeline, group, dynamic, workgroups } => {
                    let g = &rec.group_desc[*group];
                    let np = dev.pipeline(&rec.natives[*pipeline], g.kind)?;
                    for (i, (b, off, size)) in g.storage.iter().enumerate() {
                        let end = if *size == 0 { b.size() } else { off + size };
                        acc.push(((raw_buffer(b)?, *off, end), np.writes[i]));
                    }
                    hz.guard(&mut list, &acc);
                    if bound_pipeline != np.raw {
                        list.push(NCmd::Pipeline(np.raw));
                        bound_pipeline = np.raw;
                    }
                    if bound_layout != np.layout || bound_set != Some((*group, *dynamic)) {
                        list.push(NCmd::Set(np.layout, self.sets[*group], *dynamic));
                        bound_layout = np.layout;
                        bound_set = Some((*group, *dynamic));
                    }
                    list.push(NCmd::Dispatch(*workgroups));
                }
                Cmd::Copy { src, src_offset, dst, dst_offset, len } => {
                    let (s, d) = (raw_buffer(src)?, raw_buffer(dst)?);
                    acc.push(((s, *src_offset, src_offset + len), false));
                    acc.push(((d, *dst_offset, dst_offset + len), true));
                    hz.guard(&mut list, &acc);
                    let region =
                        vk::BufferCopy::default().src_offset(*src_offset).dst_offset(*dst_offset);
                    list.push(NCmd::Copy(s, d, region.size(*len)));
                }
            }
        }
        list.push(NCmd::Barrier((WORK, WORK_WRITE), ALL));
        Ok((list, hz.barriers))
    }
}

/// One prepared Vulkan command of a segment.
enum NCmd {
    Barrier((vk::PipelineStageFlags, vk::AccessFlags), (vk::PipelineStageFlags, vk::AccessFlags)),
    Pipeline(vk::Pipeline),
    Set(vk::PipelineLayout, vk::DescriptorSet, Option<u32>),
    Dispatch([u32; 3]),
    Copy(vk::Buffer, vk::Buffer, vk::BufferCopy),
}

/// A prepared command range and its secondary command buffer.
struct Segment {
    range: Range<usize>,
    list: Vec<NCmd>,
    cb: vk::CommandBuffer,
}

/// Records `list` into `cb`.
///
/// # Safety
/// `cb` is a command buffer of `raw` in the recording state; every handle in `list` is a live
/// object of `raw` (pipelines and layouts live as long as the device's native side, descriptor
/// sets as long as the recording's pool, buffers as long as the recording).
unsafe fn emit(raw: &ash::Device, cb: vk::CommandBuffer, list: &[NCmd]) {
    let compute = vk::PipelineBindPoint::COMPUTE;
    for c in list {
        // SAFETY: the function's contract.
        unsafe {
            match c {
                NCmd::Barrier(src, dst) => barrier(raw, cb, *src, *dst),
                NCmd::Pipeline(p) => raw.cmd_bind_pipeline(cb, compute, *p),
                NCmd::Set(layout, set, dynamic) => raw.cmd_bind_descriptor_sets(
                    cb,
                    compute,
                    *layout,
                    0,
                    &[*set],
                    dynamic.as_slice(),
                ),
                NCmd::Dispatch(w) => raw.cmd_dispatch(cb, w[0], w[1], w[2]),
                NCmd::Copy(s, d, region) => {
                    raw.cmd_copy_buffer(cb, *s, *d, std::slice::from_ref(region))
                }
            }
        }
    }
}

impl Drop for NativeRec {
    fn drop(&mut self) {
        // SAFETY: `Recording::drop` has waited for every submission that executed these
        // command buffers (or none was made); destroying the pools frees their buffers/sets.
        unsafe {
            self.dev.raw.destroy_command_pool(self.cmd_pool, None);
            if self.desc_pool != vk::DescriptorPool::null() {
                self.dev.raw.destroy_descriptor_pool(self.desc_pool, None);
            }
        }
    }
}

/// Appends a command buffer that executes `cb` to `batch`, after everything recorded so far.
impl crate::device::GpuDevice {
    pub(crate) fn execute_native(
        &self,
        batch: &mut crate::batch::Batch,
        rec: &Recording,
        range: Range<usize>,
        cb: vk::CommandBuffer,
    ) -> mpsrt_core::Result<()> {
        let err = |why: &str| mpsrt_core::Error::device("replay", why);
        let dev = self.native_device().ok_or_else(|| err("no native device"))?;
        let device = &self.device;
        batch.end_pass();
        if let Some(enc) = batch.encoder.take() {
            batch.finished.push(enc.finish());
        }
        let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("mpsrt native"),
        });
        // SAFETY: this encoder is used only through `as_hal_mut` (wgpu-core panics on mixing); we
        // only record into the primary it opened and neither end nor destroy it; `cb` is an ended
        // SIMULTANEOUS_USE secondary of the same device and queue family, alive until the batch's
        // submission has completed (`Recording::drop` waits for it).
        let done = unsafe {
            enc.as_hal_mut::<Vulkan, _, _>(|e| {
                e.map(|e| {
                    let primary = e.raw_handle();
                    if cb == vk::CommandBuffer::null() {
                        // Direct mode: the prepared commands into this primary.
                        return match &*rec.native.lock() {
                            NativeState::Ready(n) => n.record_into(primary, &range),
                            _ => false,
                        };
                    }
                    dev.raw.cmd_execute_commands(primary, &[cb]);
                    true
                })
            })
        };
        match done {
            None => return Err(err("wgpu gave no Vulkan command encoder")),
            Some(false) => return Err(err("recording native commands failed")),
            Some(true) => {}
        }
        batch.finished.push(enc.finish());
        Ok(())
    }
}

impl Recording {
    /// How this recording replays: `native` (one pre-recorded Vulkan command buffer per
    /// command range, `replay/native_rec.rs`; with its barrier count), `wgpu` (re-recorded
    /// through wgpu each run), or `wgpu (native declined: why)`.
    pub fn replay_path(&self) -> String {
        match &*self.native.lock() {
            NativeState::Ready(n) => {
                format!("native ({} barriers)", n.barriers)
            }
            NativeState::Declined { why, .. } => {
                format!("wgpu (native declined: {why})")
            }
            NativeState::Untried => "wgpu".into(),
        }
    }

    /// The native command buffer of `range` (built on first use), or `None` where this replay
    /// goes through wgpu (switch off, not Vulkan, or declined: the reason is kept).
    pub(crate) fn native_segment(
        &self,
        range: std::ops::Range<usize>,
    ) -> Option<ash::vk::CommandBuffer> {
        if !self.device.replay_native() {
            return None;
        }
        let mut st = self.native.lock();
        if matches!(*st, NativeState::Untried) {
            let dev = self.device.native_device()?.clone();
            *st = match NativeRec::new(dev, self) {
                Ok(n) => NativeState::Ready(n),
                Err(why) => NativeState::Declined { why, _kept: None },
            };
        }
        let NativeState::Ready(n) = &mut *st else { return None };
        match n.segment(self, range, self.device.native.secondary()) {
            Ok(cb) => Some(cb),
            Err(why) => {
                tracing::warn!("replay: native path declined: {why}");
                let NativeState::Ready(n) = std::mem::replace(&mut *st, NativeState::Untried)
                else {
                    unreachable!()
                };
                *st = NativeState::Declined { why, _kept: Some(n) };
                None
            }
        }
    }

    /// Waits for the GPU where native command buffers of this recording may still be queued or
    /// running (`serial`: the batch of its last replay): wgpu-core does not know what they use,
    /// so their pools (and the recording's buffers) must outlive that work.
    pub(crate) fn native_wait(&mut self, serial: u64) {
        if !matches!(*self.native.get_mut(), NativeState::Untried)
            && self.device.completed.load(std::sync::atomic::Ordering::Acquire) < serial
        {
            if let Err(e) = self.device.synchronize() {
                tracing::warn!("replay: waiting for the GPU before dropping a recording: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Access, Hazards, NCmd};
    use ash::vk::{self, Handle};

    /// Read-after-write, write-after-read and write-after-write on overlapping byte ranges get
    /// a barrier; reads after reads and accesses to disjoint ranges (concat slices) do not.
    #[test]
    fn barriers_follow_overlapping_conflicts_only() {
        let (a, b) = (vk::Buffer::from_raw(1), vk::Buffer::from_raw(2));
        let mut hz = Hazards::default();
        let mut list: Vec<NCmd> = Vec::new();
        let steps: [(&[Access], usize); 7] = [
            (&[((a, 0, 64), false), ((b, 0, 32), true)], 0), // read a, write b[0..32)
            (&[((a, 0, 64), false), ((b, 32, 64), true)], 0), // disjoint slice of b
            (&[((a, 16, 32), false)], 0),                    // read after read
            (&[((b, 8, 16), false)], 1),                     // read after write
            (&[((b, 40, 48), false)], 1),                    // read after read (barrier since)
            (&[((b, 44, 46), true)], 2),                     // write after read
            (&[((b, 45, 47), true)], 3),                     // write after write
        ];
        for (i, (acc, barriers)) in steps.iter().enumerate() {
            hz.guard(&mut list, acc);
            assert_eq!(hz.barriers, *barriers, "step {i}");
        }
        assert_eq!(list.len(), 3);
    }
}
