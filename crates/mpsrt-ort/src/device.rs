//! Device memory for ORT: one `OrtMemoryInfo` per mpsrt GPU (registered on the `OrtEpDevice`
//! with `EpDevice_AddAllocatorInfo`), the `OrtAllocator` ORT allocates fused-node inputs and
//! outputs and IO-bound values with, and the `OrtDataTransferImpl` that copies between that
//! memory and the host. With these, ORT keeps tensors between two claimed subgraphs, and
//! values bound with `IOBinding`, on the GPU; `Compute` reads them in place.
//!
//! The memory info names a private vendor id ([`MEMORY_VENDOR_ID`]), not the adapter's PCI id:
//! our addresses are mpsrt buffers, not CUDA pointers, and must never be mistaken for another
//! EP's memory on the same card (the CUDA EP's is `GPU / 0x10DE / 0`).
//! Host→device copies of int64/float64 values also keep a host mirror (`memory`), which
//! `Compute` reads instead of the device (the engine holds those types on the host), and
//! device→host copies of a mirrored range are answered from it.
//! `MPSRT_ORT_DEVICE_MEMORY=0` registers no memory info: inputs and outputs then live in host
//! memory and every `Compute` uploads and downloads (the path before this module).

use crate::abi::*;
use crate::memory;
use crate::ort::{self, api, ep_api};
use std::ffi::{c_void, CString};
use std::ptr;
use std::sync::Mutex;

/// Vendor id of mpsrt device memory in ORT's `OrtDevice` ("MPSR").
pub const MEMORY_VENDOR_ID: u32 = 0x4D50_5352;

/// One registered memory info: mpsrt GPU index and ORT's handle.
pub struct MemInfo {
    pub gpu: usize,
    pub info: *mut OrtMemoryInfo,
}

/// The memory infos, created once per GPU and kept for the life of the process: a session
/// made before `unregister_execution_provider_library` outlives our factory and still holds
/// allocators (and ORT holds the data transfer) that point at them.
pub struct MemInfos(Mutex<Vec<MemInfo>>);

pub static INFOS: MemInfos = MemInfos(Mutex::new(Vec::new()));

// SAFETY: ORT's memory infos are immutable once created; we only hand their pointers back.
unsafe impl Send for MemInfos {}
unsafe impl Sync for MemInfos {}

pub fn enabled() -> bool {
    std::env::var("MPSRT_ORT_DEVICE_MEMORY").map_or(true, |v| v != "0")
}

impl MemInfos {
    /// The memory info of GPU `gpu`, created on first use.
    pub fn for_gpu(&self, gpu: usize) -> ort::R<*mut OrtMemoryInfo> {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = v.iter().find(|m| m.gpu == gpu) {
            return Ok(m.info);
        }
        let name = CString::new(format!("MpsrtExecutionProvider GPU {gpu}")).unwrap_or_default();
        let mut info = ptr::null_mut();
        // SAFETY: per the C API.
        ort::check(unsafe {
            api().CreateMemoryInfo_V2(
                name.as_ptr(),
                MEM_DEVICE_GPU,
                MEMORY_VENDOR_ID,
                gpu as i32,
                MEM_TYPE_DEFAULT,
                0,
                DEVICE_ALLOCATOR,
                &mut info,
            )
        })?;
        v.push(MemInfo { gpu, info });
        Ok(info)
    }

    /// The GPU of a memory info we created (by pointer, else by its memory device).
    pub fn gpu_of(&self, info: *const OrtMemoryInfo) -> Option<(usize, *mut OrtMemoryInfo)> {
        let v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = v.iter().find(|m| ptr::eq(m.info, info)) {
            return Some((m.gpu, m.info));
        }
        let e = ep_api();
        // SAFETY: per the C API.
        let dev = unsafe { (e.memory_info_get_memory_device)(info) };
        v.iter()
            .find(|m| unsafe {
                (e.memory_device_are_equal)((e.memory_info_get_memory_device)(m.info), dev)
            })
            .map(|m| (m.gpu, m.info))
    }

    /// Whether `d` is one of our memory devices.
    pub fn is_ours(&self, d: *const OrtMemoryDevice) -> bool {
        let v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let e = ep_api();
        // SAFETY: per the C API.
        v.iter().any(|m| unsafe {
            (e.memory_device_are_equal)((e.memory_info_get_memory_device)(m.info), d)
        })
    }
}

/// Our allocator: `OrtAllocator` first, so ORT's pointer is ours.
#[repr(C)]
pub struct Allocator {
    base: OrtAllocatorImpl,
    gpu: usize,
    info: *mut OrtMemoryInfo,
}

pub fn new_allocator(gpu: usize, info: *mut OrtMemoryInfo) -> Box<Allocator> {
    Box::new(Allocator {
        base: OrtAllocatorImpl {
            version: ORT_API_LEVEL,
            alloc: a_alloc,
            free: a_free,
            info: a_info,
            reserve: a_alloc,
            get_stats: None,
            alloc_on_stream: None,
            reserved: [None; RESERVED],
        },
        gpu,
        info,
    })
}

unsafe extern "C" fn a_alloc(this: *mut OrtAllocatorImpl, size: usize) -> *mut c_void {
    let r = std::panic::catch_unwind(|| {
        // SAFETY: `this` is our Allocator.
        let a = unsafe { &*(this as *const Allocator) };
        match memory::alloc(a.gpu, size) {
            Ok(p) => p as *mut c_void,
            Err(e) => {
                // ORT turns NULL into its own out-of-memory error; say why first.
                eprintln!("[mpsrt-ort] allocating {size} bytes on GPU {}: {e}", a.gpu);
                ptr::null_mut()
            }
        }
    });
    r.unwrap_or(ptr::null_mut())
}

unsafe extern "C" fn a_free(_: *mut OrtAllocatorImpl, p: *mut c_void) {
    let _ = std::panic::catch_unwind(|| {
        if !p.is_null() && !memory::free(p as usize) {
            crate::log(&format!("Free({p:p}): not an allocation of ours (ignored)"));
        }
    });
}

unsafe extern "C" fn a_info(this: *const OrtAllocatorImpl) -> *const OrtMemoryInfo {
    // SAFETY: `this` is our Allocator.
    unsafe { (*(this as *const Allocator)).info }
}

/// Our data transfer: `OrtDataTransferImpl` first. One per process, never freed (ORT's
/// Release is a no-op): sessions may use it after our factory is released.
#[repr(C)]
pub struct DataTransfer {
    base: OrtDataTransferImpl,
}

// SAFETY: immutable function table.
unsafe impl Sync for DataTransfer {}

pub static TRANSFER: DataTransfer = DataTransfer {
    base: OrtDataTransferImpl {
        ort_version_supported: ORT_API_LEVEL,
        release: t_release,
        can_copy: t_can_copy,
        copy_tensors: t_copy,
        reserved: [None; RESERVED],
    },
};

unsafe extern "C" fn t_release(_: *mut OrtDataTransferImpl) {}

unsafe extern "C" fn t_can_copy(
    this: *const OrtDataTransferImpl,
    src: *const OrtMemoryDevice,
    dst: *const OrtMemoryDevice,
) -> bool {
    std::panic::catch_unwind(|| {
        let _ = this;
        let infos = &INFOS;
        let e = ep_api();
        // SAFETY: per the C API.
        let host = |d| unsafe {
            (e.memory_device_get_device_type)(d) == MEM_DEVICE_CPU
                || (e.memory_device_get_memory_type)(d) == MEM_TYPE_HOST_ACCESSIBLE
        };
        let (s, d) = (infos.is_ours(src), infos.is_ours(dst));
        (s && (d || host(dst))) || (d && host(src))
    })
    .unwrap_or(false)
}

unsafe extern "C" fn t_copy(
    _: *mut OrtDataTransferImpl,
    src: *const *const OrtValue,
    dst: *const *mut OrtValue,
    _streams: *const *mut c_void,
    n: usize,
) -> Status {
    crate::guard("CopyTensors", || {
        // SAFETY: ORT passes `n` source and destination values.
        let pairs: Vec<(*const OrtValue, *mut OrtValue)> =
            (0..n).map(|i| unsafe { (*src.add(i), *dst.add(i)) }).collect();
        match copy_tensors(&pairs) {
            Ok(()) => ptr::null_mut(),
            Err(s) => s,
        }
    })
}

/// Host→device copies up to this size keep a host mirror whatever their element type (a copy
/// this small costs the host next to nothing; a read back costs a GPU round trip).
const SMALL_MIRROR_BYTES: usize = 64 << 10;

/// Copies each `(src, dst)` pair by where its bytes live: host→device writes, device→device
/// GPU copies, device→host reads batched into one submission and one wait per GPU.
fn copy_tensors(pairs: &[(*const OrtValue, *mut OrtValue)]) -> ort::R<()> {
    let a = api();
    let mut reads: Vec<(usize, usize, *mut u8)> = Vec::new(); // (device addr, len, host dst)
    for &(s, d) in pairs {
        let (mut sp, mut dp, mut len) = (ptr::null(), ptr::null_mut(), 0usize);
        // SAFETY: per the C API.
        unsafe {
            ort::check(a.GetTensorSizeInBytes(s, &mut len))?;
            if len == 0 {
                continue;
            }
            ort::check(a.GetTensorData(s, &mut sp))?;
            ort::check(a.GetTensorMutableData(d, &mut dp))?;
        }
        let (sa, da) = (sp as usize, dp as usize);
        let fail = |e: mpsrt_core::Error| ort::fail(format!("copying {len} bytes: {e}"));
        match (memory::is_device(sa), memory::is_device(da)) {
            (false, true) => {
                let (buf, off) = memory::resolve("CopyTensors", da, len).map_err(fail)?;
                // SAFETY: ORT's host tensor holds `len` bytes.
                let data = unsafe { std::slice::from_raw_parts(sp as *const u8, len) };
                memory::write_at(&buf, off, data).map_err(fail)?;
                memory::count(memory::H2D, len);
                // int64/float64 (ids, masks): `Compute` wants them on the host; keep a copy
                // so it need not read them back (see `memory`'s host mirrors). Small values
                // of any type too: ORT's Python `update_inplace` copies raw bytes (both sides
                // typed uint8), so the type does not tell an int64 IO-bound input apart.
                let (elem, _) = ort::value_tensor_type(s)?;
                let host_type =
                    crate::convert::feed_dtype(elem).is_some_and(|d| !d.gpu_supported());
                if (host_type && len <= memory::MIRROR_MAX_BYTES) || len <= SMALL_MIRROR_BYTES {
                    memory::set_mirror(&buf, off, data.into());
                }
            }
            (true, true) => {
                let (sb, so) = memory::resolve("CopyTensors", sa, len).map_err(fail)?;
                let (db, doff) = memory::resolve("CopyTensors", da, len).map_err(fail)?;
                memory::copy_between(&sb, so, &db, doff, len).map_err(fail)?;
                memory::count(memory::D2D, len);
            }
            (true, false) => {
                // A value `Compute` or this transfer uploaded from the host (an int64 result,
                // say) still has its host copy: no GPU read back.
                let (buf, off) = memory::resolve("CopyTensors", sa, len).map_err(fail)?;
                match memory::mirror(&buf, off, len) {
                    Some(m) => {
                        // SAFETY: the host tensor holds `len` bytes, as the mirror does.
                        unsafe { ptr::copy_nonoverlapping(m.as_ptr(), dp as *mut u8, len) };
                        memory::count(memory::READ_MIRRORED, 1);
                    }
                    None => reads.push((sa, len, dp as *mut u8)),
                }
            }
            // SAFETY: both host tensors of `len` bytes.
            (false, false) => unsafe { ptr::copy(sp as *const u8, dp as *mut u8, len) },
        }
    }
    read_to_host(&reads)
}

/// Device ranges → host pointers, one `read_many` per GPU.
pub fn read_to_host(reads: &[(usize, usize, *mut u8)]) -> ort::R<()> {
    if reads.is_empty() {
        return Ok(());
    }
    let fail = |e: mpsrt_core::Error| ort::fail(format!("reading device memory: {e}"));
    let resolved = reads
        .iter()
        .map(|&(addr, len, _)| memory::resolve("CopyTensors", addr, len))
        .collect::<mpsrt_core::Result<Vec<_>>>()
        .map_err(fail)?;
    let mut devices: Vec<usize> = resolved.iter().map(|(b, _)| b.device().index()).collect();
    devices.sort_unstable();
    devices.dedup();
    for dev in devices {
        let idx: Vec<usize> =
            (0..reads.len()).filter(|&i| resolved[i].0.device().index() == dev).collect();
        let parts: Vec<_> = idx
            .iter()
            .map(|&i| (&*resolved[i].0, resolved[i].1 as u64, reads[i].1 as u64))
            .collect();
        let data = resolved[idx[0]].0.device().read_many(&parts).map_err(fail)?;
        for (&i, bytes) in idx.iter().zip(data) {
            // SAFETY: the destination host tensor holds `len` bytes.
            unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), reads[i].2, reads[i].1) };
            memory::count(memory::D2H, reads[i].1);
        }
    }
    Ok(())
}
