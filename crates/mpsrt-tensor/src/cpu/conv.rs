//! CPU reference for convolutions: direct loops in f64 over the receptive field (forward) or
//! over the input pixels whose stride grid lands on an output (transposed), rounded once to
//! the output dtype. Also the f64 → tensor encoder shared by the pooling reference.

use crate::conv::ConvGeom;
use crate::Tensor;
use half::f16;
use mpsrt_core::{DType, Layout, Result};
use mpsrt_runtime::{CpuBuffer, Storage};
use std::sync::Arc;

/// A contiguous CPU tensor of `dtype` from f64 values (floats rounded once).
pub(crate) fn from_f64(values: &[f64], shape: &[usize], dtype: DType) -> Result<Tensor> {
    let mut out = mpsrt_runtime::host_vec("from_f64", values.len() * dtype.size(), 0u8)?;
    out.clear();
    for &v in values {
        match dtype {
            DType::F16 => out.extend_from_slice(&f16::from_f64(v).to_le_bytes()),
            DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
            DType::F64 => out.extend_from_slice(&v.to_le_bytes()),
            DType::Bool => out.push((v != 0.0) as u8),
            DType::U8 | DType::I8 => out.push(v as i64 as u8),
            DType::I32 => out.extend_from_slice(&(v as i64 as i32).to_le_bytes()),
            DType::I64 => out.extend_from_slice(&(v as i64).to_le_bytes()),
        }
    }
    Ok(Tensor::from_parts(
        Storage::Cpu(Arc::new(CpuBuffer::from_bytes("from_f64", &out)?)),
        Layout::contiguous(shape),
        dtype,
    ))
}

fn bias_values(b: Option<&Tensor>, oc: usize) -> Result<Vec<f64>> {
    match b {
        Some(b) => b.to_f64_vec(),
        None => mpsrt_runtime::host_vec("conv2d", oc, 0.0),
    }
}

/// Forward conv: x (N, C, H, W), w (OC, C/g, KH, KW).
pub(crate) fn conv2d(x: &Tensor, w: &Tensor, b: Option<&Tensor>, g: &ConvGeom) -> Result<Tensor> {
    let (xv, wv, bv) = (x.to_f64_vec()?, w.to_f64_vec()?, bias_values(b, g.oc)?);
    let (icg, ocg) = (g.c / g.groups, g.oc / g.groups);
    let mut out = mpsrt_runtime::host_vec("conv2d", g.n * g.oc * g.oh * g.ow, 0.0)?;
    let mut idx = 0;
    for n in 0..g.n {
        for (c, &bias) in bv.iter().enumerate() {
            let grp = c / ocg;
            for oh in 0..g.oh {
                for ow in 0..g.ow {
                    let mut acc = bias;
                    for ic in 0..icg {
                        let ci = grp * icg + ic;
                        for kh in 0..g.kh {
                            let ih = (oh * g.sh + kh * g.dh) as isize - g.pt as isize;
                            if ih < 0 || ih >= g.h as isize {
                                continue;
                            }
                            for kw in 0..g.kw {
                                let iw = (ow * g.sw + kw * g.dw) as isize - g.pl as isize;
                                if iw < 0 || iw >= g.w as isize {
                                    continue;
                                }
                                let xi = ((n * g.c + ci) * g.h + ih as usize) * g.w + iw as usize;
                                let wi = ((c * icg + ic) * g.kh + kh) * g.kw + kw;
                                acc += xv[xi] * wv[wi];
                            }
                        }
                    }
                    out[idx] = acc;
                    idx += 1;
                }
            }
        }
    }
    from_f64(&out, &[g.n, g.oc, g.oh, g.ow], x.dtype())
}

/// Transposed conv: x (N, C, H, W), w (C, OC/g, KH, KW); scatter form (independent of the
/// GPU's gather form, so the two check each other).
pub(crate) fn conv_transpose2d(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    g: &ConvGeom,
) -> Result<Tensor> {
    let (xv, wv, bv) = (x.to_f64_vec()?, w.to_f64_vec()?, bias_values(b, g.oc)?);
    let (icg, ocg) = (g.c / g.groups, g.oc / g.groups);
    let plane = g.oh * g.ow;
    let mut out = mpsrt_runtime::host_vec("conv_transpose2d", g.n * g.oc * plane, 0.0)?;
    for n in 0..g.n {
        for (c, &bias) in bv.iter().enumerate() {
            let base = (n * g.oc + c) * plane;
            out[base..base + plane].iter_mut().for_each(|v| *v = bias);
        }
        for ci in 0..g.c {
            let grp = ci / icg;
            for ih in 0..g.h {
                for iw in 0..g.w {
                    let xval = xv[((n * g.c + ci) * g.h + ih) * g.w + iw];
                    for oc in 0..ocg {
                        let c = grp * ocg + oc;
                        for kh in 0..g.kh {
                            let oh = (ih * g.sh + kh * g.dh) as isize - g.pt as isize;
                            if oh < 0 || oh >= g.oh as isize {
                                continue;
                            }
                            for kw in 0..g.kw {
                                let ow = (iw * g.sw + kw * g.dw) as isize - g.pl as isize;
                                if ow < 0 || ow >= g.ow as isize {
                                    continue;
                                }
                                let wi = ((ci * ocg + oc) * g.kh + kh) * g.kw + kw;
                                out[(n * g.oc + c) * plane + oh as usize * g.ow + ow as usize] +=
                                    xval * wv[wi];
                            }
                        }
                    }
                }
            }
        }
    }
    from_f64(&out, &[g.n, g.oc, g.oh, g.ow], x.dtype())
}
