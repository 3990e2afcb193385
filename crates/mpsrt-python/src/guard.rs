//! The panic guard at the Python boundary. A Rust panic that reached PyO3 would surface as
//! `pyo3_runtime.PanicException`, a `BaseException` that `except Exception` does not catch;
//! every entry point that runs mpsrt code goes through [`detach`] (or [`guarded`] where the GIL
//! is kept), which turns a panic into an ordinary `RuntimeError` naming where it happened.
//! Panics are bugs — their causes are fixed where found — so this is the last line, not a
//! way of reporting user errors.

use mpsrt_core::{Error, Result};
use pyo3::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The panic payload as text (`panic!` gives `&str` or `String`).
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// Runs `f`, turning a panic into a `Device`-kind error (Python `RuntimeError`) that says so.
/// Unwind safety: the closures own clones of tensor handles (immutable storage) and the
/// runtime's shared state is behind mutexes that stay consistent at every await point.
pub(crate) fn guarded<T>(op: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        Err(Error::device(
            op,
            format!(
                "internal error (a Rust panic: {}); the process is intact, but this is a bug \
                 in mpsrt: please report it with the call that triggered it",
                panic_text(&*p)
            ),
        ))
    })
}

/// `py.detach(f)` (the GIL released while mpsrt works) with the panic guard of [`guarded`].
pub(crate) fn detach<T: Send>(
    py: Python<'_>,
    op: &str,
    f: impl FnOnce() -> Result<T> + Send,
) -> Result<T> {
    py.detach(|| guarded(op, f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_errors() {
        let e = guarded::<()>("slice", || panic!("index out of bounds")).unwrap_err();
        assert_eq!(e.kind, mpsrt_core::ErrorKind::Device);
        assert!(e.to_string().starts_with("[slice] internal error (a Rust panic: index out"));
        let owned = guarded::<()>("x", || panic!("{}", String::from("owned"))).unwrap_err();
        assert!(owned.message.contains("owned"));
        assert_eq!(guarded("ok", || Ok(3)).unwrap(), 3);
    }
}
