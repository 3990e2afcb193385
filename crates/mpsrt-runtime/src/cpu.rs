//! Host memory for CPU tensors: an immutable byte buffer aligned to 8 bytes, so it can be viewed
//! as a slice of any element type (including f64/i64) without copying.

use bytemuck::Pod;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::OnceLock;

/// Bytes of a CPU tensor. Immutable once built; ops always produce new buffers.
pub struct CpuBuffer {
    words: Vec<u64>,
    len: usize,
}

/// Buffers of at least this many bytes go back to the pool when dropped.
const MIN_POOLED: usize = 64 << 10;

/// Recycled storage for [`CpuBuffer::for_overwrite`], keyed by exact word count. CPU ops write
/// every byte of their output and the engine drops values at their last use, so most of a run's
/// allocations find a buffer of their size here and skip the allocator's zero fill (9% of a
/// DenseNet-121 run on the CPU went to `memset`). At most `MPSRT_CPU_POOL_MB` (default 256)
/// MiB are kept; buffers past that are freed.
struct Pool {
    lists: HashMap<usize, Vec<Vec<u64>>>,
    bytes: usize,
    max: usize,
}

fn pool() -> &'static Mutex<Pool> {
    static POOL: OnceLock<Mutex<Pool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let mb = std::env::var("MPSRT_CPU_POOL_MB")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(256);
        Mutex::new(Pool { lists: HashMap::new(), bytes: 0, max: mb << 20 })
    })
}

impl Drop for CpuBuffer {
    fn drop(&mut self) {
        let bytes = self.words.len() * 8;
        if bytes < MIN_POOLED {
            return;
        }
        let mut p = pool().lock();
        if p.bytes + bytes <= p.max {
            p.bytes += bytes;
            let words = std::mem::take(&mut self.words);
            p.lists.entry(words.len()).or_default().push(words);
        }
    }
}

impl CpuBuffer {
    /// A zero-filled buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Self {
        CpuBuffer { words: vec![0u64; len.div_ceil(8)], len }
    }

    /// A buffer of `len` bytes with unspecified (but initialized) contents — a recycled
    /// buffer's old values, or zeros — for an output the caller overwrites entirely.
    pub fn for_overwrite(len: usize) -> Self {
        let n = len.div_ceil(8);
        if n * 8 >= MIN_POOLED {
            let mut p = pool().lock();
            if let Some(words) = p.lists.get_mut(&n).and_then(Vec::pop) {
                p.bytes -= n * 8;
                return CpuBuffer { words, len };
            }
        }
        Self::zeroed(len)
    }

    /// A copy of `bytes`, written once (no zero fill first: outputs of CPU ops pass through here).
    pub fn from_bytes(bytes: &[u8]) -> Self {
        let (full, tail) = bytes.split_at(bytes.len() / 8 * 8);
        let mut words = Vec::with_capacity(bytes.len().div_ceil(8));
        words.extend(full.chunks_exact(8).map(bytemuck::pod_read_unaligned::<u64>));
        if !tail.is_empty() {
            let mut w = [0u8; 8];
            w[..tail.len()].copy_from_slice(tail);
            words.push(u64::from_ne_bytes(w));
        }
        CpuBuffer { words, len: bytes.len() }
    }

    pub fn from_slice<T: Pod>(data: &[T]) -> Self {
        Self::from_bytes(bytemuck::cast_slice(data))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }

    /// View as elements; `len` must be a multiple of `size_of::<T>()` (guaranteed by tensor code).
    pub fn as_slice<T: Pod>(&self) -> &[T] {
        let n = self.len / std::mem::size_of::<T>();
        &bytemuck::cast_slice::<u64, T>(&self.words)[..n]
    }

    pub fn as_mut_slice<T: Pod>(&mut self) -> &mut [T] {
        let n = self.len / std::mem::size_of::<T>();
        &mut bytemuck::cast_slice_mut::<u64, T>(&mut self.words)[..n]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_views_round_trip() {
        let b = CpuBuffer::from_slice(&[1.5f64, -2.0]);
        assert_eq!(b.len(), 16);
        assert_eq!(b.as_slice::<f64>(), &[1.5, -2.0]);
        let c = CpuBuffer::from_bytes(&[1, 2, 3]);
        assert_eq!(c.bytes(), &[1, 2, 3]);
        assert_eq!(c.as_slice::<u8>(), &[1, 2, 3]);
        let bytes: Vec<u8> = (0..21u8).collect();
        assert_eq!(CpuBuffer::from_bytes(&bytes).bytes(), &bytes[..], "two words and a tail");
    }

    #[test]
    fn dropped_buffers_are_recycled_for_overwrite() {
        // A size no other test uses: the pool is process-wide.
        let len = MIN_POOLED + 8 * 13 + 3;
        let mut a = CpuBuffer::for_overwrite(len);
        assert_eq!(a.len(), len);
        a.bytes_mut().fill(7);
        let ptr = a.words.as_ptr();
        drop(a);
        let b = CpuBuffer::for_overwrite(len);
        assert_eq!(b.words.as_ptr(), ptr, "the dropped buffer is handed out again");
        assert_eq!(b.len(), len);
        // Small buffers are not pooled; zeroed() never takes from the pool.
        assert!(CpuBuffer::zeroed(len).bytes().iter().all(|&x| x == 0));
        drop(b);
        let small = CpuBuffer::for_overwrite(100);
        assert!(small.bytes().iter().all(|&x| x == 0));
    }
}
