//! GPU launches for convolutions. Dense and grouped convs lower to the tiled matmul (the
//! fastest kernel we have): 1×1 stride-1 unpadded convs read the input as the column matrix
//! directly, the rest go through an im2col pass (`mpsrt-kernels/src/im2col.wgsl`). The
//! implicit-GEMM kernel of `conv.wgsl` remains for column matrices past the binding limit (and
//! under `MPSRT_CONV_IMPLICIT_GEMM=1`, to compare); a direct kernel serves depthwise convs, a
//! gather kernel transposed convs. f16 tensors are widened to f32 around the f32 kernels (f32
//! accumulation either way).
//!
//! Why the lowering: measured on an H100, the implicit-GEMM kernel spends ~60 µs per K step per
//! workgroup (0.1–0.3 TFLOP/s whatever the shape), an order of magnitude behind the matmul
//! kernel on the same M×N×K; until that kernel is understood, im2col + matmul wins everywhere
//! the column matrix fits.

use super::conv_plan::{plan_conv, ConvAlgo, ConvPlan};
use super::{alloc_out, env_knob, grid};
use crate::activation::Activation;
use crate::conv::ConvGeom;
use crate::matmul::{epilogue_after, matmul_epilogue};
use crate::Tensor;
use mpsrt_core::{DType, Error, Layout, Result};
use mpsrt_kernels::{splitk_reduce_kernel, MatmulAct};
use mpsrt_runtime::{Binding, GpuBuffer, Kernel, Pipeline, Storage};
use std::sync::{Arc, OnceLock};

const SOURCE: &str = mpsrt_kernels::CONV_WGSL;
const IM2COL: &str = include_str!("../../../mpsrt-kernels/src/im2col.wgsl");
const TILE: u64 = 64;
const BIG_TILE: u64 = 128;

/// `conv_gemm` with 128×128×8 block tiles and 8×8 register tiles, for problems with enough
/// tiles to fill the GPU (twice the arithmetic intensity per workgroup-memory load).
fn big_source() -> &'static str {
    static SRC: OnceLock<String> = OnceLock::new();
    SRC.get_or_init(|| {
        SOURCE
            .replace("const BM: u32 = 64u;", "const BM: u32 = 128u;")
            .replace("const BN: u32 = 64u;", "const BN: u32 = 128u;")
            .replace("const BK: u32 = 16u;", "const BK: u32 = 8u;")
            .replace("const TM: u32 = 4u;", "const TM: u32 = 8u;")
            .replace("const TN: u32 = 4u;", "const TN: u32 = 8u;")
    })
}

/// The GPU buffer behind `t`, or an internal error naming `op`.
pub(crate) fn buffer<'a>(op: &str, t: &'a Tensor) -> Result<&'a Arc<GpuBuffer>> {
    match t.storage() {
        Storage::Gpu(b) => Ok(b),
        Storage::Cpu(_) => Err(Error::device(op, "internal: CPU tensor reached the GPU backend")),
    }
}

/// Little-endian bytes of `words`, zero-padded to `vec4s` uniform rows.
pub(crate) fn meta_bytes(words: &[u32], vec4s: usize) -> Vec<u8> {
    let mut w = words.to_vec();
    w.resize(vec4s * 4, 0);
    bytemuck::cast_slice(&w).to_vec()
}

/// `t` as a contiguous f32 tensor (f16 widened).
pub(crate) fn as_f32(t: &Tensor) -> Result<Tensor> {
    t.astype(DType::F32)?.contiguous()
}

fn u(v: usize) -> u32 {
    v as u32
}

/// The conv's meta words (layout in `conv.wgsl`); `total` and `row` fill words 20 and 21.
fn meta_words(g: &ConvGeom, has_bias: bool, offs: [usize; 3], total: usize, row: u32) -> [u32; 22] {
    [
        u(g.n),
        u(g.c),
        u(g.h),
        u(g.w),
        u(g.oc),
        u(g.oh),
        u(g.ow),
        u(g.kh),
        u(g.kw),
        u(g.sh),
        u(g.sw),
        u(g.pt),
        u(g.pl),
        u(g.dh),
        u(g.dw),
        u(g.groups),
        has_bias as u32,
        u(offs[0]),
        u(offs[1]),
        u(offs[2]),
        u(total),
        row,
    ]
}

/// K slices for a single (image, group) product of `m × n` outputs over `k`, when its 64×64
/// tiles are too few to occupy a GPU (a batch-1 conv on a small map: ResNet-50's 56×56 layers
/// give 49 tiles, its 7×7 layers 8) and K is long enough to split into slices of ≥ 64: up to
/// 512 workgroups. `MPSRT_SPLIT_K=off` turns it off, `=legacy` keeps the first rule (K ≥ 1024,
/// slices ≥ 128, fewer than 64 tiles) — both for comparison.
fn split_k(batch: usize, m: usize, n: usize, k: usize) -> Option<usize> {
    let tiles = m.div_ceil(64) * n.div_ceil(64);
    let legacy = match split_k_mode() {
        SplitK::Off => return None,
        SplitK::Legacy => true,
        SplitK::Wide => false,
    };
    let (max_tiles, min_k, min_slice) = if legacy { (64, 1024, 128) } else { (128, 256, 64) };
    if batch != 1 || tiles >= max_tiles || k < min_k {
        return None;
    }
    [32, 16, 8, 4, 2]
        .into_iter()
        .find(|&s| k.is_multiple_of(s) && k / s >= min_slice && tiles * s <= 512)
}

/// K slices for the merged product of a batched conv (`[OC, K]·[K, N·P]`), when it has fewer
/// than `MPSRT_CONV_MERGE_SPLIT_TILES` 64×64 tiles (default 1024; 0 turns it off): slices of
/// ≥ 64 and at most 1024 workgroups in all. Measured on an H100 (BENCHMARKS.md, 2026-11-24):
/// ResNet-50's 7×7 layers at batch 32 (200 tiles, K up to 4608) 1.2–1.5× faster, the model at
/// batch 32 22.0 / 22.2 → 20.7 / 20.7 ms.
fn split_k_merged(m: usize, n: usize, k: usize) -> Option<usize> {
    static T: OnceLock<usize> = OnceLock::new();
    let max_tiles = *T.get_or_init(|| env_knob("MPSRT_CONV_MERGE_SPLIT_TILES", 1024));
    let tiles = m.div_ceil(64) * n.div_ceil(64);
    if tiles >= max_tiles || k < 256 {
        return None;
    }
    [16, 8, 4, 2].into_iter().find(|&s| k.is_multiple_of(s) && k / s >= 64 && tiles * s <= 1024)
}

/// Largest output map (OH·OW) on which a batched, ungrouped conv runs as one GEMM over all
/// images (`MPSRT_CONV_MERGE_P`, default 1024: ResNet's 28×28, 14×14 and 7×7 layers; 0 turns
/// it off). Measured on an H100 at batch 32 (BENCHMARKS.md): the 7×7 layers 1.5–2× faster,
/// 14×14 ~1.2×, 28×28 even; on 56×56 maps the 1×1 convs' input transpose costs more than the
/// padding it saves.
fn merge_max_p() -> usize {
    static P: OnceLock<usize> = OnceLock::new();
    *P.get_or_init(|| env_knob("MPSRT_CONV_MERGE_P", 1024))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SplitK {
    Off,
    Legacy,
    Wide,
}

fn split_k_mode() -> SplitK {
    static M: OnceLock<SplitK> = OnceLock::new();
    *M.get_or_init(|| match std::env::var("MPSRT_SPLIT_K").as_deref() {
        Ok("off") | Ok("0") => SplitK::Off,
        Ok("legacy") => SplitK::Legacy,
        _ => SplitK::Wide,
    })
}

/// `W (OC × K) · col (K × cols)` computed as `s` slices of K (one batched product of strided
/// views, `s` times the workgroups) and reduced with the bias (one value per row) and `epi` in
/// one `splitk_reduce` pass: a contiguous `[OC, cols]` tensor.
#[allow(clippy::too_many_arguments)]
fn split_k_product(
    op: &str,
    dev: &mpsrt_runtime::GpuDevice,
    w: &Tensor,
    col: &Tensor,
    b: Option<&Tensor>,
    [oc, k, cols]: [usize; 3],
    s: usize,
    epi: Epi<'_>,
) -> Result<Tensor> {
    let i = |v: usize| v as isize;
    let ws = w.reshape(&[i(oc), i(s), i(k / s)])?.permute(&[1, 0, 2])?;
    let cs = col.reshape(&[i(s), i(k / s), i(cols)])?;
    let parts = crate::matmul(&ws, &cs)?;
    let bias = b.map(|b| b.contiguous()).transpose()?;
    splitk_reduce(op, dev, &parts, bias.as_ref(), epi)
}

/// `act(sum_j parts[j] + bias[m] + res)`: the split-K partials `[s, M, N]` reduced with the
/// conv's epilogue in one dispatch (`splitk_reduce_kernel`), as a contiguous `[M, N]` tensor.
fn splitk_reduce(
    op: &str,
    dev: &mpsrt_runtime::GpuDevice,
    parts: &Tensor,
    bias: Option<&Tensor>,
    (res, act): Epi<'_>,
) -> Result<Tensor> {
    type Cache = parking_lot::Mutex<
        std::collections::HashMap<(usize, bool, bool, MatmulAct), Arc<Pipeline>>,
    >;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let (s, m, n) = (parts.shape()[0], parts.shape()[1], parts.shape()[2]);
    let total = m * n;
    let res = res.map(as_f32).transpose()?;
    let (kind, p0, p1) = act.map_or((MatmulAct::None, 0.0, 0.0), |a| a.kernel());
    let key = (dev.index(), bias.is_some(), res.is_some(), kind);
    let cache = CACHE.get_or_init(Default::default);
    let cached = cache.lock().get(&key).cloned();
    let pipeline = match cached {
        Some(p) => p,
        None => {
            let src = splitk_reduce_kernel(key.1, key.2, kind);
            let p = dev.pipeline(Kernel { source: &src, entry: "main" })?;
            cache.lock().insert(key, p.clone());
            p
        }
    };
    let out = alloc_out(dev, op, total, 4)?;
    let wg =
        grid((total as u64).div_ceil(256), dev.properties().max_compute_workgroups_per_dimension);
    let mut words = [0u32; 16];
    words[..6].copy_from_slice(&[
        total as u32,
        n as u32,
        s as u32,
        p0.to_bits(),
        wg[0] * 256,
        bias.map_or(0, |b| b.layout().offset as u32),
    ]);
    words[15] = p1.to_bits();
    let mut bindings = vec![Binding::from(&**buffer(op, parts)?)];
    if let Some(b) = bias {
        bindings.push(Binding::from(&**buffer(op, b)?));
    }
    if let Some(r) = &res {
        if r.layout().offset != 0 || r.numel() != total {
            return Err(Error::invalid(op, "internal: residual must be a whole [M, N] buffer"));
        }
        bindings.push(Binding::from(&**buffer(op, r)?));
    }
    bindings.push(Binding::from(&out));
    dev.dispatch(op, &pipeline, &bindings, bytemuck::cast_slice(&words), wg)?;
    Ok(Tensor::from_parts(Storage::Gpu(Arc::new(out)), Layout::contiguous(&[m, n]), DType::F32))
}

fn implicit_gemm_forced() -> bool {
    static F: OnceLock<bool> = OnceLock::new();
    *F.get_or_init(|| std::env::var("MPSRT_CONV_IMPLICIT_GEMM").is_ok_and(|v| v == "1"))
}

/// Dense / grouped conv as `W[g] (OCg × K) @ col[n, g] (K × P)` through the tiled matmul, with
/// the bias (ungrouped convs) and `act` in the GEMM's epilogue; `None` when the column matrix
/// would not fit one binding.
fn lowered(
    op: &str,
    dev: &mpsrt_runtime::GpuDevice,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    g: &ConvGeom,
    (res, act): Epi<'_>,
) -> Result<Option<Tensor>> {
    let (icg, ocg) = (g.c / g.groups, g.oc / g.groups);
    let (k, p) = (icg * g.kh * g.kw, g.oh * g.ow);
    let i = |v: usize| v as isize;
    let direct = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.pt == 0 && g.pl == 0;
    // Merged only while the [K, N·P] column matrix fits one binding (a 1×1 conv's transposed
    // input included); past that, the per-image products below keep their own fallbacks.
    let col_bytes = (g.n * g.groups * k * p) as u64 * 4;
    let merged = g.groups == 1
        && g.n > 1
        && p <= merge_max_p()
        && col_bytes <= dev.properties().max_storage_buffer_binding_size;
    let col = if direct && merged {
        // The input as [ICg, N, P]: one transposing copy, so all images share one GEMM.
        x.reshape(&[i(g.n), i(icg), i(p)])?.permute(&[1, 0, 2])?.contiguous()?
    } else if direct {
        // oh = h and ow = w here: the NCHW input already is [N, G, ICg, H·W].
        x.reshape(&[i(g.n), i(g.groups), i(icg), i(p)])?
    } else {
        let total = g.n * g.groups * k * p;
        let limit = dev.properties().max_storage_buffer_binding_size;
        if (total as u64) * 4 > limit || total > u32::MAX as usize / 2 {
            return Ok(None);
        }
        let out = alloc_out(dev, op, total, 4)?;
        let maxd = dev.properties().max_compute_workgroups_per_dimension;
        let wg = grid((total as u64).div_ceil(256), maxd);
        let mut words =
            meta_words(g, false, [x.layout().offset, 0, 0], total, wg[0] * 256).to_vec();
        words.push(u32::from(merged));
        let pipeline = dev.static_pipeline(IM2COL, "conv_im2col")?;
        let bindings = [Binding::from(&**buffer(op, x)?), Binding::from(&out)];
        dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, 6), wg)?;
        let shape = if merged { [g.groups, k, g.n, p] } else { [g.n, g.groups, k, p] };
        Tensor::from_parts(Storage::Gpu(Arc::new(out)), Layout::contiguous(&shape), DType::F32)
    };
    let shape = [i(g.n), i(g.oc), i(g.oh), i(g.ow)];
    if merged {
        // One [OC, K] · [K, N·P] product: on a small map the per-image products would pad each
        // image's P up to the tile width (49 of 64 columns on a 7×7 map) and launch few, long
        // workgroups. The bias rides in C; the activation in the epilogue unless a residual
        // must be added first (it is laid out [N, OC, P], the product [OC, N, P]).
        let fused_act = if res.is_none() { act } else { None };
        let y = match split_k_merged(ocg, g.n * p, k) {
            // Still few tiles (OC ≤ 512 rows, long K): split K as the batch-1 path does.
            Some(s) => {
                split_k_product(op, dev, w, &col, b, [ocg, k, g.n * p], s, (None, fused_act))?
            }
            None => {
                let bias = b.map(|b| b.reshape(&[i(ocg), 1])).transpose()?;
                let w2 = w.reshape(&[i(ocg), i(k)])?;
                let c2 = col.reshape(&[i(k), i(g.n * p)])?;
                matmul_epilogue(op, &w2, &c2, bias.as_ref(), None, fused_act)?
            }
        };
        let y = y.reshape(&[i(ocg), i(g.n), i(p)])?.permute(&[1, 0, 2])?;
        let y = match res {
            Some(_) => epilogue_after(y, res, act)?,
            None => y.contiguous()?,
        };
        return Ok(Some(y.reshape(&shape)?));
    }
    let y = match split_k(g.n * g.groups, ocg, p, k) {
        // Few output tiles (a batch-1 conv on a small map): split K into `s` slices computed
        // as one batched product of strided views, then summed — `s` times the workgroups.
        // Batch 1, so groups == 1 here: the bias is one value per row of [OC, P].
        Some(s) => {
            let y = split_k_product(op, dev, w, &col, b, [ocg, k, p], s, (res, act))?;
            return Ok(Some(y.reshape(&shape)?));
        }
        // Ungrouped: one (batched) GEMM whose C operand is the bias, broadcast along P and the
        // batch, and whose epilogue applies the activation — one kernel for conv+bias+act.
        None if g.groups == 1 => {
            let bias = b.map(|b| b.reshape(&[i(ocg), 1])).transpose()?;
            let w2 = w.reshape(&[1, i(ocg), i(k)])?;
            let c2 = col.reshape(&[i(g.n), i(k), i(p)])?;
            let y = matmul_epilogue(op, &w2, &c2, bias.as_ref(), res, act)?;
            return Ok(Some(y.reshape(&shape)?));
        }
        None => crate::matmul(&w.reshape(&[1, i(g.groups), i(ocg), i(k)])?, &col)?,
    };
    let y = y.reshape(&shape)?;
    let y = match b {
        Some(b) => crate::add(&y, &b.reshape(&[1, i(g.oc), 1, 1])?)?,
        None => y,
    };
    epilogue_after(y, res, act).map(Some)
}

/// A fused epilogue: residual added, then activation.
pub(crate) type Epi<'a> = (Option<&'a Tensor>, Option<Activation>);

#[allow(clippy::too_many_arguments)]
pub(crate) fn conv(
    op: &str,
    device: usize,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    g: &ConvGeom,
    transposed: bool,
    epi: Epi<'_>,
) -> Result<Tensor> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    // f16 convs on the matrix units where the adapter has them (`conv_coop.rs`); else below.
    if let Some(y) = super::conv_coop::try_conv(op, &dev, x, w, b, g, transposed, epi)? {
        return Ok(y);
    }
    let dtype = x.dtype();
    // A channel slice (a concat's view at batch > 1) stays a view: the implicit GEMM reads it
    // with its image stride, and `conv_f32` copies it for any other route.
    let x = if super::conv_gemm::channel_slice(x) { x.clone() } else { as_f32(x)? };
    let w = as_f32(w)?;
    let b = b.map(as_f32).transpose()?;
    let res = epi.0.map(as_f32).transpose()?;
    conv_f32(op, &dev, &x, &w, b.as_ref(), g, transposed, (res.as_ref(), epi.1))?.astype(dtype)
}

/// With `MPSRT_CONV_PLAN_LOG=1`, each conv's geometry and plan on stderr (to check which
/// algorithm a benchmark or a test exercised).
fn log_plan(g: &ConvGeom, plan: ConvPlan) {
    static ON: OnceLock<bool> = OnceLock::new();
    if *ON.get_or_init(|| std::env::var("MPSRT_CONV_PLAN_LOG").is_ok_and(|v| v == "1")) {
        eprintln!(
            "conv plan: n{} c{} {}x{} -> oc{} {}x{} k{}x{} s{}x{}: {plan:?}",
            g.n, g.c, g.h, g.w, g.oc, g.oh, g.ow, g.kh, g.kw, g.sh, g.sw
        );
    }
}

/// [`conv`] on f32 operands: cut into pieces when an operand is past the binding limit
/// (`conv_split.rs`), else the planner's algorithm (`conv_plan.rs`), the lowering, or the
/// direct kernels.
#[allow(clippy::too_many_arguments)]
fn conv_f32(
    op: &str,
    dev: &Arc<mpsrt_runtime::GpuDevice>,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    g: &ConvGeom,
    transposed: bool,
    epi: Epi<'_>,
) -> Result<Tensor> {
    let total = g.n * g.oc * g.oh * g.ow;
    // An operation pending for this conv's input (`with_conv_input_scale`, `..._affine_relu`)
    // or a strided input: the implicit GEMM applies / reads it in its gather; any other route
    // (or operands past one binding) gets a dense, materialized input first.
    let mut gate = super::conv_gemm::take_input_op(x);
    let strided = !x.layout().is_contiguous();
    let gated;
    let x = match (&gate, strided) {
        (None, false) => x,
        _ => {
            let lim = dev.properties().max_storage_buffer_binding_size;
            let fits = buffer(op, x)?.size() <= lim
                && buffer(op, w)?.size() <= lim
                && (total as u64) * 4 <= lim
                && epi.0.is_none_or(|r| buffer(op, r).is_ok_and(|b| b.size() <= lim));
            let gemm = !transposed
                && g.groups == 1
                && total > 0
                && !implicit_gemm_forced()
                && matches!(
                    plan_conv(g, &super::conv_gemm::plan_limits(dev), ConvAlgo::from_env()),
                    ConvPlan::Gemm { .. }
                );
            if fits && gemm {
                x
            } else {
                // The op's kernel reads a strided input as is: one pass, a dense result.
                gated = match gate.take() {
                    Some(op) => op.apply(x)?,
                    None => x.contiguous()?,
                };
                &gated
            }
        }
    };
    if total > 0 {
        let limit = dev.properties().max_storage_buffer_binding_size;
        let run = |x: &Tensor, w: &Tensor, b: Option<&Tensor>, g: &ConvGeom, epi: Epi<'_>| {
            conv_f32(op, dev, x, w, b, g, transposed, epi)
        };
        if let Some(y) = super::conv_split::split(op, limit, x, w, b, g, transposed, epi, &run)? {
            return Ok(y);
        }
    }
    let (dev, x, w, b) = (dev.clone(), x.clone(), w.clone(), b.cloned());
    // The gate was kept for the implicit GEMM only: any other route (not reached when the
    // planner is deterministic) reads the product.
    let ungated = |x: &Tensor| match &gate {
        Some(op) => op.apply(x),
        None => x.contiguous(),
    };
    let shape = [g.n, g.oc, g.oh, g.ow];
    // Depthwise convs (one input channel per group) keep the direct kernel: a GEMM per group
    // of one K row would be all overhead.
    let depthwise = g.c / g.groups == 1 && g.groups > 1;
    let lowerable = !(transposed || depthwise);
    if total > 0 && lowerable && !implicit_gemm_forced() {
        let b = b.as_ref();
        let plan = plan_conv(g, &super::conv_gemm::plan_limits(&dev), ConvAlgo::from_env());
        log_plan(g, plan);
        match plan {
            ConvPlan::Gemm { bm, bn, kslice } => {
                let tile = (bm, bn, kslice);
                return super::conv_gemm::conv(op, &dev, &x, &w, b, g, epi, tile, gate.as_ref());
            }
            ConvPlan::Winograd { m } => {
                return super::winograd::conv(op, &dev, &ungated(&x)?, &w, b, g, epi, m);
            }
            ConvPlan::Lowered => {}
        }
        if let Some(y) = lowered(op, &dev, &ungated(&x)?, &w, b, g, epi)? {
            return Ok(y);
        }
    }
    let x = ungated(&x)?;
    let out = alloc_out(&dev, op, total, 4)?;
    // Whether the direct kernel applied the activation while storing.
    let mut folded_act = false;
    if total > 0 {
        let maxd = dev.properties().max_compute_workgroups_per_dimension;
        let ocg = g.oc / g.groups;
        let m = (g.n * g.oh * g.ow) as u64;
        let big = m.div_ceil(BIG_TILE) * (ocg as u64).div_ceil(BIG_TILE) * g.groups as u64 >= 128
            && ocg >= 128;
        let tile = if big { BIG_TILE } else { TILE };
        let m_tiles = m.div_ceil(tile);
        let n_tiles = (ocg as u64).div_ceil(tile);
        let direct_only = !lowerable;
        let gemm = !direct_only
            && m_tiles <= maxd as u64
            && n_tiles <= maxd as u64
            && g.groups as u64 <= maxd as u64;
        let (entry, wg) = if transposed {
            ("conv_transpose_direct", grid((total as u64).div_ceil(256), maxd))
        } else if gemm {
            ("conv_gemm", [m_tiles as u32, n_tiles as u32, g.groups as u32])
        } else {
            ("conv_direct", grid((total as u64).div_ceil(256), maxd))
        };
        let source = if gemm && big { big_source() } else { SOURCE };
        let bias_buf = match &b {
            Some(b) => buffer(op, b)?.clone(),
            None => buffer(op, &w)?.clone(),
        };
        let offs =
            [x.layout().offset, w.layout().offset, b.as_ref().map_or(0, |b| b.layout().offset)];
        let mut words = meta_words(g, b.is_some(), offs, total, wg[0] * 256).to_vec();
        let (code, p0, p1) = match epi.1 {
            Some(a) if entry == "conv_direct" && epi.0.is_none() => {
                let (kind, p0, p1) = a.kernel();
                match kind.direct_code() {
                    Some(code) => {
                        folded_act = true;
                        (code, p0, p1)
                    }
                    None => (0, 0.0, 0.0),
                }
            }
            _ => (0, 0.0, 0.0),
        };
        words.extend([code, p0.to_bits(), p1.to_bits()]);
        let pipeline = dev.static_pipeline(source, entry)?;
        let bindings = [
            Binding::from(&**buffer(op, &x)?),
            Binding::from(&**buffer(op, &w)?),
            Binding::from(&*bias_buf),
            Binding::from(&out),
        ];
        dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, 7), wg)?;
    }
    let y = Tensor::from_parts(Storage::Gpu(Arc::new(out)), Layout::contiguous(&shape), DType::F32);
    epilogue_after(y, epi.0, if folded_act { None } else { epi.1 })
}
