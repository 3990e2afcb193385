//! GPU launch for elementwise expressions: coalesce dims, choose Linear/Vec4/Strided, fetch the
//! cached pipeline for the spec, pack the metadata block and record one dispatch (one per
//! binding window past the binding limit; see [`split`] for operands read a binding apart).

use super::shape::{assemble, empty};
use super::window::{self, Access};
use super::{alloc_out, grid};
use crate::{Scalar, Tensor};
use mpsrt_core::{numel, DType, Error, Layout, Result};
use mpsrt_kernels::{coalesce, ElementwiseSpec, Expr, Mode, Tuning, VType};
use mpsrt_runtime::{Binding, Kernel, Pipeline, Storage};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::sync::{Arc, OnceLock};

/// Keyed with FxHash (the keys are small trusted specs): hashing the spec tree with SipHash cost
/// ~1k instructions per eager op, a fifth of a tiny op's host time.
type SpecCache = Mutex<FxHashMap<(usize, ElementwiseSpec), Arc<Pipeline>>>;

/// Spec → pipeline, so the hot path skips rendering and hashing WGSL text.
fn spec_cache() -> &'static SpecCache {
    static CACHE: OnceLock<SpecCache> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// Launch tuning for generated elementwise kernels, read once: `MPSRT_EW_WORKGROUP` (power of two,
/// 32..=1024, default 256) and `MPSRT_EW_UNROLL` (vec4s per thread in Vec4 mode, 1..=8, default 2).
/// Invalid values fall back to the defaults with a warning.
fn tuning() -> Tuning {
    static T: OnceLock<Tuning> = OnceLock::new();
    *T.get_or_init(|| {
        let mut t = Tuning::default();
        let read = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<u32>().ok());
        match read("MPSRT_EW_WORKGROUP") {
            Some(w) if w.is_power_of_two() && (32..=1024).contains(&w) => t.workgroup = w,
            Some(w) => tracing::warn!(
                "MPSRT_EW_WORKGROUP={w} ignored: expected a power of two in 32..=1024"
            ),
            None => {}
        }
        match read("MPSRT_EW_UNROLL") {
            Some(u) if (1..=8).contains(&u) => t.unroll = u,
            Some(u) => tracing::warn!("MPSRT_EW_UNROLL={u} ignored: expected 1..=8"),
            None => {}
        }
        t
    })
}

fn scalar_types(e: &Expr, out: &mut Vec<(usize, VType)>) {
    match e {
        Expr::Scalar(k, t) => out.push((*k, *t)),
        Expr::Input(_) => {}
        Expr::Cast(_, a) | Expr::Unary(_, a) => scalar_types(a, out),
        Expr::Binary(_, a, b) => {
            scalar_types(a, out);
            scalar_types(b, out);
        }
        Expr::Select(c, a, b) => {
            scalar_types(c, out);
            scalar_types(a, out);
            scalar_types(b, out);
        }
    }
}

/// `dst`: a dense destination of this shape and dtype (see `with_destination`) written instead
/// of a fresh buffer when its offset suits a binding (else a fresh buffer).
#[allow(clippy::too_many_arguments)]
pub(crate) fn eval(
    op: &str,
    device: usize,
    inputs: &[&Tensor],
    shape: &[usize],
    out: DType,
    expr: Expr,
    scalars: &[Scalar],
    dst: Option<&Tensor>,
) -> Result<Tensor> {
    eval_at(op, device, inputs, shape, out, expr, scalars, 0, dst)
}

/// How deep [`split`] may recurse: each level shrinks one dim (a 3-D permute may need two).
const MAX_SPLIT_DEPTH: usize = 8;
/// Points whose span decides a split: one workgroup's worth.
const SPLIT_PROBE: usize = 256;

#[allow(clippy::too_many_arguments)]
fn eval_at(
    op: &str,
    device: usize,
    inputs: &[&Tensor],
    shape: &[usize],
    out: DType,
    expr: Expr,
    scalars: &[Scalar],
    depth: usize,
    dst: Option<&Tensor>,
) -> Result<Tensor> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    let n = numel(shape);
    let (limit, align) = window::limits(&dev);
    // The destination's buffer and element offset, when it can be bound from that offset.
    // wgpu refuses a buffer bound read-only and read-write in one dispatch (even at disjoint
    // ranges): a destination sharing an input's buffer is not used.
    let shares = |b: &Arc<mpsrt_runtime::GpuBuffer>| {
        inputs.iter().any(|t| matches!(t.storage(), Storage::Gpu(ib) if Arc::ptr_eq(ib, b)))
    };
    let dst = dst.and_then(|t| match t.storage() {
        Storage::Gpu(b)
            if b.device().index() == device
                && ((t.layout().offset * out.size()) as u64).is_multiple_of(align)
                && !shares(b) =>
        {
            Some((b.clone(), t.layout().offset))
        }
        _ => None,
    });
    let (buf, out_off) = match dst {
        Some(d) => d,
        None => (Arc::new(alloc_out(&dev, op, n, out.size())?), 0),
    };
    if n > 0 {
        let mut buffers = Vec::with_capacity(inputs.len());
        let mut offsets = Vec::with_capacity(inputs.len());
        for t in inputs {
            let Storage::Gpu(b) = t.storage() else {
                return Err(Error::device(op, "internal: CPU tensor reached the GPU backend"));
            };
            buffers.push(&**b);
            offsets.push(t.layout().offset);
        }
        // Dense operands of the output's shape (the common eager case) are linear without
        // building broadcast strides and coalescing them: the result is one dim of `n` (none
        // when n == 1), stride 1 everywhere.
        let dense = inputs.iter().all(|t| t.shape() == shape && t.layout().is_contiguous());
        let (cshape, cstrides) = if dense {
            (if n == 1 { Vec::new() } else { vec![n] }, Vec::new())
        } else {
            let mut strides = Vec::with_capacity(inputs.len());
            for t in inputs {
                strides.push(t.layout().broadcast_to(op, shape)?.strides);
            }
            coalesce(shape, &strides)
        };
        let linear =
            dense || (cshape.len() <= 1 && cstrides.iter().all(|s| s.iter().all(|&x| x == 1)));
        let dtypes: Vec<DType> = inputs.iter().map(|t| t.dtype()).collect();
        let mode = if linear && ElementwiseSpec::vec4_ok(&dtypes, out, n, &offsets) {
            Mode::Vec4
        } else if linear {
            Mode::Linear
        } else {
            Mode::Strided { ndim: cshape.len() }
        };
        let mut stypes = Vec::new();
        scalar_types(&expr, &mut stypes);
        let num_scalars = stypes.iter().map(|(k, _)| k + 1).max().unwrap_or(0);
        let mut words = vec![0u32; num_scalars];
        for (k, t) in stypes {
            words[k] = scalars.get(k).copied().unwrap_or(Scalar::I(0)).gpu_word(t);
        }
        // The spec takes the expression by value: the lookup key is built without cloning it.
        let key =
            (device, ElementwiseSpec { inputs: dtypes, output: out, num_scalars, expr, mode });
        let cached = spec_cache().lock().get(&key).cloned();
        let pipeline = match cached {
            Some(p) => p,
            None => {
                let src = key
                    .1
                    .render_with(tuning())
                    .map_err(|e| Error::dtype(op, format!("cannot generate kernel: {e}")))?;
                // SAFETY: generated elementwise kernels only touch elements inside the operands'
                // views (layouts derived from valid tensors; Vec4 loads use clamped indices and
                // every store is guarded by `numel`), and the output holds exactly `numel`; a
                // windowed launch binds each operand from the first element its range touches.
                let p = unsafe { dev.pipeline_unchecked(Kernel { source: &src, entry: "main" })? };
                spec_cache().lock().insert(key.clone(), p.clone());
                p
            }
        };
        let spec = &key.1;
        let tune = tuning();
        let ept = spec.elements_per_thread_with(tune) as usize;
        // Ranges start on a whole thread's first element; the output is bound from the aligned
        // element at or before it and the kernel shifts its stores (ranges may then end where
        // a transposed view's row ends, the only place such a view's span stays small).
        let unit = ept;
        // The kernel counts elements in u32: keep a range well inside it.
        let max_points = (u32::MAX as usize / 2) / unit * unit;
        let out_fits = if out_off == 0 {
            window::fits(&buf, limit)
        } else {
            ((n * out.size()) as u64).next_multiple_of(4) <= limit
        };
        let whole = n <= max_points && out_fits && buffers.iter().all(|b| window::fits(b, limit));
        // Points are output elements over the coalesced shape; every operand (inputs, then the
        // output) says where each point's element lives, so ranges past one binding are split.
        let mut access: Vec<Access<'_>> = Vec::new();
        let windows = if whole {
            vec![window::Window { start: 0, len: n, base: vec![None; inputs.len() + 1] }]
        } else {
            let pdims: Vec<usize> = if cshape.is_empty() { vec![n] } else { cshape.clone() };
            access = buffers
                .iter()
                .zip(inputs)
                .enumerate()
                .map(|(k, (b, t))| Access {
                    buffer: b,
                    elem_bytes: t.dtype().size(),
                    offset: offsets[k] as isize,
                    strides: if dense || cshape.is_empty() {
                        vec![if n == 1 { 0 } else { 1 }; pdims.len()]
                    } else {
                        cstrides[k].clone()
                    },
                    extent: (0, 0),
                })
                .collect();
            access.push(Access::dense(&buf, out.size(), out_off, &pdims));
            // Neighbouring outputs reading a binding apart (a transposed operand): reorder the
            // work instead of refusing it or dispatching a handful of elements at a time.
            if depth < MAX_SPLIT_DEPTH
                && window::spans_far(&dev, &pdims, unit, SPLIT_PROBE.max(unit), &access)
            {
                let expr = key.1.expr.clone();
                // A fresh result: the caller of `with_destination` copies it into place.
                return split(op, device, inputs, shape, out, expr, scalars, depth);
            }
            window::plan(op, &dev, &pdims, unit, max_points, &access)?
        };
        let nin = inputs.len();
        let mut bindings: Vec<Binding<'_>> = Vec::with_capacity(nin + 1);
        let mut rel = Vec::with_capacity(nin);
        for w in &windows {
            bindings.clear();
            rel.clear();
            if access.is_empty() {
                bindings.extend(buffers.iter().map(|&b| Binding::from(b)));
                bindings.push(if out_off == 0 {
                    Binding::from(&*buf)
                } else {
                    Binding::window(&buf, (out_off * out.size()) as u64, (n * out.size()) as u64)
                });
            } else {
                for (k, a) in access.iter().enumerate() {
                    bindings.push(w.binding(k, a));
                }
            }
            for (k, &o) in offsets.iter().enumerate() {
                // Linear modes index `offset + e` with e local to the range; Strided decodes
                // coordinates from `start + e` itself.
                let first = if linear { o + w.start } else { o };
                rel.push(w.rel(k, first as isize));
            }
            // Where the output element of point `w.start` lies in its binding (a bound window
            // starts at the destination's offset).
            let out_rel = match w.base[nin] {
                Some((b, _)) => out_off + w.start - b,
                None if access.is_empty() => w.start,
                None => out_off + w.start,
            };
            // In storage units: vec4s, packed words or elements.
            let shift = out_rel / if mode == Mode::Vec4 { 4 } else { ept };
            let meta = spec.meta(w.len, w.start, shift, &words, &cshape, &rel, &cstrides);
            let threads = (w.len as u64).div_ceil(ept as u64);
            let wg = grid(
                threads.div_ceil(tune.workgroup as u64),
                dev.properties().max_compute_workgroups_per_dimension,
            );
            dev.dispatch(op, &pipeline, &bindings, bytemuck::cast_slice(&meta), wg)?;
        }
    }
    let mut layout = Layout::contiguous(shape);
    layout.offset = out_off;
    Ok(Tensor::from_parts(Storage::Gpu(buf), layout, out))
}

/// `expr` over `shape` when neighbouring output points read more than a binding apart in some
/// input (a transposed operand): evaluated in blocks along the dim where an input steps
/// furthest (in bytes) per step of the output, each block its own launch into a contiguous
/// temporary (whose neighbouring points now read near each other) that a strided copy
/// (`shape::assemble`, windowed per element) scatters into a 4-byte canvas. Packed outputs
/// (f16, u8/i8, bool: two launches must not write halves of one word) are assembled as
/// f32/i32 and narrowed by a final dense cast: the same values, since the kernel computes in
/// f32/i32 and only its store narrows.
#[allow(clippy::too_many_arguments)]
fn split(
    op: &str,
    device: usize,
    inputs: &[&Tensor],
    shape: &[usize],
    out: DType,
    expr: Expr,
    scalars: &[Scalar],
    depth: usize,
) -> Result<Tensor> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    let (limit, _) = window::limits(&dev);
    let layouts =
        inputs.iter().map(|t| t.layout().broadcast_to(op, shape)).collect::<Result<Vec<_>>>()?;
    let ostr = mpsrt_core::contiguous_strides(shape);
    // Bytes the furthest-stepping input moves per step of dim d.
    let step = |d: usize| {
        let bytes = layouts.iter().zip(inputs);
        bytes.map(|(l, t)| l.strides[d].unsigned_abs() * t.dtype().size()).max().unwrap_or(0)
    };
    let score = |d: usize| step(d) as f64 / (ostr[d].unsigned_abs().max(1) * out.size()) as f64;
    let Some(d) =
        (0..shape.len()).filter(|&d| shape[d] > 1).max_by(|&a, &b| score(a).total_cmp(&score(b)))
    else {
        // One element cannot span anything: let the planner decide (and name the limit).
        return eval_at(op, device, inputs, shape, out, expr, scalars, MAX_SPLIT_DEPTH, None);
    };
    // Blocks along d whose reads stay within a quarter binding per output unit; always at
    // least halving d, so every level of recursion shrinks the work.
    let far = step(d).max(1) as u64;
    let b = (1 + (limit / 4 / far) as usize).min(shape[d].div_ceil(2)).max(1);
    let (wide, wexpr) = match out {
        DType::F16 => (DType::F32, expr),
        DType::U8 | DType::I8 => (DType::I32, expr),
        DType::Bool => (DType::I32, Expr::cast(VType::Int, expr)),
        _ => (out, expr),
    };
    let mut canvas = empty(op, device, shape, wide)?;
    let mut i = 0;
    while i < shape[d] {
        let j = (i + b).min(shape[d]);
        let (lo, hi) = (Some(i as isize), Some(j as isize));
        let views = inputs
            .iter()
            .zip(&layouts)
            .map(|(t, l)| {
                Ok(Tensor::from_parts(
                    t.storage().clone(),
                    l.slice(op, d as isize, lo, hi, 1)?,
                    t.dtype(),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&Tensor> = views.iter().collect();
        let mut bshape = shape.to_vec();
        bshape[d] = j - i;
        let block =
            eval_at(op, device, &refs, &bshape, wide, wexpr.clone(), scalars, depth + 1, None)?;
        let dst = canvas.layout().slice(op, d as isize, lo, hi, 1)?;
        canvas = assemble(op, canvas, &[(dst, &block)])?;
        i = j;
    }
    if wide == out {
        return Ok(canvas);
    }
    let narrow = Expr::cast(VType::of(out), Expr::input(0));
    eval_at(op, device, &[&canvas], shape, out, narrow, &[], depth + 1, None)
}
