//! The runtime half of the plugin: the `C_DeviceInterface` slots Paddle calls for devices,
//! streams, events, memory and copies, mapped onto mpsrt's device registry, allocator and
//! command batches. One wgpu queue per device runs everything in order, so a stream is a token,
//! recording an event submits the open batch (the fence is the submission) and waiting on an
//! event or stream waits for the device.

use crate::abi::*;
use crate::{log, memory, stats};
use mpsrt_core::{Error, Result};
use std::ffi::c_void;
use std::sync::Arc;

/// Run a slot body: panics and errors become a status (and the message is kept for
/// `mpsrt_paddle_last_error` and printed, since Paddle's own message cannot carry it).
fn slot(op: &str, fail: C_Status, f: impl FnOnce() -> Result<()>) -> C_Status {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => C_SUCCESS,
        Ok(Err(e)) => {
            stats::set_error(&e.to_string());
            eprintln!("[mpsrt] {op}: {e}");
            fail
        }
        Err(p) => {
            let msg = crate::panic_message(&p);
            stats::set_error(&format!("[{op}] internal error: {msg}"));
            eprintln!("[mpsrt] {op}: internal error: {msg}");
            C_ERROR
        }
    }
}

fn dev_id(d: C_Device) -> usize {
    if d.is_null() {
        mpsrt_runtime::current_device()
    } else {
        // SAFETY: Paddle passes a live C_Device_st.
        unsafe { (*d).id.max(0) as usize }
    }
}

fn device(d: C_Device) -> Result<Arc<mpsrt_runtime::GpuDevice>> {
    mpsrt_runtime::gpu_device(dev_id(d))
}

extern "C-unwind" fn initialize() -> C_Status {
    C_SUCCESS
}
/// Paddle is shutting down: let the recorder thread (if on) finish what it holds first.
extern "C-unwind" fn finalize() -> C_Status {
    slot("finalize", C_ERROR, || {
        crate::kernels::drain();
        Ok(())
    })
}
extern "C-unwind" fn init_device(d: C_Device) -> C_Status {
    // Opening the wgpu device is deferred to its first allocation: Paddle initialises every
    // device at start-up, and a process that never uses 'mps' should not pay for it.
    slot("init_device", C_ERROR, || {
        mpsrt_runtime::validate_place(mpsrt_core::Place::Gpu(dev_id(d))).map(|_| ())
    })
}
extern "C-unwind" fn set_device(d: C_Device) -> C_Status {
    slot("set_device", C_ERROR, || mpsrt_runtime::set_current_device(dev_id(d)))
}
extern "C-unwind" fn get_device(d: C_Device) -> C_Status {
    slot("get_device", C_ERROR, || {
        if !d.is_null() {
            // SAFETY: Paddle passes a live C_Device_st to fill.
            unsafe { (*d).id = mpsrt_runtime::current_device() as i32 };
        }
        Ok(())
    })
}
extern "C-unwind" fn deinit_device(_d: C_Device) -> C_Status {
    slot("deinit_device", C_ERROR, || {
        crate::kernels::drain();
        Ok(())
    })
}

/// Streams are tokens (one in-order queue per device); a non-null value keeps Paddle happy.
extern "C-unwind" fn create_stream(_d: C_Device, s: *mut C_Stream) -> C_Status {
    slot("create_stream", C_ERROR, || {
        // SAFETY: Paddle passes a slot to fill.
        unsafe { *s = Box::into_raw(Box::new(0u8)) as C_Stream };
        Ok(())
    })
}
extern "C-unwind" fn destroy_stream(_d: C_Device, s: C_Stream) -> C_Status {
    slot("destroy_stream", C_ERROR, || {
        if !s.is_null() {
            // SAFETY: made by create_stream.
            drop(unsafe { Box::from_raw(s as *mut u8) });
        }
        Ok(())
    })
}
extern "C-unwind" fn sync_stream(d: C_Device, _s: C_Stream) -> C_Status {
    slot("synchronize_stream", C_ERROR, || sync(d))
}
extern "C-unwind" fn create_event(_d: C_Device, e: *mut C_Event) -> C_Status {
    slot("create_event", C_ERROR, || {
        // SAFETY: Paddle passes a slot to fill.
        unsafe { *e = Box::into_raw(Box::new(0u8)) as C_Event };
        Ok(())
    })
}
extern "C-unwind" fn destroy_event(_d: C_Device, e: C_Event) -> C_Status {
    slot("destroy_event", C_ERROR, || {
        if !e.is_null() {
            // SAFETY: made by create_event.
            drop(unsafe { Box::from_raw(e as *mut u8) });
        }
        Ok(())
    })
}
/// Recording an event submits the recorded work: the submission is the fence.
extern "C-unwind" fn record_event(d: C_Device, _s: C_Stream, _e: C_Event) -> C_Status {
    slot("record_event", C_ERROR, || {
        crate::kernels::drain();
        if mpsrt_runtime::device_count() == 0 {
            Ok(())
        } else {
            device(d)?.flush()
        }
    })
}
extern "C-unwind" fn sync_event(d: C_Device, _e: C_Event) -> C_Status {
    slot("synchronize_event", C_ERROR, || sync(d))
}
extern "C-unwind" fn query_event(d: C_Device, _e: C_Event) -> C_Status {
    slot("query_event", C_ERROR, || sync(d))
}
/// One in-order queue: work recorded later always runs after the event's work.
extern "C-unwind" fn stream_wait_event(_d: C_Device, _s: C_Stream, _e: C_Event) -> C_Status {
    C_SUCCESS
}
extern "C-unwind" fn sync_device(d: C_Device) -> C_Status {
    slot("synchronize_device", C_ERROR, || sync(d))
}

fn sync(d: C_Device) -> Result<()> {
    crate::kernels::drain();
    if let Some(e) = stats::take_pending_error() {
        return Err(Error::device("synchronize", e));
    }
    if mpsrt_runtime::device_count() == 0 {
        return Ok(());
    }
    device(d)?.synchronize()
}

/// Out of memory answers success with a null pointer: Paddle's allocator then frees its idle
/// cached chunks, retries, and raises its own out-of-memory error (`MemoryError` in Python)
/// instead of a generic device failure. The mpsrt message is printed and kept.
extern "C-unwind" fn allocate(d: C_Device, ptr: *mut *mut c_void, size: usize) -> C_Status {
    slot("device_memory_allocate", C_FAILED, || {
        let dev = device(d)?;
        let buf = match dev.alloc("paddle allocate", size.max(4) as u64) {
            Err(e) if e.kind == mpsrt_core::ErrorKind::OutOfMemory => {
                stats::set_error(&e.to_string());
                eprintln!("[mpsrt] device_memory_allocate: {e}");
                // SAFETY: Paddle passes a slot to fill.
                unsafe { *ptr = std::ptr::null_mut() };
                return Ok(());
            }
            r => r?,
        };
        let addr = memory::insert(buf, size)?;
        log!("allocate {size} -> {addr:#x}");
        // SAFETY: Paddle passes a slot to fill.
        unsafe { *ptr = addr as *mut c_void };
        Ok(())
    })
}
extern "C-unwind" fn deallocate(_d: C_Device, ptr: *mut c_void, size: usize) -> C_Status {
    slot("device_memory_deallocate", C_ERROR, || {
        log!("deallocate {:#x} ({size})", ptr as usize);
        if memory::remove(ptr as usize) {
            Ok(())
        } else {
            Err(Error::invalid(
                "deallocate",
                format!("{:#x} was not allocated by the plugin", ptr as usize),
            ))
        }
    })
}
extern "C-unwind" fn memset(_d: C_Device, ptr: *mut c_void, value: u8, size: usize) -> C_Status {
    slot("device_memory_set", C_ERROR, || {
        crate::kernels::drain();
        memory::fill(ptr as usize, value, size)
    })
}
extern "C-unwind" fn h2d(
    _d: C_Device,
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
) -> C_Status {
    slot("memory_copy_h2d", C_ERROR, || {
        crate::kernels::drain();
        stats::count_copy(0);
        if size == 0 {
            return Ok(());
        }
        // SAFETY: Paddle passes `size` readable host bytes.
        let data = unsafe { std::slice::from_raw_parts(src as *const u8, size) };
        memory::write(dst as usize, data)
    })
}
extern "C-unwind" fn d2h(
    _d: C_Device,
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
) -> C_Status {
    slot("memory_copy_d2h", C_ERROR, || {
        crate::kernels::drain();
        stats::count_copy(1);
        if let Some(e) = stats::take_pending_error() {
            return Err(Error::device("memory_copy_d2h", e));
        }
        if size == 0 {
            return Ok(());
        }
        // SAFETY: Paddle passes `size` writable host bytes.
        let out = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, size) };
        memory::read(src as usize, out)
    })
}
extern "C-unwind" fn d2d(
    _d: C_Device,
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
) -> C_Status {
    slot("memory_copy_d2d", C_ERROR, || {
        crate::kernels::drain();
        stats::count_copy(2);
        memory::copy(dst as usize, src as usize, size)
    })
}
extern "C-unwind" fn async_h2d(
    d: C_Device,
    _s: C_Stream,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
) -> C_Status {
    h2d(d, dst, src, n)
}
extern "C-unwind" fn async_d2h(
    d: C_Device,
    _s: C_Stream,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
) -> C_Status {
    d2h(d, dst, src, n)
}
extern "C-unwind" fn async_d2d(
    d: C_Device,
    _s: C_Stream,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
) -> C_Status {
    d2d(d, dst, src, n)
}

/// Runs during `import paddle`: adapter discovery only (no device is opened); 0 with
/// `MPSRT_DEVICE=cpu` or no Vulkan/Metal adapter.
extern "C-unwind" fn device_count(count: *mut usize) -> C_Status {
    slot("get_device_count", C_ERROR, || {
        // SAFETY: Paddle passes a slot to fill.
        unsafe { *count = mpsrt_runtime::device_count() };
        Ok(())
    })
}
extern "C-unwind" fn device_list(list: *mut usize) -> C_Status {
    slot("get_device_list", C_ERROR, || {
        for i in 0..mpsrt_runtime::device_count() {
            // SAFETY: Paddle passes room for get_device_count entries.
            unsafe { *list.add(i) = i };
        }
        Ok(())
    })
}
extern "C-unwind" fn memory_stats(d: C_Device, total: *mut usize, free: *mut usize) -> C_Status {
    slot("device_memory_stats", C_ERROR, || {
        let dev = device(d)?;
        let s = dev.memory_stats();
        let t = s.limit.min(dev.properties().total_memory) as usize;
        // SAFETY: Paddle passes slots to fill.
        unsafe {
            *total = t;
            *free = t.saturating_sub(s.reserved as usize);
        }
        Ok(())
    })
}
extern "C-unwind" fn min_chunk(_d: C_Device, size: *mut usize) -> C_Status {
    // Paddle aligns sub-allocations to this: 256 bytes keeps every tensor word- and
    // binding-aligned.
    // SAFETY: Paddle passes a slot to fill.
    unsafe { *size = 256 };
    C_SUCCESS
}
/// A chunk must fit one storage binding (128 MiB on lavapipe), or a tensor in it could not be
/// bound to a kernel.
extern "C-unwind" fn max_chunk(d: C_Device, size: *mut usize) -> C_Status {
    slot("device_max_chunk_size", C_ERROR, || {
        let dev = device(d)?;
        let p = dev.properties();
        // SAFETY: Paddle passes a slot to fill.
        unsafe { *size = p.max_storage_buffer_binding_size.min(p.max_buffer_size) as usize };
        Ok(())
    })
}
extern "C-unwind" fn max_alloc(d: C_Device, size: *mut usize) -> C_Status {
    slot("device_max_alloc_size", C_ERROR, || {
        let dev = device(d)?;
        // SAFETY: Paddle passes a slot to fill.
        unsafe { *size = dev.properties().max_buffer_size as usize };
        Ok(())
    })
}
extern "C-unwind" fn extra_padding(_d: C_Device, size: *mut usize) -> C_Status {
    // SAFETY: Paddle passes a slot to fill.
    unsafe { *size = 0 };
    C_SUCCESS
}

/// Fill Paddle's interface table.
///
/// # Safety
/// `iface` must point at a `C_DeviceInterface` of [`IFACE_SLOTS`] slots.
pub unsafe fn fill(iface: *mut C_DeviceInterface) {
    // SAFETY: per the contract.
    let i = unsafe { &mut (*iface).slots };
    macro_rules! set {
        ($s:expr, $f:expr) => {
            i[$s] = $f as *const c_void
        };
    }
    type D = extern "C-unwind" fn(C_Device) -> C_Status;
    type DevStream = extern "C-unwind" fn(C_Device, C_Stream) -> C_Status;
    type DevEvent = extern "C-unwind" fn(C_Device, C_Event) -> C_Status;
    type StreamEvent = extern "C-unwind" fn(C_Device, C_Stream, C_Event) -> C_Status;
    type Cp = extern "C-unwind" fn(C_Device, *mut c_void, *const c_void, usize) -> C_Status;
    type ACp =
        extern "C-unwind" fn(C_Device, C_Stream, *mut c_void, *const c_void, usize) -> C_Status;
    type Sz = extern "C-unwind" fn(C_Device, *mut usize) -> C_Status;
    set!(slot::INITIALIZE, initialize as extern "C-unwind" fn() -> C_Status);
    set!(slot::FINALIZE, finalize as extern "C-unwind" fn() -> C_Status);
    set!(slot::INIT_DEVICE, init_device as D);
    set!(slot::SET_DEVICE, set_device as D);
    set!(slot::GET_DEVICE, get_device as D);
    set!(slot::DEINIT_DEVICE, deinit_device as D);
    set!(
        slot::CREATE_STREAM,
        create_stream as extern "C-unwind" fn(C_Device, *mut C_Stream) -> C_Status
    );
    set!(slot::DESTROY_STREAM, destroy_stream as DevStream);
    set!(slot::QUERY_STREAM, sync_stream as DevStream);
    set!(
        slot::CREATE_EVENT,
        create_event as extern "C-unwind" fn(C_Device, *mut C_Event) -> C_Status
    );
    set!(slot::RECORD_EVENT, record_event as StreamEvent);
    set!(slot::DESTROY_EVENT, destroy_event as DevEvent);
    set!(slot::QUERY_EVENT, query_event as DevEvent);
    set!(slot::SYNC_DEVICE, sync_device as D);
    set!(slot::SYNC_STREAM, sync_stream as DevStream);
    set!(slot::SYNC_EVENT, sync_event as DevEvent);
    set!(slot::STREAM_WAIT_EVENT, stream_wait_event as StreamEvent);
    set!(
        slot::DEV_ALLOC,
        allocate as extern "C-unwind" fn(C_Device, *mut *mut c_void, usize) -> C_Status
    );
    set!(
        slot::DEV_FREE,
        deallocate as extern "C-unwind" fn(C_Device, *mut c_void, usize) -> C_Status
    );
    set!(
        slot::DEV_MEMSET,
        memset as extern "C-unwind" fn(C_Device, *mut c_void, u8, usize) -> C_Status
    );
    set!(slot::H2D, h2d as Cp);
    set!(slot::D2H, d2h as Cp);
    set!(slot::D2D, d2d as Cp);
    set!(slot::ASYNC_H2D, async_h2d as ACp);
    set!(slot::ASYNC_D2H, async_d2h as ACp);
    set!(slot::ASYNC_D2D, async_d2d as ACp);
    set!(slot::DEVICE_COUNT, device_count as extern "C-unwind" fn(*mut usize) -> C_Status);
    set!(slot::DEVICE_LIST, device_list as extern "C-unwind" fn(*mut usize) -> C_Status);
    set!(
        slot::MEM_STATS,
        memory_stats as extern "C-unwind" fn(C_Device, *mut usize, *mut usize) -> C_Status
    );
    set!(slot::MIN_CHUNK, min_chunk as Sz);
    set!(slot::MAX_CHUNK, max_chunk as Sz);
    set!(slot::MAX_ALLOC, max_alloc as Sz);
    set!(slot::EXTRA_PADDING, extra_padding as Sz);
}
