//! The CPU backend's fast f32 path for the two ops that dominate real models. Matrix products
//! run as packed SGEMM (the `gemm` crate, or `matrixmultiply` with `MPSRT_CPU_GEMM`: cache
//! blocking, AVX2/FMA micro-kernels; row or column blocks split over the worker pool) straight
//! over the operands' own strides, so transposed and broadcast operands are never copied.
//! Convolutions lower to SGEMMs per (image, group) over im2col column blocks of ~1 MiB, each
//! filled and multiplied on one worker (`im2col.rs`) — 1×1 stride-1 unpadded kernels skip
//! im2col, their input plane already is the column matrix — and a fused conv step's residual
//! add and activation ([`Epi`]) are applied to each block right after its product.
//!
//! These accumulate in f32 (like the GPU kernels and onnxruntime). The f64 loops in `matmul.rs`
//! and `conv.rs` stay: they serve every other dtype and are the reference the fast path is
//! tested against (`tests/cpu_fast.rs`). Set `MPSRT_CPU_REFERENCE=1` to force them everywhere.

use super::im2col::im2col_block;
use super::matmul::batch_offset;
use super::SendPtr;
use crate::conv::ConvGeom;
use crate::matmul::Problem;
use crate::Activation;
use crate::Tensor;
use mpsrt_core::{DType, Layout, Result};
use mpsrt_runtime::{CpuBuffer, Storage};
use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

/// Elements of one im2col column block (1 MiB of f32): fits a core's L2 beside the packed
/// operands.
const COL_BLOCK: usize = 1 << 18;

thread_local! {
    /// Each worker's column block buffer, reused across convs (grows to the largest block).
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Whether the fast path is enabled (`MPSRT_CPU_REFERENCE` unset or `0`).
fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("MPSRT_CPU_REFERENCE").map_or(true, |v| v.is_empty() || v == "0")
    })
}

/// Whether `MPSRT_CPU_GEMM=matrixmultiply` selects the `matrixmultiply` crate's SGEMM instead of
/// the default `gemm` crate's (kept to compare the two on a machine).
fn use_matrixmultiply() -> bool {
    static MM: OnceLock<bool> = OnceLock::new();
    *MM.get_or_init(|| std::env::var("MPSRT_CPU_GEMM").is_ok_and(|v| v == "matrixmultiply"))
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

/// Bytes of `dims` f32 elements, `None` when they overflow (the reference route then reports
/// the error with the op's name).
fn f32_bytes(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(4usize, |a, &d| a.checked_mul(d)).filter(|&b| b <= mpsrt_core::MAX_SIZE)
}

/// A strided operand: `(buffer, offset of element [0, 0], row stride, column stride)`.
type Operand<'a> = (&'a [f32], isize, isize, isize);

/// What a product applies to its C block right after computing it (while the block is in
/// cache): `C = act(C + res)`, `res` laid out like C (same row stride, same origin).
#[derive(Clone, Copy, Default)]
pub(crate) struct Epi<'a> {
    pub res: Option<&'a [f32]>,
    pub act: Option<Activation>,
}

impl<'a> Epi<'a> {
    /// The same epilogue for a block whose origin is `off` elements past this one's.
    fn at(self, off: usize) -> Epi<'a> {
        Epi { res: self.res.map(|r| &r[off..]), ..self }
    }

    /// Applies the epilogue to `row` (a row segment of C) and `res` (the same segment of the
    /// residual); the arithmetic of `add` followed by the activation as separate ops.
    fn apply(self, row: &mut [f32], res: Option<&[f32]>) {
        if let Some(r) = res {
            row.iter_mut().zip(r).for_each(|(y, r)| *y += *r);
        }
        match self.act {
            None => {}
            Some(Activation::Relu) => {
                row.iter_mut().for_each(|y| *y = if *y < 0.0 { 0.0 } else { *y })
            }
            Some(Activation::LeakyRelu(a)) => {
                row.iter_mut().for_each(|y| *y = if *y < 0.0 { *y * a } else { *y })
            }
            Some(Activation::Clip(lo, hi)) => row.iter_mut().for_each(|y| {
                *y = if y.is_nan() { *y } else { y.max(lo).min(hi) };
            }),
            Some(Activation::HardSigmoid(a, b)) => {
                row.iter_mut().for_each(|y| *y = hard_sigmoid(*y, a, b))
            }
            Some(Activation::HardSwish) => {
                row.iter_mut().for_each(|y| *y *= hard_sigmoid(*y, 1.0 / 6.0, 0.5))
            }
            Some(Activation::Sigmoid) => row.iter_mut().for_each(|y| *y = sigmoid(*y)),
            Some(Activation::Silu) => row.iter_mut().for_each(|y| *y *= sigmoid(*y)),
            // The elementwise `gelu`'s arithmetic: `(0.5 x) (1 + erf(x / √2))`.
            Some(Activation::Gelu) => row.iter_mut().for_each(|y| {
                *y = (0.5 * *y) * (1.0 + libm::erff(*y * std::f32::consts::FRAC_1_SQRT_2))
            }),
            Some(Activation::GeluTanh) => row.iter_mut().for_each(|y| {
                let inner = 0.797_884_6 * (*y + 0.044715 * (*y * *y * *y));
                *y = (0.5 * *y) * (1.0 + inner.tanh())
            }),
        }
    }
}

/// `clamp(a * x + b, 0, 1)`, NaN kept (the elementwise HardSigmoid's `max(0, min(1, .))`).
fn hard_sigmoid(x: f32, a: f32, b: f32) -> f32 {
    let l = x * a + b;
    if l.is_nan() {
        l
    } else {
        l.clamp(0.0, 1.0)
    }
}

/// The elementwise Sigmoid's overflow-free form.
fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// Panics unless every element a `rows × cols` operand's strides reach lies inside its buffer
/// (a tensor's layout never points outside its buffer, so this only catches our own bugs).
fn check_bounds((buf, o, r, c): Operand<'_>, rows: usize, cols: usize) {
    let span = |s: isize, len: usize| s * (len as isize - 1);
    let first = o + span(r.min(0), rows) + span(c.min(0), cols);
    let last = o + span(r.max(0), rows) + span(c.max(0), cols);
    assert!(first >= 0 && (last as usize) < buf.len(), "sgemm operand out of bounds");
}

/// `C[:, c0..c0 + n] = alpha · A·B + beta · C[:, c0..c0 + n]` for C row-major with row stride
/// `ldc`, through the packed SGEMM, then the epilogue `epi` on that window.
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
    c: SendPtr<f32>,
    ldc: usize,
    epi: Epi<'_>,
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
    } else {
        // SAFETY: the caller's contract.
        unsafe { sgemm_raw([m, n, k], alpha, a, b, beta, c, ldc) };
    }
    if epi.res.is_some() || epi.act.is_some() {
        for i in 0..m {
            // SAFETY: row i of the caller's m × n window of C, which only this call touches.
            let row = unsafe { std::slice::from_raw_parts_mut(c.0.add(i * ldc), n) };
            epi.apply(row, epi.res.map(|r| &r[i * ldc..i * ldc + n]));
        }
    }
}

/// The product itself (k > 0): [`sgemm_cols`] without the epilogue.
///
/// # Safety
/// As [`sgemm_cols`].
unsafe fn sgemm_raw(
    [m, n, k]: [usize; 3],
    alpha: f32,
    a: Operand<'_>,
    b: Operand<'_>,
    beta: f32,
    c: SendPtr<f32>,
    ldc: usize,
) {
    check_bounds(a, m, k);
    check_bounds(b, k, n);
    // SAFETY: the bounds checks cover every element of A and B the strides reach; C is the
    // caller's contract.
    unsafe {
        let (pa, pb) = (a.0.as_ptr().offset(a.1), b.0.as_ptr().offset(b.1));
        if use_matrixmultiply() {
            matrixmultiply::sgemm(
                m,
                k,
                n,
                alpha,
                pa,
                a.2,
                a.3,
                pb,
                b.2,
                b.3,
                beta,
                c.0,
                ldc as isize,
                1,
            );
        } else {
            // gemm's convention: dst = alpha·dst + beta·lhs·rhs; with `read_dst` false it
            // neither reads C nor lets stale NaNs through.
            gemm::gemm(
                m,
                n,
                k,
                c.0,
                1,
                ldc as isize,
                beta != 0.0,
                pa,
                a.3,
                a.2,
                pb,
                b.3,
                b.2,
                beta,
                alpha,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
    }
}

/// `C (m×n, row-major, contiguous) = alpha · A·B + beta · C` with the work split over scoped
/// threads (each SGEMM call runs single-threaded): by row blocks when A is the larger
/// operand to pack (late, channel-heavy layers), by column blocks when B is (early layers with
/// large maps), so no thread repacks the big operand. Small products stay on this thread.
fn sgemm_par(
    [m, n, k]: [usize; 3],
    alpha: f32,
    a: Operand<'_>,
    b: Operand<'_>,
    beta: f32,
    c: &mut [f32],
    epi: Epi<'_>,
) {
    assert!(c.len() >= m * n, "sgemm output too small");
    let by_cols = n > m;
    let t = super::threads().min(if by_cols { n } else { m }).max(1);
    let ptr = SendPtr(c.as_mut_ptr());
    if t == 1 || m * n * k < (1 << 20) {
        // SAFETY: `c` holds m × n elements and is exclusively borrowed.
        return unsafe { sgemm_cols([m, n, k], alpha, a, b, beta, ptr, n, epi) };
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
                sgemm_cols([m, len, k], alpha, a, b, beta, SendPtr(ptr.0.add(lo)), n, epi.at(lo));
            } else {
                let a = (a.0, a.1 + lo as isize * a.2, a.2, a.3);
                let c = SendPtr(ptr.0.add(lo * n));
                sgemm_cols([len, n, k], alpha, a, b, beta, c, n, epi.at(lo * n));
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
    // beta = 0 the SGEMM writes C without reading it, k = 0 included).
    // Over the memory limit: the reference route reports the error.
    let mut buf = CpuBuffer::for_overwrite("matmul", f32_bytes(&[zc, m, n])?).ok()?;
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
            Epi::default(),
        );
    }
    let mut shape = p.batch.clone();
    shape.extend([m, n]);
    Some(f32_tensor(buf, &shape))
}

/// The fast path of [`super::conv::conv2d`] for f32 operands; `None` when it does not apply.
pub(crate) fn conv2d(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    g: &ConvGeom,
    (res, act): (Option<&Tensor>, Option<Activation>),
) -> Result<Option<Tensor>> {
    if !enabled() || x.dtype() != DType::F32 || w.dtype() != DType::F32 {
        return Ok(None);
    }
    if res.is_some_and(|r| r.dtype() != DType::F32) {
        return Ok(None);
    }
    let rc = res.map(Tensor::contiguous).transpose()?;
    let rs = match &rc {
        Some(r) => match f32_buffer(r) {
            Some(v) => Some(&v[r.layout().offset..][..g.n * g.oc * g.oh * g.ow]),
            None => return Ok(None),
        },
        None => None,
    };
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
    let mut buf = CpuBuffer::for_overwrite("conv2d", g.n * g.oc * plane * 4)?;
    let out = buf.as_mut_slice::<f32>();
    let t = super::threads();
    // Column blocks of about COL_BLOCK elements, a multiple of the thread count when there is
    // more than one, each filled and multiplied on one worker.
    // A conv too small for two 1 MiB blocks still splits over the workers when its product is
    // worth it, so the im2col fill runs in parallel too (not on this thread while they wait):
    // DenseNet's 3×3 convs at 14×14 and 7×7 are this case, 40 of its 58.
    let worth = t > 1 && ocg * kdim * plane >= 1 << 20;
    let blocks = match (kdim * plane).div_ceil(COL_BLOCK) {
        _ if direct => 1,
        b if b <= 1 && !worth => 1,
        b => b.next_multiple_of(t).min(plane),
    };
    let width = plane.div_ceil(blocks);
    // A single block is filled here and multiplied by `sgemm_par`.
    let mut col_buf = CpuBuffer::for_overwrite(
        "conv2d",
        if direct || blocks > 1 { 0 } else { kdim * plane * 4 },
    )?;
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
            let epi = Epi { res: rs.map(|r| &r[c0..c0 + ocg * plane]), act };
            if direct {
                // The input plane [icg, h·w] is the column matrix (oh = h, ow = w).
                let bmat = (xs, ((img * g.c + grp * icg) * g.h * g.w) as isize, plane as isize, 1);
                sgemm_par([ocg, plane, kdim], 1.0, a, bmat, beta, dst, epi);
            } else if blocks == 1 {
                im2col_block(xs, g, [img, grp], [0, plane], col);
                let bmat = (&col[..], 0, plane as isize, 1);
                sgemm_par([ocg, plane, kdim], 1.0, a, bmat, beta, dst, epi);
            } else {
                let ptr = SendPtr(dst.as_mut_ptr());
                super::par_for(blocks, move |j| {
                    let ptr = ptr; // the whole `Send + Sync` wrapper, not its field
                    let (p0, p1) = (j * width, ((j + 1) * width).min(plane));
                    if p0 >= p1 {
                        return;
                    }
                    SCRATCH.with_borrow_mut(|s| {
                        if s.len() < kdim * (p1 - p0) {
                            s.resize(kdim * (p1 - p0), 0.0);
                        }
                        im2col_block(xs, g, [img, grp], [p0, p1], s);
                        let bmat = (&s[..], 0, (p1 - p0) as isize, 1);
                        // SAFETY: block j owns columns p0..p1 of the ocg × plane output `dst`,
                        // which stays borrowed until `par_for` returns, after every block.
                        unsafe {
                            let c = SendPtr(ptr.0.add(p0));
                            let (mnk, e) = ([ocg, p1 - p0, kdim], epi.at(p0));
                            sgemm_cols(mnk, 1.0, a, bmat, beta, c, plane, e);
                        }
                    });
                });
            }
        }
    }
    Ok(Some(f32_tensor(buf, &[g.n, g.oc, g.oh, g.ow])))
}
