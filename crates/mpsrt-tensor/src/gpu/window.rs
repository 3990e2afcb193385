//! Binding windows: how a launch reaches operands larger than one storage binding
//! (`max_storage_buffer_binding_size`: 128 MiB on lavapipe, 2 GiB on NVIDIA; lowered for tests
//! with `MPSRT_MAX_BINDING_BYTES`).
//!
//! Every windowed kernel iterates over *points* numbered `0..n` in row-major order over `dims`
//! (an elementwise op's output elements, a reduction's kept rows, a copy's source elements).
//! Each operand says which of its elements a point touches: `offset + Σ coord·stride`, plus an
//! `extent` around that base for row ops (a reduction's point reads its whole reduced row). The
//! planner cuts `0..n` into consecutive ranges such that, for every operand whose buffer does
//! not fit one binding, the elements the range touches do fit one binding starting at a
//! 256-byte-aligned offset ([`Window::base`]). The launcher then binds each operand at its
//! window, passes element offsets relative to the window start and the range's first point in
//! the metadata, and records one dispatch per range.
//!
//! One mechanism for every op family, instead of per-op splits: an operand whose touched
//! elements for even one aligned unit of points exceed a binding (a transposed view whose
//! neighbouring outputs lie a binding apart) is refused here with an error naming the limit.
//! Callers that can reorder their work ask [`spans_far`] first and decompose such a launch
//! (elementwise kernels, so copies and casts: `gpu/elementwise.rs::split`, slices along the
//! offending dim scattered into place).

use mpsrt_core::{Error, Result};
use mpsrt_runtime::{Binding, GpuBuffer, GpuDevice};

/// How one operand is addressed by the points of a launch.
pub(crate) struct Access<'a> {
    pub buffer: &'a GpuBuffer,
    /// Bytes per element (f16: 2, u8/i8/bool: 1; packed narrow types are addressed by element).
    pub elem_bytes: usize,
    /// Element touched by point 0 (before `extent`).
    pub offset: isize,
    /// Element stride per iteration dim.
    pub strides: Vec<isize>,
    /// Elements touched around a point's base: `base + extent.0 ..= base + extent.1`.
    pub extent: (isize, isize),
}

impl Access<'_> {
    /// A contiguous operand over `dims` (one element per point).
    pub fn dense<'a>(
        buffer: &'a GpuBuffer,
        elem_bytes: usize,
        offset: usize,
        dims: &[usize],
    ) -> Access<'a> {
        let strides = mpsrt_core::contiguous_strides(dims);
        Access { buffer, elem_bytes, offset: offset as isize, strides, extent: (0, 0) }
    }
}

/// One dispatch's share: points `start .. start + len`, and per operand the element at which
/// its binding starts and the bytes bound (`None`: the whole buffer is bound).
pub(crate) struct Window {
    pub start: usize,
    pub len: usize,
    pub base: Vec<Option<(usize, u64)>>,
}

impl Window {
    /// Operand `k`'s binding for this window.
    pub fn binding<'a>(&self, k: usize, a: &Access<'a>) -> Binding<'a> {
        match self.base[k] {
            None => Binding::from(a.buffer),
            Some((b, bytes)) => Binding::window(a.buffer, (b * a.elem_bytes) as u64, bytes),
        }
    }

    /// Operand `k`'s element offset relative to its binding, for an absolute element `e`.
    pub fn rel(&self, k: usize, e: isize) -> isize {
        e - self.base[k].map_or(0, |b| b.0) as isize
    }
}

/// Binding limits of `dev`: (max bytes per binding, offset alignment in bytes).
pub(crate) fn limits(dev: &GpuDevice) -> (u64, u64) {
    let p = dev.properties();
    // At least 256 bytes (a multiple of every adapter's power-of-two alignment): a window then
    // starts on a whole vec4 / packed word of any dtype, which kernels' store shifts rely on.
    (p.max_storage_buffer_binding_size, (p.min_storage_buffer_offset_alignment as u64).max(256))
}

/// Whether `buffer` can be bound whole.
pub(crate) fn fits(buffer: &GpuBuffer, limit: u64) -> bool {
    buffer.size().max(4).next_multiple_of(4) <= limit
}

/// `(min, max)` of `Σ c_d·s_d` over coordinates `c` between `lo` and `hi` (inclusive, in
/// row-major order) over `dims[d..]`: exact for any strides (negative and zero too).
fn range_minmax(dims: &[usize], st: &[isize], lo: &[usize], hi: &[usize]) -> (isize, isize) {
    if dims.is_empty() {
        return (0, 0);
    }
    let s0 = st[0];
    let term = |c: usize| c as isize * s0;
    if lo[0] == hi[0] {
        let (a, b) = range_minmax(&dims[1..], &st[1..], &lo[1..], &hi[1..]);
        return (term(lo[0]) + a, term(lo[0]) + b);
    }
    let last: Vec<usize> = dims[1..].iter().map(|&d| d - 1).collect();
    let first = vec![0; dims.len() - 1];
    let (a1, b1) = range_minmax(&dims[1..], &st[1..], &lo[1..], &last);
    let (a2, b2) = range_minmax(&dims[1..], &st[1..], &first, &hi[1..]);
    let mut mn = (term(lo[0]) + a1).min(term(hi[0]) + a2);
    let mut mx = (term(lo[0]) + b1).max(term(hi[0]) + b2);
    if hi[0] - lo[0] >= 2 {
        // Full blocks in between: every inner coordinate, outer from lo+1 to hi-1.
        let (fa, fb) = range_minmax(&dims[1..], &st[1..], &first, &last);
        let (ta, tb) = (term(lo[0] + 1), term(hi[0] - 1));
        mn = mn.min(ta.min(tb) + fa);
        mx = mx.max(ta.max(tb) + fb);
    }
    (mn, mx)
}

fn coords(dims: &[usize], mut i: usize) -> Vec<usize> {
    let mut c = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        c[d] = i % dims[d];
        i /= dims[d];
    }
    c
}

/// The bound window of `a` for points `s .. e` (e > s): (first element, bytes).
fn span(dims: &[usize], a: &Access<'_>, s: usize, e: usize, align: u64) -> (usize, u64) {
    let (mn, mx) = range_minmax(dims, &a.strides, &coords(dims, s), &coords(dims, e - 1));
    let lo = (a.offset + mn + a.extent.0).max(0) as u64;
    let hi = (a.offset + mx + a.extent.1).max(0) as u64 + 1;
    let eb = a.elem_bytes as u64;
    let start = (lo * eb) / align * align;
    let end = (hi * eb).next_multiple_of(4);
    ((start / eb) as usize, end - start)
}

/// Cut points `0..n` over `dims` into windows (see the module doc). Range starts are multiples
/// of `unit` points (so an operand the kernel indexes without an offset, like an output written
/// at the local point index, starts exactly at an aligned element) and no range holds more than
/// `max_points`. One window binding every buffer whole when they all fit: the hot path.
pub(crate) fn plan(
    op: &str,
    dev: &GpuDevice,
    dims: &[usize],
    unit: usize,
    max_points: usize,
    operands: &[Access<'_>],
) -> Result<Vec<Window>> {
    let n: usize = dims.iter().product();
    let (limit, align) = limits(dev);
    let big: Vec<bool> = operands.iter().map(|a| !fits(a.buffer, limit)).collect();
    let unit = unit.max(1);
    let max_units = (max_points / unit).max(1);
    if !big.contains(&true) && n <= max_units * unit {
        return Ok(vec![Window { start: 0, len: n, base: vec![None; operands.len()] }]);
    }
    let fits_range = |s: usize, e: usize| {
        operands.iter().zip(&big).all(|(a, &b)| !b || span(dims, a, s, e, align).1 <= limit)
    };
    let mut out = Vec::new();
    let mut s = 0;
    while s < n {
        let total_units = (n - s).div_ceil(unit);
        let end = |k: usize| (s + k * unit).min(n);
        if !fits_range(s, end(1)) {
            let worst = operands
                .iter()
                .zip(&big)
                .filter(|(_, &b)| b)
                .map(|(a, _)| span(dims, a, s, end(1), align).1)
                .max()
                .unwrap_or(0);
            return Err(Error::oom(
                op,
                format!(
                    "{unit} neighbouring elements of this operation touch {} of one operand, more \
                     than the adapter's max_storage_buffer_binding_size of {} ({}); make the \
                     operand contiguous (or smaller) first",
                    fmt_mib(worst),
                    fmt_mib(limit),
                    dev.properties().display_name()
                ),
            ));
        }
        // Largest unit count that fits (the span only grows with the range).
        let (mut lo, mut hi) = (1, total_units.min(max_units));
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits_range(s, end(mid)) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let e = end(lo);
        let base = operands
            .iter()
            .zip(&big)
            .map(|(a, &b)| b.then(|| span(dims, a, s, e, align)))
            .collect();
        out.push(Window { start: s, len: e - s, base });
        s = e;
    }
    Ok(out)
}

/// Whether the first `probe` points (rounded up to whole units, at most `n`) touch more than
/// one binding of some operand that cannot be bound whole. Then [`plan`] would refuse the
/// launch (one unit is too wide) or cut it into windows of a few points each (a dispatch per
/// handful of elements), and a caller that can reorder its work should decompose it instead.
pub(crate) fn spans_far(
    dev: &GpuDevice,
    dims: &[usize],
    unit: usize,
    probe: usize,
    operands: &[Access<'_>],
) -> bool {
    let n: usize = dims.iter().product();
    if n == 0 {
        return false;
    }
    let (limit, align) = limits(dev);
    let e = probe.max(1).next_multiple_of(unit.max(1)).min(n);
    operands.iter().any(|a| !fits(a.buffer, limit) && span(dims, a, 0, e, align).1 > limit)
}

fn fmt_mib(b: u64) -> String {
    format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brute force over every point of the range.
    fn brute(dims: &[usize], st: &[isize], s: usize, e: usize) -> (isize, isize) {
        let mut r = (isize::MAX, isize::MIN);
        for i in s..e {
            let c = coords(dims, i);
            let v: isize = c.iter().zip(st).map(|(&c, &s)| c as isize * s).sum();
            r = (r.0.min(v), r.1.max(v));
        }
        r
    }

    #[test]
    fn range_minmax_is_exact_for_every_range() {
        let cases: &[(&[usize], &[isize])] = &[
            (&[10], &[1]),
            (&[4, 5], &[5, 1]),
            (&[4, 5], &[1, 4]),
            (&[3, 4, 5], &[0, 1, 4]),
            (&[3, 4, 5], &[-20, 5, -1]),
            (&[2, 3, 2, 3], &[1, 6, 3, 100]),
        ];
        for &(dims, st) in cases {
            let n: usize = dims.iter().product();
            for s in 0..n {
                for e in s + 1..=n {
                    let got = range_minmax(dims, st, &coords(dims, s), &coords(dims, e - 1));
                    assert_eq!(got, brute(dims, st, s, e), "{dims:?} {st:?} {s}..{e}");
                }
            }
        }
    }
}
