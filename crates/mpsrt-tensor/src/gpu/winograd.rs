//! Launch of the Winograd F(m×m, 3×3) conv, m = 2 or 4 (`mpsrt-kernels/src/winograd.rs`), for
//! 3×3, stride-1, undilated, ungrouped convs the planner (`gpu/conv_plan.rs`) gives it: weight
//! and input transforms, α² products `U[ξ]·V[ξ]` (α = m + 2) as one batched call of the tiled
//! matmul, and the output transform with bias, residual and activation. The weights are
//! transformed on every call (`α²·OC·C` floats, small beside the input transform); caching
//! them per weight buffer is left for the engine's plans.

use super::conv::{as_f32, buffer, meta_bytes};
use super::{alloc_out, grid};
use crate::activation::Activation;
use crate::conv::ConvGeom;
use crate::Tensor;
use mpsrt_core::{DType, Layout, Result};
use mpsrt_kernels::{
    winograd_input_kernel, winograd_output_kernel, winograd_tiles, winograd_weights_kernel,
    MatmulAct,
};
use mpsrt_runtime::{Binding, GpuBuffer, GpuDevice, Kernel, Pipeline, Storage};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// The shared metadata layout of the three kernels (see the kernel module's doc).
struct Meta {
    words: [u32; 16],
}

impl Meta {
    fn new(g: &ConvGeom, (th, tw): (u32, u32)) -> Meta {
        let u = |v: usize| v as u32;
        let mut words = [0u32; 16];
        words[1] = u(g.c);
        words[2] = u(g.h);
        words[5] = u(g.w);
        words[6] = u(g.oc);
        words[7] = u(g.oh);
        words[8] = u(g.ow);
        words[9] = th;
        words[10] = tw;
        words[11] = u(g.pt);
        words[12] = u(g.pl);
        Meta { words }
    }

    /// The words for a pass of `threads` threads reading its input at `offset`.
    fn pass(&self, threads: usize, offset: usize, maxd: u32) -> ([u32; 16], [u32; 3]) {
        let wg = grid((threads as u64).div_ceil(256), maxd);
        let mut w = self.words;
        w[0] = threads as u32;
        w[4] = wg[0] * 256;
        w[13] = offset as u32;
        (w, wg)
    }
}

fn tensor(buf: GpuBuffer, shape: &[usize]) -> Tensor {
    Tensor::from_parts(Storage::Gpu(Arc::new(buf)), Layout::contiguous(shape), DType::F32)
}

/// `act(conv(x, w) + bias + res)` by Winograd F(`m`, 3); the planner has checked the
/// geometry and that V, M and U each fit one binding.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv(
    op: &str,
    dev: &Arc<GpuDevice>,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    g: &ConvGeom,
    (res, act): (Option<&Tensor>, Option<Activation>),
    m: u32,
) -> Result<Tensor> {
    let maxd = dev.properties().max_compute_workgroups_per_dimension;
    let a2 = ((m + 2) * (m + 2)) as usize;
    let tiles = winograd_tiles(m, g.oh as u32, g.ow as u32);
    let t = g.n * (tiles.0 * tiles.1) as usize;
    let meta = Meta::new(g, tiles);
    // U[α², OC, C].
    let u = alloc_out(dev, op, a2 * g.oc * g.c, 4)?;
    let (words, wg) = meta.pass(g.oc * g.c, w.layout().offset, maxd);
    let binds = [Binding::from(&**buffer(op, w)?), Binding::from(&u)];
    let p = pipeline(dev, Pass::Weights, m, false, false, MatmulAct::None)?;
    dev.dispatch(op, &p, &binds, &meta_bytes(&words, 4), wg)?;
    // V[α², C, T].
    let v = alloc_out(dev, op, a2 * g.c * t, 4)?;
    let (words, wg) = meta.pass(g.c * t, x.layout().offset, maxd);
    let binds = [Binding::from(&**buffer(op, x)?), Binding::from(&v)];
    let p = pipeline(dev, Pass::Input, m, false, false, MatmulAct::None)?;
    dev.dispatch(op, &p, &binds, &meta_bytes(&words, 4), wg)?;
    // M[α², OC, T] = U · V: α² products in one batched matmul.
    let mx = crate::matmul(&tensor(u, &[a2, g.oc, g.c]), &tensor(v, &[a2, g.c, t]))?;
    // Y = Aᵀ M A + bias + res, activated, NCHW.
    let res = res.map(as_f32).transpose()?;
    let (kind, p0, p1) = act.map_or((MatmulAct::None, 0.0, 0.0), |a| a.kernel());
    let pipeline = pipeline(dev, Pass::Output, m, b.is_some(), res.is_some(), kind)?;
    let total = g.n * g.oc * g.oh * g.ow;
    let out = alloc_out(dev, op, total, 4)?;
    let (mut words, wg) = meta.pass(g.oc * t, b.map_or(0, |b| b.layout().offset), maxd);
    words[3] = p0.to_bits();
    words[14] = res.as_ref().map_or(0, |r| r.layout().offset as u32);
    words[15] = p1.to_bits();
    let m = mx.contiguous()?;
    let mut binds = vec![Binding::from(&**buffer(op, &m)?)];
    if let Some(b) = b {
        binds.push(Binding::from(&**buffer(op, b)?));
    }
    if let Some(r) = &res {
        binds.push(Binding::from(&**buffer(op, r)?));
    }
    binds.push(Binding::from(&out));
    if m.layout().offset != 0 {
        return Err(mpsrt_core::Error::invalid(op, "internal: winograd product at an offset"));
    }
    dev.dispatch(op, &pipeline, &binds, &meta_bytes(&words, 4), wg)?;
    Ok(tensor(out, &[g.n, g.oc, g.oh, g.ow]))
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Pass {
    Weights,
    Input,
    Output,
}

/// The pipeline of one pass, rendered and compiled once per (device, pass, m, epilogue).
fn pipeline(
    dev: &GpuDevice,
    pass: Pass,
    m: u32,
    bias: bool,
    res: bool,
    act: MatmulAct,
) -> Result<Arc<Pipeline>> {
    type Key = (usize, Pass, u32, bool, bool, MatmulAct);
    static CACHE: OnceLock<parking_lot::Mutex<HashMap<Key, Arc<Pipeline>>>> = OnceLock::new();
    let key = (dev.index(), pass, m, bias, res, act);
    let cache = CACHE.get_or_init(Default::default);
    if let Some(p) = cache.lock().get(&key) {
        return Ok(p.clone());
    }
    let src = match pass {
        Pass::Weights => winograd_weights_kernel(m),
        Pass::Input => winograd_input_kernel(m),
        Pass::Output => winograd_output_kernel(m, bias, res, act),
    };
    let p = dev.pipeline(Kernel { source: &src, entry: "main" })?;
    cache.lock().insert(key, p.clone());
    Ok(p)
}
