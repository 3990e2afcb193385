//! The CPU backend's fast f32 path for the two ops that dominate real models. Matrix products
//! run as packed SGEMM (the `matrixmultiply` crate: cache blocking, AVX2/FMA micro-kernels;
//! row or column blocks split over scoped threads) straight over the operands' own strides, so
//! transposed and broadcast operands are never copied; convolutions lower to one SGEMM per (image, group) over an im2col matrix —
//! skipped for 1×1 stride-1 unpadded kernels, whose input plane already is that matrix.
//!
//! These accumulate in f32 (like the GPU kernels and onnxruntime). The f64 loops in `matmul.rs`
//! and `conv.rs` stay: they serve every other dtype and are the reference the fast path is
//! tested against (`tests/cpu_fast.rs`). Set `MPSRT_CPU_REFERENCE=1` to force them everywhere.

use super::matmul::batch_offset;
use crate::conv::ConvGeom;
use crate::matmul::Problem;
use crate::Tensor;
use mpsrt_core::{DType, Layout, Result};
use mpsrt_runtime::{CpuBuffer, Storage};
use std::sync::{Arc, OnceLock};

/// Whether the fast path is enabled (`MPSRT_CPU_REFERENCE` unset or `0`).
fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("MPSRT_CPU_REFERENCE").map_or(true, |v| v.is_empty() || v == "0")
    })
}

/// The f32 elements of a CPU tensor's whole buffer (the layout indexes into it).
fn f32_buffer(t: &Tensor) -> Option<&[f32]> {
    match t.storage() {
        Storage::Cpu(b) if t.dtype() == DType::F32 => Some(b.as_slice::<f32>()),
        _ => None,
    }
}

/// A contiguous f32 tensor over `buf`, which the caller filled in place (no copy into a new
/// buffer: that copy and its zero fill were ~10% of a ResNet-50 run on the CPU).
fn f32_tensor(buf: CpuBuffer, shape: &[usize]) -> Tensor {
    Tensor::from_parts(Storage::Cpu(Arc::new(buf)), Layout::contiguous(shape), DType::F32)
}

/// A strided operand: `(buffer, offset of element [0, 0], row stride, column stride)`.
type Operand<'a> = (&'a [f32], isize, isize, isize);

/// Panics unless every element a `rows × cols` operand's strides reach lies inside its buffer
/// (a tensor's layout never points outside its buffer, so this only catches our own bugs).
fn check_bounds((buf, o, r, c): Operand<'_>, rows: usize, cols: usize) {
    let span = |s: isize, len: usize| s * (len as isize - 1);
    let first = o + span(r.min(0), rows) + span(c.min(0), cols);
    let last = o + span(r.max(0), rows) + span(c.max(0), cols);
    assert!(first >= 0 && (last as usize) < buf.len(), "sgemm operand out of bounds");
}

/// C pointer that scoped worker threads share; each writes only its own columns.
#[derive(Clone, Copy)]
struct CPtr(*mut f32);
// SAFETY: the tasks of `sgemm_par` write disjoint row or column ranges of C and nothing reads C
// concurrently; the pointer outlives them (`par_for` waits for every task).
unsafe impl Send for CPtr {}
// SAFETY: as above: shared only to hand each task its own disjoint range.
unsafe impl Sync for CPtr {}

/// `C[:, c0..c0 + n] = alpha · A·B + beta · C[:, c0..c0 + n]` for C row-major with row stride
/// `ldc`, through matrixmultiply's packed SGEMM.
///
/// # Safety
/// `c` must point at `C[0, c0]` with `m` rows of `ldc` elements valid for writes, and no other
/// thread may touch those columns meanwhile.
#[allow(clippy::too_many_arguments)]
unsafe fn sgemm_cols(
    [m, n, k]: [usize; 3],
    alpha: f32,
    a: Operand<'_>,
    b: Operand<'_>,
    beta: f32,
    c: CPtr,
    ldc: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for i in 0..m {
            for j in 0..n {
                // SAFETY: inside the caller's m × n window of C.
                unsafe { *c.0.add(i * ldc + j) *= beta };
            }
        }
        return;
    }
    check_bounds(a, m, k);
    check_bounds(b, k, n);
    // SAFETY: the bounds checks cover every element of A and B the strides reach; C is the
    // caller's contract.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.0.as_ptr().offset(a.1),
            a.2,
            a.3,
            b.0.as_ptr().offset(b.1),
            b.2,
            b.3,
            beta,
            c.0,
            ldc as isize,
            1,
        );
    }
}

/// `C (m×n, row-major, contiguous) = alpha · A·B + beta · C` with the work split over scoped
/// threads (matrixmultiply itself runs single-threaded): by row blocks when A is the larger
/// operand to pack (late, channel-heavy layers), by column blocks when B is (early layers with
/// large maps), so no thread repacks the big operand. Small products stay on this thread.
fn sgemm_par(
    [m, n, k]: [usize; 3],
    alpha: f32,
    a: Operand<'_>,
    b: Operand<'_>,
    beta: f32,
    c: &mut [f32],
) {
    assert!(c.len() >= m * n, "sgemm output too small");
    let by_cols = n > m;
    let t = super::threads().min(if by_cols { n } else { m }).max(1);
    let ptr = CPtr(c.as_mut_ptr());
    if t == 1 || m * n * k < (1 << 20) {
        // SAFETY: `c` holds m × n elements and is exclusively borrowed.
        return unsafe { sgemm_cols([m, n, k], alpha, a, b, beta, ptr, n) };
    }
    let block = if by_cols { n } else { m }.div_ceil(t);
    super::par_for(t, move |j| {
        let ptr = ptr; // capture the whole `Send + Sync` wrapper, not its raw-pointer field
        let lo = j * block;
        let len = block.min(if by_cols { n } else { m }.saturating_sub(lo));
        if len == 0 {
            return;
        }
        // SAFETY: task j owns rows (or columns) lo..lo + len of C exclusively; `c` is borrowed
        // until `par_for` returns, after every task.
        unsafe {
            if by_cols {
                let b = (b.0, b.1 + lo as isize * b.3, b.2, b.3);
                sgemm_cols([m, len, k], alpha, a, b, beta, CPtr(ptr.0.add(lo)), n);
            } else {
                let a = (a.0, a.1 + lo as isize * a.2, a.2, a.3);
                sgemm_cols([len, n, k], alpha, a, b, beta, CPtr(ptr.0.add(lo * n)), n);
            }
        }
    });
}

/// The fast path of [`super::matmul::matmul`] when both operands (and C) are f32; `None` when it
/// does not apply.
pub(crate) fn matmul(p: &Problem<'_>) -> Option<Tensor> {
    if !enabled() {
        return None;
    }
    let (da, db) = (f32_buffer(p.a_t)?, f32_buffer(p.b_t)?);
    let [m, n, k] = p.mnk;
    let nb = p.batch.len();
    let zc: usize = p.batch.iter().product();
    // Every element is written: beta·C first when there is a C, else by the product (with
    // beta = 0 matrixmultiply writes C without reading it, k = 0 included).
    let mut buf = CpuBuffer::for_overwrite(zc * m * n * 4);
    let out = buf.as_mut_slice::<f32>();
    let beta = match &p.c {
        Some((t, l)) => {
            let dc = f32_buffer(t)?;
            // C is broadcast to [M, N]: materialize beta·C into every batch's block first.
            for i in 0..m {
                for j in 0..n {
                    let o =
                        l.offset as isize + i as isize * l.strides[0] + j as isize * l.strides[1];
                    let v = p.beta as f32 * dc[o as usize];
                    for z in 0..zc {
                        out[(z * m + i) * n + j] = v;
                    }
                }
            }
            1.0
        }
        None => 0.0,
    };
    let (sam, sak) = (p.a.strides[nb], p.a.strides[nb + 1]);
    let (sbk, sbn) = (p.b.strides[nb], p.b.strides[nb + 1]);
    for z in 0..zc {
        let (oa, ob) = (batch_offset(&p.a, &p.batch, z), batch_offset(&p.b, &p.batch, z));
        sgemm_par(
            [m, n, k],
            p.alpha as f32,
            (da, oa, sam, sak),
            (db, ob, sbk, sbn),
            beta,
            &mut out[z * m * n..(z + 1) * m * n],
        );
    }
    let mut shape = p.batch.clone();
    shape.extend([m, n]);
    Some(f32_tensor(buf, &shape))
}

/// Column matrix `[icg·kh·kw, oh·ow]` of group `grp` of image `img` (x contiguous NCHW). Rows
/// are independent: large matrices are filled in row blocks on the CPU worker pool
/// (single-threaded, im2col was what kept the conv path from scaling with cores).
fn im2col(x: &[f32], g: &ConvGeom, img: usize, grp: usize, col: &mut [f32]) {
    let plane = g.oh * g.ow;
    let rows = g.c / g.groups * g.kh * g.kw;
    let col = &mut col[..rows * plane];
    let t = if rows * plane >= 1 << 16 { super::threads().min(rows) } else { 1 };
    if t <= 1 {
        im2col_rows(x, g, img, grp, 0, col);
        return;
    }
    let per = rows.div_ceil(t);
    super::par_chunks(col, per * plane, |i, chunk| im2col_rows(x, g, img, grp, i * per, chunk));
}

/// Rows `row0..` of the column matrix into `dst` (whole rows of `oh·ow`).
fn im2col_rows(x: &[f32], g: &ConvGeom, img: usize, grp: usize, row0: usize, dst: &mut [f32]) {
    let icg = g.c / g.groups;
    let plane = g.oh * g.ow;
    for (r, out) in dst.chunks_mut(plane).enumerate() {
        let row = row0 + r;
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
        for oh in 0..g.oh {
            let ih = (oh * g.sh + kh * g.dh) as isize - g.pt as isize;
            let line = &mut out[oh * g.ow..(oh + 1) * g.ow];
            if ih < 0 || ih >= g.h as isize {
                line.fill(0.0);
                continue;
            }
            let srow = &src[ih as usize * g.w..(ih as usize + 1) * g.w];
            line[..lo].fill(0.0);
            line[hi..].fill(0.0);
            if g.sw == 1 {
                let start = (lo as isize + off) as usize;
                line[lo..hi].copy_from_slice(&srow[start..start + (hi - lo)]);
            } else {
                for (j, v) in line[lo..hi].iter_mut().enumerate() {
                    *v = srow[(((lo + j) * g.sw) as isize + off) as usize];
                }
            }
        }
    }
}

/// The fast path of [`super::conv::conv2d`] for f32 operands; `None` when it does not apply.
pub(crate) fn conv2d(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    g: &ConvGeom,
) -> Result<Option<Tensor>> {
    if !enabled() || x.dtype() != DType::F32 || w.dtype() != DType::F32 {
        return Ok(None);
    }
    if b.is_some_and(|b| b.dtype() != DType::F32) {
        return Ok(None);
    }
    let (xc, wc) = (x.contiguous()?, w.contiguous()?);
    let (Some(xs), Some(ws)) = (f32_buffer(&xc), f32_buffer(&wc)) else {
        return Ok(None);
    };
    let (xs, ws) = (&xs[xc.layout().offset..], &ws[wc.layout().offset..]);
    let bias = match b {
        Some(b) => Some(b.to_vec::<f32>()?),
        None => None,
    };
    let (icg, ocg) = (g.c / g.groups, g.oc / g.groups);
    let (plane, kdim) = (g.oh * g.ow, icg * g.kh * g.kw);
    let direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pl == 0;
    // Every element is written: the bias rows first, else by the product (beta = 0).
    let mut buf = CpuBuffer::for_overwrite(g.n * g.oc * plane * 4);
    let out = buf.as_mut_slice::<f32>();
    // im2col writes every element of its column matrix (zeros for padding included).
    let mut col_buf = CpuBuffer::for_overwrite(if direct { 0 } else { kdim * plane * 4 });
    let col = col_buf.as_mut_slice::<f32>();
    for img in 0..g.n {
        for grp in 0..g.groups {
            let c0 = (img * g.oc + grp * ocg) * plane;
            let dst = &mut out[c0..c0 + ocg * plane];
            if let Some(bias) = &bias {
                for (oc, row) in dst.chunks_mut(plane).enumerate() {
                    row.fill(bias[grp * ocg + oc]);
                }
            }
            let beta = if bias.is_some() { 1.0 } else { 0.0 };
            let a = (ws, (grp * ocg * kdim) as isize, kdim as isize, 1);
            let bmat = if direct {
                // The input plane [icg, h·w] is the column matrix (oh = h, ow = w).
                (xs, ((img * g.c + grp * icg) * g.h * g.w) as isize, plane as isize, 1)
            } else {
                im2col(xs, g, img, grp, col);
                (&col[..], 0, plane as isize, 1)
            };
            sgemm_par([ocg, plane, kdim], 1.0, a, bmat, beta, dst);
        }
    }
    Ok(Some(f32_tensor(buf, &[g.n, g.oc, g.oh, g.ow])))
}
