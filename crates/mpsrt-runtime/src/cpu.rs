//! Host memory for CPU tensors: an immutable byte buffer aligned to 8 bytes, so it can be viewed
//! as a slice of any element type (including f64/i64) without copying.
//!
//! Every buffer is allocated fallibly and counted against the CPU place's memory limit
//! (`MPSRT_CPU_MEMORY_LIMIT`, default 90% of system RAM) *before* the allocation, as the GPU
//! allocator does with `MPSRT_MEMORY_LIMIT`: a shape or model that asks for terabytes gets an
//! out-of-memory error (Python `MemoryError`), never the allocator's abort.

use bytemuck::Pod;
use mpsrt_core::{Error, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Bytes held by live CPU buffers (pooled buffers not counted, as the GPU's `allocated`).
static LIVE: AtomicU64 = AtomicU64::new(0);
/// The limit in bytes; `u64::MAX` = none. Set on first use from the environment.
static LIMIT: OnceLock<AtomicU64> = OnceLock::new();

fn limit_cell() -> &'static AtomicU64 {
    LIMIT.get_or_init(|| {
        let env = std::env::var("MPSRT_CPU_MEMORY_LIMIT").ok();
        let parsed = env.as_deref().and_then(|v| v.trim().parse::<u64>().ok());
        let v = parsed.unwrap_or_else(|| match crate::adapters::system_memory() {
            0 => u64::MAX,
            total => total / 10 * 9,
        });
        AtomicU64::new(v)
    })
}

/// The CPU place's memory limit in bytes (`MPSRT_CPU_MEMORY_LIMIT`; default 90% of system
/// RAM; `u64::MAX` when the system does not report its RAM), and the bytes live buffers hold.
pub fn cpu_memory_usage() -> (u64, u64) {
    (LIVE.load(Ordering::Relaxed), limit_cell().load(Ordering::Relaxed))
}

/// Replace the CPU memory limit (`None` restores the default); for tests and embedders.
pub fn set_cpu_memory_limit(bytes: Option<u64>) {
    let v = bytes.unwrap_or_else(|| match crate::adapters::system_memory() {
        0 => u64::MAX,
        total => total / 10 * 9,
    });
    limit_cell().store(v, Ordering::Relaxed);
}

fn oom(op: &str, bytes: u64, live: u64, limit: u64, why: &str) -> Error {
    Error::oom(
        op,
        format!(
            "out of memory on the CPU: tried to allocate {}; {} already allocated by live \
             tensors, limit {}{why}. Free tensors or raise the limit with \
             MPSRT_CPU_MEMORY_LIMIT=<bytes>",
            crate::device::fmt_bytes(bytes),
            crate::device::fmt_bytes(live),
            crate::device::fmt_bytes(limit),
        ),
    )
}

/// Whether `bytes` more of host memory fit under the CPU limit; an out-of-memory error naming
/// `op` if not. For host-side scratch (vectors an op fills before building its output) as much
/// as for tensor buffers: call it before allocating.
pub fn check_host_alloc(op: &str, bytes: usize) -> Result<()> {
    let (live, limit) = cpu_memory_usage();
    if (bytes as u64).saturating_add(live) > limit {
        pool().lock().clear();
        return Err(oom(op, bytes as u64, live, limit, ""));
    }
    Ok(())
}

/// A vector of `n` copies of `v`, allocated fallibly after [`check_host_alloc`]: the scratch
/// and output vectors of CPU ops whose length comes from user shapes.
pub fn host_vec<T: Clone>(op: &str, n: usize, v: T) -> Result<Vec<T>> {
    let bytes = n
        .checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::shape(op, format!("{n} elements overflow the address space")))?;
    check_host_alloc(op, bytes)?;
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| {
        let (live, limit) = cpu_memory_usage();
        oom(op, bytes as u64, live, limit, " (the system allocator refused)")
    })?;
    out.resize(n, v);
    Ok(out)
}

/// `n` zeroed words, allocated fallibly (calloc: large zero buffers come from fresh pages).
fn alloc_words(op: &str, n: usize, zeroed: bool) -> Result<Vec<u64>> {
    let bytes = n.checked_mul(8).filter(|&b| b <= mpsrt_core::MAX_SIZE).ok_or_else(|| {
        Error::shape(op, format!("{n} words of host memory overflow the address space"))
    })?;
    let (live, limit) = cpu_memory_usage();
    if (bytes as u64).saturating_add(live) > limit {
        pool().lock().clear();
        return Err(oom(op, bytes as u64, live, limit, ""));
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    let refused = || {
        pool().lock().clear();
        oom(op, bytes as u64, live, limit, " (the system allocator refused)")
    };
    if !zeroed {
        let mut v = Vec::new();
        v.try_reserve_exact(n).map_err(|_| refused())?;
        return Ok(v);
    }
    let layout = std::alloc::Layout::array::<u64>(n).map_err(|_| refused())?;
    // SAFETY: `layout` has a non-zero size (n > 0); a null return is handled; the memory is
    // zeroed, which is a valid `u64` bit pattern, and was allocated by the global allocator
    // with exactly the layout `Vec<u64>` uses for capacity `n`.
    let words = unsafe {
        let ptr = std::alloc::alloc_zeroed(layout) as *mut u64;
        if ptr.is_null() {
            return Err(refused());
        }
        Vec::from_raw_parts(ptr, n, n)
    };
    Ok(words)
}

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

impl Pool {
    /// Frees every pooled buffer: memory is short, so nothing is kept for reuse.
    fn clear(&mut self) {
        self.lists.clear();
        self.bytes = 0;
    }
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
        LIVE.fetch_sub(bytes as u64, Ordering::Relaxed);
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
    fn counted(words: Vec<u64>, len: usize) -> Self {
        LIVE.fetch_add(words.len() as u64 * 8, Ordering::Relaxed);
        CpuBuffer { words, len }
    }

    /// A zero-filled buffer of `len` bytes; an out-of-memory error naming `op` over the limit.
    pub fn zeroed(op: &str, len: usize) -> Result<Self> {
        Ok(Self::counted(alloc_words(op, len.div_ceil(8), true)?, len))
    }

    /// A buffer of `len` bytes with unspecified (but initialized) contents — a recycled
    /// buffer's old values, or zeros — for an output the caller overwrites entirely.
    pub fn for_overwrite(op: &str, len: usize) -> Result<Self> {
        let n = len.div_ceil(8);
        if n.saturating_mul(8) >= MIN_POOLED {
            let mut p = pool().lock();
            if let Some(words) = p.lists.get_mut(&n).and_then(Vec::pop) {
                p.bytes -= n * 8;
                drop(p);
                let (live, limit) = cpu_memory_usage();
                if (n as u64 * 8).saturating_add(live) > limit {
                    return Err(oom(op, n as u64 * 8, live, limit, ""));
                }
                return Ok(Self::counted(words, len));
            }
        }
        Self::zeroed(op, len)
    }

    /// A copy of `bytes`, written once (no zero fill first: outputs of CPU ops pass through here).
    pub fn from_bytes(op: &str, bytes: &[u8]) -> Result<Self> {
        let n = bytes.len().div_ceil(8);
        let mut words = alloc_words(op, n, false)?;
        // One memcpy (the bytes need not be 8-aligned; the words are): a per-word loop ran at
        // ~50 MB/s in debug builds, and an image batch is tens of MB.
        words.resize(n, 0);
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Ok(Self::counted(words, bytes.len()))
    }

    pub fn from_slice<T: Pod>(op: &str, data: &[T]) -> Result<Self> {
        Self::from_bytes(op, bytemuck::cast_slice(data))
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

    /// Held by tests that use the process-wide pool: an out-of-memory refusal in one test
    /// clears the pool (`Pool::clear`), which would race the recycling check of another.
    static POOL_TESTS: Mutex<()> = Mutex::new(());

    #[test]
    fn typed_views_round_trip() {
        let b = CpuBuffer::from_slice("t", &[1.5f64, -2.0]).unwrap();
        assert_eq!(b.len(), 16);
        assert_eq!(b.as_slice::<f64>(), &[1.5, -2.0]);
        let c = CpuBuffer::from_bytes("t", &[1, 2, 3]).unwrap();
        assert_eq!(c.bytes(), &[1, 2, 3]);
        assert_eq!(c.as_slice::<u8>(), &[1, 2, 3]);
        let bytes: Vec<u8> = (0..21u8).collect();
        assert_eq!(
            CpuBuffer::from_bytes("t", &bytes).unwrap().bytes(),
            &bytes[..],
            "two words and a tail"
        );
    }

    #[test]
    fn dropped_buffers_are_recycled_for_overwrite() {
        let _pool = POOL_TESTS.lock();
        // A size no other test uses: the pool is process-wide.
        let len = MIN_POOLED + 8 * 13 + 3;
        let mut a = CpuBuffer::for_overwrite("t", len).unwrap();
        assert_eq!(a.len(), len);
        a.bytes_mut().fill(7);
        let ptr = a.words.as_ptr();
        drop(a);
        let b = CpuBuffer::for_overwrite("t", len).unwrap();
        assert_eq!(b.words.as_ptr(), ptr, "the dropped buffer is handed out again");
        assert_eq!(b.len(), len);
        // Small buffers are not pooled; zeroed() never takes from the pool.
        assert!(CpuBuffer::zeroed("t", len).unwrap().bytes().iter().all(|&x| x == 0));
        drop(b);
        let small = CpuBuffer::for_overwrite("t", 100).unwrap();
        assert!(small.bytes().iter().all(|&x| x == 0));
    }

    #[test]
    fn huge_requests_are_refused_before_allocating() {
        let _pool = POOL_TESTS.lock();
        for len in [1usize << 50, usize::MAX - 3, (1usize << 62) + 1] {
            let e = CpuBuffer::zeroed("zeros", len).err().expect("refused");
            assert!(
                matches!(e.kind, mpsrt_core::ErrorKind::OutOfMemory | mpsrt_core::ErrorKind::Shape),
                "{e}"
            );
            assert!(e.to_string().starts_with("[zeros] "), "{e}");
            assert!(CpuBuffer::for_overwrite("t", len).is_err());
            assert!(host_vec::<f32>("t", len, 0.0).is_err());
        }
        let e = CpuBuffer::zeroed("zeros", 1 << 50).err().unwrap();
        assert!(e.to_string().contains("MPSRT_CPU_MEMORY_LIMIT"), "{e}");
        assert!(check_host_alloc("t", 1 << 10).is_ok());
    }
}
