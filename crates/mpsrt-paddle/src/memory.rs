//! Device memory as Paddle sees it. wgpu buffers have no addresses, so each allocation gets a
//! fabricated address inside a `PROT_NONE` reservation (a host dereference faults at once
//! instead of reading stray memory) and an entry in an address → buffer map. Paddle's
//! auto-growth allocator sub-allocates those chunks and tensor views add byte offsets, so
//! lookups take any address inside a chunk and resolve it to `(buffer, byte offset)`.
//!
//! Copies: the GPU copies whole 4-byte words at 4-byte offsets. Ranges that start or end
//! inside a word (bool / int8 / f16 tensors of odd size, views at odd offsets) copy the
//! aligned middle on the device and patch the ragged edge words on the host, so bytes next to
//! the range (another sub-allocation) are never clobbered.

use mpsrt_core::{Error, Result};
use mpsrt_runtime::GpuBuffer;
use mpsrt_tensor::Tensor;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One allocation handed to Paddle.
struct Chunk {
    buf: Arc<GpuBuffer>,
    size: usize,
}

struct Space {
    next: usize,
    end: usize,
    chunks: BTreeMap<usize, Chunk>,
}

static SPACE: Mutex<Option<Space>> = Mutex::new(None);

/// Addresses are handed out 4 KiB apart (Paddle aligns sub-allocations to the min chunk size).
const ADDR_ALIGN: usize = 4096;

fn reserve() -> Result<Space> {
    // PROT_NONE + MAP_NORESERVE costs address space only; try smaller sizes under ulimit -v.
    for shift in [44u32, 40, 36, 32] {
        let len = 1usize << shift;
        #[cfg(target_os = "linux")]
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        #[cfg(not(target_os = "linux"))]
        let flags = libc::MAP_PRIVATE | libc::MAP_ANON;
        // SAFETY: an anonymous PROT_NONE mapping at an address the kernel picks touches no
        // existing memory.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_NONE, flags, -1, 0) };
        if p != libc::MAP_FAILED {
            let base = p as usize;
            return Ok(Space {
                next: base.next_multiple_of(ADDR_ALIGN),
                end: base + len,
                chunks: BTreeMap::new(),
            });
        }
    }
    Err(Error::device(
        "allocate",
        "could not reserve address space for device pointers (mmap failed)",
    ))
}

/// Register `buf` and return its fabricated address.
pub fn insert(buf: GpuBuffer, size: usize) -> Result<usize> {
    let mut g = SPACE.lock();
    if g.is_none() {
        *g = Some(reserve()?);
    }
    let s = g.as_mut().expect("reserved above");
    let addr = s.next;
    let step = size.max(1).next_multiple_of(ADDR_ALIGN);
    if addr + step > s.end {
        return Err(Error::oom("allocate", "the plugin's device address space is exhausted"));
    }
    s.next += step;
    s.chunks.insert(addr, Chunk { buf: Arc::new(buf), size });
    Ok(addr)
}

/// Forget the allocation at `addr` (the buffer returns to mpsrt's allocator once the last
/// in-flight kernel that holds it has finished).
pub fn remove(addr: usize) -> bool {
    SPACE.lock().as_mut().and_then(|s| s.chunks.remove(&addr)).is_some()
}

/// The buffer holding `[addr, addr + len)` and the byte offset of `addr` in it.
pub fn resolve(op: &str, addr: usize, len: usize) -> Result<(Arc<GpuBuffer>, usize)> {
    let g = SPACE.lock();
    let found = g.as_ref().and_then(|s| s.chunks.range(..=addr).next_back());
    match found {
        Some((&base, c)) if addr - base + len <= c.size => Ok((c.buf.clone(), addr - base)),
        Some((&base, c)) if addr - base < c.size.max(1) => Err(Error::invalid(
            op,
            format!(
                "range {addr:#x}+{len} runs past the end of its allocation ({base:#x}, {} bytes)",
                c.size
            ),
        )),
        _ => Err(Error::invalid(
            op,
            format!("{addr:#x} is not an mps device address of this plugin"),
        )),
    }
}

/// Bytes held by chunks handed to Paddle.
pub fn chunk_bytes() -> usize {
    SPACE.lock().as_ref().map_or(0, |s| s.chunks.values().map(|c| c.size).sum())
}

/// Host bytes → device.
pub fn write(addr: usize, data: &[u8]) -> Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    let (buf, off) = resolve("memory_copy_h2d", addr, data.len())?;
    write_at(&buf, off, data)
}

fn write_at(buf: &GpuBuffer, off: usize, data: &[u8]) -> Result<()> {
    let dev = buf.device();
    let end = off + data.len();
    if off.is_multiple_of(4) && end.is_multiple_of(4) {
        return dev.write(buf, off as u64, data);
    }
    // Ragged edges: merge with the bytes already in the first and last word.
    let (start, stop) = (off & !3, end.next_multiple_of(4));
    let mut words = vec![0u8; stop - start];
    let head = dev.read(buf, start as u64, 4)?;
    words[..4].copy_from_slice(&head);
    let tail = dev.read(buf, (stop - 4) as u64, 4)?;
    let n = words.len();
    words[n - 4..].copy_from_slice(&tail);
    words[off - start..end - start].copy_from_slice(data);
    dev.write(buf, start as u64, &words)
}

/// Device → host bytes.
pub fn read(addr: usize, out: &mut [u8]) -> Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let (buf, off) = resolve("memory_copy_d2h", addr, out.len())?;
    let v = buf.device().read(&buf, off as u64, out.len() as u64)?;
    out.copy_from_slice(&v);
    Ok(())
}

/// Device → device (any offsets, also inside one buffer).
pub fn copy(dst: usize, src: usize, len: usize) -> Result<()> {
    if len == 0 || dst == src {
        return Ok(());
    }
    let (sb, so) = resolve("memory_copy_d2d", src, len)?;
    let (db, doff) = resolve("memory_copy_d2d", dst, len)?;
    copy_between(&sb, so, &db, doff, len)
}

fn copy_between(sb: &GpuBuffer, so: usize, db: &GpuBuffer, doff: usize, len: usize) -> Result<()> {
    let dev = db.device();
    if sb.device().index() != dev.index() {
        let v = sb.device().read(sb, so as u64, len as u64)?;
        return write_at(db, doff, &v);
    }
    let aligned = (so | doff | len).is_multiple_of(4);
    if aligned && !std::ptr::eq(sb, db) {
        return dev.copy(sb, so as u64, db, doff as u64, len as u64);
    }
    if aligned {
        // wgpu refuses a copy whose source and destination are the same buffer: bounce.
        let tmp = dev.alloc("memory_copy_d2d", len as u64)?;
        dev.copy(sb, so as u64, &tmp, 0, len as u64)?;
        return dev.copy(&tmp, 0, db, doff as u64, len as u64);
    }
    if so % 4 == doff % 4 {
        // Same phase: the word-aligned middle on the device, the edges through the host.
        let head = (4 - so % 4) % 4;
        let mid = (len - head.min(len)) & !3;
        if head > 0 {
            let v = dev.read(sb, so as u64, head.min(len) as u64)?;
            write_at(db, doff, &v)?;
        }
        if mid > 0 {
            copy_between(sb, so + head, db, doff + head, mid)?;
        }
        let done = head.min(len) + mid;
        if done < len {
            let v = dev.read(sb, (so + done) as u64, (len - done) as u64)?;
            write_at(db, doff + done, &v)?;
        }
        return Ok(());
    }
    let v = dev.read(sb, so as u64, len as u64)?;
    write_at(db, doff, &v)
}

/// `memset(addr, value, len)`.
pub fn fill(addr: usize, value: u8, len: usize) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let (buf, off) = resolve("device_memory_set", addr, len)?;
    write_at(&buf, off, &vec![value; len])
}

/// Store a dense tensor computed by mpsrt into Paddle's window at `addr`.
pub fn store(op: &str, addr: usize, t: &Tensor) -> Result<()> {
    let t = t.contiguous()?;
    let es = t.dtype().size();
    let len = t.numel() * es;
    if len == 0 {
        return Ok(());
    }
    let (db, doff) = resolve(op, addr, len)?;
    match t.storage() {
        // Computed in place (`mt::with_destination`): nothing to copy.
        mpsrt_runtime::Storage::Gpu(sb)
            if Arc::ptr_eq(sb, &db) && t.layout().offset * es == doff =>
        {
            Ok(())
        }
        mpsrt_runtime::Storage::Gpu(sb) => copy_between(sb, t.layout().offset * es, &db, doff, len),
        mpsrt_runtime::Storage::Cpu(_) => write_at(&db, doff, &t.to_bytes()?),
    }
}
