//! `mpsrt bench --host-detail` (issue 22): where the benchmarking thread ran and how fast its
//! core was, to tell why one process records a plan replay twice as slowly as another.
//!
//! Per timed iteration it notes the CPU the thread was on before and after the run
//! (`sched_getcpu`), and over the loop the thread's voluntary / involuntary context switches
//! (`getrusage(RUSAGE_THREAD)`). Two probes time the core itself before the loop: a chain of
//! dependent integer operations (frequency, a busy SMT sibling, a time-shared virtual CPU) and a
//! pointer chase through 32 MiB (memory latency: a remote NUMA node, cold caches, page walks),
//! also after collapsing that memory into 2 MiB pages (`MPSRT_HUGEPAGES`'s effect). A process
//! that is slow in the probes as well is slow because of where it runs, not because of what it
//! records.

use std::time::Instant;

/// The CPU this thread is running on (`None` where the platform does not say).
pub fn current_cpu() -> Option<u32> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sched_getcpu has no preconditions.
        let c = unsafe { libc::sched_getcpu() };
        u32::try_from(c).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// This thread's (voluntary, involuntary) context switches so far.
pub fn context_switches() -> (i64, i64) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: an all-zero rusage is a valid out-parameter; RUSAGE_THREAD is Linux's.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `u` is a valid, writable rusage.
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) } == 0 {
            return (u.ru_nvcsw, u.ru_nivcsw);
        }
        (0, 0)
    }
    #[cfg(not(target_os = "linux"))]
    {
        (0, 0)
    }
}

/// Nanoseconds per step of a chain of dependent integer multiply-adds (through a stack slot) (best of 5 rounds of
/// 200 000 steps, about 0.2 ms each).
pub fn alu_probe_ns() -> f64 {
    const STEPS: u64 = 200_000;
    let mut best = f64::MAX;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..5 {
        let t = Instant::now();
        for i in 0..STEPS {
            // `black_box` keeps the chain from being folded or vectorized.
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
        }
        best = best.min(t.elapsed().as_nanos() as f64 / STEPS as f64);
    }
    std::hint::black_box(x);
    best
}

/// Nanoseconds per load of a random cyclic pointer chase through 32 MiB (100 000 loads after
/// building the cycle; memory latency, TLB included), in the process's 4 KiB pages and again
/// after asking the kernel to collapse the same memory into 2 MiB pages (`MADV_COLLAPSE`; the
/// second number is `None` where it refused or elsewhere than Linux).
pub fn chase_probe_ns() -> (f64, Option<f64>) {
    const N: usize = 4 << 20; // 32 MiB of u64 indices
    const LOADS: usize = 100_000;
    // A single random cycle (Sattolo's shuffle) so the chase cannot fall into a short loop.
    let mut next: Vec<u64> = (0..N as u64).collect();
    let mut s: u64 = 0x2545_f491_4f6c_dd1d;
    for i in (1..N).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let j = (s % i as u64) as usize;
        next.swap(i, j);
    }
    let chase = |next: &[u64]| {
        let mut at = 0usize;
        let t = Instant::now();
        for _ in 0..LOADS {
            at = next[at] as usize;
        }
        std::hint::black_box(at);
        t.elapsed().as_nanos() as f64 / LOADS as f64
    };
    let plain = chase(&next);
    (plain, collapse(&next).then(|| chase(&next)))
}

/// Asks for the 2 MiB-aligned part of `v`'s memory in huge pages; whether the kernel did.
fn collapse(v: &[u64]) -> bool {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        const MADV_COLLAPSE: libc::c_int = 25;
        let (a, b) = (v.as_ptr() as usize, v.as_ptr() as usize + std::mem::size_of_val(v));
        let (start, end) = (a.next_multiple_of(HUGE), b / HUGE * HUGE);
        if end <= start {
            return false;
        }
        let p = start as *mut libc::c_void;
        // SAFETY: advice on whole pages inside `v`'s allocation; contents are unchanged.
        unsafe {
            libc::madvise(p, end - start, libc::MADV_HUGEPAGE);
            libc::madvise(p, end - start, MADV_COLLAPSE) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = v;
        false
    }
}

/// What `--host-detail` collects over the timed loop.
#[derive(Default)]
pub struct HostDetail {
    /// CPU at the start of each iteration and at the end of its host part.
    cpus: Vec<(Option<u32>, Option<u32>)>,
    /// Host microseconds of each iteration (the run call).
    host_us: Vec<f64>,
    /// Microseconds of each iteration's wait for the GPU (`synchronize`).
    wait_us: Vec<f64>,
    cs0: (i64, i64),
    cs1: (i64, i64),
    alu_ns: f64,
    chase_ns: f64,
    chase_huge_ns: Option<f64>,
}

impl HostDetail {
    /// Runs the probes and notes the context switches so far (call just before the loop).
    pub fn start() -> HostDetail {
        let alu_ns = alu_probe_ns();
        let (chase_ns, chase_huge_ns) = chase_probe_ns();
        HostDetail {
            alu_ns,
            chase_ns,
            chase_huge_ns,
            cs0: context_switches(),
            ..HostDetail::default()
        }
    }

    /// One iteration: the CPUs before and after its host part, its host and wait times.
    pub fn iteration(&mut self, cpus: (Option<u32>, Option<u32>), host_us: f64, wait_us: f64) {
        self.cpus.push(cpus);
        self.host_us.push((host_us * 100.0).round() / 100.0);
        self.wait_us.push((wait_us * 100.0).round() / 100.0);
    }

    /// Notes the context switches at the end of the loop.
    pub fn finish(&mut self) {
        self.cs1 = context_switches();
    }

    pub fn json(&self) -> serde_json::Value {
        let mut distinct: Vec<u32> = Vec::new();
        let mut changes = 0;
        let mut prev: Option<u32> = None;
        for &(a, b) in &self.cpus {
            for c in [a, b].into_iter().flatten() {
                if !distinct.contains(&c) {
                    distinct.push(c);
                }
                if prev.is_some_and(|p| p != c) {
                    changes += 1;
                }
                prev = Some(c);
            }
        }
        serde_json::json!({
            "cpus": distinct,
            "cpu_changes": changes,
            "voluntary_switches": self.cs1.0 - self.cs0.0,
            "involuntary_switches": self.cs1.1 - self.cs0.1,
            "alu_probe_ns": (self.alu_ns * 1000.0).round() / 1000.0,
            "chase_probe_ns": (self.chase_ns * 100.0).round() / 100.0,
            "chase_huge_probe_ns": self.chase_huge_ns.map(|n| (n * 100.0).round() / 100.0),
            "host_us": self.host_us,
            "wait_us": self.wait_us,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_and_cpu_changes() {
        assert!(alu_probe_ns() > 0.0);
        let mut d = HostDetail::start();
        assert!(d.chase_ns > 0.0);
        d.iteration((Some(3), Some(3)), 10.0, 5.0);
        d.iteration((Some(3), Some(5)), 12.0, 5.0);
        d.iteration((Some(5), Some(3)), 11.0, 5.0);
        d.finish();
        let j = d.json();
        assert_eq!(j["cpus"], serde_json::json!([3, 5]));
        assert_eq!(j["cpu_changes"], 2);
        assert_eq!(j["host_us"].as_array().map(Vec::len), Some(3));
        if cfg!(target_os = "linux") {
            assert!(current_cpu().is_some());
        }
    }
}
