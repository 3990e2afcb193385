//! PaddlePaddle CustomDevice plugin: `paddle.set_device('mps')` runs Paddle on mpsrt's GPU
//! runtime (wgpu: Vulkan, Metal).
//!
//! Paddle loads every `*.so` in `<site-packages>/paddle_custom_device/` (or
//! `CUSTOM_DEVICE_ROOT`) at `import paddle` and calls [`InitPlugin`], which fills the runtime
//! interface (`runtime.rs`: devices, streams, events, memory, copies) and registers the
//! kernels (`kernels/`) through Paddle's plain-C `PD_RegisterPhiKernel` (`capi.rs`). Device
//! memory is mpsrt buffers behind fabricated addresses (`memory.rs`). Everything crossing the
//! FFI boundary is wrapped in `catch_unwind`; kernel errors reach Python as Paddle exceptions.
//!
//! Query functions for `mpsrt.paddle` (ctypes): [`mpsrt_paddle_stats`],
//! [`mpsrt_paddle_last_error`], [`mpsrt_paddle_reset_stats`].

pub mod abi;
mod capi;
mod kernels;
mod memory;
mod runtime;
pub mod stats;

use abi::*;
use std::ffi::{c_char, c_void};
use std::sync::atomic::Ordering;

pub(crate) fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

/// Why the interface Paddle passed cannot be used, if it cannot.
fn check_abi(p: &CustomRuntimeParams) -> Result<(), String> {
    if p.size != std::mem::size_of::<CustomRuntimeParams>() {
        return Err(format!(
            "CustomRuntimeParams is {} bytes, this plugin was built for {} (Paddle 3.x)",
            p.size,
            std::mem::size_of::<CustomRuntimeParams>()
        ));
    }
    if p.interface.is_null() {
        return Err("Paddle passed no device interface".into());
    }
    // SAFETY: `interface` is non-null and Paddle fills its first word with its size.
    let isize = unsafe { *(p.interface as *const usize) };
    if isize != std::mem::size_of::<C_DeviceInterface>() {
        return Err(format!(
            "C_DeviceInterface is {isize} bytes, this plugin was built for {} (Paddle 3.x)",
            std::mem::size_of::<C_DeviceInterface>()
        ));
    }
    Ok(())
}

/// Keep this library loaded until the process exits: Paddle `dlclose`s plugins at exit while
/// wgpu's threads and thread-locals of this library may still be alive.
fn pin_self() {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables; the flags only add NODELETE to an object
    // that is already loaded.
    unsafe {
        if libc::dladdr(InitPlugin as *const c_void, &mut info) != 0 && !info.dli_fname.is_null() {
            libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE);
        }
    }
}

/// Paddle's entry point. On an interface mismatch the plugin leaves `device_type` NULL, so
/// Paddle skips it with a warning instead of crashing.
///
/// # Safety
/// Called by Paddle with a valid `CustomRuntimeParams`.
#[no_mangle]
pub unsafe extern "C" fn InitPlugin(params: *mut CustomRuntimeParams) {
    let r = std::panic::catch_unwind(|| {
        if std::env::var("MPSRT_PADDLE_LOG").is_ok_and(|v| v == "1") {
            stats::LOG.store(true, Ordering::Relaxed);
        }
        if params.is_null() {
            return;
        }
        // SAFETY: Paddle passes a valid struct.
        let p = unsafe { &mut *params };
        if let Err(e) = check_abi(p) {
            eprintln!("[mpsrt] the Paddle plugin is not loaded: {e}");
            return;
        }
        pin_self();
        p.version = RUNTIME_VERSION;
        p.device_type = c"mps".as_ptr();
        p.sub_device_type = c"mpsrt".as_ptr();
        // SAFETY: the size check above proved the table's length.
        unsafe { runtime::fill(p.interface) };
        if std::env::var_os("MPSRT_PADDLE_NO_KERNELS").is_some() {
            return;
        }
        match kernels::register_all() {
            Ok(n) => log!("registered {n} kernels"),
            Err(e) => eprintln!("[mpsrt] no mps kernels registered: {e}"),
        }
    });
    if let Err(p) = r {
        eprintln!("[mpsrt] InitPlugin failed: {}", panic_message(&p));
    }
}

fn write_c(s: &str, buf: *mut c_char, len: usize) -> usize {
    if !buf.is_null() && len > 0 {
        let n = s.len().min(len - 1);
        // SAFETY: the caller passes `len` writable bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
            *buf.add(n) = 0;
        }
    }
    s.len() + 1
}

/// Kernel launch counts, copy counts and registered kernels as JSON into `buf`; returns the
/// bytes needed (including the NUL).
#[no_mangle]
pub extern "C" fn mpsrt_paddle_stats(buf: *mut c_char, len: usize) -> usize {
    std::panic::catch_unwind(|| {
        let reg: Vec<String> = kernels::registered()
            .iter()
            .map(|(n, d)| {
                format!(
                    "\"{n}\": [{}]",
                    d.iter().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(", ")
                )
            })
            .collect();
        let s = stats::json();
        let s = format!("{}, \"registered\": {{{}}}}}", &s[..s.len() - 1], reg.join(", "));
        write_c(&s, buf, len)
    })
    .unwrap_or(0)
}

/// The last error message of a kernel or runtime call.
#[no_mangle]
pub extern "C" fn mpsrt_paddle_last_error(buf: *mut c_char, len: usize) -> usize {
    std::panic::catch_unwind(|| write_c(&stats::last_error(), buf, len)).unwrap_or(0)
}

#[no_mangle]
pub extern "C" fn mpsrt_paddle_reset_stats() {
    let _ = std::panic::catch_unwind(stats::reset);
}

/// Device `index` as JSON: name, backend, type, total memory, unified memory, max buffer size
/// and mpsrt's allocator statistics (`{"error": ...}` when there is no such device).
#[no_mangle]
pub extern "C" fn mpsrt_paddle_device_json(index: i32, buf: *mut c_char, len: usize) -> usize {
    std::panic::catch_unwind(|| {
        let s = match mpsrt_runtime::gpu_device(index.max(0) as usize) {
            Ok(d) => {
                let p = d.properties();
                let m = d.memory_stats();
                format!(
                    "{{\"name\": {:?}, \"backend\": {:?}, \"device_type\": {:?}, \"total_memory\": {}, \
                     \"unified_memory\": {}, \"max_buffer_size\": {}, \"allocated\": {}, \"reserved\": {}, \
                     \"peak_allocated\": {}, \"limit\": {}, \"chunk_bytes\": {}}}",
                    p.name,
                    p.backend,
                    p.device_type,
                    p.total_memory,
                    p.unified_memory,
                    p.max_buffer_size,
                    m.allocated,
                    m.reserved,
                    m.peak_allocated,
                    m.limit,
                    memory::chunk_bytes()
                )
            }
            Err(e) => format!("{{\"error\": {:?}}}", e.to_string()),
        };
        write_c(&s, buf, len)
    })
    .unwrap_or(0)
}

/// Release mpsrt's cached buffers of device `index` to the driver.
#[no_mangle]
pub extern "C" fn mpsrt_paddle_empty_cache(index: i32) {
    let _ = std::panic::catch_unwind(|| {
        // Deferred launches hold their buffers: record them first, so freed ones are released.
        kernels::drain();
        if let Ok(d) = mpsrt_runtime::gpu_device(index.max(0) as usize) {
            d.empty_cache();
        }
    });
}
