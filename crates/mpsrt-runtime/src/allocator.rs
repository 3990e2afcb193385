//! The per-device caching allocator.
//!
//! Choice (see ARCHITECTURE.md): a best-fit size-class cache like PyTorch-MPS and MLX rather than
//! the seed's buddy allocator. wgpu cannot sub-allocate one `wgpu::Buffer` into independently
//! bindable tensors without alignment padding (256-byte binding offsets) and would force every
//! kernel to carry a base offset, while whole-buffer caching keeps binding trivial; the memory a
//! buddy scheme would save is bounded here by the size classes (at most 12.5% rounding).
//!
//! Invariant 3: a freed buffer goes to `pending` tagged with the last batch that used it. The
//! cache (completed buffers) is tried first; on a miss, a pending buffer of the class is reused
//! at once — stream-ordered reuse, as PyTorch's caching allocator does on one stream: the queue
//! runs in order and wgpu puts a barrier between the old reads and the new writes. The new owner
//! inherits the old last-use serial, so a host write into it first submits the batch that still
//! reads it (`GpuDevice::write`). Without this, a loop of large ops allocates a fresh buffer per
//! iteration until a sync (e.g. 256 MiB softmax outputs: driver allocation + zero-fill each).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Memory statistics of one GPU device, all in bytes except counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes held by live tensors (size-class rounded, as PyTorch reports).
    pub allocated: u64,
    /// Bytes of GPU buffers held by the allocator: live + cached + waiting for the GPU.
    pub reserved: u64,
    /// Highest `allocated` since the last reset.
    pub peak_allocated: u64,
    /// Cached buffers ready for reuse.
    pub cached: u64,
    /// Number of allocation requests served.
    pub alloc_count: u64,
    /// Requests served from the cache.
    pub cache_hits: u64,
    /// Hard limit on `allocated` (bytes); requests beyond it fail with an out-of-memory error.
    pub limit: u64,
}

struct Cached {
    buffer: wgpu::Buffer,
    last_used: Instant,
}

pub(crate) struct Allocator {
    free: BTreeMap<u64, Vec<Cached>>,
    pending: Vec<(u64, u64, wgpu::Buffer)>,
    stats: MemoryStats,
    pending_bytes: u64,
    max_pool: u64,
    max_age: Duration,
    last_gc: Instant,
    /// Times buffers were dropped back to the driver (trim, `empty_cache`): the device clears
    /// its bind-group cache then, so no cached bind group keeps a released buffer alive.
    releases: u64,
}

/// Round a request up to its size class: at least 256 bytes, then steps of 1/16 of the next power of two,
/// so rounding wastes at most 12.5%.
/// Requests too large to round (near 2^64) map to `u64::MAX`, which no adapter can hold, so
/// the caller refuses them with its out-of-memory error instead of overflowing.
pub(crate) fn size_class(bytes: u64) -> u64 {
    let Some(n) = bytes.max(256).checked_next_multiple_of(4) else {
        return u64::MAX;
    };
    if n <= 256 {
        return 256;
    }
    let Some(pow) = n.checked_next_power_of_two() else {
        return u64::MAX;
    };
    let step = pow / 16;
    n.div_ceil(step).saturating_mul(step)
}

impl Allocator {
    pub(crate) fn new(limit: u64, max_pool: u64, max_age: Duration) -> Self {
        Allocator {
            free: BTreeMap::new(),
            pending: Vec::new(),
            stats: MemoryStats { limit, ..Default::default() },
            pending_bytes: 0,
            max_pool,
            max_age,
            last_gc: Instant::now(),
            releases: 0,
        }
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        MemoryStats {
            reserved: self.stats.allocated + self.stats.cached + self.pending_bytes,
            ..self.stats
        }
    }

    /// Changes whenever buffers are dropped back to the driver.
    pub(crate) fn releases(&self) -> u64 {
        self.releases
    }

    /// Take a cached buffer of class `class` (or up to 25% larger); `None` on a miss.
    pub(crate) fn take_cached(&mut self, class: u64) -> Option<(wgpu::Buffer, u64)> {
        let hi = class.saturating_add(class / 4);
        let key = *self.free.range(class..=hi).find(|(_, v)| !v.is_empty())?.0;
        let list = self.free.get_mut(&key)?;
        let entry = list.pop()?;
        if list.is_empty() {
            self.free.remove(&key);
        }
        self.stats.cached -= key;
        self.note_alloc(key, true);
        Some((entry.buffer, key))
    }

    /// Take a pending buffer of class `class` (or up to 25% larger) for stream-ordered reuse:
    /// `(buffer, class, last_use)`; the caller must carry `last_use` into the new tensor.
    pub(crate) fn take_pending(&mut self, class: u64) -> Option<(wgpu::Buffer, u64, u64)> {
        let hi = class.saturating_add(class / 4);
        let i = self
            .pending
            .iter()
            .enumerate()
            .filter(|(_, p)| (class..=hi).contains(&p.1))
            .min_by_key(|(_, p)| p.1)?
            .0;
        let (serial, key, buffer) = self.pending.swap_remove(i);
        self.pending_bytes -= key;
        self.note_alloc(key, true);
        Some((buffer, key, serial))
    }

    /// Whether a new buffer of `class` bytes fits under the limit, counting only live tensors.
    pub(crate) fn fits(&self, class: u64) -> bool {
        self.stats.allocated + class <= self.stats.limit
    }

    pub(crate) fn note_alloc(&mut self, class: u64, hit: bool) {
        self.stats.allocated += class;
        self.stats.alloc_count += 1;
        if hit {
            self.stats.cache_hits += 1;
        }
        self.stats.peak_allocated = self.stats.peak_allocated.max(self.stats.allocated);
    }

    /// A tensor released its buffer; it becomes reusable once batch `last_use` is complete.
    pub(crate) fn release(
        &mut self,
        buffer: wgpu::Buffer,
        class: u64,
        last_use: u64,
        completed: u64,
    ) {
        self.stats.allocated -= class;
        if last_use > completed {
            self.pending_bytes += class;
            self.pending.push((last_use, class, buffer));
        } else {
            self.cache(buffer, class);
        }
        self.trim();
    }

    fn cache(&mut self, buffer: wgpu::Buffer, class: u64) {
        self.stats.cached += class;
        self.free.entry(class).or_default().push(Cached { buffer, last_used: Instant::now() });
    }

    /// Move buffers whose batch has completed into the cache.
    pub(crate) fn reap(&mut self, completed: u64) {
        if self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        for (serial, class, buffer) in pending {
            if serial <= completed {
                self.pending_bytes -= class;
                self.cache(buffer, class);
            } else {
                self.pending.push((serial, class, buffer));
            }
        }
        self.trim();
    }

    /// Enforce `MPS_MAX_POOL_SIZE` (evict least recently used first) and, at most once a second,
    /// `MPS_MAX_BUFFER_AGE`.
    fn trim(&mut self) {
        let now = Instant::now();
        let age_due = now.duration_since(self.last_gc) >= Duration::from_secs(1);
        if self.stats.cached <= self.max_pool && !age_due {
            return;
        }
        if age_due {
            self.last_gc = now;
            let max_age = self.max_age;
            let mut dropped = 0;
            self.free.retain(|&class, list| {
                let before = list.len();
                list.retain(|c| now.duration_since(c.last_used) <= max_age);
                dropped += (before - list.len()) as u64 * class;
                !list.is_empty()
            });
            self.stats.cached -= dropped;
            if dropped > 0 {
                self.releases += 1;
            }
        }
        while self.stats.cached > self.max_pool {
            // Oldest entry across classes.
            let Some((&class, idx)) = self
                .free
                .iter()
                .flat_map(|(k, v)| v.iter().enumerate().map(move |(i, c)| ((k, i), c.last_used)))
                .min_by_key(|(_, t)| *t)
                .map(|(ki, _)| ki)
            else {
                break;
            };
            if let Some(list) = self.free.get_mut(&class) {
                list.remove(idx);
                if list.is_empty() {
                    self.free.remove(&class);
                }
            }
            self.stats.cached -= class;
            self.releases += 1;
        }
    }

    /// Drop every cached buffer, including ones still waiting for the GPU (wgpu keeps those alive
    /// until the GPU is done, so dropping our handle is safe; they just won't be reused).
    pub(crate) fn empty_cache(&mut self) {
        self.releases += 1;
        self.free.clear();
        self.pending.clear();
        self.stats.cached = 0;
        self.pending_bytes = 0;
    }

    pub(crate) fn reset_peak(&mut self) {
        self.stats.peak_allocated = self.stats.allocated;
    }
}

#[cfg(test)]
mod tests {
    use super::size_class;

    #[test]
    fn size_classes_bound_waste() {
        assert_eq!(size_class(0), 256);
        assert_eq!(size_class(1), 256);
        assert_eq!(size_class(257), 288);
        assert_eq!(size_class(1 << 20), 1 << 20);
        assert_eq!(size_class((1 << 20) + 1), (1 << 20) + (1 << 17));
        for n in [300u64, 4097, 65_537, 1_000_001, 123_456_789] {
            let c = size_class(n);
            assert!(c >= n && (c - n) * 8 <= n, "{n} -> {c}");
            assert_eq!(size_class(c), c, "classes are fixed points");
        }
        // Near 2^63 and 2^64: no division by zero or overflow, a size nothing can hold.
        for n in [1u64 << 63, (1 << 63) + 1, u64::MAX - 2, u64::MAX] {
            assert!(size_class(n) >= n, "{n}");
        }
    }
}
