//! GPU launch for matrix products: coalesce the broadcast batch dims, pick GEMV (M = 1, or
//! N = 1 by swapping the operands' roles through strides) or the tiled GEMM, choose the tile
//! size and each operand's load path (`vec4` along its contiguous axis when aligned), and
//! record one dispatch. The f32 result is cast by the caller (a generation-3 cooperative kernel
//! writes an f16 product itself, `MPSRT_COOP_F16_OUT`). An f16 product without epilogue
//! runs on the matrix units (`mpsrt_kernels::matmul_coop`) when [`plan_f16_gemm`] finds a
//! usable cooperative-matrix configuration on the device; the tiled GEMM stays the fallback.
//!
//! Operands past the adapter's `max_storage_buffer_binding_size` (VGG's 392 MiB fully-connected
//! weight against lavapipe's 128 MiB, a large A, C or output, more batch matrices than one
//! dispatch dimension holds) are solved in pieces: the problem is halved along batches, rows
//! of A, columns of B or (when a single row or column is too long) K, until every operand's
//! touched elements fit one binding; each piece binds only those byte windows, the pieces are
//! concatenated (K halves summed, C added once), and a residual/activation epilogue is applied
//! to the assembled product.

use super::matmul_coop::{
    cached_coop, coop_enabled, coop_epilogue, coop_small_m, coop_spec, coop_spec_sliced,
    coop_splitk_target,
};
pub use super::matmul_coop::{
    matmul_kernel_name, plan_coop_splitk, plan_f16_gemm, small_m_prefers_tiled,
};
use super::reduce::gpu_buffer;
use super::window;
use crate::activation::maybe_apply;
use crate::matmul::epilogue_after;
use crate::matmul::Problem;
use crate::Tensor;
use mpsrt_core::{DType, Error, Layout, Result};
use mpsrt_kernels::matmul_coop::CoopEpilogue;
use mpsrt_kernels::CoopMatmulSpec;
use mpsrt_kernels::{
    coalesce, gemm_splitk_reduce4_kernel, gemm_splitk_reduce_kernel, matmul_meta, GemvSpec,
    MatmulAct,
};
use mpsrt_kernels::{MatmulSpec, OperandLoad};
use mpsrt_runtime::{Binding, GpuBuffer, GpuDevice, Kernel, Pipeline, Storage};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// Rendered pipelines per (device, spec): rendering a tiled GEMM's WGSL (~16 KB of generated
/// text) and hashing it for the device's cache cost tens of µs per call, paid on every conv of
/// a batch-1 network otherwise.
pub(crate) fn cached<S: Copy + Eq + std::hash::Hash>(
    cache: &'static SpecCache<S>,
    dev: &GpuDevice,
    op: &str,
    spec: S,
    render: impl FnOnce(&S) -> std::result::Result<String, String>,
) -> Result<Arc<Pipeline>> {
    // SAFETY: `checked` — wgpu keeps its bounds checks.
    unsafe { cached_impl(cache, dev, op, spec, render, true) }
}

/// [`cached`] for kernels compiled without wgpu's runtime bounds checks
/// (`GpuDevice::pipeline_unchecked`).
///
/// # Safety
/// Every access of the kernel `render` produces must be in bounds for every launch the caller
/// makes with it.
pub(crate) unsafe fn cached_unchecked<S: Copy + Eq + std::hash::Hash>(
    cache: &'static SpecCache<S>,
    dev: &GpuDevice,
    op: &str,
    spec: S,
    render: impl FnOnce(&S) -> std::result::Result<String, String>,
) -> Result<Arc<Pipeline>> {
    // SAFETY: forwarded to the caller.
    unsafe { cached_impl(cache, dev, op, spec, render, false) }
}

/// # Safety
/// With `checked == false`, as [`cached_unchecked`].
unsafe fn cached_impl<S: Copy + Eq + std::hash::Hash>(
    cache: &'static SpecCache<S>,
    dev: &GpuDevice,
    op: &str,
    spec: S,
    render: impl FnOnce(&S) -> std::result::Result<String, String>,
    checked: bool,
) -> Result<Arc<Pipeline>> {
    let cache = cache.get_or_init(Mutex::default);
    let key = (dev.index(), spec);
    if let Some(p) = cache.lock().get(&key) {
        return Ok(p.clone());
    }
    let src = render(&spec).map_err(|e| Error::dtype(op, e))?;
    let kernel = Kernel { source: &src, entry: "main" };
    let p = if checked {
        dev.pipeline(kernel)?
    } else {
        // SAFETY: the caller's contract (see `cached_unchecked`).
        unsafe { dev.pipeline_unchecked(kernel)? }
    };
    cache.lock().insert(key, p.clone());
    Ok(p)
}

pub(crate) type SpecCache<S> = OnceLock<Mutex<HashMap<(usize, S), Arc<Pipeline>>>>;
static GEMM: SpecCache<MatmulSpec> = OnceLock::new();
/// The same kernels compiled without wgpu's bounds checks (generation 2's default).
static GEMM_UNCHECKED: SpecCache<MatmulSpec> = OnceLock::new();
/// Tiled GEMMs storing at meta strides (`MatmulSpec::render_strided_out`), checked.
static GEMM_STRIDED: SpecCache<MatmulSpec> = OnceLock::new();
static GEMM_STRIDED_UNCHECKED: SpecCache<MatmulSpec> = OnceLock::new();
/// Stream-K fix-up passes (`MatmulSpec::render_sk_fixup`), checked and unchecked.
static GEMM_SK_FIXUP: SpecCache<MatmulSpec> = OnceLock::new();
static GEMM_SK_FIXUP_UNCHECKED: SpecCache<MatmulSpec> = OnceLock::new();
static GEMV: SpecCache<GemvSpec> = OnceLock::new();
use super::matmul_plan::{splitk_f16, splitk_slices, splitk_target, tile128_min, tiled_choice};

/// A tiled GEMM launch: the output tile edge and how many K slices (1: no split-K).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmPlan {
    /// 64 or 128.
    pub tile: u32,
    /// K slices, each a batch of the GEMM dispatch, summed by `gemm_splitk_reduce_kernel`.
    pub slices: usize,
}

/// The tiled GEMM's launch for `[m, n, k]` over `batch` matrices: 128×128 tiles when there are
/// at least `tile128_min` of them, else 64×64; then, when the 64×64 grid has fewer than
/// `target` workgroups (0: never split) — BERT's `[128, 3072]·[3072, 768]` has 24 for an
/// H100's 132 SMs — K is cut into `S` slices run as an extra batch dim so the grid reaches
/// about `target`, with `S` dividing K into slices of ≥ 256 (`matmul_plan::SPLITK_MIN_SLICE`) (a multiple of 8,
/// the K step: slices share no edge), at most 16, and the partials' extra
/// traffic (`2·S·M·N` floats) no more than the operands' (`M·K + K·N` per matrix). Pure: shape
/// in, choice out, tested without a GPU.
pub fn plan_gemm(mnk: [usize; 3], batch: usize, tile128_min: usize, target: usize) -> GemmPlan {
    let [m, n, _] = mnk;
    let tiles = |t: usize| m.div_ceil(t) * n.div_ceil(t) * batch;
    let tile = if tiles(128) >= tile128_min { 128 } else { 64 };
    // 128-wide tiles mean the grid is already large: splitting only adds partial traffic.
    let slices = if tile == 64 { splitk_slices(mnk, tiles(64), target) } else { 1 };
    GemmPlan { tile, slices }
}

fn aligned(vals: &[isize]) -> bool {
    vals.iter().all(|v| v % 4 == 0)
}

pub(crate) fn matmul(op: &str, device: usize, p: &Problem<'_>) -> Result<Tensor> {
    if !oversize(op, device, p)? {
        return solve(op, device, p, &Wins::default());
    }
    // Pieces carry no residual or activation: those apply once, to the assembled product.
    let r = split(op, device, &p.without_epilogue(), 0)?;
    epilogue_after(r, p.res, p.act)
}

/// Whether an operand or the output of `p` is past one binding or the dispatch limits (then
/// [`matmul`] solves it in pieces).
pub(super) fn oversize(op: &str, device: usize, p: &Problem<'_>) -> Result<bool> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    let (limit, _) = window::limits(&dev);
    let [m, n, _] = p.mnk;
    let z: usize = p.batch.iter().product();
    let maxd = dev.properties().max_compute_workgroups_per_dimension as usize;
    let big = |t: &Tensor| gpu_buffer(op, t).map(|b| !window::fits(b, limit));
    Ok(big(p.a_t)?
        || big(p.b_t)?
        || p.c.as_ref().map(|(c, _)| big(c)).transpose()?.unwrap_or(false)
        || p.res.map(big).transpose()?.unwrap_or(false)
        || ((z * m * n * 4) as u64) > limit
        || z > maxd
        || m.max(n) > GRID_ROWS * maxd)
}

/// Rows (or columns) of the output per workgroup in the narrowest grid (the GEMV's 8 columns):
/// products longer than this many times the dispatch limit per dimension are cut too.
const GRID_ROWS: usize = 8;

/// Byte windows bound for A, B and C (`None`: the whole buffer); layouts in the problem are
/// then relative to the window's first element.
#[derive(Default)]
pub(super) struct Wins {
    a: Option<(u64, u64)>,
    b: Option<(u64, u64)>,
    c: Option<(u64, u64)>,
}

/// Elements `(lo, hi)` (inclusive) a view touches; `None` when it is empty.
fn touched(l: &Layout) -> Option<(usize, usize)> {
    if l.shape.contains(&0) {
        return None;
    }
    let (mut lo, mut hi) = (l.offset as isize, l.offset as isize);
    for (&d, &s) in l.shape.iter().zip(&l.strides) {
        let t = (d as isize - 1) * s;
        lo += t.min(0);
        hi += t.max(0);
    }
    Some((lo.max(0) as usize, hi.max(0) as usize))
}

/// The aligned byte window `(offset, bytes)` holding a view's elements of `eb` bytes.
fn window_of(l: &Layout, eb: usize, align: u64) -> Option<(u64, u64)> {
    let (lo, hi) = touched(l)?;
    let start = (lo * eb) as u64 / align * align;
    let end = (((hi + 1) * eb) as u64).next_multiple_of(4);
    Some((start, end - start))
}

/// How many bindings' worth each operand of `p` needs (its window over the limit; the output
/// counts as a fresh contiguous buffer, the batch count and M/N against the dispatch limit):
/// ≤ 1 fits.
fn load(p: &Problem<'_>, limit: u64, align: u64, maxd: usize) -> f64 {
    let [m, n, _] = p.mnk;
    let z: usize = p.batch.iter().product();
    let ratio = |w: Option<(u64, u64)>| w.map_or(0.0, |(_, b)| b as f64 / limit as f64);
    let mut r = ratio(window_of(&p.a, p.a_t.dtype().size(), align))
        .max(ratio(window_of(&p.b, p.b_t.dtype().size(), align)))
        .max((z * m * n * 4) as f64 / limit as f64)
        .max(z as f64 / maxd as f64)
        .max(m.max(n) as f64 / (GRID_ROWS * maxd) as f64);
    if let Some((c, l)) = &p.c {
        r = r.max(ratio(window_of(l, c.dtype().size(), align)));
    }
    r
}

/// Where a problem is cut: a batch dim, rows of A (M), columns of B (N), or K.
#[derive(Clone, Copy, PartialEq)]
enum Cut {
    Batch(usize),
    M,
    N,
    K,
}

/// `p` restricted to `start .. start + len` along `cut`.
fn piece<'a>(p: &Problem<'a>, cut: Cut, start: usize, len: usize) -> Problem<'a> {
    let nb = p.batch.len();
    let mut q = p.without_epilogue();
    let narrow = |l: &mut Layout, d: usize| {
        l.offset = (l.offset as isize + start as isize * l.strides[d]) as usize;
        l.shape[d] = len;
    };
    match cut {
        Cut::Batch(d) => {
            narrow(&mut q.a, d);
            narrow(&mut q.b, d);
            q.batch[d] = len;
        }
        Cut::M => {
            narrow(&mut q.a, nb);
            if let Some((_, l)) = &mut q.c {
                narrow(l, 0);
            }
            q.mnk[0] = len;
        }
        Cut::N => {
            narrow(&mut q.b, nb + 1);
            if let Some((_, l)) = &mut q.c {
                narrow(l, 1);
            }
            q.mnk[1] = len;
        }
        Cut::K => {
            narrow(&mut q.a, nb + 1);
            narrow(&mut q.b, nb);
            q.mnk[2] = len;
        }
    }
    q
}

/// Solves `p` (no residual/activation) when every operand's window fits one binding, else cuts
/// it in two along the dim that most reduces the largest operand — batches, rows of A, columns
/// of B, and K last (its halves are summed, C joining the first) — and assembles the pieces.
fn split(op: &str, device: usize, p: &Problem<'_>, depth: usize) -> Result<Tensor> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    let (limit, align) = window::limits(&dev);
    let maxd = dev.properties().max_compute_workgroups_per_dimension as usize;
    let now = load(p, limit, align, maxd);
    if now <= 1.0 {
        return solve_windowed(op, device, p, align);
    }
    let [m, n, k] = p.mnk;
    let mut cuts: Vec<(Cut, usize)> =
        p.batch.iter().enumerate().map(|(d, &s)| (Cut::Batch(d), s)).collect();
    cuts.extend([(Cut::M, m), (Cut::N, n), (Cut::K, k)]);
    // The first cut (in that order) whose halves carry the least load; K only when it helps
    // more, since its halves cost an extra sum.
    let best = cuts
        .iter()
        .filter(|&&(_, len)| len > 1)
        .map(|&(c, len)| (c, len, load(&piece(p, c, 0, len.div_ceil(2)), limit, align, maxd)))
        .fold(None::<(Cut, usize, f64)>, |acc, x| match acc {
            Some(a) if a.2 <= x.2 * 1.001 => Some(a),
            _ => Some(x),
        });
    let Some((cut, len, _)) = best.filter(|b| b.2 < now && depth < 64) else {
        return Err(Error::oom(
            op,
            format!(
                "a [{m}, {n}, {k}] product (batch {:?}) has an operand that no split brings                  under the adapter's max_storage_buffer_binding_size of {limit} bytes; make                  the operands contiguous first",
                p.batch
            ),
        ));
    };
    let h = len.div_ceil(2);
    let first = piece(p, cut, 0, h);
    let mut second = piece(p, cut, h, len - h);
    let nb = p.batch.len();
    let axis = match cut {
        Cut::Batch(d) => d,
        Cut::M => nb,
        Cut::N => nb + 1,
        Cut::K => {
            second.c = None;
            second.beta = 0.0;
            // f16 pieces (the cooperative kernel's f16 output) are summed in f32.
            let r0 = split(op, device, &first, depth + 1)?.astype(DType::F32)?;
            let r1 = split(op, device, &second, depth + 1)?.astype(DType::F32)?;
            return crate::add(&r0, &r1);
        }
    };
    let r0 = split(op, device, &first, depth + 1)?;
    let r1 = split(op, device, &second, depth + 1)?;
    crate::shape::concat(&[&r0, &r1], axis as isize)
}

/// [`solve`] with A, B and C bound at the windows their views touch.
fn solve_windowed(op: &str, device: usize, p: &Problem<'_>, align: u64) -> Result<Tensor> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    let (limit, _) = window::limits(&dev);
    let mut q = p.without_epilogue();
    let mut w = Wins::default();
    let rebase = |l: &mut Layout, t: &Tensor| -> Result<Option<(u64, u64)>> {
        if window::fits(gpu_buffer(op, t)?, limit) {
            return Ok(None);
        }
        let eb = t.dtype().size();
        Ok(window_of(l, eb, align).map(|(o, bytes)| {
            l.offset -= o as usize / eb;
            (o, bytes)
        }))
    };
    w.a = rebase(&mut q.a, p.a_t)?;
    w.b = rebase(&mut q.b, p.b_t)?;
    if let Some((c, l)) = &mut q.c {
        w.c = rebase(l, c)?;
    }
    solve(op, device, &q, &w)
}

/// [`solve_to`] with the contiguous output.
fn solve(op: &str, device: usize, p: &Problem<'_>, w: &Wins) -> Result<Tensor> {
    solve_to(op, device, p, w, None)
}

/// One dispatch; operands with a window in `w` bind only that byte range (offsets in `p` are
/// then relative to the window's start). `out`: the output's layout when not contiguous
/// (only the unsplit tiled GEMM takes one: [`matmul_strided`] checks that first).
pub(super) fn solve_to(
    op: &str,
    device: usize,
    p: &Problem<'_>,
    w: &Wins,
    out: Option<&Layout>,
) -> Result<Tensor> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    let [m, n, k] = p.mnk;
    let nb = p.batch.len();
    let mut lists = vec![p.a.strides[..nb].to_vec(), p.b.strides[..nb].to_vec()];
    lists.extend(out.map(|o| o.strides[..nb].to_vec()));
    let (bs, bst) = coalesce(&p.batch, &lists);
    let z: usize = p.batch.iter().product();
    let mut shape = p.batch.clone();
    shape.extend([m, n]);
    // The product, contiguous `[batch.., M, N]` unless `out` says otherwise: f32, or f16
    // where the cooperative kernel rounds on the way out.
    let alloc_out = |dt: DType| -> Result<Tensor> {
        let buf = dev.alloc(op, (z * m * n * dt.size()) as u64)?;
        let l = out.cloned().unwrap_or_else(|| Layout::contiguous(&shape));
        Ok(Tensor::from_parts(Storage::Gpu(Arc::new(buf)), l, dt))
    };
    if z * m * n == 0 {
        return alloc_out(DType::F32);
    }
    let maxd = dev.properties().max_compute_workgroups_per_dimension as usize;
    if z > maxd {
        return Err(Error::invalid(
            op,
            format!(
                "{z} batch matrices exceed the adapter's limit of {maxd} workgroups per dimension"
            ),
        ));
    }
    let dtype = p.a_t.dtype();
    if !matches!(dtype, DType::F32 | DType::F16) {
        return Err(Error::dtype(op, format!("{dtype} is not supported by the GPU matmul")));
    }
    let (mut sa, mut sb) =
        ([p.a.strides[nb], p.a.strides[nb + 1]], [p.b.strides[nb], p.b.strides[nb + 1]]);
    let (mut oa, mut ob) = (p.a.offset, p.b.offset);
    let (mut abuf, mut bbuf) =
        (bind(gpu_buffer(op, p.a_t)?, w.a), bind(gpu_buffer(op, p.b_t)?, w.b));
    let (mut ab, mut bb) = (bst[0].clone(), bst[1].clone());
    let (mut mm, mut nn) = (m, n);
    if p.c.is_none() && p.res.is_none() && n == 1 && m > 1 {
        // out^T = b^T a^T: a row vector times a matrix, without copying either operand.
        std::mem::swap(&mut abuf, &mut bbuf);
        std::mem::swap(&mut oa, &mut ob);
        std::mem::swap(&mut ab, &mut bb);
        let (a_old, b_old) = (sa, sb);
        sa = [b_old[1], b_old[0]];
        sb = [a_old[1], a_old[0]];
        (mm, nn) = (1, m);
    }
    let alpha = p.alpha as f32;
    let beta = p.beta as f32;
    let (coff, cstr) = match &p.c {
        Some((_, l)) => (l.offset, [l.strides[0], l.strides[1]]),
        None => (0, [0, 0]),
    };
    let mut meta =
        matmul_meta([mm, nn, k], [oa, ob, coff], sa, sb, cstr, alpha, beta, (&bs, &ab, &bb));
    let (act, p0, p1) = p.act.map_or((MatmulAct::None, 0.0, 0.0), |a| a.kernel());
    (meta[3], meta[15]) = (p0.to_bits(), p1.to_bits());
    let nbd = bs.len();
    // One row times a matrix (a batch-1 classifier): the GEMV kernel, with C (the bias) in its
    // epilogue when there is one — a one-row tiled GEMM would keep 1/64 of its threads busy.
    if p.res.is_none() && mm == 1 && (p.c.is_none() || z == 1) {
        let spec = GemvSpec {
            dtype,
            k_contig: sb[0] == 1 && nn > 1,
            batch_dims: nbd,
            has_c: p.c.is_some(),
        };
        let cols = if spec.k_contig { 8 } else { 32 };
        let pl = cached(&GEMV, &dev, op, spec, GemvSpec::render)?;
        let result = alloc_out(DType::F32)?;
        let outb = gpu_buffer(op, &result)?;
        let wg = [nn.div_ceil(cols) as u32, 1, z as u32];
        let mut binds = vec![abuf, bbuf];
        if let Some((c, _)) = &p.c {
            binds.push(bind(gpu_buffer(op, c)?, w.c));
        }
        binds.push(Binding::from(&**outb));
        dev.dispatch(op, &pl, &binds, bytemuck::cast_slice(&meta), wg)?;
        // The GEMV kernel has no activation epilogue: a separate elementwise pass.
        return maybe_apply(result, p.act);
    }
    let epilogue = p.c.is_some() || p.res.is_some() || p.act.is_some();
    if dtype == DType::F16 && (!epilogue || coop_epilogue()) {
        let props = dev.properties();
        let planned = plan_f16_gemm(props, [mm, nn, k], nbd, epilogue, coop_enabled()).ok();
        // The kernel for the operands' layouts; generations 1 and 2 (forced, or a fallback
        // for workgroup memory) have no epilogue: the tiled GEMM then runs.
        let coop = planned.map(|spec| {
            let by8 = |v: &[isize]| v.iter().all(|x| x % 8 == 0);
            let vec_a = sa[1] == 1 && sa[0] % 8 == 0 && k % 8 == 0 && oa % 8 == 0 && by8(&ab);
            let vec_b = sb[1] == 1 && sb[0] % 8 == 0 && nn % 8 == 0 && ob % 8 == 0 && by8(&bb);
            let epi = CoopEpilogue { c: p.c.is_some(), res: p.res.is_some(), act };
            coop_spec(CoopMatmulSpec { epi, ..spec }, [mm, nn, k], props, vec_a, vec_b)
        });
        let slices = match &coop {
            Some(s) if s.vec_a && s.vec_b => plan_coop_splitk([mm, nn, k], z, coop_splitk_target()),
            _ => 1,
        };
        if let (Some(spec), true) = (planned, slices > 1 && z * slices <= maxd) {
            // The slices are an outermost batch dim (A and B advance by a slice of K): one
            // dispatch writes f32 partials `[S, batch.., M, N]`, summed with the epilogue.
            let ks = k / slices;
            let (mut bs, mut ab, mut bb) = (bs.clone(), ab.clone(), bb.clone());
            bs.insert(0, slices);
            ab.insert(0, ks as isize * sa[1]);
            bb.insert(0, ks as isize * sb[0]);
            let mut smeta =
                matmul_meta([mm, nn, ks], [oa, ob, 0], sa, sb, [0, 0], alpha, 0.0, (&bs, &ab, &bb));
            (smeta[3], smeta[15]) = (p0.to_bits(), p1.to_bits());
            let spec = CoopMatmulSpec { batch_dims: nbd + 1, ..spec };
            // f32 partials (`coop_spec_sliced` plans slices with an f32 output).
            let spec = coop_spec_sliced(spec, [mm, nn, ks], slices, props, true, true);
            let pl = cached_coop(&dev, op, spec)?;
            let (bm, bn) = (spec.block_m() as usize, spec.block_n() as usize);
            let wg = [nn.div_ceil(bn) as u32, mm.div_ceil(bm) as u32, (z * slices) as u32];
            let part = dev.alloc(op, (slices * z * mm * nn * 4) as u64)?;
            let binds = [abuf, bbuf, Binding::from(&part)];
            dev.dispatch(op, &pl, &binds, bytemuck::cast_slice(&smeta), wg)?;
            let result = alloc_out(DType::F32)?;
            let sum = Slices { part: &part, slices, m: mm, n: nn, total: z * mm * nn };
            splitk_reduce(&dev, op, p, w, &sum, (act, p0, p1), &result)?;
            return Ok(result);
        }
        // Few rows and few blocks: the tiled GEMM's split-K fills more of the GPU.
        let tiled = |s: &CoopMatmulSpec| {
            let plan = plan_gemm([mm, nn, k], z, tile128_min(), splitk_target());
            let block = (s.block_m() as usize, s.block_n() as usize);
            coop_small_m() && small_m_prefers_tiled([mm, nn, k], z, block, plan.slices)
        };
        if let Some(spec) = coop.filter(|s| (!epilogue || s.variant == 3) && !tiled(s)) {
            let pl = cached_coop(&dev, op, spec)?;
            let result = alloc_out(if spec.out_f16 { DType::F16 } else { DType::F32 })?;
            let outb = gpu_buffer(op, &result)?;
            let (bm, bn) = (spec.block_m() as usize, spec.block_n() as usize);
            let (gx, gy) = (nn.div_ceil(bn), mm.div_ceil(bm));
            if gx > maxd || gy > maxd {
                return Err(Error::invalid(
                    op,
                    format!("[{mm}, {nn}] output exceeds the dispatch limit"),
                ));
            }
            // a, b, [C], [residual], out (the kernel's binding order).
            let mut binds = vec![abuf, bbuf];
            if let Some((c, _)) = &p.c {
                binds.push(bind(gpu_buffer(op, c)?, w.c));
            }
            if let Some(r) = p.res {
                if r.layout().offset != 0 {
                    return Err(Error::invalid(op, "internal: residual must start at offset 0"));
                }
                binds.push(Binding::from(&**gpu_buffer(op, r)?));
            }
            binds.push(Binding::from(&**outb));
            let wg = [gx as u32, gy as u32, z as u32];
            dev.dispatch(op, &pl, &binds, bytemuck::cast_slice(&meta), wg)?;
            return Ok(result);
        }
    }
    let f32x = dtype == DType::F32;
    let plan = tiled_choice([mm, nn, k], z, f32x, tile128_min(), splitk_target());
    let limit = window::limits(&dev).0;
    // Split-K (f32, and f16 unless `MPSRT_GEMM_SPLITK_F16=0`: the partials are f32 either
    // way): the slices are an extra, outermost batch dim (A and B advance by a slice of K), so
    // one GEMM dispatch writes partials `[S, batch.., M, N]`.
    let slices = if (f32x || splitk_f16())
        && plan.slices > 1
        && z * plan.slices <= maxd
        && ((plan.slices * z * mm * nn * 4) as u64) <= limit
    {
        plan.slices
    } else {
        1
    };
    let ks = k / slices;
    let (mut bs, mut nbd) = (bs, nbd);
    if slices > 1 {
        bs.insert(0, slices);
        ab.insert(0, ks as isize * sa[1]);
        bb.insert(0, ks as isize * sb[0]);
        nbd += 1;
        meta = matmul_meta([mm, nn, ks], [oa, ob, 0], sa, sb, [0, 0], alpha, 0.0, (&bs, &ab, &bb));
    }
    let a_base_ok = oa % 4 == 0 && aligned(&ab);
    let b_base_ok = ob % 4 == 0 && aligned(&bb);
    let a = if f32x && a_base_ok && sa[1] == 1 && sa[0] % 4 == 0 && ks % 4 == 0 {
        OperandLoad::VecK
    } else if f32x && a_base_ok && sa[0] == 1 && sa[1] % 4 == 0 && mm % 4 == 0 {
        OperandLoad::VecMN
    } else {
        OperandLoad::Scalar
    };
    let b = if f32x && b_base_ok && sb[1] == 1 && sb[0] % 4 == 0 && nn % 4 == 0 {
        OperandLoad::VecMN
    } else if f32x && b_base_ok && sb[0] == 1 && sb[1] % 4 == 0 && ks % 4 == 0 {
        OperandLoad::VecK
    } else {
        OperandLoad::Scalar
    };
    let mut tune = plan.tune;
    // Stream-K (`matmul_sk`): `W` workgroups over `T` K steps, a workspace of two partial
    // blocks per workgroup; the plain tune where the grid or the workspace does not fit.
    let (gx, gy) = (nn.div_ceil(tune.bn as usize), mm.div_ceil(tune.bm as usize));
    let kit = k.div_ceil(tune.k_step() as usize);
    let sk_w = plan.sk_wgs.min(gx * gy * z * kit);
    let ws_bytes = (sk_w * 2 * (tune.bm * tune.bn) as usize * 4) as u64;
    if tune.sk
        && (slices > 1
            || sk_w == 0
            || gx * gy * z > maxd
            || sk_w > maxd
            || (sk_w as u64) * ((gx * gy * z * kit) as u64) >= 1 << 31
            || ws_bytes > limit)
    {
        tune.sk = false;
    }
    if tune.sk {
        meta.extend([sk_w, kit, gx, gx * gy, gx * gy * z * kit].map(|v| v as u32));
    }
    let split = slices > 1;
    if let Some(o) = out {
        if split || tune.sk || p.res.is_some() {
            return Err(Error::invalid(op, "internal: strided output on a split GEMM"));
        }
        // The strided epilogue's words: the row stride, then the coalesced batch strides.
        meta.push(o.strides[nb] as u32);
        meta.extend(bst[2].iter().map(|&s| s as u32));
    }
    // vec4 stores need 4-aligned row and batch strides.
    let out_vec = out.is_none_or(|o| o.strides[..=nb].iter().all(|s| s % 4 == 0));
    let spec = MatmulSpec {
        dtype,
        tune,
        a,
        b,
        has_c: p.c.is_some() && !split,
        vec_out: nn % 4 == 0 && out_vec,
        batch_dims: nbd,
        act: if split { MatmulAct::None } else { act },
        has_res: p.res.is_some() && !split,
    };
    let pl = if out.is_some() && plan.checked {
        cached(&GEMM_STRIDED, &dev, op, spec, MatmulSpec::render_strided_out)?
    } else if out.is_some() {
        // SAFETY: as `gemm_unchecked`; `matmul_strided` checked that `out`'s last element is
        // inside the `batch·M·N` elements allocated.
        unsafe {
            cached_unchecked(
                &GEMM_STRIDED_UNCHECKED,
                &dev,
                op,
                spec,
                MatmulSpec::render_strided_out,
            )?
        }
    } else if plan.checked {
        cached(&GEMM, &dev, op, spec, MatmulSpec::render)?
    } else {
        gemm_unchecked(&dev, op, spec)?
    };
    let result = alloc_out(DType::F32)?;
    let outb = gpu_buffer(op, &result)?;
    if gx > maxd || gy > maxd {
        return Err(Error::invalid(op, format!("[{mm}, {nn}] output exceeds the dispatch limit")));
    }
    let wg = [gx as u32, gy as u32, (z * slices) as u32];
    let res = match p.res {
        // Contiguous by construction (`matmul_epilogue`); the kernels index it like `out`.
        Some(r) if r.layout().offset != 0 => {
            return Err(Error::invalid(op, "internal: residual must start at offset 0"))
        }
        Some(r) => Some(Binding::from(&**gpu_buffer(op, r)?)),
        None => None,
    };
    let cbind = match &p.c {
        Some((c, _)) => Some(bind(gpu_buffer(op, c)?, w.c)),
        None => None,
    };
    if tune.sk {
        // The GEMM (a, b, [C], [res], out, ws), then the fix-up (ws, [C], [res], out).
        let ws = dev.alloc(op, ws_bytes)?;
        let mut binds = vec![abuf, bbuf];
        binds.extend(cbind);
        binds.extend(res);
        binds.push(Binding::from(&**outb));
        binds.push(Binding::from(&ws));
        dev.dispatch(op, &pl, &binds, bytemuck::cast_slice(&meta), [sk_w as u32, 1, 1])?;
        let fix = if plan.checked {
            cached(&GEMM_SK_FIXUP, &dev, op, spec, MatmulSpec::render_sk_fixup)?
        } else {
            // SAFETY: the workspace index stays below 2·W blocks by the launch's own division,
            // stores are guarded by M and N as the GEMM's.
            unsafe {
                cached_unchecked(
                    &GEMM_SK_FIXUP_UNCHECKED,
                    &dev,
                    op,
                    spec,
                    MatmulSpec::render_sk_fixup,
                )?
            }
        };
        let mut binds = vec![Binding::from(&ws)];
        binds.extend(cbind);
        binds.extend(res);
        binds.push(Binding::from(&**outb));
        let tiles = (gx * gy * z) as u32;
        dev.dispatch(op, &fix, &binds, bytemuck::cast_slice(&meta), [tiles, 1, 1])?;
        return Ok(result);
    }
    if !split {
        let mut binds = vec![abuf, bbuf];
        binds.extend(cbind);
        binds.extend(res);
        binds.push(Binding::from(&**outb));
        dev.dispatch(op, &pl, &binds, bytemuck::cast_slice(&meta), wg)?;
        return Ok(result);
    }
    let total = z * mm * nn;
    let part = dev.alloc(op, (slices * total * 4) as u64)?;
    dev.dispatch(op, &pl, &[abuf, bbuf, Binding::from(&part)], bytemuck::cast_slice(&meta), wg)?;
    let sum = Slices { part: &part, slices, m: mm, n: nn, total };
    splitk_reduce(&dev, op, p, w, &sum, (act, p0, p1), &result)?;
    Ok(result)
}

/// The tiled GEMM's pipeline without wgpu's bounds checks: every access of the rendered kernel
/// is in bounds for the launches `solve` makes (global loads guarded by the row and K bounds of
/// views the launcher validated, stores by M and N, workgroup-memory indices by the block).
fn gemm_unchecked(dev: &GpuDevice, op: &str, spec: MatmulSpec) -> Result<Arc<Pipeline>> {
    // SAFETY: see above; the kernel is the checked one's source, compiled without the checks.
    unsafe { cached_unchecked(&GEMM_UNCHECKED, dev, op, spec, MatmulSpec::render) }
}

/// Split-K partials `[slices, total]` (f32) of an `[m, n]` product (`total = batch·m·n`).
struct Slices<'a> {
    part: &'a GpuBuffer,
    slices: usize,
    m: usize,
    n: usize,
    total: usize,
}

/// Sums split-K partials into the f32 `result` with `p`'s C (beta), residual and activation
/// (`gemm_splitk_reduce_kernel`), for the tiled and the cooperative GEMM.
fn splitk_reduce(
    dev: &GpuDevice,
    op: &str,
    p: &Problem<'_>,
    w: &Wins,
    s: &Slices<'_>,
    (act, p0, p1): (MatmulAct, f32, f32),
    result: &Tensor,
) -> Result<()> {
    let maxd = dev.properties().max_compute_workgroups_per_dimension;
    let (coff, cstr) = match &p.c {
        Some((_, l)) => (l.offset, [l.strides[0], l.strides[1]]),
        None => (0, [0, 0]),
    };
    static REDUCE: SpecCache<(bool, bool, MatmulAct, u32)> = OnceLock::new();
    // `MPSRT_GEMM_REDUCE4` (default on): four outputs per thread, the slice count baked in.
    let v4 = super::matmul_plan::reduce4() && s.n.is_multiple_of(4) && s.slices <= 16;
    let key = (p.c.is_some(), p.res.is_some(), act, if v4 { s.slices as u32 } else { 0 });
    let rpl = cached(&REDUCE, dev, op, key, |&(c, r, a, v)| {
        Ok(if v > 0 {
            gemm_splitk_reduce4_kernel(c, r, a, v)
        } else {
            gemm_splitk_reduce_kernel(c, r, a)
        })
    })?;
    let rwg = super::grid((s.total as u64).div_ceil(if v4 { 1024 } else { 256 }), maxd);
    let mut words = [0u32; 16];
    words[..10].copy_from_slice(&[
        s.total as u32,
        s.n as u32,
        s.slices as u32,
        p0.to_bits(),
        rwg[0] * 256,
        coff as u32,
        (p.beta as f32).to_bits(),
        cstr[0] as i32 as u32,
        cstr[1] as i32 as u32,
        s.m as u32,
    ]);
    words[15] = p1.to_bits();
    let mut binds = vec![Binding::from(s.part)];
    if let Some((c, _)) = &p.c {
        binds.push(bind(gpu_buffer(op, c)?, w.c));
    }
    if let Some(r) = p.res {
        binds.push(Binding::from(&**gpu_buffer(op, r)?));
    }
    let outb = gpu_buffer(op, result)?;
    binds.push(Binding::from(&**outb));
    dev.dispatch(op, &rpl, &binds, bytemuck::cast_slice(&words), rwg)?;
    Ok(())
}

/// `b` bound whole, or the byte window `w`.
fn bind(b: &GpuBuffer, w: Option<(u64, u64)>) -> Binding<'_> {
    match w {
        Some((o, s)) => Binding::window(b, o, s),
        None => Binding::from(b),
    }
}
