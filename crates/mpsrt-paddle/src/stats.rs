//! What the plugin did, readable from Python through the exported `mpsrt_paddle_*` functions:
//! kernel launches per op (so a test can prove an op ran on the device), copies by direction,
//! the last error, and the `MPSRT_PADDLE_LOG=1` debug log.

use parking_lot::Mutex;
use rustc_hash::FxHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub static LOG: AtomicBool = AtomicBool::new(false);

/// `eprintln!` behind `MPSRT_PADDLE_LOG=1`.
#[macro_export]
macro_rules! log {
    ($($t:tt)*) => {
        if $crate::stats::LOG.load(std::sync::atomic::Ordering::Relaxed) {
            eprintln!("[mpsrt-paddle] {}", format!($($t)*));
        }
    };
}

/// Launches per (kernel, dtype name): static strings, so counting a launch neither formats nor
/// allocates (it runs on every eager op).
type Counts = HashMap<(&'static str, &'static str), u64, BuildHasherDefault<FxHasher>>;
static KERNELS: Mutex<Option<Counts>> = Mutex::new(None);
static COPIES: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
/// Launches replayed by the eager fast path (`kernels/fast.rs`), also counted in `KERNELS`.
static FAST: AtomicU64 = AtomicU64::new(0);
static LAST_ERROR: Mutex<String> = Mutex::new(String::new());
static PENDING: Mutex<Option<String>> = Mutex::new(None);
/// Whether `PENDING` holds an error (read on every fast-path op without the lock).
static HAS_PENDING: AtomicBool = AtomicBool::new(false);

pub fn count_kernel(name: &'static str, dtype: &'static str) {
    *KERNELS.lock().get_or_insert_with(Counts::default).entry((name, dtype)).or_default() += 1;
}

pub fn count_fast() {
    FAST.fetch_add(1, Ordering::Relaxed);
}

pub fn count_copy(dir: usize) {
    COPIES[dir].fetch_add(1, Ordering::Relaxed);
}

pub fn set_error(msg: &str) {
    *LAST_ERROR.lock() = msg.to_string();
}

/// A kernel error that could not be raised where it happened; the next sync or read reports it.
pub fn set_pending_error(msg: &str) {
    set_error(msg);
    *PENDING.lock() = Some(msg.to_string());
    HAS_PENDING.store(true, Ordering::Release);
}

pub fn take_pending_error() -> Option<String> {
    let mut p = PENDING.lock();
    HAS_PENDING.store(false, Ordering::Release);
    p.take()
}

/// Whether an error waits to be raised (see [`set_pending_error`]).
pub fn has_pending_error() -> bool {
    HAS_PENDING.load(Ordering::Acquire)
}

pub fn last_error() -> String {
    LAST_ERROR.lock().clone()
}

/// `{"kernels": {"add/float32": 3, ...}, "fast": n, "h2d": n, "d2h": n, "d2d": n}` as JSON.
pub fn json() -> String {
    let sorted: BTreeMap<String, u64> =
        KERNELS.lock().iter().flatten().map(|((n, d), c)| (format!("{n}/{d}"), *c)).collect();
    let items: Vec<String> = sorted.iter().map(|(n, c)| format!("\"{n}\": {c}")).collect();
    format!(
        "{{\"kernels\": {{{}}}, \"fast\": {}, \"h2d\": {}, \"d2h\": {}, \"d2d\": {}, \"chunk_bytes\": {}}}",
        items.join(", "),
        FAST.load(Ordering::Relaxed),
        COPIES[0].load(Ordering::Relaxed),
        COPIES[1].load(Ordering::Relaxed),
        COPIES[2].load(Ordering::Relaxed),
        crate::memory::chunk_bytes()
    )
}

pub fn reset() {
    *KERNELS.lock() = None;
    for c in &COPIES {
        c.store(0, Ordering::Relaxed);
    }
    FAST.store(0, Ordering::Relaxed);
}
