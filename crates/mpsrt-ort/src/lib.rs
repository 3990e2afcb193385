//! mpsrt as an ONNX Runtime **plugin execution provider**. The library exports
//! `CreateEpFactories` / `ReleaseEpFactory` (ORT ≥ 1.24 loads it with
//! `onnxruntime.register_execution_provider_library(name, path)`); its factory
//! `MpsrtExecutionProvider` claims the parts of a model the mpsrt engine runs, compiles each
//! claimed subgraph into an engine `Session` (through the ONNX importer) and runs it on mpsrt's
//! GPU path; ORT's CPU EP keeps the rest.
//!
//! * `abi` — `repr(C)` mirrors of ORT's C ABI (layout-tested); `ort` — helpers over `OrtApi`.
//! * `device` — ORT allocator and data transfer over `memory` (addresses for mpsrt buffers).
//! * `ep` — factory and EP callbacks; `capability` — which nodes we claim; `convert` —
//!   `OrtGraph` → `ModelProto`; `contrib` — `com.microsoft` ops as default-domain nodes; `compute` — compiled fused nodes; `options` — provider options.
//!
//! Every exported function and callback runs under [`guard`] (`catch_unwind`): a panic becomes an
//! `OrtStatus`, never an abort across the C boundary. `MPSRT_ORT_VERBOSE=1` logs placement.

pub mod abi;
mod capability;
mod compute;
mod contrib;
mod convert;
mod device;
mod ep;
mod memory;
mod options;
mod ort;

use abi::{OrtApi, OrtApiBase, OrtEpFactory, OrtLogger, Status, ORT_API_LEVEL};
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

pub use ep::EP_NAME;
pub use options::EpOptions;

/// Oldest ORT minor version whose ABI we implement (1.24: the level our structs are written at).
pub const MIN_ORT_MINOR: u32 = ORT_API_LEVEL;
/// Newest ORT minor version this build was checked against; newer ones are refused unless
/// `MPSRT_ORT_ALLOW_NEWER=1` (ORT's tables are append-only, so they normally work).
pub const MAX_ORT_MINOR: u32 = 32;

pub(crate) fn log(msg: &str) {
    if std::env::var("MPSRT_ORT_VERBOSE").is_ok_and(|v| v != "0" && !v.is_empty()) {
        eprintln!("[mpsrt-ort] {msg}");
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Runs a callback body; a panic becomes an `OrtStatus` naming the callback.
pub(crate) fn guard(what: &str, f: impl FnOnce() -> Status) -> Status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(s) => s,
        Err(p) => {
            let msg = format!("internal error in {what}: {}", panic_message(&*p));
            log(&msg);
            catch_unwind(|| ort::fail(&msg)).unwrap_or(ptr::null_mut())
        }
    }
}

/// `"1.31.1"` → 31.
fn ort_minor(version: &str) -> Option<u32> {
    let mut it = version.split('.');
    let major: u32 = it.next()?.trim().parse().ok()?;
    let minor: u32 = it.next()?.trim().parse().ok()?;
    (major == 1).then_some(minor)
}

/// Why this ORT is refused, if it is.
fn refuse_reason(version: &str, allow_newer: bool) -> Option<String> {
    match ort_minor(version) {
        None => Some(format!("unrecognized onnxruntime version {version:?}")),
        Some(m) if m < MIN_ORT_MINOR => Some(format!(
            "onnxruntime {version} is too old: MpsrtExecutionProvider needs onnxruntime >= 1.{MIN_ORT_MINOR} (plugin EP ABI {ORT_API_LEVEL})"
        )),
        Some(m) if m > MAX_ORT_MINOR && !allow_newer => Some(format!(
            "onnxruntime {version} is newer than the versions MpsrtExecutionProvider knows (1.{MIN_ORT_MINOR} to 1.{MAX_ORT_MINOR}); set MPSRT_ORT_ALLOW_NEWER=1 to load it anyway"
        )),
        Some(_) => None,
    }
}

/// A status made through whatever `OrtApi` version ORT has (slot 0, `CreateStatus`, exists in
/// every version), for refusing an ORT whose level-24 table does not exist.
///
/// # Safety
/// `base` must be ORT's `OrtApiBase`.
unsafe fn status_any_version(base: &OrtApiBase, msg: &str) -> Status {
    for v in (1..=ORT_API_LEVEL).rev() {
        // SAFETY: GetApi returns NULL for versions ORT lacks.
        let t = unsafe { (base.get_api)(v) };
        if !t.is_null() {
            let c = std::ffi::CString::new(msg.replace('\0', " ")).unwrap_or_default();
            // SAFETY: slot 0 is CreateStatus in every OrtApi version.
            return unsafe {
                OrtApi::from_raw(t).CreateStatus(abi::ORT_NOT_IMPLEMENTED, c.as_ptr())
            };
        }
    }
    eprintln!("[mpsrt-ort] {msg}");
    ptr::null_mut()
}

/// ORT's entry point: creates our one factory.
///
/// # Safety
/// Called by ORT with the documented arguments.
#[no_mangle]
pub unsafe extern "C" fn CreateEpFactories(
    registered_name: *const c_char,
    ort_api_base: *const OrtApiBase,
    _default_logger: *const OrtLogger,
    factories: *mut *mut OrtEpFactory,
    max_factories: usize,
    num_factories: *mut usize,
) -> Status {
    let r = catch_unwind(AssertUnwindSafe(|| {
        if ort_api_base.is_null() || factories.is_null() || num_factories.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: ORT passes its API base and valid out pointers.
        let base = unsafe { &*ort_api_base };
        unsafe { *num_factories = 0 };
        // SAFETY: per the C API.
        let version = ort::cstr(unsafe { (base.get_version_string)() });
        let allow = std::env::var("MPSRT_ORT_ALLOW_NEWER").is_ok_and(|v| v == "1");
        // SAFETY: GetApi returns NULL for versions ORT lacks.
        let table = unsafe { (base.get_api)(ORT_API_LEVEL) };
        let why = refuse_reason(&version, allow).or_else(|| {
            table
                .is_null()
                .then(|| format!("onnxruntime {version} has no OrtApi version {ORT_API_LEVEL}"))
        });
        if let Some(why) = why {
            // SAFETY: `base` is ORT's.
            return unsafe { status_any_version(base, &format!("MpsrtExecutionProvider: {why}")) };
        }
        // SAFETY: the level-24 table.
        ort::install(unsafe { OrtApi::from_raw(table) });
        log(&format!(
            "CreateEpFactories(registered as {:?}) in onnxruntime {version}",
            ort::cstr(registered_name)
        ));
        if max_factories < 1 {
            return ort::fail("ORT offered room for no factory");
        }
        // SAFETY: room for one factory.
        unsafe {
            *factories = ep::factory_ptr();
            *num_factories = 1;
        }
        ptr::null_mut()
    }));
    r.unwrap_or_else(|p| {
        eprintln!("[mpsrt-ort] internal error in CreateEpFactories: {}", panic_message(&*p));
        ptr::null_mut()
    })
}

/// ORT's exit point for a factory made by [`CreateEpFactories`].
///
/// # Safety
/// `factory` must come from `CreateEpFactories`.
#[no_mangle]
pub unsafe extern "C" fn ReleaseEpFactory(factory: *mut OrtEpFactory) -> Status {
    // The factory is a static table (see `ep::Factory`): nothing to free.
    let _ = factory;
    ptr::null_mut()
}

/// Copies up to `n` traffic counters (see `memory::STATS`) to `out`; returns how many exist.
/// For tests (Python reads it with ctypes from `mpsrt._C`), not part of ORT's ABI.
///
/// # Safety
/// `out` must have room for `n` values (or be NULL with `n == 0`).
#[no_mangle]
pub unsafe extern "C" fn mpsrt_ort_stats(out: *mut u64, n: usize) -> usize {
    let all = &memory::STATS;
    for (i, c) in all.iter().enumerate().take(n) {
        // SAFETY: room for `n` values.
        unsafe { *out.add(i) = c.load(std::sync::atomic::Ordering::Relaxed) };
    }
    all.len()
}

/// The entry points, for a host binary (the Python extension) that links this crate as an
/// rlib and must keep them in its dynamic symbol table.
pub fn entry_points() -> [*const (); 3] {
    [CreateEpFactories as *const (), ReleaseEpFactory as *const (), mpsrt_ort_stats as *const ()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_outside_the_known_range_are_refused_with_a_reason() {
        assert_eq!(refuse_reason("1.31.1", false), None);
        assert_eq!(refuse_reason("1.24.0", false), None);
        assert_eq!(refuse_reason("1.32.0", false), None);
        let old = refuse_reason("1.22.0", false).unwrap();
        assert!(old.contains("too old") && old.contains(">= 1.24"), "{old}");
        let new = refuse_reason("1.40.0", false).unwrap();
        assert!(new.contains("MPSRT_ORT_ALLOW_NEWER"), "{new}");
        assert_eq!(refuse_reason("1.40.0", true), None);
        assert!(refuse_reason("banana", false).is_some());
    }

    // A fake ORT whose API stops at version 20: CreateEpFactories must refuse through slot 0 of
    // the old table (CreateStatus) and create no factory.
    static mut LAST: Option<String> = None;
    unsafe extern "C" fn fake_create_status(_code: i32, msg: *const c_char) -> Status {
        // SAFETY: test-only single-threaded use.
        unsafe { LAST = Some(ort::cstr(msg)) };
        8 as Status
    }
    static TABLE: [unsafe extern "C" fn(i32, *const c_char) -> Status; 1] = [fake_create_status];
    unsafe extern "C" fn fake_get_api(v: u32) -> *const std::ffi::c_void {
        if v <= 20 {
            TABLE.as_ptr() as *const std::ffi::c_void
        } else {
            ptr::null()
        }
    }
    unsafe extern "C" fn fake_version() -> *const c_char {
        c"1.20.0".as_ptr()
    }

    #[test]
    fn an_old_ort_gets_a_status_not_a_crash() {
        let base = OrtApiBase { get_api: fake_get_api, get_version_string: fake_version };
        let mut f: *mut OrtEpFactory = ptr::null_mut();
        let mut n = 7usize;
        // SAFETY: fake ORT above.
        let s = unsafe { CreateEpFactories(c"x".as_ptr(), &base, ptr::null(), &mut f, 4, &mut n) };
        assert_eq!(s as usize, 8);
        assert_eq!(n, 0);
        assert!(f.is_null());
        // SAFETY: the call above has returned.
        let msg = unsafe { (*std::ptr::addr_of!(LAST)).clone() }.unwrap();
        assert!(msg.contains("too old") && msg.contains("1.20.0"), "{msg}");
    }
}
