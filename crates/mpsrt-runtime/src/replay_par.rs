//! Parallel recording of a long plan replay (issue 22).
//!
//! wgpu-core records a pass's commands cheaply and does the real work — usage scopes, resource
//! tracking, barriers and the driver's command recording — in `CommandEncoder::finish`, on the
//! calling thread. A replay's commands are immutable and own nothing per run, so a long one is
//! cut into consecutive parts, each recorded into its own command encoder and finished on its
//! own thread; the command buffers are then submitted in order after the batch's earlier work
//! (`Batch::finished`), which keeps the GPU's order exactly that of a serial recording (wgpu
//! inserts the barriers between command buffers at submit).
//!
//! `MPSRT_REPLAY_THREADS` / `MPSRT_REPLAY_CHUNK` (`env.rs`), or
//! [`GpuDevice::set_replay_split`] at run time, choose how many parts.
//!
//! A serial replay can also hand its *tail* to threads (`MPSRT_REPLAY_TAIL` threads,
//! `MPSRT_REPLAY_TAIL_PCT` percent of the commands): the calling thread records the head with
//! its early submits, so the GPU starts at once, while the tail's parts are recorded and
//! finished meanwhile; they are submitted, in order, after the head's last commands. On the
//! H100 machines a replay's host time is bound by memory latency (calls 1–2 of 2026-11-26:
//! `CommandEncoder::finish` 1.3 vs 2.8 µs per command in processes whose 32 MiB pointer chase
//! read 46 vs 87 ns), which more cores overlap.

use crate::device::{GpuDevice, State};
use crate::replay::{Cmd, PassBinding, Recording};
use mpsrt_core::{Error, Result};
use std::ops::Range;
use std::sync::atomic::Ordering;

/// Consecutive ranges covering `0..len`: as many as `threads` allows with at least `chunk`
/// commands each (one range when `len < 2 * chunk` or `threads <= 1`), sizes differing by at
/// most one.
pub(crate) fn split(len: usize, threads: usize, chunk: usize) -> Vec<Range<usize>> {
    let parts = (len / chunk.max(1)).clamp(1, threads.max(1));
    let (base, extra) = (len / parts, len % parts);
    let mut at = 0;
    (0..parts)
        .map(|i| {
            let n = base + usize::from(i < extra);
            let r = at..at + n;
            at += n;
            r
        })
        .collect()
}

/// Records `cmds` into a fresh encoder and finishes it; returns the command buffer and the
/// dispatches recorded.
fn record_part(
    device: &wgpu::Device,
    rec: &Recording,
    cmds: &[Cmd],
) -> (wgpu::CommandBuffer, usize) {
    let mut encoder = device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("mpsrt replay") });
    let mut pass: Option<wgpu::ComputePass<'static>> = None;
    let mut bound = PassBinding::NONE;
    let mut dispatches = 0;
    for cmd in cmds {
        match cmd {
            Cmd::Dispatch { pipeline, group, dynamic, workgroups } => {
                let pass = pass.get_or_insert_with(|| {
                    encoder
                        .begin_compute_pass(&wgpu::ComputePassDescriptor {
                            label: Some("mpsrt replay"),
                            timestamp_writes: None,
                        })
                        .forget_lifetime()
                });
                bound.dispatch(pass, rec, *pipeline, *group, *dynamic, *workgroups);
                dispatches += 1;
            }
            Cmd::Copy { src, src_offset, dst, dst_offset, len } => {
                // Copies are recorded outside a pass; the next dispatch opens a new one.
                pass = None;
                bound = PassBinding::NONE;
                encoder.copy_buffer_to_buffer(src, *src_offset, dst, *dst_offset, *len);
            }
        }
    }
    drop(pass);
    (encoder.finish(), dispatches)
}

/// Records the `parts` of `cmds` on one thread each (the first on the calling thread); returns
/// the command buffers in order and the dispatches recorded.
pub(crate) fn record(
    device: &wgpu::Device,
    rec: &Recording,
    cmds: &[Cmd],
    parts: &[Range<usize>],
) -> Result<(Vec<wgpu::CommandBuffer>, usize)> {
    let Some((first, rest)) = parts.split_first() else { return Ok((Vec::new(), 0)) };
    std::thread::scope(|s| {
        let handles: Vec<_> = rest
            .iter()
            .map(|r| {
                let part = &cmds[r.clone()];
                s.spawn(move || record_part(device, rec, part))
            })
            .collect();
        let mut out = Vec::with_capacity(parts.len());
        let (buffer, mut dispatches) = record_part(device, rec, &cmds[first.clone()]);
        out.push(buffer);
        for h in handles {
            let (buffer, n) = h
                .join()
                .map_err(|_| Error::device("replay", "a replay recording thread panicked"))?;
            out.push(buffer);
            dispatches += n;
        }
        Ok((out, dispatches))
    })
}

/// Commands recorded by the calling thread, and the tail's parts: `pct` percent of `len`
/// split over at most `threads` ranges of at least `chunk` commands each (none when that
/// leaves less than one; `MPSRT_REPLAY_TAIL_MIN`, default 80: handing a part to a pool thread
/// costs a wake-up and its objects are cold on that core, so short parts lose — on the H100,
/// ResNet-50's 48-command tail read 4.3–6.8 µs per step vs 3.0–4.4 without, DenseNet's two
/// parts of 92 won).
pub(crate) fn tail_split(
    len: usize,
    threads: usize,
    pct: usize,
    chunk: usize,
) -> (usize, Vec<Range<usize>>) {
    let tail = len * pct.min(95) / 100;
    let parts = (tail / chunk.max(1)).min(threads);
    // With several threads, a tail of one part is not worth it either (DenseNet on one tail
    // thread read 2.65–4.27 µs per step on the H100, on two 1.84–3.34).
    if parts == 0 || parts < threads.min(2) {
        return (len, Vec::new());
    }
    let head = len - tail;
    let ranges = split(tail, parts, 1).into_iter().map(|r| head + r.start..head + r.end).collect();
    (head, ranges)
}

/// GPU nanoseconds per command (learnt by `replay/early.rs`) from which a replay is not bound
/// by the host and records serially (DenseNet-121: ~8 µs per command at batch 1, ~40 at 32).
pub(crate) const TAIL_MAX_GPU_NS: f64 = 20_000.0;

/// One tail part's result slot: its command buffer and dispatches, or the panic's message.
pub(crate) type TailSlot =
    parking_lot::Mutex<Option<std::result::Result<(wgpu::CommandBuffer, usize), String>>>;

/// The process's replay-tail workers (created on first use with `threads` threads; persistent,
/// so a run pays a wake-up instead of a thread spawn per part).
fn pool(threads: usize) -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads.clamp(1, 16))
            .thread_name(|i| format!("mpsrt-replay-tail-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}

/// Runs `head` on the calling thread while the pool records and finishes each range of
/// `tails` into its slot (in order); `None` from the pool (it could not be built): the parts
/// are recorded on the calling thread after `head`.
pub(crate) fn with_tail<R>(
    device: &wgpu::Device,
    rec: &Recording,
    cmds: &[Cmd],
    tails: &[Range<usize>],
    head: impl FnOnce() -> R,
) -> (R, Vec<TailSlot>) {
    let slots: Vec<TailSlot> = tails.iter().map(|_| parking_lot::Mutex::new(None)).collect();
    let record = |r: &Range<usize>, slot: &TailSlot| {
        let part = &cmds[r.clone()];
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            record_part(device, rec, part)
        }))
        .map_err(|e| {
            e.downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| e.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a replay tail part panicked".to_string())
        });
        *slot.lock() = Some(out);
    };
    let out = match (tails.is_empty(), pool(tails.len())) {
        (false, Some(pool)) => pool.in_place_scope(|s| {
            for (r, slot) in tails.iter().zip(&slots) {
                let record = &record;
                s.spawn(move |_| record(r, slot));
            }
            head()
        }),
        _ => {
            let out = head();
            for (r, slot) in tails.iter().zip(&slots) {
                record(r, slot);
            }
            out
        }
    };
    (out, slots)
}

/// Puts the tail's command buffers after everything the batch holds (the head's open encoder
/// is finished first); returns the dispatches they recorded.
pub(crate) fn join_tail(st: &mut State, slots: Vec<TailSlot>) -> Result<usize> {
    if slots.is_empty() {
        return Ok(0);
    }
    let batch = &mut st.batch;
    batch.end_pass();
    if let Some(enc) = batch.encoder.take() {
        let t = std::time::Instant::now();
        batch.finished.push(enc.finish());
        st.timing.finish_ns += t.elapsed().as_nanos() as u64;
    }
    let mut dispatches = 0;
    for slot in slots {
        match slot.into_inner() {
            Some(Ok((buffer, n))) => {
                st.batch.finished.push(buffer);
                st.timing.replay_parts += 1;
                dispatches += n;
            }
            Some(Err(why)) => {
                return Err(Error::device("replay", format!("a tail part failed: {why}")))
            }
            None => return Err(Error::device("replay", "a tail part never ran")),
        }
    }
    Ok(dispatches)
}

impl GpuDevice {
    /// Sets how a replay is split over recording threads: at most `threads` parts of at least
    /// `chunk` commands each (`threads` 1: record on the calling thread only). Overrides
    /// `MPSRT_REPLAY_THREADS` / `MPSRT_REPLAY_CHUNK` for this device.
    pub fn set_replay_split(&self, threads: usize, chunk: usize) {
        self.replay_threads.store(threads.clamp(1, 64), Ordering::Relaxed);
        self.replay_chunk.store(chunk.max(1), Ordering::Relaxed);
    }

    /// Sets the threads that record a serial replay's tail while the calling thread records its
    /// head, the percent of the commands they get (`threads` 0: off) and the fewest commands
    /// of one tail part. Overrides `MPSRT_REPLAY_TAIL` / `_PCT` / `_MIN` for this device.
    pub fn set_replay_tail(&self, threads: usize, pct: usize, min_part: usize) {
        self.replay_tail.store(threads.min(16), Ordering::Relaxed);
        self.replay_tail_pct.store(pct.min(95), Ordering::Relaxed);
        self.replay_tail_min.store(min_part.max(1), Ordering::Relaxed);
    }

    /// `(threads, pct, min_part)` of [`GpuDevice::set_replay_tail`].
    pub fn replay_tail(&self) -> (usize, usize, usize) {
        (
            self.replay_tail.load(Ordering::Relaxed),
            self.replay_tail_pct.load(Ordering::Relaxed),
            self.replay_tail_min.load(Ordering::Relaxed),
        )
    }

    /// `(threads, chunk)` of [`GpuDevice::set_replay_split`].
    pub fn replay_split(&self) -> (usize, usize) {
        (self.replay_threads.load(Ordering::Relaxed), self.replay_chunk.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // the expected list of ranges has one range
    fn tail_takes_its_percent_in_parts_of_at_least_min_tail() {
        use super::tail_split;
        assert_eq!(tail_split(309, 0, 50, 48), (309, vec![]));
        assert_eq!(tail_split(309, 1, 50, 48), (155, vec![155..309]));
        assert_eq!(tail_split(309, 2, 60, 48), (124, vec![124..217, 217..309]));
        assert_eq!(tail_split(60, 2, 60, 48), (60, vec![]), "36 commands are not worth a thread");
        assert_eq!(tail_split(40, 1, 50, 16), (20, vec![20..40]));
        assert_eq!(tail_split(40, 4, 50, 16), (40, vec![]), "one part of several threads");
        assert_eq!(tail_split(200, 2, 60, 48), (80, vec![80..140, 140..200]));
    }

    #[test]
    fn split_covers_the_range_in_order_with_parts_of_at_least_chunk() {
        assert_eq!(split(10, 4, 48), vec![0..10]);
        assert_eq!(split(95, 4, 48), vec![0..95]);
        assert_eq!(split(96, 4, 48), vec![0..48, 48..96]);
        assert_eq!(split(415, 4, 48), vec![0..104, 104..208, 208..312, 312..415]);
        assert_eq!(split(415, 1, 48), vec![0..415]);
        assert_eq!(split(0, 4, 48), vec![0..0]);
        for len in 0..300 {
            for threads in 1..6 {
                let parts = split(len, threads, 7);
                assert!(parts.len() <= threads);
                assert_eq!(parts.first().map(|r| r.start), Some(0));
                assert_eq!(parts.last().map(|r| r.end), Some(len));
                assert!(parts.windows(2).all(|w| w[0].end == w[1].start));
                assert!(parts.len() == 1 || parts.iter().all(|r| r.len() >= 7));
            }
        }
    }
}
