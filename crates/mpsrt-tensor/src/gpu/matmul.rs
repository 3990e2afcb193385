//! GPU launch for matrix products: coalesce the broadcast batch dims, pick GEMV (M = 1, or
//! N = 1 by swapping the operands' roles through strides) or the tiled GEMM, choose the tile
//! size and each operand's load path (`vec4` along its contiguous axis when aligned), and
//! record one dispatch. The f32 result is cast by the caller. An f16 product without epilogue
//! runs on the matrix units (`mpsrt_kernels::matmul_coop`) when [`plan_f16_gemm`] finds a
//! usable cooperative-matrix configuration on the device; the tiled GEMM stays the fallback.
//!
//! A `B` operand larger than the adapter's `max_storage_buffer_binding_size` (VGG's 392 MiB
//! fully-connected weight against lavapipe's 128 MiB) is solved in column blocks, each binding
//! only the byte window of `B` it reads, and the blocks are concatenated.

use super::reduce::gpu_buffer;
use crate::activation::maybe_apply;
use crate::matmul::epilogue_after;
use crate::matmul::Problem;
use crate::Tensor;
use mpsrt_core::{DType, Error, Layout, Result};
use mpsrt_kernels::{coalesce, matmul_meta, GemvSpec, MatmulAct, MatmulSpec, OperandLoad};
use mpsrt_kernels::{plan_coop_matmul, CoopConfig, CoopDecline, CoopMatmulSpec};
use mpsrt_runtime::{Binding, DeviceProperties, GpuDevice, Kernel, Pipeline, Storage};
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
    let cache = cache.get_or_init(Mutex::default);
    let key = (dev.index(), spec);
    if let Some(p) = cache.lock().get(&key) {
        return Ok(p.clone());
    }
    let src = render(&spec).map_err(|e| Error::dtype(op, e))?;
    let p = dev.pipeline(Kernel { source: &src, entry: "main" })?;
    cache.lock().insert(key, p.clone());
    Ok(p)
}

pub(crate) type SpecCache<S> = OnceLock<Mutex<HashMap<(usize, S), Arc<Pipeline>>>>;
static GEMM: SpecCache<MatmulSpec> = OnceLock::new();
static GEMV: SpecCache<GemvSpec> = OnceLock::new();
static COOP: SpecCache<CoopMatmulSpec> = OnceLock::new();

/// Whether an f16 product `[m, n, k]` (with `batch_dims` coalesced batch dims, `epilogue` when
/// it carries C, a residual or an activation) runs on the matrix units of a device with `props`,
/// and with which configuration; else why not (the tiled GEMM then runs). Pure, so the choice is
/// tested on lavapipe with fake configuration lists; `enabled` is `MPSRT_COOP_MATMUL != 0`.
pub fn plan_f16_gemm(
    props: &DeviceProperties,
    mnk: [usize; 3],
    batch_dims: usize,
    epilogue: bool,
    enabled: bool,
) -> std::result::Result<CoopMatmulSpec, CoopDecline> {
    if !enabled {
        return Err(CoopDecline::Disabled);
    }
    let configs: Vec<CoopConfig> = props
        .coop_matrix
        .iter()
        .map(|c| CoopConfig { m: c.m, n: c.n, k: c.k, ab: c.ab, cr: c.cr })
        .collect();
    let spec = plan_coop_matmul(
        &configs,
        (props.subgroup_min_size, props.subgroup_max_size),
        mnk,
        batch_dims,
    )?;
    if !props.shader_f16 {
        return Err(CoopDecline::Unsupported("the device lacks shader-f16"));
    }
    if !props.subgroups {
        return Err(CoopDecline::Unsupported("the device lacks subgroups"));
    }
    if epilogue {
        return Err(CoopDecline::Unsupported("C/residual/activation epilogues are not fused yet"));
    }
    Ok(spec)
}

fn coop_enabled() -> bool {
    static E: OnceLock<bool> = OnceLock::new();
    *E.get_or_init(|| super::env_knob("MPSRT_COOP_MATMUL", 1) != 0)
}

/// The kernel a plain (no epilogue) `[m, n, k]` product of `dtype` takes on GPU `device`, in
/// words: `"coop 16x16 float32 accumulation"`, or `"tiled (<why not coop>)"`; for benchmarks
/// and reports.
pub fn matmul_kernel_name(device: usize, dtype: DType, mnk: [usize; 3]) -> Result<String> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    if dtype != DType::F16 {
        return Ok(format!("tiled ({dtype})"));
    }
    Ok(match plan_f16_gemm(dev.properties(), mnk, 0, false, coop_enabled()) {
        Ok(s) => format!("coop {0}x{0} {1} accumulation", s.size, s.acc),
        Err(why) => format!("tiled ({why})"),
    })
}

/// 128×128 tiles (8×8 per thread) once the product has this many of them
/// (`MPSRT_GEMM_TILE128_MIN`, default 128); fewer, and 64×64 tiles keep more workgroups busy.
fn tile128_min() -> usize {
    static T: OnceLock<usize> = OnceLock::new();
    *T.get_or_init(|| super::env_knob("MPSRT_GEMM_TILE128_MIN", 128))
}

fn aligned(vals: &[isize]) -> bool {
    vals.iter().all(|v| v % 4 == 0)
}

pub(crate) fn matmul(op: &str, device: usize, p: &Problem<'_>) -> Result<Tensor> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    let props = dev.properties();
    let b_bytes = gpu_buffer(op, p.b_t)?.size();
    let z: usize = p.batch.iter().product();
    if b_bytes > props.max_storage_buffer_binding_size && z == 1 && p.mnk[1] > 1 {
        if p.res.is_some() {
            // Column blocks do not carry the residual: add it (and the activation) after.
            return epilogue_after(split_columns(op, device, &p.without_epilogue())?, p.res, p.act);
        }
        return split_columns(op, device, p);
    }
    solve(op, device, p, None)
}

/// Solves `p` in column blocks of `B` whose byte windows fit one binding, then concatenates.
fn split_columns(op: &str, device: usize, p: &Problem<'_>) -> Result<Tensor> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    let props = dev.properties();
    let [m, n, k] = p.mnk;
    let nb = p.batch.len();
    let elem = p.b_t.dtype().size();
    let align = (props.min_storage_buffer_offset_alignment as usize).div_ceil(elem).max(1);
    let (s0, s1) = (p.b.strides[nb], p.b.strides[nb + 1]);
    let max_elems = props.max_storage_buffer_binding_size as usize / elem;
    // Elements one column block of width c spans: (c - 1) * s1 + (k - 1) * s0 + 1 (+ alignment slack).
    let fixed = (k.saturating_sub(1)) * s0.max(0) as usize + 1 + align;
    if s0 < 0 || s1 <= 0 || fixed > max_elems {
        return Err(Error::oom(
            op,
            format!(
                "B of shape [{k}, {n}] with strides [{s0}, {s1}] is larger than the adapter's \
                 max_storage_buffer_binding_size ({} bytes) and its columns are not stored apart \
                 (pass B transposed, e.g. as Gemm's transB weight)",
                props.max_storage_buffer_binding_size
            ),
        ));
    }
    let mut cols = (max_elems - fixed) / s1 as usize + 1;
    if cols >= 128 {
        cols -= cols % 64;
    }
    let mut parts = Vec::new();
    for n0 in (0..n).step_by(cols) {
        let n1 = (n0 + cols).min(n);
        let start = p.b.offset + n0 * s1 as usize;
        let base = start / align * align;
        let end = start + (n1 - n0 - 1) * s1 as usize + (k - 1) * s0 as usize + 1;
        let mut b = p.b.clone();
        b.offset = start - base;
        b.shape[nb + 1] = n1 - n0;
        let c = p.c.as_ref().map(|(t, l)| {
            let mut l = l.clone();
            l.offset += n0 * l.strides[l.strides.len() - 1].max(0) as usize;
            let r = l.shape.len();
            l.shape[r - 1] = n1 - n0;
            (*t, l)
        });
        let sub = Problem {
            a: p.a.clone(),
            b,
            a_t: p.a_t,
            b_t: p.b_t,
            batch: p.batch.clone(),
            mnk: [m, n1 - n0, k],
            c,
            alpha: p.alpha,
            beta: p.beta,
            res: None,
            act: p.act,
        };
        let window = ((base * elem) as u64, ((end - base) * elem) as u64);
        parts.push(solve(op, device, &sub, Some(window))?);
    }
    let refs: Vec<&Tensor> = parts.iter().collect();
    crate::shape::concat(&refs, -1)
}

/// One dispatch; `b_window` binds only that byte range of B's buffer (offsets in `p.b` are
/// then relative to the window's start).
fn solve(op: &str, device: usize, p: &Problem<'_>, b_window: Option<(u64, u64)>) -> Result<Tensor> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    let [m, n, k] = p.mnk;
    let nb = p.batch.len();
    let (bs, bst) = coalesce(&p.batch, &[p.a.strides[..nb].to_vec(), p.b.strides[..nb].to_vec()]);
    let z: usize = p.batch.iter().product();
    let mut shape = p.batch.clone();
    shape.extend([m, n]);
    let out = dev.alloc(op, (z * m * n * 4) as u64)?;
    let result =
        Tensor::from_parts(Storage::Gpu(Arc::new(out)), Layout::contiguous(&shape), DType::F32);
    if z * m * n == 0 {
        return Ok(result);
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
    let bbuf = gpu_buffer(op, p.b_t)?;
    let (mut abuf, mut bbuf) = (
        Binding::from(&**gpu_buffer(op, p.a_t)?),
        match b_window {
            Some((o, s)) => Binding::window(bbuf, o, s),
            None => Binding::from(&**bbuf),
        },
    );
    let (mut ab, mut bb) = (bst[0].clone(), bst[1].clone());
    let outb = gpu_buffer(op, &result)?;
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
        let wg = [nn.div_ceil(cols) as u32, 1, z as u32];
        let mut binds = vec![abuf, bbuf];
        if let Some((c, _)) = &p.c {
            binds.push(Binding::from(&**gpu_buffer(op, c)?));
        }
        binds.push(Binding::from(&**outb));
        dev.dispatch(op, &pl, &binds, bytemuck::cast_slice(&meta), wg)?;
        // The GEMV kernel has no activation epilogue: a separate elementwise pass.
        return maybe_apply(result, p.act);
    }
    if dtype == DType::F16 {
        let epilogue = p.c.is_some() || p.res.is_some() || p.act.is_some();
        let props = dev.properties();
        if let Ok(mut spec) = plan_f16_gemm(props, [mm, nn, k], nbd, epilogue, coop_enabled()) {
            // 8 f16 per load where the operand runs contiguously along K (A) / N (B) in whole
            // 16-byte vectors: offsets, strides and the contiguous extent multiples of 8.
            let by8 = |v: &[isize]| v.iter().all(|x| x % 8 == 0);
            spec.vec_a = sa[1] == 1 && sa[0] % 8 == 0 && k % 8 == 0 && oa % 8 == 0 && by8(&ab);
            spec.vec_b = sb[1] == 1 && sb[0] % 8 == 0 && nn % 8 == 0 && ob % 8 == 0 && by8(&bb);
            let pl = cached(&COOP, &dev, op, spec, CoopMatmulSpec::render)?;
            let (bm, bn) = (spec.block_m() as usize, spec.block_n() as usize);
            let (gx, gy) = (nn.div_ceil(bn), mm.div_ceil(bm));
            if gx > maxd || gy > maxd {
                return Err(Error::invalid(
                    op,
                    format!("[{mm}, {nn}] output exceeds the dispatch limit"),
                ));
            }
            let binds = [abuf, bbuf, Binding::from(&**outb)];
            let wg = [gx as u32, gy as u32, z as u32];
            dev.dispatch(op, &pl, &binds, bytemuck::cast_slice(&meta), wg)?;
            return Ok(result);
        }
    }
    let f32x = dtype == DType::F32;
    let a_base_ok = oa % 4 == 0 && aligned(&ab);
    let b_base_ok = ob % 4 == 0 && aligned(&bb);
    let a = if f32x && a_base_ok && sa[1] == 1 && sa[0] % 4 == 0 && k % 4 == 0 {
        OperandLoad::VecK
    } else if f32x && a_base_ok && sa[0] == 1 && sa[1] % 4 == 0 && mm % 4 == 0 {
        OperandLoad::VecMN
    } else {
        OperandLoad::Scalar
    };
    let b = if f32x && b_base_ok && sb[1] == 1 && sb[0] % 4 == 0 && nn % 4 == 0 {
        OperandLoad::VecMN
    } else if f32x && b_base_ok && sb[0] == 1 && sb[1] % 4 == 0 && k % 4 == 0 {
        OperandLoad::VecK
    } else {
        OperandLoad::Scalar
    };
    let tiles128 = mm.div_ceil(128) * nn.div_ceil(128) * z;
    let tile = if tiles128 >= tile128_min() { 128 } else { 64 };
    let spec = MatmulSpec {
        dtype,
        tile,
        a,
        b,
        has_c: p.c.is_some(),
        vec_out: nn % 4 == 0,
        batch_dims: nbd,
        act,
        has_res: p.res.is_some(),
    };
    let pl = cached(&GEMM, &dev, op, spec, MatmulSpec::render)?;
    let (gx, gy) = (nn.div_ceil(tile as usize), mm.div_ceil(tile as usize));
    if gx > maxd || gy > maxd {
        return Err(Error::invalid(op, format!("[{mm}, {nn}] output exceeds the dispatch limit")));
    }
    let mut binds = vec![abuf, bbuf];
    if let Some((c, _)) = &p.c {
        binds.push(Binding::from(&**gpu_buffer(op, c)?));
    }
    if let Some(r) = p.res {
        // Contiguous by construction (`matmul_epilogue`); the kernel indexes it like `out`.
        if r.layout().offset != 0 {
            return Err(Error::invalid(op, "internal: residual must start at offset 0"));
        }
        binds.push(Binding::from(&**gpu_buffer(op, r)?));
    }
    binds.push(Binding::from(&**outb));
    dev.dispatch(op, &pl, &binds, bytemuck::cast_slice(&meta), [gx as u32, gy as u32, z as u32])?;
    Ok(result)
}
