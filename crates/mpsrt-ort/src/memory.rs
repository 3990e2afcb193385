//! Device memory as ONNX Runtime sees it. ORT's allocator interface hands out raw `void*`, but
//! mpsrt's GPU buffers (wgpu) have no addresses; so each allocation gets an address inside a
//! `PROT_NONE` reservation (ORT never dereferences device memory; if anything on the host ever
//! did, it would fault at once instead of reading stray memory) and an entry in an address →
//! buffer map. ORT places tensors at offsets inside one allocation (its memory-pattern planner
//! allocates one block per run), so lookups take any address inside an allocation and resolve
//! it to `(buffer, byte offset)`.
//!
//! The GPU copies whole 4-byte words at 4-byte offsets; ranges that start or end inside a word
//! (bool / uint8 / fp16 tensors of odd size) copy the aligned middle on the device and merge
//! the ragged edge words through the host, so neighbouring tensors are never clobbered.
//!
//! Host mirrors: values of types the GPU does not hold (int64, float64: token ids, masks,
//! positions) reach `Compute` in device memory when ORT copies a graph input there, but the
//! engine wants them on the host (it narrows them itself). Reading them back would cost a GPU
//! round trip per input per run, so every host→device write of such a value also keeps its
//! bytes here ([`set_mirror`]), keyed by buffer and byte range; `Compute` takes them from
//! [`mirror`]. Every device write through this module ([`write_at`], [`copy_between`]) drops
//! the mirrors it overlaps (a whole-range device copy carries the source's mirror along) and
//! [`free`] drops an allocation's mirrors, so a mirror always equals what the GPU holds (or
//! will hold once the queued write lands: the queue runs in order).

use mpsrt_core::{Error, Result};
use mpsrt_runtime::GpuBuffer;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

struct Chunk {
    buf: Arc<GpuBuffer>,
    size: usize,
}

struct Space {
    start: usize,
    next: usize,
    end: usize,
    chunks: BTreeMap<usize, Chunk>,
    /// Freed address ranges by size, reused before the reservation grows (ORT frees and
    /// allocates the same sizes run after run).
    free: BTreeMap<usize, Vec<usize>>,
}

static SPACE: Mutex<Option<Space>> = Mutex::new(None);

/// A host copy of `len` bytes at byte `off` of a buffer.
struct Mirror {
    off: usize,
    bytes: Arc<[u8]>,
}

/// Host mirrors by buffer (its address as the key: a buffer has mirrors only while an
/// allocation registers it, and [`free`] drops them before the buffer can go away).
static MIRRORS: Mutex<BTreeMap<usize, Vec<Mirror>>> = Mutex::new(BTreeMap::new());

/// Largest value kept as a host mirror; a larger one is read back when `Compute` needs it.
pub const MIRROR_MAX_BYTES: usize = 64 << 20;

fn mirrors() -> std::sync::MutexGuard<'static, BTreeMap<usize, Vec<Mirror>>> {
    MIRRORS.lock().unwrap_or_else(|p| p.into_inner())
}

fn key(buf: &GpuBuffer) -> usize {
    buf as *const GpuBuffer as usize
}

/// Drops the mirrors of `buf` that overlap `[off, off + len)`.
fn invalidate(buf: &GpuBuffer, off: usize, len: usize) {
    let mut m = mirrors();
    if let Some(v) = m.get_mut(&key(buf)) {
        v.retain(|x| x.off + x.bytes.len() <= off || off + len <= x.off);
        if v.is_empty() {
            m.remove(&key(buf));
        }
    }
}

/// Whether host mirrors are kept (`MPSRT_ORT_HOST_MIRROR=0` turns them off, to measure what
/// they save: every device input the engine wants on the host is then read back).
fn mirrors_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MPSRT_ORT_HOST_MIRROR").map_or(true, |v| v != "0"))
}

/// Records `bytes` as the host copy of `buf[off..off + bytes.len()]` (already written, or
/// queued, to the device by the caller). Values over [`MIRROR_MAX_BYTES`] are not kept.
pub fn set_mirror(buf: &GpuBuffer, off: usize, bytes: Arc<[u8]>) {
    invalidate(buf, off, bytes.len());
    if bytes.is_empty() || bytes.len() > MIRROR_MAX_BYTES || !mirrors_enabled() {
        return;
    }
    mirrors().entry(key(buf)).or_default().push(Mirror { off, bytes });
}

/// The host copy of exactly `buf[off..off + len]`, if one is kept.
pub fn mirror(buf: &GpuBuffer, off: usize, len: usize) -> Option<Arc<[u8]>> {
    let m = mirrors();
    let v = m.get(&key(buf))?;
    v.iter().find(|x| x.off == off && x.bytes.len() == len).map(|x| x.bytes.clone())
}

thread_local! {
    /// A buffer the next allocation of exactly its length on this thread adopts instead of
    /// allocating (see [`adopting`]).
    static ADOPT: std::cell::RefCell<Option<(Arc<GpuBuffer>, usize)>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` (which makes ORT allocate one output) so that an allocation of exactly `len` bytes
/// on `buf`'s device made during it registers `buf` itself: the engine's result becomes ORT's
/// output without a copy. The caller passes only buffers nothing else holds.
pub fn adopting<T>(buf: Arc<GpuBuffer>, len: usize, f: impl FnOnce() -> T) -> T {
    ADOPT.with(|a| *a.borrow_mut() = Some((buf, len)));
    let r = f();
    ADOPT.with(|a| a.borrow_mut().take());
    r
}

/// Allocations start 256 bytes apart at least (ORT aligns tensors to 64 bytes inside them).
const ADDR_ALIGN: usize = 256;

fn reserve() -> Result<Space> {
    // PROT_NONE + MAP_NORESERVE costs address space only; smaller sizes under `ulimit -v`.
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
            let base = (p as usize).next_multiple_of(ADDR_ALIGN);
            return Ok(Space {
                start: base,
                next: base,
                end: p as usize + len,
                chunks: BTreeMap::new(),
                free: BTreeMap::new(),
            });
        }
    }
    Err(Error::device("allocate", "could not reserve address space for device pointers (mmap)"))
}

fn lock() -> std::sync::MutexGuard<'static, Option<Space>> {
    SPACE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Allocates `size` bytes on GPU `device` and returns the address ORT sees.
pub fn alloc(device: usize, size: usize) -> Result<usize> {
    let adopted = ADOPT.with(|a| {
        let mut a = a.borrow_mut();
        match a.as_ref() {
            Some((b, len)) if *len == size && b.device().index() == device => a.take(),
            _ => None,
        }
    });
    let buf = match adopted {
        Some((b, _)) => b,
        None => {
            let dev = mpsrt_runtime::gpu_device(device)?;
            let bytes = size.max(4).next_multiple_of(4) as u64;
            Arc::new(dev.alloc("MpsrtExecutionProvider allocator", bytes)?)
        }
    };
    let mut g = lock();
    if g.is_none() {
        *g = Some(reserve()?);
    }
    let s = g.as_mut().expect("reserved above");
    let step = size.max(1).next_multiple_of(ADDR_ALIGN);
    let addr = match s.free.get_mut(&step).and_then(Vec::pop) {
        Some(a) => a,
        None => {
            if s.next + step > s.end {
                return Err(Error::oom("allocate", "the EP's device address space is exhausted"));
            }
            s.next += step;
            s.next - step
        }
    };
    s.chunks.insert(addr, Chunk { buf, size });
    Ok(addr)
}

/// Frees the allocation at `addr` (the buffer returns to mpsrt's caching allocator once the
/// last in-flight kernel holding it has finished). False if `addr` is not one of ours.
pub fn free(addr: usize) -> bool {
    let mut g = lock();
    let Some(s) = g.as_mut() else { return false };
    match s.chunks.remove(&addr) {
        Some(c) => {
            s.free.entry(c.size.max(1).next_multiple_of(ADDR_ALIGN)).or_default().push(addr);
            drop(g);
            mirrors().remove(&key(&c.buf));
            true
        }
        None => false,
    }
}

/// Whether `addr` lies in our reservation (device memory) rather than host memory.
pub fn is_device(addr: usize) -> bool {
    lock().as_ref().is_some_and(|s| addr >= s.start && addr < s.end)
}

/// The buffer holding `[addr, addr + len)` and the byte offset of `addr` in it.
pub fn resolve(op: &str, addr: usize, len: usize) -> Result<(Arc<GpuBuffer>, usize)> {
    let g = lock();
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
            format!("{addr:#x} is not a live MpsrtExecutionProvider allocation"),
        )),
    }
}

/// Host bytes → device at `(buf, off)`.
pub fn write_at(buf: &GpuBuffer, off: usize, data: &[u8]) -> Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    invalidate(buf, off, data.len());
    let dev = buf.device();
    let end = off + data.len();
    if off.is_multiple_of(4) && end.is_multiple_of(4) {
        return dev.write(buf, off as u64, data);
    }
    // Ragged edges: merge with the bytes already in the first and last word.
    let (start, stop) = (off & !3, end.next_multiple_of(4));
    let mut words = dev.read(buf, start as u64, (stop - start) as u64)?;
    words[off - start..end - start].copy_from_slice(data);
    dev.write(buf, start as u64, &words)
}

/// Device → device between two windows (any offsets; also inside one buffer). A host mirror
/// of exactly the source range goes with the bytes.
pub fn copy_between(
    sb: &GpuBuffer,
    so: usize,
    db: &GpuBuffer,
    doff: usize,
    len: usize,
) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let carried = mirror(sb, so, len);
    invalidate(db, doff, len);
    copy_device(sb, so, db, doff, len)?;
    if let Some(m) = carried {
        set_mirror(db, doff, m);
    }
    Ok(())
}

fn copy_device(sb: &GpuBuffer, so: usize, db: &GpuBuffer, doff: usize, len: usize) -> Result<()> {
    let dev = db.device();
    let same_device = sb.device().index() == dev.index();
    let aligned = (so | doff | len).is_multiple_of(4);
    if same_device && aligned && !std::ptr::eq(sb, db) {
        return dev.copy(sb, so as u64, db, doff as u64, len as u64);
    }
    if same_device && aligned {
        // wgpu refuses a copy whose source and destination are the same buffer: bounce.
        let tmp = dev.alloc("MpsrtExecutionProvider copy", len as u64)?;
        dev.copy(sb, so as u64, &tmp, 0, len as u64)?;
        return dev.copy(&tmp, 0, db, doff as u64, len as u64);
    }
    // Another device or ragged edges: through the host (rare: odd-sized bool/uint8/fp16).
    let v = sb.device().read(sb, so as u64, len as u64)?;
    write_at(db, doff, &v)
}

/// Traffic counters, read by tests through [`crate::mpsrt_ort_stats`] to prove where bytes
/// went: `[host→device bytes, device→host bytes, device→device bytes, inputs read in place,
/// inputs copied, outputs written on the device, outputs written to host memory, outputs whose
/// engine buffer ORT adopted (no copy), inputs in device memory taken from their host mirror
/// (no read back), device→host copies answered from a host mirror (no read back, not counted
/// in device→host bytes)]`. Reads `Compute` makes of device inputs count in device→host bytes.
pub static STATS: [AtomicU64; 10] = [const { AtomicU64::new(0) }; 10];
pub const H2D: usize = 0;
pub const D2H: usize = 1;
pub const D2D: usize = 2;
pub const IN_PLACE: usize = 3;
pub const IN_COPIED: usize = 4;
pub const OUT_DEVICE: usize = 5;
pub const OUT_HOST: usize = 6;
pub const OUT_ADOPTED: usize = 7;
pub const IN_MIRRORED: usize = 8;
pub const READ_MIRRORED: usize = 9;

pub fn count(which: usize, n: usize) {
    STATS[which].fetch_add(n as u64, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_resolve_inside_and_refuse_outside_their_allocation() {
        if mpsrt_runtime::device_count() == 0 {
            eprintln!("no GPU: skipped");
            return;
        }
        let a = alloc(0, 1000).unwrap();
        let b = alloc(0, 10).unwrap();
        assert!(is_device(a) && is_device(b) && !is_device(&a as *const _ as usize));
        let (buf, off) = resolve("t", a + 64, 100).unwrap();
        assert_eq!(off, 64);
        assert!(buf.size() >= 1000);
        let e = resolve("t", a + 990, 20).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("past the end"), "{e}");
        // Ragged write/read round trip (3 bytes at an odd offset) keeps the neighbours.
        write_at(&buf, 0, &[7u8; 16]).unwrap();
        write_at(&buf, 5, &[1, 2, 3]).unwrap();
        let back = buf.device().read(&buf, 0, 12).unwrap();
        assert_eq!(back, [7, 7, 7, 7, 7, 1, 2, 3, 7, 7, 7, 7]);
        let (bb, _) = resolve("t", b, 10).unwrap();
        copy_between(&buf, 4, &bb, 0, 6).unwrap();
        assert_eq!(bb.device().read(&bb, 0, 6).unwrap(), [7, 1, 2, 3, 7, 7]);
        // Host mirrors: kept per exact range, carried by a whole-range device copy, dropped
        // by an overlapping write and by freeing the allocation.
        let m: Arc<[u8]> = vec![9u8; 8].into();
        set_mirror(&buf, 16, m.clone());
        assert_eq!(mirror(&buf, 16, 8).as_deref(), Some(&m[..]));
        assert!(mirror(&buf, 16, 4).is_none() && mirror(&buf, 20, 4).is_none());
        copy_between(&buf, 16, &bb, 0, 8).unwrap();
        assert_eq!(mirror(&bb, 0, 8).as_deref(), Some(&m[..]));
        write_at(&buf, 0, &[1u8; 4]).unwrap(); // no overlap: kept
        assert!(mirror(&buf, 16, 8).is_some());
        write_at(&buf, 22, &[1u8; 4]).unwrap(); // overlaps its tail: dropped
        assert!(mirror(&buf, 16, 8).is_none());
        set_mirror(&buf, 16, m.clone());
        copy_between(&bb, 0, &buf, 12, 8).unwrap(); // a device copy over it: the source's
        assert!(mirror(&buf, 16, 8).is_none() && mirror(&buf, 12, 8).is_some());
        assert!(free(a) && free(b) && !free(a));
        assert!(mirror(&buf, 12, 8).is_none() && mirror(&bb, 0, 8).is_none());
        assert!(resolve("t", a, 4).is_err());
        // A freed range of the same size class is reused.
        let c = alloc(0, 900).unwrap();
        assert_eq!(c, a);
        assert!(free(c));
    }
}
