//! im2col for the CPU conv fast path: the column matrix `[icg·kh·kw, oh·ow]` of one (image,
//! group), or a block of its columns (output positions `p0..p1`). The conv lowers in column
//! blocks of about 1 MiB so each block is filled and consumed by the SGEMM on the same worker
//! while it sits in that core's L2 (a whole 3×3 column matrix of a 56×56 map is 14 MiB: writing
//! it out and packing it back from memory made those convs memory-bound).

use crate::conv::ConvGeom;

/// Columns `p0..p1` (output positions, row-major over `oh × ow`) of the column matrix of group
/// `grp` of image `img` into `dst`, row-major `[icg·kh·kw, p1 − p0]`. `x` is contiguous NCHW.
/// Every element of `dst[..rows · (p1 − p0)]` is written (zeros for padding).
pub(crate) fn im2col_block(
    x: &[f32],
    g: &ConvGeom,
    [img, grp]: [usize; 2],
    [p0, p1]: [usize; 2],
    dst: &mut [f32],
) {
    let icg = g.c / g.groups;
    let (rows, width) = (icg * g.kh * g.kw, p1 - p0);
    if width == 0 {
        return;
    }
    for (row, out) in dst[..rows * width].chunks_mut(width).enumerate() {
        let (ic, kh, kw) = (row / (g.kh * g.kw), row / g.kw % g.kh, row % g.kw);
        let src = &x[((img * g.c) + grp * icg + ic) * g.h * g.w..][..g.h * g.w];
        // Output columns whose input column is inside the image: [lo, hi).
        let off = (kw * g.dw) as isize - g.pl as isize;
        let lo = if off >= 0 { 0 } else { ((-off) as usize).div_ceil(g.sw) }.min(g.ow);
        let hi = if (g.w as isize) <= off {
            0
        } else {
            ((g.w as isize - off) as usize).div_ceil(g.sw).min(g.ow)
        }
        .max(lo);
        if g.sw == 1 && g.sh == 1 && g.ow == g.w {
            shifted_row(src, g, [kh as isize, off, lo as isize, hi as isize], [p0, p1], out);
            continue;
        }
        // Walk the block one output row (oh) segment at a time.
        let mut p = p0;
        while p < p1 {
            let (oh, j0) = (p / g.ow, p % g.ow);
            let j1 = g.ow.min(j0 + (p1 - p));
            let line = &mut out[p - p0..p - p0 + (j1 - j0)];
            p += j1 - j0;
            let ih = (oh * g.sh + kh * g.dh) as isize - g.pt as isize;
            if ih < 0 || ih >= g.h as isize {
                line.fill(0.0);
                continue;
            }
            let srow = &src[ih as usize * g.w..(ih as usize + 1) * g.w];
            // The in-image part of this segment, in output columns: [a, b) ⊆ [j0, j1).
            let (a, b) = (lo.clamp(j0, j1), hi.clamp(j0, j1).max(lo.clamp(j0, j1)));
            line[..a - j0].fill(0.0);
            line[b - j0..].fill(0.0);
            let seg = &mut line[a - j0..b - j0];
            if g.sw == 1 {
                let start = (a as isize + off) as usize;
                seg.copy_from_slice(&srow[start..start + (b - a)]);
            } else {
                for (j, v) in seg.iter_mut().enumerate() {
                    *v = srow[(((a + j) * g.sw) as isize + off) as usize];
                }
            }
        }
    }
}

/// One im2col row (`kh`, column offset `off`, in-image output columns `lo..hi`) of a stride-1
/// conv whose output is as wide as its input ("same" width): output position `p` then reads
/// input element `p + shift`, so the row is one contiguous copy of the plane followed by zeroing
/// the padding — the columns outside `lo..hi` of each output row, and the rows outside the
/// image. (Copying row segment by row segment cost as much as the product itself on 14×14
/// maps: DenseNet's 3×3 convs spent 28% of their time here.)
fn shifted_row(
    src: &[f32],
    g: &ConvGeom,
    [kh, off, lo, hi]: [isize; 4],
    [p0, p1]: [usize; 2],
    out: &mut [f32],
) {
    let (ow, plane) = (g.ow as isize, (g.h * g.w) as isize);
    let dy = kh * g.dh as isize - g.pt as isize;
    let shift = dy * ow + off;
    // Output rows whose input row is inside the image, as a position range.
    let rows = ((-dy).max(0), (g.h as isize - dy).clamp(0, g.oh as isize));
    let (a, b) = (rows.0 * ow, rows.1.max(rows.0) * ow);
    let (p0i, p1i) = (p0 as isize, p1 as isize);
    // The part of the block to copy: inside the valid rows and the source plane.
    let c0 = a.max(p0i).max(-shift);
    let c1 = b.min(p1i).min(plane - shift).max(c0);
    if c0 >= c1 {
        out.fill(0.0);
        return;
    }
    out[..(c0 - p0i) as usize].fill(0.0);
    out[(c1 - p0i) as usize..].fill(0.0);
    out[(c0 - p0i) as usize..(c1 - p0i) as usize]
        .copy_from_slice(&src[(c0 + shift) as usize..(c1 + shift) as usize]);
    // Padding columns of the copied rows: [0, lo) and [hi, ow) of each, clipped to the copy.
    if lo > 0 || hi < ow {
        let mut row = c0 / ow;
        while row * ow < c1 {
            for (x0, x1) in [(0, lo), (hi, ow)] {
                let (z0, z1) = ((row * ow + x0).max(c0), (row * ow + x1).min(c1));
                if z0 < z1 {
                    out[(z0 - p0i) as usize..(z1 - p0i) as usize].fill(0.0);
                }
            }
            row += 1;
        }
    }
}
