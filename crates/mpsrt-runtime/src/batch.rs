//! Command recording: dispatches go into one open compute pass of one command encoder and are
//! submitted together at sync points or when a threshold is crossed (invariant 4).
//!
//! Kernel metadata (shapes, strides, offsets) is appended to a per-batch uniform arena and
//! uploaded with one `write_buffer` at submit time, so a dispatch costs a bind group and a few
//! recorded commands rather than a buffer allocation.

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
    pub pass: Option<wgpu::ComputePass<'static>>,
    pub ops: usize,
    pub bytes: u64,
    /// Arenas written by this batch (the last one is being filled).
    pub arenas: Vec<Arena>,
    /// Arenas of submitted batches, reusable once their serial has completed.
    pub in_flight: Vec<(u64, wgpu::Buffer)>,
    pub spare: Vec<wgpu::Buffer>,
    /// Serial, submission index and bytes of each batch still possibly running, oldest first.
    pub submitted: std::collections::VecDeque<(u64, wgpu::SubmissionIndex, u64)>,
}

impl Batch {
    pub(crate) fn new() -> Self {
        Batch {
            serial: 1,
            encoder: None,
            pass: None,
            ops: 0,
            bytes: 0,
            arenas: Vec::new(),
            in_flight: Vec::new(),
            spare: Vec::new(),
            submitted: std::collections::VecDeque::new(),
        }
    }

    pub(crate) fn encoder(&mut self, device: &wgpu::Device) -> &mut wgpu::CommandEncoder {
        // Copies cannot be recorded inside a compute pass: close it first.
        self.pass = None;
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

    /// Reserve `len` bytes of metadata; returns (arena index, offset).
    pub(crate) fn push_meta(&mut self, device: &wgpu::Device, bytes: &[u8]) -> (usize, u64) {
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
            self.arenas.push(Arena { buffer, data: Vec::with_capacity(ARENA_SIZE as usize) });
        }
        let idx = self.arenas.len() - 1;
        let arena = &mut self.arenas[idx];
        let off = arena.data.len() as u64;
        arena.data.extend_from_slice(bytes);
        arena.data.resize((off + len) as usize, 0);
        (idx, off)
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
