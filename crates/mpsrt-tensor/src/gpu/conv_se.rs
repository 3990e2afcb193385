//! Launch of the fused squeeze-excitation gate (`mpsrt-kernels/src/conv_se.rs`): the two 1×1
//! convs of an SE block on its pooled `[N, C, 1, 1]` vector, with their biases and
//! activations, as one dispatch of one workgroup per image (issue 22).

use super::alloc_out;
use super::conv::{as_f32, buffer, meta_bytes};
use crate::activation::Activation;
use crate::Tensor;
use mpsrt_core::{DType, Layout, Place, Result};
use mpsrt_kernels::{se_gate_kernel, MatmulAct, SE_MAX_C, SE_MAX_C4};
use mpsrt_runtime::{Binding, Kernel, Pipeline, Storage};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// `act2(conv(act1(conv(p, w1, b1)), w2, b2))` for `p` `[N, C, 1, 1]`, `w1` `[C4, C, 1, 1]`,
/// `b1` `[C4]`, `w2` `[C, C4, 1, 1]`, `b2` `[C]` on a GPU, as one dispatch: a `[N, C, 1, 1]`
/// gate, equal to the two convs up to float rounding (another summation order). `None` when
/// the operands are not of that form, not on one GPU, or past the kernel's limits
/// (C ≤ 2048, C4 ≤ 256) — the caller then runs the convs.
pub fn se_gate(
    p: &Tensor,
    (w1, b1, act1): (&Tensor, &Tensor, Option<Activation>),
    (w2, b2, act2): (&Tensor, &Tensor, Option<Activation>),
) -> Result<Option<Tensor>> {
    let op = "se_gate";
    let Place::Gpu(d) = p.place() else { return Ok(None) };
    let [n, c, 1, 1] = *p.shape() else { return Ok(None) };
    let c4 = w1.shape().first().copied().unwrap_or(0);
    let fits = w1.shape() == [c4, c, 1, 1]
        && b1.shape() == [c4]
        && w2.shape() == [c, c4, 1, 1]
        && b2.shape() == [c]
        && [w1, b1, w2, b2].iter().all(|t| t.place() == p.place())
        && (1..=SE_MAX_C).contains(&c)
        && (1..=SE_MAX_C4).contains(&c4)
        && n > 0
        && n <= 65535;
    if !fits {
        return Ok(None);
    }
    let dev = mpsrt_runtime::gpu_device(d)?;
    let dtype = p.dtype();
    let [p, w1, b1, w2, b2] = [p, w1, b1, w2, b2].map(|t| as_f32(t).and_then(|t| t.contiguous()));
    let (p, w1, b1, w2, b2) = (p?, w1?, b1?, w2?, b2?);
    let (k1, p0, p1) = act1.map_or((MatmulAct::None, 0.0, 0.0), |a| a.kernel());
    let (k2, q0, q1) = act2.map_or((MatmulAct::None, 0.0, 0.0), |a| a.kernel());
    type Cache = parking_lot::Mutex<HashMap<(usize, MatmulAct, MatmulAct), Arc<Pipeline>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (dev.index(), k1, k2);
    let cached = cache.lock().get(&key).cloned();
    let pipeline = match cached {
        Some(pl) => pl,
        None => {
            let src = se_gate_kernel(k1, k2);
            let pl = dev.pipeline(Kernel { source: &src, entry: "main" })?;
            cache.lock().insert(key, pl.clone());
            pl
        }
    };
    let out = alloc_out(&dev, op, n * c, 4)?;
    let off = |t: &Tensor| t.layout().offset as u32;
    let mut words = [0u32; 16];
    words[..8].copy_from_slice(&[
        c as u32,
        c4 as u32,
        off(&p),
        p0.to_bits(),
        off(&w1),
        off(&b1),
        off(&w2),
        off(&b2),
    ]);
    words[13] = q0.to_bits();
    words[14] = q1.to_bits();
    words[15] = p1.to_bits();
    let bindings = [
        Binding::from(&**buffer(op, &p)?),
        Binding::from(&**buffer(op, &w1)?),
        Binding::from(&**buffer(op, &b1)?),
        Binding::from(&**buffer(op, &w2)?),
        Binding::from(&**buffer(op, &b2)?),
        Binding::from(&out),
    ];
    dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, 4), [n as u32, 1, 1])?;
    let y = Tensor::from_parts(
        Storage::Gpu(Arc::new(out)),
        Layout::contiguous(&[n, c, 1, 1]),
        DType::F32,
    );
    Ok(Some(y.astype(dtype)?))
}

/// The activation code `DW_POOL_WGSL` (and `conv_direct`) switches on: `MatmulAct`'s order.
fn dw_act_code(kind: MatmulAct) -> u32 {
    // The callers check `direct_code().is_some()` first (the GELUs have no code here).
    kind.direct_code().unwrap_or(0)
}

/// A depthwise conv with bias and activation, `y = act(conv(x, w, b))` for `x` `[N, C, H, W]`
/// and `w` `[C, 1, KH, KW]` (groups = C), and the mean of each output channel,
/// `p = mean(y, [2, 3])` `[N, C, 1, 1]`, as one dispatch (`mpsrt_kernels::DW_POOL_WGSL`; issue
/// 22: the depthwise conv and the `GlobalAveragePool` of EfficientNet's squeeze-excitation). `y`
/// is bit-identical to the direct depthwise kernel's; `p` matches a separate mean to float
/// rounding. `pads` are the top and left padding, `out` the output's `[OH, OW]`. `None` when
/// the operands are not f32 on one GPU of that form or N·C is past one grid dimension (the
/// caller runs the two steps).
#[allow(clippy::too_many_arguments)]
pub fn depthwise_conv_pool(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    stride: [usize; 2],
    pads: [usize; 2],
    dilation: [usize; 2],
    out: [usize; 2],
    act: Option<Activation>,
) -> Result<Option<(Tensor, Tensor)>> {
    let op = "depthwise_conv_pool";
    let Place::Gpu(d) = x.place() else { return Ok(None) };
    let [n, c, h, wi] = *x.shape() else { return Ok(None) };
    let [wc, 1, kh, kw] = *w.shape() else { return Ok(None) };
    let [oh, ow] = out;
    let f32s = [Some(x), Some(w), b].into_iter().flatten().all(|t| t.dtype() == DType::F32)
        && act.is_none_or(|a| a.kernel().0.direct_code().is_some());
    let dev = mpsrt_runtime::gpu_device(d)?;
    let maxd = dev.properties().max_compute_workgroups_per_dimension as usize;
    let fits = f32s
        && wc == c
        && b.is_none_or(|b| b.shape() == [c] && b.place() == x.place())
        && w.place() == x.place()
        && n * c > 0
        && n * c <= maxd
        && kh > 0
        && kw > 0
        && oh > 0
        && ow > 0
        && stride.iter().chain(&dilation).all(|&v| v > 0)
        && [n * c * h * wi, n * c * oh * ow].iter().all(|&v| v <= u32::MAX as usize);
    if !fits {
        return Ok(None);
    }
    let (x, w) = (x.contiguous()?, w.contiguous()?);
    let b = b.map(|b| b.contiguous()).transpose()?;
    let (kind, p0, p1) = act.map_or((MatmulAct::None, 0.0, 0.0), |a| a.kernel());
    let pipeline = dev.static_pipeline(mpsrt_kernels::DW_POOL_WGSL, "main")?;
    let y = alloc_out(&dev, op, n * c * oh * ow, 4)?;
    let p = alloc_out(&dev, op, n * c, 4)?;
    let u = |v: usize| v as u32;
    let words = [
        u(c),
        u(h),
        u(wi),
        u(oh),
        u(ow),
        u(kh),
        u(kw),
        u(stride[0]),
        u(stride[1]),
        u(pads[0]),
        u(pads[1]),
        u(dilation[0]),
        u(dilation[1]),
        u(x.layout().offset),
        u(w.layout().offset),
        u(b.as_ref().map_or(0, |b| b.layout().offset)),
        u32::from(b.is_some()),
        dw_act_code(kind),
        p0.to_bits(),
        p1.to_bits(),
    ];
    let bias = match &b {
        Some(b) => buffer(op, b)?,
        None => buffer(op, &w)?,
    };
    let bindings = [
        Binding::from(&**buffer(op, &x)?),
        Binding::from(&**buffer(op, &w)?),
        Binding::from(&**bias),
        Binding::from(&y),
        Binding::from(&p),
    ];
    dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, 5), [u(n * c), 1, 1])?;
    let y = Tensor::from_parts(
        Storage::Gpu(Arc::new(y)),
        Layout::contiguous(&[n, c, oh, ow]),
        DType::F32,
    );
    let p = Tensor::from_parts(
        Storage::Gpu(Arc::new(p)),
        Layout::contiguous(&[n, c, 1, 1]),
        DType::F32,
    );
    Ok(Some((y, p)))
}

/// Lanes per output of `CONV1X1_VEC_WGSL` for rows of `k` inputs: about 8 loads per lane,
/// 32 to 256.
fn vec_lanes(k: usize) -> usize {
    k.div_ceil(8).next_power_of_two().clamp(32, 256)
}

/// A 1×1 conv with bias and activation on a `[N, C, 1, 1]` map, `y = act(conv(x, w, b))` for
/// `w` `[OC, C, 1, 1]`, as one GEMV dispatch (`mpsrt_kernels::CONV1X1_VEC_WGSL`; issue 22:
/// squeeze-excitation's convs, which the GEMM conv runs as a 64×64 tile over one pixel, plus
/// a split-K pass for long K). Sums run in another order than the GEMM's (equal to float
/// rounding). `None` when the operands are not f32 on one GPU of that form or the grid does
/// not fit (the caller runs the conv).
pub fn conv1x1_vec(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    act: Option<Activation>,
) -> Result<Option<Tensor>> {
    let op = "conv1x1_vec";
    let Place::Gpu(d) = x.place() else { return Ok(None) };
    let [n, c, 1, 1] = *x.shape() else { return Ok(None) };
    let [oc, wc, 1, 1] = *w.shape() else { return Ok(None) };
    let f32s = [Some(x), Some(w), b].into_iter().flatten().all(|t| t.dtype() == DType::F32)
        && act.is_none_or(|a| a.kernel().0.direct_code().is_some());
    let dev = mpsrt_runtime::gpu_device(d)?;
    let maxd = dev.properties().max_compute_workgroups_per_dimension as usize;
    let fits = f32s
        && wc == c
        && c > 0
        && n > 0
        && oc > 0
        && n <= maxd
        && oc.div_ceil(256 / vec_lanes(c)) <= maxd
        && b.is_none_or(|b| b.shape() == [oc] && b.place() == x.place())
        && w.place() == x.place()
        && [n * c, oc * c, n * oc].iter().all(|&v| v <= u32::MAX as usize);
    if !fits {
        return Ok(None);
    }
    let (x, w) = (x.contiguous()?, w.contiguous()?);
    let b = b.map(|b| b.contiguous()).transpose()?;
    let (kind, p0, p1) = act.map_or((MatmulAct::None, 0.0, 0.0), |a| a.kernel());
    let pipeline = dev.static_pipeline(mpsrt_kernels::CONV1X1_VEC_WGSL, "main")?;
    let lanes = vec_lanes(c);
    let y = alloc_out(&dev, op, n * oc, 4)?;
    let u = |v: usize| v as u32;
    let words = [
        u(c),
        u(oc),
        u(x.layout().offset),
        u(w.layout().offset),
        u(b.as_ref().map_or(0, |b| b.layout().offset)),
        u32::from(b.is_some()),
        dw_act_code(kind),
        p0.to_bits(),
        p1.to_bits(),
        u(lanes),
    ];
    let bias = match &b {
        Some(b) => buffer(op, b)?,
        None => buffer(op, &w)?,
    };
    let bindings = [
        Binding::from(&**buffer(op, &x)?),
        Binding::from(&**buffer(op, &w)?),
        Binding::from(&**bias),
        Binding::from(&y),
    ];
    let groups = oc.div_ceil(256 / lanes);
    dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, 3), [u(groups), u(n), 1])?;
    let y = Tensor::from_parts(
        Storage::Gpu(Arc::new(y)),
        Layout::contiguous(&[n, oc, 1, 1]),
        DType::F32,
    );
    Ok(Some(y))
}
