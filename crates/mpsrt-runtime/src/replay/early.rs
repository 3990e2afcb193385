//! When a serial replay submits early (issue 22): sized from how much GPU work is queued and how
//! fast the host records, instead of fixed doubling parts.
//!
//! Every early submit costs the host a `CommandEncoder::finish` of its own and a `queue.submit`
//! (on an H200 about 10–20 µs each beside 1.5–2.5 µs per recorded command); at batch 1 the GPU
//! runs a command in 5–25 µs, so once it has work the host is far ahead. The adaptive policy
//! submits the first part as soon as it is recorded (the GPU starts), then submits again only
//! when the host could not record the rest before the queued work runs out: the next part is as
//! large as the host can record in the time the GPU still has work for.
//!
//! The GPU time per command comes from the recording's previous replay: its parts' submit times
//! and the time its last batch completed (the submission callback's clock). The GPU cannot
//! finish the `n_k` commands from part `k` on sooner than `n_k · g` after that part's submit, so
//! `min_k (done − t_k) / n_k` bounds `g` from above and is tight for the part after which the
//! GPU never waited for the host. Until there is such a replay (or when its completion was not
//! seen) the parts double (`MPSRT_REPLAY_EARLY_GROWTH`).

use std::sync::OnceLock;
use std::time::Instant;

/// Parts shorter than this do not estimate the GPU's time per command (too few commands for the
/// callback's wake-up latency to average out).
const MIN_ESTIMATE_COMMANDS: usize = 8;

/// Nanoseconds since the first call in this process (a clock shared by submission callbacks
/// and replays).
pub(crate) fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// When the last few batches completed: (serial, `now_ns` in the submission callback).
#[derive(Debug, Default)]
pub(crate) struct Completions(std::collections::VecDeque<(u64, u64)>);

impl Completions {
    /// Batches remembered (a replay's final batch is looked up before the next replay; a few
    /// readbacks may complete in between).
    const KEEP: usize = 16;

    pub fn push(&mut self, serial: u64) {
        if self.0.len() == Self::KEEP {
            self.0.pop_front();
        }
        self.0.push_back((serial, now_ns()));
    }

    /// When batch `serial` completed, if it is one of the last few.
    pub fn at(&self, serial: u64) -> Option<u64> {
        self.0.iter().rev().find(|c| c.0 == serial).map(|c| c.1)
    }
}

/// What a recording remembers of its last full replay that submitted early.
#[derive(Debug, Default, Clone)]
pub(crate) struct EarlyLog {
    /// Per part, in order: its submit time (`now_ns`) and the commands from it to the end.
    pub parts: Vec<(u64, usize)>,
    /// Serial of the batch holding the replay's last commands.
    pub serial: u64,
    /// GPU nanoseconds per command, estimated from an earlier replay (0: unknown).
    pub gpu_ns: f64,
}

impl EarlyLog {
    /// Updates the estimate from the completion of this log's last batch at `done_ns`.
    pub fn learn(&mut self, done_ns: u64) {
        if let Some(g) = gpu_per_command(&self.parts, done_ns) {
            self.gpu_ns = g;
        }
        self.parts.clear();
    }
}

/// `min_k (done − t_k) / n_k` over the parts with at least [`MIN_ESTIMATE_COMMANDS`] commands
/// to the end (nanoseconds per command), or `None` if there is none or a part was submitted
/// after `done_ns` (a clock mix-up).
pub(crate) fn gpu_per_command(parts: &[(u64, usize)], done_ns: u64) -> Option<f64> {
    let mut best: Option<f64> = None;
    for &(t, n) in parts {
        if n < MIN_ESTIMATE_COMMANDS {
            continue;
        }
        let span = done_ns.checked_sub(t)? as f64;
        let g = span / n as f64;
        best = Some(best.map_or(g, |b: f64| b.min(g)));
    }
    best
}

/// Chooses the early parts of one replay as it is recorded.
pub(crate) struct EarlyPlan {
    len: usize,
    first: usize,
    growth: usize,
    max: usize,
    gpu_ns: f64,
    start: u64,
    /// When the GPU runs out of the work submitted so far (estimated; `now_ns` clock).
    busy_until: u64,
    submits: usize,
    next: usize,
    /// Host nanoseconds of the early submits' `Queue::submit` calls so far (a fixed cost per
    /// submit, not per command).
    queue_ns: u64,
}

impl EarlyPlan {
    /// A replay of `len` commands starting now: the first part has `first` commands (0: no
    /// early submits); then, with `gpu_ns` known (> 0), parts sized to the GPU's queued work,
    /// otherwise each `growth` times the last; at most `max` early submits.
    pub fn new(
        len: usize,
        first: usize,
        growth: usize,
        max: usize,
        gpu_ns: f64,
        start: u64,
    ) -> Self {
        EarlyPlan {
            len,
            first,
            growth: growth.max(2),
            max,
            gpu_ns,
            start,
            busy_until: start,
            submits: 0,
            next: first,
            queue_ns: 0,
        }
    }

    /// The size of the next early part after `done` commands, or `None`: the rest goes with the
    /// run's final submit.
    pub fn part(&self, done: usize) -> Option<usize> {
        let left = self.len.saturating_sub(done);
        (self.next > 0 && left > self.next && self.submits < self.max).then_some(self.next)
    }

    /// A part of `n` commands was submitted at `now` (with `done` commands submitted in all);
    /// its `Queue::submit` took `queue_ns`.
    pub fn submitted(&mut self, n: usize, done: usize, now: u64, queue_ns: u64) {
        self.submits += 1;
        self.queue_ns += queue_ns;
        if self.gpu_ns <= 0.0 {
            self.next = self.next.saturating_mul(self.growth);
            return;
        }
        self.busy_until = self.busy_until.max(now) + (self.gpu_ns * n as f64) as u64;
        // Host time per command so far (recording and `finish`, which grow with the commands;
        // the queue submits are a cost per submit, charged once below).
        let spent = now.saturating_sub(self.start).saturating_sub(self.queue_ns);
        let host = (spent as f64 / done.max(1) as f64).max(1.0);
        let per_submit = self.queue_ns as f64 / self.submits as f64;
        let ahead = self.busy_until.saturating_sub(now) as f64;
        let left = self.len.saturating_sub(done);
        self.next = if host * left as f64 + per_submit <= ahead {
            0 // the host records and submits the rest before the GPU runs out of work
        } else {
            let fits = (((ahead - per_submit).max(0.0) / host) as usize).max(self.first);
            // The GPU outruns the host here: smaller parts would not feed it sooner, only add
            // submits (an H100 process with a slow host made 39 early submits of 8 commands,
            // 15 µs per step), so parts never shrink below the last one's doubling.
            if fits <= n {
                n.saturating_mul(self.growth)
            } else {
                fits
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_estimate_is_the_tightest_part() {
        // 100 commands at 10 us each from t=0, the GPU never waits: done at 1000 us.
        let parts = [(0, 100), (50_000, 92), (120_000, 60), (200_000, 4)];
        assert_eq!(gpu_per_command(&parts, 1_000_000), Some(10_000.0));
        // The GPU waited for the last 60 (submitted at 800 us): they bound it.
        let parts = [(0, 100), (800_000, 60)];
        assert_eq!(gpu_per_command(&parts, 1_400_000), Some(10_000.0));
        assert_eq!(gpu_per_command(&[(0, 4)], 1_000), None);
        assert_eq!(gpu_per_command(&[(2_000, 40)], 1_000), None);
        let mut log = EarlyLog { parts: parts.to_vec(), serial: 7, gpu_ns: 0.0 };
        log.learn(1_400_000);
        assert_eq!((log.gpu_ns, log.parts.len()), (10_000.0, 0));
        log.learn(9_000_000); // nothing left to learn from
        assert_eq!(log.gpu_ns, 10_000.0);
        let mut c = Completions::default();
        for s in 1..=20 {
            c.push(s);
        }
        assert!(c.at(4).is_none() && c.at(5).is_some() && c.at(20).is_some() && c.at(21).is_none());
    }

    #[test]
    fn parts_follow_the_queued_work() {
        // Unknown GPU time: doubling parts.
        let mut p = EarlyPlan::new(100, 8, 2, usize::MAX, 0.0, 0);
        assert_eq!(p.part(0), Some(8));
        p.submitted(8, 8, 1_000, 0);
        assert_eq!(p.part(8), Some(16));
        // 20 us of GPU per command, 2 us of host: 8 commands keep the GPU busy 160 us, the
        // host's 92 others take 184 us: one more part, as large as 160 us of host time allows.
        let mut p = EarlyPlan::new(100, 8, 2, usize::MAX, 20_000.0, 0);
        p.submitted(8, 8, 16_000, 0);
        assert_eq!(p.part(8), Some(80));
        p.submitted(80, 88, 176_000, 0);
        assert_eq!(p.part(88), None, "the last 12 commands fit in the GPU's queued work");
        // A heavy GPU (100 us per command): one early part is enough.
        let mut p = EarlyPlan::new(100, 8, 2, usize::MAX, 100_000.0, 0);
        p.submitted(8, 8, 16_000, 0);
        assert_eq!(p.part(8), None);
        // A light GPU (3 us per command, host 2 us): parts grow by 1.5, never below the first.
        let mut p = EarlyPlan::new(400, 8, 2, usize::MAX, 3_000.0, 0);
        p.submitted(8, 8, 16_000, 0);
        assert_eq!(p.part(8), Some(12));
        // A GPU faster than the host (1 us per command): 8 more commands would not keep it
        // busy either; the parts double instead of staying at 8 (each submit costs the host).
        let mut p = EarlyPlan::new(400, 8, 2, usize::MAX, 1_000.0, 0);
        p.submitted(8, 8, 16_000, 0);
        assert_eq!(p.part(8), Some(16));
        p.submitted(16, 24, 48_000, 0);
        assert_eq!(p.part(24), Some(32));
        // The same with a 10 us queue submit inside the first 26 us: 2 us per command, and the
        // next submit's 10 us comes off the 160 us the GPU is busy.
        let mut p = EarlyPlan::new(100, 8, 2, usize::MAX, 20_000.0, 0);
        p.submitted(8, 8, 26_000, 10_000);
        assert_eq!(p.part(8), Some(75));
        // At most `max` early submits.
        let mut p = EarlyPlan::new(400, 8, 2, 1, 3_000.0, 0);
        p.submitted(8, 8, 16_000, 0);
        assert_eq!(p.part(8), None);
        assert_eq!(EarlyPlan::new(400, 0, 2, 9, 3_000.0, 0).part(0), None);
    }
}
