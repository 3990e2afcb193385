//! The process's hot host memory in huge pages (issue 22, `MPSRT_HUGEPAGES=1`, opt-in).
//!
//! A plan replay is bound by memory latency on the host: every recorded command makes wgpu-core
//! and the driver walk a few kilobytes of objects (bind groups, buffers, trackers) spread over
//! the heap. On the H100 machines (a KVM guest) the same replay took 450 µs in one process and
//! 1000 µs in the next, on the same pinned core with the same clock; only the latency of the
//! process's memory differed (a 32 MiB pointer chase 46 vs 87 ns). With 4 KiB pages each miss
//! also pays a page walk through the guest's and the host's tables; in 2 MiB pages the heap's
//! hot objects need a few hundred TLB entries instead of thousands.
//!
//! When a recording is made (the plan's objects exist by then) this asks the kernel, once per
//! process, to back every private anonymous writable mapping of at least 2 MiB (the malloc heap
//! and arenas, where wgpu-core and the driver keep their objects) with transparent huge pages:
//! `madvise(MADV_HUGEPAGE)` for later faults and `MADV_COLLAPSE` (Linux 6.1+) for what is there
//! now. PyTorch's `THP_MEM_ALLOC_ENABLE` is the same kind of process-wide opt-in. Device and
//! file mappings are left alone; a region the kernel refuses (pinned or special memory) is
//! skipped. Elsewhere than Linux it does nothing.

use std::sync::OnceLock;

/// What one pass over the process's mappings did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HugePages {
    /// Regions asked to collapse, and those the kernel collapsed.
    pub regions: usize,
    pub collapsed: usize,
    /// Bytes asked for (2 MiB-aligned parts of the regions), and in collapsed regions.
    pub bytes: u64,
    pub collapsed_bytes: u64,
    /// Wall time of the pass, microseconds.
    pub micros: u64,
}

/// Whether `MPSRT_HUGEPAGES` asks for it (`1`/`on`; default off).
pub(crate) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("MPSRT_HUGEPAGES").is_ok_and(|v| matches!(v.trim(), "1" | "on" | "true"))
    })
}

static DONE: OnceLock<HugePages> = OnceLock::new();

/// Runs [`collapse_heap`] the first time it is called in this process with the switch on.
pub(crate) fn once() {
    if enabled() {
        DONE.get_or_init(|| {
            let r = collapse_heap();
            tracing::debug!(?r, "host memory in huge pages (MPSRT_HUGEPAGES)");
            r
        });
    }
}

/// What the `MPSRT_HUGEPAGES` pass of this process did (`None`: off, or no recording yet).
pub fn hugepages_pass() -> Option<HugePages> {
    DONE.get().copied()
}

/// The 2 MiB-aligned part `[start, end)` of each private anonymous writable mapping in a
/// `/proc/self/maps` text (file-backed, device, stack and special mappings excluded).
pub(crate) fn anonymous_regions(maps: &str) -> Vec<(usize, usize)> {
    const HUGE: usize = 2 << 20;
    let mut out = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms), Some(_off), Some(_dev), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let path = f.next().unwrap_or("");
        let private_rw = perms.len() == 4 && perms.starts_with("rw") && perms.ends_with('p');
        if !private_rw || inode != "0" || !(path.is_empty() || path == "[heap]") {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else {
            continue;
        };
        let (start, end) = (a.next_multiple_of(HUGE), b / HUGE * HUGE);
        if end > start {
            out.push((start, end));
        }
    }
    out
}

/// Asks for huge pages on every region of [`anonymous_regions`] of this process now.
pub fn collapse_heap() -> HugePages {
    let mut r = HugePages::default();
    #[cfg(target_os = "linux")]
    {
        /// `MADV_COLLAPSE` (Linux 6.1; not in every libc's headers).
        const MADV_COLLAPSE: libc::c_int = 25;
        let t = std::time::Instant::now();
        let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return r };
        for (start, end) in anonymous_regions(&maps) {
            let (p, len) = (start as *mut libc::c_void, end - start);
            r.regions += 1;
            r.bytes += len as u64;
            // SAFETY: advice on whole pages of a mapping of this process; neither call changes
            // the contents of the memory (the kernel copies into huge pages transparently).
            unsafe {
                libc::madvise(p, len, libc::MADV_HUGEPAGE);
                if libc::madvise(p, len, MADV_COLLAPSE) == 0 {
                    r.collapsed += 1;
                    r.collapsed_bytes += len as u64;
                }
            }
        }
        r.micros = t.elapsed().as_micros() as u64;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_private_anonymous_writable_regions_aligned_to_2mib() {
        let maps = "\
55d0c0000000-55d0c0a00000 rw-p 00000000 00:00 0                          [heap]
7f0000100000-7f0000700000 rw-p 00000000 00:00 0 
7f0001000000-7f0001100000 rw-p 00000000 00:00 0 
7f0002000000-7f0002800000 r--p 00000000 00:00 0 
7f0003000000-7f0003800000 rw-s 00000000 00:05 1234                       /dev/nvidia0
7f0004000000-7f0004800000 rw-p 00001000 08:01 5678                       /usr/lib/libfoo.so
7ffc00000000-7ffc00800000 rw-p 00000000 00:00 0                          [stack]
bad line
";
        assert_eq!(
            anonymous_regions(maps),
            vec![(0x55d0c0000000, 0x55d0c0a00000), (0x7f0000200000, 0x7f0000600000)]
        );
    }

    #[test]
    fn collapsing_the_heap_leaves_memory_intact() {
        let v: Vec<u64> = (0..(8u64 << 17)).collect(); // 8 MiB
        let r = collapse_heap();
        assert!(r.collapsed <= r.regions && r.collapsed_bytes <= r.bytes);
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
    }
}
