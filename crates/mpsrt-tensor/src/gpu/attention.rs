//! GPU launch for fused attention: plan the key tile from the device's workgroup-memory limit,
//! pass every operand's element strides (so permuted and broadcast views need no copy), one
//! workgroup per 16 query rows of one (batch, head). f16 problems whose shapes and layouts the
//! matrix-unit kernel takes (`mpsrt_kernels::attention_coop`, [`coop_plan`]) run there instead:
//! `MPSRT_ATTENTION_COOP=0` keeps the scalar kernels, `MPSRT_ATTENTION_COOP_SGS` (1, 2, 4;
//! default 1) sets its subgroups per workgroup, `MPSRT_ATTENTION_COOP_CHUNK` its key chunk.
//! Otherwise heads of at most 64 (multiples of 4) take the register-tiled kernel when there are
//! at least 16 query rows (`mpsrt_kernels::attention_tiled`, 32 query rows per workgroup;
//! `MPSRT_ATTENTION_TILED=0` keeps the row kernel).

use super::matmul::{cached, SpecCache};
use super::reduce::gpu_buffer;
use crate::attention::Sdpa;
use crate::Tensor;
use mpsrt_core::{DType, Error, Layout, Result};
use mpsrt_kernels::{AttnCoopSpec, AttnSpec, AttnTiledSpec, ATTN_META_WORDS, ATTN_ROWS};
use mpsrt_runtime::{Binding, Storage};
use std::sync::{Arc, OnceLock};

const OP: &str = "scaled_dot_product_attention";
static ATTN: SpecCache<AttnSpec> = OnceLock::new();
static ATTN_COOP: SpecCache<AttnCoopSpec> = OnceLock::new();
static ATTN_TILED: SpecCache<AttnTiledSpec> = OnceLock::new();

/// `MPSRT_ATTENTION_TILED` (default on), read once: heads ≤ 64 without the matrix-unit kernel
/// take the register-tiled kernel (`mpsrt_kernels::attention_tiled`).
fn tiled_env() -> bool {
    static E: OnceLock<bool> = OnceLock::new();
    *E.get_or_init(|| std::env::var("MPSRT_ATTENTION_TILED").map_or(true, |v| v.trim() != "0"))
}

/// `MPSRT_ATTENTION_COOP` (default on), `MPSRT_ATTENTION_COOP_SGS` (subgroups per workgroup,
/// default 1: H100 call 1 of the ninth session, BERT-base b8 f16 p50 4.30 ms with 1 against
/// 4.61–4.69 with 2 — workgroup memory limits how many fit an SM) and
/// `MPSRT_ATTENTION_COOP_CHUNK` (the largest key chunk, default 128), read once.
fn coop_env() -> (bool, u32, u32) {
    static E: OnceLock<(bool, u32, u32)> = OnceLock::new();
    *E.get_or_init(|| {
        let on = std::env::var("MPSRT_ATTENTION_COOP").map_or(true, |v| v.trim() != "0");
        let num = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<u32>().ok());
        let sgs = num("MPSRT_ATTENTION_COOP_SGS").filter(|v| matches!(v, 1 | 2 | 4)).unwrap_or(1);
        let chunk = num("MPSRT_ATTENTION_COOP_CHUNK")
            .filter(|v| *v >= 16 && v.is_multiple_of(16))
            .unwrap_or(128);
        (on, sgs, chunk)
    })
}

/// Whether [`coop_plan`] takes this f16 problem on device `index` with the environment's switches.
pub(crate) fn takes_matrix_units(
    index: usize,
    dims: [usize; 7],
    qkv: [&Tensor; 3],
    mask: Option<DType>,
) -> bool {
    let Ok(dev) = mpsrt_runtime::gpu_device(index) else { return false };
    let (on, sgs, chunk) = coop_env();
    let lay = qkv.iter().all(|t| coop_layout_ok(t));
    coop_plan(dev.properties(), dims, lay, mask, on, (sgs, chunk)).is_some()
}

/// Whether every operand's layout suits the matrix-unit kernel's direct fragment loads: unit
/// column stride, offset and the other strides multiples of 8 elements (16 bytes), all
/// non-negative.
fn coop_layout_ok(t: &Tensor) -> bool {
    let l = t.layout();
    l.strides.len() == 4
        && l.strides[3] == 1
        && l.offset.is_multiple_of(8)
        && l.strides[..3].iter().all(|&s| s >= 0 && s % 8 == 0)
}

/// The matrix-unit kernel for this problem on a device with `props`, if it takes it: f16 I/O,
/// `Sq` and `Skv` multiples of 16 (whole fragments: the kernel's loads are not bounds checked),
/// head sizes multiples of 16 up to 128, aligned operand layouts, and a device with 16×16 f16
/// → f32 cooperative matrices, shader-f16 and one subgroup size. Pure but for the environment
/// switches (`enabled`, `sgs`), so it is tested with fake device properties.
pub fn coop_plan(
    props: &mpsrt_runtime::DeviceProperties,
    dims: [usize; 7],
    layouts_ok: bool,
    mask: Option<DType>,
    enabled: bool,
    sgs_chunk: (u32, u32),
) -> Option<AttnCoopSpec> {
    let [_, _, _, sq, skv, d, dv] = dims;
    let has_cfg = props
        .coop_matrix
        .iter()
        .any(|c| c.m == 16 && c.n == 16 && c.k == 16 && c.ab == DType::F16 && c.cr == DType::F32);
    let sub =
        (props.subgroup_min_size == props.subgroup_max_size).then_some(props.subgroup_min_size);
    if !enabled
        || !layouts_ok
        || !has_cfg
        || !props.shader_f16
        || !props.subgroups
        || sq < 16
        || sq % 16 != 0
        || u32::try_from(sq).is_err()
    {
        return None;
    }
    AttnCoopSpec::plan(
        u32::try_from(d).ok()?,
        u32::try_from(dv).ok()?,
        u32::try_from(skv).ok()?,
        mask,
        sub?,
        sgs_chunk,
        props.max_compute_workgroup_storage_size,
    )
}

/// The kernel for these head sizes on GPU `index`, if it takes them.
pub(crate) fn plan(
    index: usize,
    io: DType,
    d: usize,
    dv: usize,
    mask: Option<DType>,
) -> Option<AttnSpec> {
    let dev = mpsrt_runtime::gpu_device(index).ok()?;
    let limit = dev.properties().max_compute_workgroup_storage_size;
    AttnSpec::plan(io, u32::try_from(d).ok()?, u32::try_from(dv).ok()?, mask, limit)
}

/// `(offset, 4 strides)` of a 4-D view as i32 metadata words.
fn strides(t: &Tensor) -> Result<[u32; 5]> {
    let l = t.layout();
    let mut w = [0u32; 5];
    let vals = std::iter::once(l.offset as i64).chain(l.strides.iter().map(|&s| s as i64));
    for (slot, x) in w.iter_mut().zip(vals) {
        *slot = i32::try_from(x)
            .map_err(|_| Error::unsupported(OP, "operand offsets/strides past i32"))?
            as u32;
    }
    Ok(w)
}

pub(crate) fn sdpa(index: usize, p: &Sdpa) -> Result<Tensor> {
    let [b, hq, hkv, sq, skv, d, dv] = p.dims();
    let io = p.q.dtype();
    let dev = mpsrt_runtime::gpu_device(index)?;
    let spec = plan(index, io, d, dv, p.mask.as_ref().map(|m| m.dtype())).ok_or_else(|| {
        Error::unsupported(
            OP,
            format!("head sizes {d}/{dv} do not fit the fused kernel on this device (≤ 256)"),
        )
    })?;
    let out_shape = if p.opts.seq_major { [b, sq, hq, dv] } else { [b, hq, sq, dv] };
    let numel = b * hq * sq * dv;
    let out_l = Layout::contiguous(&out_shape);
    // Output strides in (b, h, query, col) order.
    let os = &out_l.strides;
    let ostr = if p.opts.seq_major {
        [0, os[0], os[2], os[1], os[3]]
    } else {
        [0, os[0], os[1], os[2], os[3]]
    };
    // f16 outputs are stored as whole packed words: column pairs need an even head size.
    let coop = if io == DType::F16 {
        let (on, sgs, chunk) = coop_env();
        let lay = [p.q, p.k, p.v].iter().all(|t| coop_layout_ok(t));
        let mdt = p.mask.as_ref().map(|m| m.dtype());
        coop_plan(dev.properties(), p.dims(), lay, mdt, on, (sgs, chunk))
    } else {
        None
    };
    let (spec, out_dt) = if io == DType::F16 && dv % 2 == 1 {
        (AttnSpec { io: DType::F32, ..spec }, DType::F32)
    } else {
        (spec, io)
    };
    let (q, k, v) = if spec.io == io {
        (p.q.clone(), p.k.clone(), p.v.clone())
    } else {
        (p.q.astype(spec.io)?, p.k.astype(spec.io)?, p.v.astype(spec.io)?)
    };
    let outb = Arc::new(super::alloc_out(&dev, OP, numel, out_dt.size())?);
    let result = Tensor::from_parts(Storage::Gpu(outb.clone()), out_l.clone(), out_dt);
    if numel == 0 {
        return Ok(result);
    }
    let max_bind = dev.properties().max_storage_buffer_binding_size;
    let mut ins = vec![&q, &k, &v];
    ins.extend(p.mask.as_ref());
    for t in &ins {
        if gpu_buffer(OP, t)?.size() > max_bind {
            return Err(Error::unsupported(
                OP,
                format!("an operand is larger than one storage binding ({max_bind} bytes)"),
            ));
        }
    }
    let maxd = dev.properties().max_compute_workgroups_per_dimension as usize;
    let gx = sq.div_ceil(ATTN_ROWS as usize);
    if gx > maxd || hq > maxd || b > maxd {
        return Err(Error::unsupported(
            OP,
            format!("grid [{gx}, {hq}, {b}] exceeds the dispatch limit {maxd}"),
        ));
    }
    let mut meta = [0u32; ATTN_META_WORDS];
    meta[0] = sq as u32;
    meta[1] = skv as u32;
    meta[2] = (hq / hkv) as u32;
    meta[3] = (p.opts.scale as f32).to_bits();
    if let Some(off) = p.opts.causal_offset {
        meta[4] = 1;
        meta[5] = off.clamp(i32::MIN as i64, i32::MAX as i64) as i32 as u32;
    }
    meta[8..13].copy_from_slice(&strides(&q)?);
    meta[13..18].copy_from_slice(&strides(&k)?);
    meta[18..23].copy_from_slice(&strides(&v)?);
    if let Some(m) = &p.mask {
        meta[23..28].copy_from_slice(&strides(m)?);
    }
    for (slot, s) in meta[28..33].iter_mut().zip(ostr) {
        *slot = s as u32;
    }
    // A device that refuses the matrix-unit pipeline (a driver's cooperative-matrix limits)
    // runs the scalar kernel, said once on stderr.
    let coop_pl =
        coop.and_then(|cs| match cached(&ATTN_COOP, &dev, OP, cs, AttnCoopSpec::render) {
            Ok(pl) => Some((pl, cs)),
            Err(e) => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    eprintln!("mpsrt: matrix-unit attention unavailable ({e}); scalar kernel")
                });
                None
            }
        });
    let limit = dev.properties().max_compute_workgroup_storage_size;
    // Decoding steps (a few query rows against a long cache) keep the row kernel: the tiled
    // kernel's 32-row blocks would be mostly empty there.
    let tiled = (coop_pl.is_none() && tiled_env() && sq >= 16)
        .then(|| AttnTiledSpec::plan(spec.io, spec.d, spec.dv, spec.mask, limit))
        .flatten();
    let (pl, gx) = match (coop_pl, tiled) {
        (Some((pl, cs)), _) => (pl, sq.div_ceil(cs.rows() as usize)),
        (None, Some(ts)) => (
            cached(&ATTN_TILED, &dev, OP, ts, AttnTiledSpec::render)?,
            sq.div_ceil(mpsrt_kernels::attention_tiled::TILED_ROWS as usize),
        ),
        (None, None) => (cached(&ATTN, &dev, OP, spec, AttnSpec::render)?, gx),
    };
    let mut binds: Vec<Binding> = Vec::with_capacity(5);
    for t in &ins {
        binds.push(Binding::from(&**gpu_buffer(OP, t)?));
    }
    binds.push(Binding::from(&*outb));
    dev.dispatch(OP, &pl, &binds, bytemuck::cast_slice(&meta), [gx as u32, hq as u32, b as u32])?;
    if out_dt != io {
        return result.astype(io);
    }
    Ok(result)
}
