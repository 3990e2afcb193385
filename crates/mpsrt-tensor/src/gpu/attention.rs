//! GPU launch for fused attention: plan the key tile from the device's workgroup-memory limit,
//! pass every operand's element strides (so permuted and broadcast views need no copy), one
//! workgroup per 16 query rows of one (batch, head).

use super::matmul::{cached, SpecCache};
use super::reduce::gpu_buffer;
use crate::attention::Sdpa;
use crate::Tensor;
use mpsrt_core::{DType, Error, Layout, Result};
use mpsrt_kernels::{AttnSpec, ATTN_META_WORDS, ATTN_ROWS};
use mpsrt_runtime::{Binding, Storage};
use std::sync::{Arc, OnceLock};

const OP: &str = "scaled_dot_product_attention";
static ATTN: SpecCache<AttnSpec> = OnceLock::new();

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
    let pl = cached(&ATTN, &dev, OP, spec, AttnSpec::render)?;
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
