//! GPU timestamps for `mpsrt bench --profile` (issue 22): the GPU's own clock at chosen points
//! of the recorded work, so a profile can tell a step's GPU time from the host's.
//!
//! A mark is an empty compute pass whose end-of-pass timestamp is written into a query set
//! (`Features::TIMESTAMP_QUERY` only; no `_INSIDE_ENCODERS` / `_INSIDE_PASSES` needed): Vulkan
//! writes it at the bottom of the pipe, once the work recorded before it has finished. Marks
//! before and after a step that is submitted and waited for on its own bracket that step's GPU
//! work; the ticks convert to nanoseconds with the queue's timestamp period. Adapters without
//! timestamps give no timer ([`GpuDevice::gpu_timer`] is `None`) and callers fall back to host
//! timing around a synchronization.

use crate::device::GpuDevice;
use mpsrt_core::{Error, Result};
use std::sync::Arc;

const OP: &str = "gpu timer";

/// Up to `capacity` GPU timestamps of one device ([`GpuDevice::gpu_timer`]).
pub struct GpuTimer {
    device: Arc<GpuDevice>,
    set: wgpu::QuerySet,
    capacity: u32,
    next: u32,
}

/// Nanoseconds between consecutive raw timestamps `ticks`, with `period` ns per tick; a
/// counter that went backwards (a wrapped or reset clock) gives 0 rather than a huge value.
pub fn ticks_to_ns(ticks: &[u64], period: f32) -> Vec<f64> {
    ticks.windows(2).map(|w| w[1].saturating_sub(w[0]) as f64 * f64::from(period)).collect()
}

impl GpuDevice {
    /// Whether the device was opened with timestamp queries (`Features::TIMESTAMP_QUERY`).
    pub fn has_timestamps(&self) -> bool {
        self.device.features().contains(wgpu::Features::TIMESTAMP_QUERY)
    }

    /// A timer for up to `capacity` marks (at most 4096, wgpu's query set limit), or `None`
    /// when the adapter has no timestamp queries.
    pub fn gpu_timer(&self, capacity: u32) -> Option<GpuTimer> {
        if !self.has_timestamps() || capacity == 0 {
            return None;
        }
        let capacity = capacity.min(wgpu::QUERY_SET_MAX_QUERIES);
        let set = self.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("mpsrt profile timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: capacity,
        });
        Some(GpuTimer { device: self.arc(), set, capacity, next: 0 })
    }
}

impl GpuTimer {
    /// Marks written so far.
    pub fn len(&self) -> u32 {
        self.next
    }

    /// Whether no mark was written yet.
    pub fn is_empty(&self) -> bool {
        self.next == 0
    }

    /// Records a timestamp after everything recorded so far on the device; returns its index.
    pub fn mark(&mut self) -> Result<u32> {
        if self.next >= self.capacity {
            return Err(Error::invalid(OP, format!("all {} timestamps are used", self.capacity)));
        }
        let i = self.next;
        let dev = &self.device;
        let mut st = dev.state.lock();
        let encoder = st.batch.encoder(&dev.device);
        drop(encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("mpsrt timestamp"),
            timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                query_set: &self.set,
                beginning_of_pass_write_index: None,
                end_of_pass_write_index: Some(i),
            }),
        }));
        self.next += 1;
        Ok(i)
    }

    /// The raw ticks of every mark so far (waits for the device), and the nanoseconds per tick.
    pub fn read(&self) -> Result<(Vec<u64>, f32)> {
        let dev = &self.device;
        let n = u64::from(self.next);
        if n == 0 {
            return Ok((Vec::new(), dev.queue.get_timestamp_period()));
        }
        let bytes = n * 8;
        let resolve = dev.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("mpsrt timestamps"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let staging = dev.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("mpsrt timestamps readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut st = dev.state.lock();
        let encoder = st.batch.encoder(&dev.device);
        encoder.resolve_query_set(&self.set, 0..self.next, &resolve, 0);
        encoder.copy_buffer_to_buffer(&resolve, 0, &staging, 0, bytes);
        dev.submit_locked(&mut st);
        dev.map_and_wait(&mut st, &staging, 0..bytes)?;
        let ticks = {
            let view = staging
                .get_mapped_range(..)
                .map_err(|e| Error::device(OP, format!("mapped range unavailable: {e}")))?;
            view.chunks_exact(8)
                .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect()
        };
        staging.unmap();
        drop(st);
        dev.take_errors(OP)?;
        Ok((ticks, dev.queue.get_timestamp_period()))
    }
}

#[cfg(test)]
mod tests {
    use super::ticks_to_ns;

    #[test]
    fn ticks_convert_with_the_period_and_never_go_negative() {
        assert_eq!(ticks_to_ns(&[100, 150, 400], 1.0), vec![50.0, 250.0]);
        let ns = ticks_to_ns(&[10, 20], 83.333);
        assert!((ns[0] - 833.33).abs() < 1e-3, "{ns:?}");
        assert_eq!(ticks_to_ns(&[500, 20], 1.0), vec![0.0]);
        assert!(ticks_to_ns(&[7], 1.0).is_empty());
    }
}
