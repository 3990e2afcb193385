//! `mpsrt_paddle_loader.so`: the file `pip install` puts in `<site-packages>/paddle_custom_device/`,
//! where `import paddle` loads every `*.so` when `CUSTOM_DEVICE_ROOT` is unset. It holds no
//! plugin code: `InitPlugin` opens mpsrt's own extension (`mpsrt/_C*.so`, which contains the
//! plugin) and forwards the call, so Paddle and `import mpsrt` share one copy of the runtime
//! (glibc maps a file opened twice once). Wheels cannot carry symbolic links, hence a loader.
//!
//! Where `_C` is looked for, in order: `$MPSRT_PADDLE_LIBRARY`; `<site-packages>/mpsrt/`
//! (a regular install); the directories listed in `<site-packages>/mpsrt*.pth` (an editable
//! install, `maturin develop`). Built by `crates/mpsrt-paddle/build.rs` with the `rustc` of the
//! build (no dependencies, no C compiler needed).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};

#[repr(C)]
struct DlInfo {
    fname: *const c_char,
    fbase: *mut c_void,
    sname: *const c_char,
    saddr: *mut c_void,
}

extern "C" {
    fn dladdr(addr: *const c_void, info: *mut DlInfo) -> c_int;
    fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}

/// `RTLD_NOW` (2 on Linux and macOS).
const RTLD_NOW: c_int = 0x2;

/// The directory this loader was loaded from.
fn own_dir() -> Option<PathBuf> {
    let mut info = DlInfo {
        fname: std::ptr::null(),
        fbase: std::ptr::null_mut(),
        sname: std::ptr::null(),
        saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the loader's tables.
    if unsafe { dladdr(InitPlugin as *const c_void, &mut info) } == 0 || info.fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated path.
    let p = PathBuf::from(unsafe { CStr::from_ptr(info.fname) }.to_string_lossy().into_owned());
    std::fs::canonicalize(&p).unwrap_or(p).parent().map(Path::to_path_buf)
}

/// `mpsrt/_C*.so` inside `root`.
fn extension_in(root: &Path) -> Option<PathBuf> {
    let dir = root.join("mpsrt");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("_C.") && n.ends_with(".so"))
        })
        .collect();
    found.sort();
    found.pop()
}

fn candidates() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(p) = std::env::var_os("MPSRT_PADDLE_LIBRARY") {
        v.push(PathBuf::from(p));
    }
    if let Some(site) = own_dir().and_then(|d| d.parent().map(Path::to_path_buf)) {
        v.extend(extension_in(&site));
        // Editable installs list the source directory in a .pth file.
        if let Ok(rd) = std::fs::read_dir(&site) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("mpsrt") && name.ends_with(".pth") {
                    for line in std::fs::read_to_string(e.path()).unwrap_or_default().lines() {
                        let line = line.trim();
                        if !line.is_empty() && !line.starts_with('#') && !line.starts_with("import")
                        {
                            v.extend(extension_in(Path::new(line)));
                        }
                    }
                }
            }
        }
    }
    v
}

/// Paddle's entry point: forwarded to mpsrt's `InitPlugin`. When mpsrt cannot be found the
/// parameters stay untouched (no device type), so Paddle skips this library with a warning.
///
/// # Safety
/// Called by Paddle with its `CustomRuntimeParams`.
#[no_mangle]
pub unsafe extern "C" fn InitPlugin(params: *mut c_void) {
    let _ = std::panic::catch_unwind(|| {
        let mut tried = Vec::new();
        for path in candidates() {
            let Ok(c) = CString::new(path.to_string_lossy().into_owned()) else { continue };
            // SAFETY: a NUL-terminated path; Python opens the same file later with the same
            // flags and gets this handle.
            let h = unsafe { dlopen(c.as_ptr(), RTLD_NOW) };
            if h.is_null() {
                // SAFETY: dlerror returns a NUL-terminated message or null.
                let e = unsafe { dlerror() };
                let msg = if e.is_null() {
                    String::new()
                } else {
                    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
                };
                tried.push(format!("{} ({msg})", path.display()));
                continue;
            }
            // SAFETY: the symbol is `void InitPlugin(CustomRuntimeParams*)` of mpsrt-paddle.
            let f = unsafe { dlsym(h, c"InitPlugin".as_ptr()) };
            if f.is_null() {
                tried.push(format!("{} (no InitPlugin)", path.display()));
                continue;
            }
            let f: unsafe extern "C" fn(*mut c_void) = unsafe { std::mem::transmute(f) };
            // SAFETY: forwarded unchanged.
            unsafe { f(params) };
            return;
        }
        eprintln!(
            "[mpsrt] the Paddle plugin loader found no mpsrt extension (tried: {}); 'mps' is not available",
            if tried.is_empty() { "nothing".to_string() } else { tried.join(", ") }
        );
    });
}
