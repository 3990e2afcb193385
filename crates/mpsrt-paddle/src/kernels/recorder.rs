//! Opt-in recorder thread for the eager fast path (`MPSRT_PADDLE_RECORDER=1`): a replayed
//! dispatch (`fast.rs`) is handed to one thread that records it through
//! `GpuDevice::dispatch`, so wgpu-core's recording leaves Paddle's calling thread.
//!
//! Ordering: jobs run in submission order, and every other way the plugin touches the device
//! (a general-path kernel, a copy, a memset, an event, a synchronize) first waits until the
//! queue is empty and the job being recorded has finished ([`drain`]), so work reaches the
//! device in the order Paddle issued it. Jobs hold the buffers they bind (`Arc<GpuBuffer>`),
//! so a Paddle free between submission and recording cannot recycle them. Errors: a job that
//! fails stores the message as the pending error, which the next synchronize, device-to-host
//! copy or kernel raises in Python (the op that failed has already returned to Paddle).
//! Waking: the thread spins briefly between jobs before sleeping, so a loop of tiny ops does
//! not pay a futex wake per op; the queue is bounded (the caller waits when it is full).

use super::fast::{Entry, MAX_INS, OUT};
use crate::stats;
use mpsrt_core::Error;
use mpsrt_runtime::{Binding, GpuBuffer};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Jobs queued at most before the caller waits.
const CAP: usize = 4096;
/// Empty polls of the queue before the thread sleeps (~tens of µs).
const SPIN: u32 = 20_000;

/// One dispatch to record: the memo entry and the operands it binds (by role).
pub struct Job {
    pub name: &'static str,
    pub entry: Arc<Entry>,
    pub bufs: [Option<Arc<GpuBuffer>>; MAX_INS + 1],
}

struct Recorder {
    jobs: Mutex<VecDeque<Job>>,
    work: Condvar,
    idle: Condvar,
    /// Jobs submitted and not yet finished (queued or being recorded).
    pending: AtomicUsize,
    sleeping: AtomicBool,
}

/// Whether `MPSRT_PADDLE_RECORDER=1` is set (read once).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("MPSRT_PADDLE_RECORDER").is_ok_and(|v| v == "1"))
}

/// The recorder, created (with its thread) by the first deferred launch; `None` when the OS
/// refused the thread, in which case jobs are recorded on the calling thread instead.
static R: OnceLock<Option<&'static Recorder>> = OnceLock::new();

fn recorder() -> Option<&'static Recorder> {
    *R.get_or_init(|| {
        let r: &'static Recorder = Box::leak(Box::new(Recorder {
            jobs: Mutex::new(VecDeque::with_capacity(CAP)),
            work: Condvar::new(),
            idle: Condvar::new(),
            pending: AtomicUsize::new(0),
            sleeping: AtomicBool::new(false),
        }));
        std::thread::Builder::new()
            .name("mpsrt-paddle-recorder".into())
            .spawn(move || run(r))
            .ok()
            .map(|_| r)
    })
}

/// Queue `job` for the recorder thread (waits while the queue is full). Without a recorder
/// thread the job is recorded here, in order, with the same deferred-error semantics.
pub fn submit(job: Job) {
    let Some(r) = recorder() else {
        record(&job);
        return;
    };
    let mut q = r.jobs.lock();
    while q.len() >= CAP {
        r.idle.wait(&mut q);
    }
    r.pending.fetch_add(1, Ordering::AcqRel);
    q.push_back(job);
    drop(q);
    if r.sleeping.load(Ordering::Acquire) {
        r.work.notify_one();
    }
}

/// Wait until every submitted job has been recorded (a no-op when the recorder is off or idle).
pub fn drain() {
    let Some(Some(r)) = R.get() else { return };
    if r.pending.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut q = r.jobs.lock();
    while r.pending.load(Ordering::Acquire) != 0 {
        r.idle.wait(&mut q);
    }
}

fn run(r: &'static Recorder) {
    loop {
        let job = {
            let mut spins = 0;
            loop {
                // `pending` counts only queued jobs here (the last one has finished): poll it
                // without taking the lock the caller pushes under.
                if r.pending.load(Ordering::Acquire) > 0 {
                    if let Some(j) = r.jobs.lock().pop_front() {
                        break j;
                    }
                }
                if spins < SPIN {
                    spins += 1;
                    std::hint::spin_loop();
                    continue;
                }
                let mut q = r.jobs.lock();
                if let Some(j) = q.pop_front() {
                    break j;
                }
                r.sleeping.store(true, Ordering::Release);
                r.work.wait(&mut q);
                r.sleeping.store(false, Ordering::Release);
                spins = 0;
            }
        };
        record(&job);
        drop(job);
        // Waiters (`drain`, a caller facing a full queue) check under the lock: take it so a
        // wake cannot be lost.
        let q = r.jobs.lock();
        let left = r.pending.fetch_sub(1, Ordering::AcqRel) - 1;
        if left == 0 || q.len() + 1 >= CAP {
            r.idle.notify_all();
        }
    }
}

fn record(job: &Job) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if super::fail_deferred().is_some_and(|f| f == job.name) {
            return Err(Error::device(
                job.name,
                "failing on purpose in the recorder (MPSRT_PADDLE_FAIL_DEFERRED)",
            ));
        }
        replay(job.name, &job.entry, &job.bufs)
    }));
    let msg = match r {
        Ok(Ok(())) => return,
        Ok(Err(e)) => format!("mpsrt: {e}"),
        Err(p) => format!("mpsrt: [{}] internal error: {}", job.name, crate::panic_message(&p)),
    };
    eprintln!("[mpsrt] {msg}");
    stats::set_pending_error(&msg);
}

/// Record `entry`'s dispatch over `bufs` (by role: inputs, then the output at `OUT`).
pub fn replay(
    name: &'static str,
    entry: &Entry,
    bufs: &[Option<Arc<GpuBuffer>>; MAX_INS + 1],
) -> mpsrt_core::Result<()> {
    let buf = |k: usize| bufs[k].as_deref();
    let first = buf(OUT).ok_or_else(|| Error::device(name, "internal: no output buffer"))?;
    let mut bindings = [Binding::from(first); MAX_INS + 2];
    let n = entry.roles.len();
    if n > bindings.len() {
        return Err(Error::device(name, "internal: replayed launch binds too many buffers"));
    }
    for (b, &(role, window)) in bindings.iter_mut().zip(&entry.roles) {
        let buffer =
            buf(role).ok_or_else(|| Error::device(name, "internal: unbound operand role"))?;
        *b = Binding { buffer, window };
    }
    first.device().dispatch(name, &entry.pipeline, &bindings[..n], &entry.meta, entry.workgroups)
}
