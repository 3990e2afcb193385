//! Command recording: dispatches go into one open compute pass of one command encoder and are
//! submitted together at sync points or when a threshold is crossed (invariant 4).
//!
//! Kernel metadata (shapes, strides, offsets) is appended to a per-batch uniform arena and
//! uploaded with one `write_buffer` at submit time, so a dispatch costs a few recorded commands
//! rather than a buffer allocation. A dispatch whose metadata equals the previous one's shares
//! its slot, and the batch remembers what the open pass has bound, so a run of identical
//! launches records only the dispatches (wgpu-core replays each recorded command at submit).

/// Size of one metadata arena; each dispatch takes a 256-byte-aligned slice of it.
pub(crate) const ARENA_SIZE: u64 = 64 * 1024;

pub(crate) struct Arena {
    pub buffer: wgpu::Buffer,
    pub data: Vec<u8>,
}

pub(crate) struct Batch {
    /// Serial of the batch being recorded; buffers used in it are tagged with this number.
    pub serial: u64,
    pub encoder: Option<wgpu::CommandEncoder>,
    /// Command buffers of this batch finished before `encoder` (a parallel replay's parts, and
    /// the encoder they follow), submitted in this order before it.
    pub finished: Vec<wgpu::CommandBuffer>,
    pub pass: Option<wgpu::ComputePass<'static>>,
    pub ops: usize,
    /// `ops` at which a batch kept open (small work, or a busy GPU) is next considered for
    /// submission (0: at `max_ops_per_batch`; see `GpuDevice::batch_full_locked`).
    pub next_check: usize,
    pub bytes: u64,
    /// Bytes of the binding windows of this batch's dispatches (its work's size).
    pub touched: u64,
    /// Arenas written by this batch (the last one is being filled).
    pub arenas: Vec<Arena>,
    /// Arenas of submitted batches, reusable once their serial has completed.
    pub in_flight: Vec<(u64, wgpu::Buffer)>,
    pub spare: Vec<wgpu::Buffer>,
    /// Host staging vectors of submitted arenas (their bytes are already queued): reused so a
    /// batch does not allocate and free 64 KiB on the host.
    spare_data: Vec<Vec<u8>>,
    /// Serial, submission index and bytes of each batch still possibly running, oldest first.
    pub submitted: std::collections::VecDeque<(u64, wgpu::SubmissionIndex, u64)>,
    /// The last metadata slot: (arena index, offset, length).
    last_meta: Option<(usize, u64, usize)>,
    /// Pipeline id set in the open pass (0: none).
    pub bound_pipeline: u64,
    /// Bind group id and dynamic offsets bound at group 0 in the open pass.
    pub bound_group: Option<(u64, Option<u32>)>,
}

impl Batch {
    pub(crate) fn new() -> Self {
        Batch {
            serial: 1,
            encoder: None,
            finished: Vec::new(),
            pass: None,
            ops: 0,
            next_check: 0,
            bytes: 0,
            touched: 0,
            arenas: Vec::new(),
            in_flight: Vec::new(),
            spare: Vec::new(),
            spare_data: Vec::new(),
            submitted: std::collections::VecDeque::new(),
            last_meta: None,
            bound_pipeline: 0,
            bound_group: None,
        }
    }

    /// Close the open compute pass (if any); what it had bound is forgotten with it.
    pub(crate) fn end_pass(&mut self) {
        self.pass = None;
        self.bound_pipeline = 0;
        self.bound_group = None;
    }

    pub(crate) fn encoder(&mut self, device: &wgpu::Device) -> &mut wgpu::CommandEncoder {
        // Copies cannot be recorded inside a compute pass: close it first.
        self.end_pass();
        self.encoder.get_or_insert_with(|| new_encoder(device))
    }

    pub(crate) fn pass(&mut self, device: &wgpu::Device) -> &mut wgpu::ComputePass<'static> {
        let encoder = &mut self.encoder;
        self.pass.get_or_insert_with(|| {
            encoder
                .get_or_insert_with(|| new_encoder(device))
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("mpsrt ops"),
                    timestamp_writes: None,
                })
                .forget_lifetime()
        })
    }

    /// Store a metadata block; returns (arena index, offset). A block equal to the previous one
    /// reuses its slot (nothing writes a slot after it is filled).
    pub(crate) fn push_meta(&mut self, device: &wgpu::Device, bytes: &[u8]) -> (usize, u64) {
        if let Some((idx, off, n)) = self.last_meta {
            let data = &self.arenas[idx].data;
            if n == bytes.len() && data[off as usize..off as usize + n] == *bytes {
                return (idx, off);
            }
        }
        let len = (bytes.len() as u64).next_multiple_of(256);
        let need_new = match self.arenas.last() {
            None => true,
            Some(a) => a.data.len() as u64 + len > ARENA_SIZE,
        };
        if need_new {
            let buffer = self.spare.pop().unwrap_or_else(|| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("mpsrt meta arena"),
                    size: ARENA_SIZE,
                    usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            });
            let data =
                self.spare_data.pop().unwrap_or_else(|| Vec::with_capacity(ARENA_SIZE as usize));
            self.arenas.push(Arena { buffer, data });
        }
        let idx = self.arenas.len() - 1;
        let arena = &mut self.arenas[idx];
        let off = arena.data.len() as u64;
        arena.data.extend_from_slice(bytes);
        arena.data.resize((off + len) as usize, 0);
        self.last_meta = Some((idx, off, bytes.len()));
        (idx, off)
    }

    /// The recorded batch was submitted: its arenas are no longer ours to share slots of.
    pub(crate) fn reset_after_submit(&mut self) {
        self.end_pass();
        self.last_meta = None;
    }

    /// The batch `serial` was submitted (its arenas' bytes queued with `write_buffer`): the
    /// buffers wait for the GPU, the host vectors are free at once.
    pub(crate) fn retire_arenas(&mut self, serial: u64) {
        for mut a in self.arenas.drain(..) {
            self.in_flight.push((serial, a.buffer));
            a.data.clear();
            self.spare_data.push(a.data);
        }
    }

    /// Bytes touched by batches that may still be running.
    pub(crate) fn inflight_bytes(&self) -> u64 {
        self.submitted.iter().map(|(_, _, b)| b).sum()
    }

    /// Recycle arenas of completed batches.
    pub(crate) fn reap(&mut self, completed: u64) {
        while self.submitted.front().is_some_and(|(s, _, _)| *s <= completed) {
            self.submitted.pop_front();
        }
        let mut i = 0;
        while i < self.in_flight.len() {
            if self.in_flight[i].0 <= completed {
                let (_, b) = self.in_flight.swap_remove(i);
                self.spare.push(b);
            } else {
                i += 1;
            }
        }
    }
}

fn new_encoder(device: &wgpu::Device) -> wgpu::CommandEncoder {
    device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("mpsrt batch") })
}
