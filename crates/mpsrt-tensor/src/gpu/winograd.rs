//! Launch of the Winograd F(2×2, 3×3) conv (`mpsrt-kernels/src/winograd.rs`) for 3×3,
//! stride-1, undilated, ungrouped convs the planner (`gpu/conv_plan.rs`) gives it: weight and
//! input transforms, 16 products `U[ξ]·V[ξ]` as one batched call of the tiled matmul, and
//! the output transform with bias, residual and activation. The weights are transformed on
//! every call (`16·OC·C` floats, small beside the input transform); caching them per weight
//! buffer is left for the engine's plans.

use super::conv::{as_f32, buffer, meta_bytes};
use super::{alloc_out, grid};
use crate::activation::Activation;
use crate::conv::ConvGeom;
use crate::Tensor;
use mpsrt_core::{DType, Layout, Result};
use mpsrt_kernels::{winograd_output_kernel, winograd_tiles, MatmulAct, WINOGRAD_TRANSFORMS};
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

/// `act(conv(x, w) + bias + res)` by Winograd F(2,3); the planner has checked the geometry
/// and that V, M and U each fit one binding.
pub(crate) fn conv(
    op: &str,
    dev: &Arc<GpuDevice>,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    g: &ConvGeom,
    (res, act): (Option<&Tensor>, Option<Activation>),
) -> Result<Tensor> {
    let maxd = dev.properties().max_compute_workgroups_per_dimension;
    let tiles = winograd_tiles(g.oh as u32, g.ow as u32);
    let t = g.n * (tiles.0 * tiles.1) as usize;
    let meta = Meta::new(g, tiles);
    let transforms = dev.static_pipeline(WINOGRAD_TRANSFORMS, "winograd_weights")?;
    // U[16, OC, C].
    let u = alloc_out(dev, op, 16 * g.oc * g.c, 4)?;
    let (words, wg) = meta.pass(g.oc * g.c, w.layout().offset, maxd);
    let binds = [Binding::from(&**buffer(op, w)?), Binding::from(&u)];
    dev.dispatch(op, &transforms, &binds, &meta_bytes(&words, 4), wg)?;
    // V[16, C, T].
    let input = dev.static_pipeline(WINOGRAD_TRANSFORMS, "winograd_input")?;
    let v = alloc_out(dev, op, 16 * g.c * t, 4)?;
    let (words, wg) = meta.pass(g.c * t, x.layout().offset, maxd);
    let binds = [Binding::from(&**buffer(op, x)?), Binding::from(&v)];
    dev.dispatch(op, &input, &binds, &meta_bytes(&words, 4), wg)?;
    // M[16, OC, T] = U · V: 16 products in one batched matmul.
    let m = crate::matmul(&tensor(u, &[16, g.oc, g.c]), &tensor(v, &[16, g.c, t]))?;
    // Y = Aᵀ M A + bias + res, activated, NCHW.
    let res = res.map(as_f32).transpose()?;
    let (kind, p0, p1) = act.map_or((MatmulAct::None, 0.0, 0.0), |a| a.kernel());
    let pipeline = output_pipeline(dev, b.is_some(), res.is_some(), kind)?;
    let total = g.n * g.oc * g.oh * g.ow;
    let out = alloc_out(dev, op, total, 4)?;
    let (mut words, wg) = meta.pass(g.oc * t, b.map_or(0, |b| b.layout().offset), maxd);
    words[3] = p0.to_bits();
    words[14] = res.as_ref().map_or(0, |r| r.layout().offset as u32);
    words[15] = p1.to_bits();
    let m = m.contiguous()?;
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

fn output_pipeline(
    dev: &GpuDevice,
    bias: bool,
    res: bool,
    act: MatmulAct,
) -> Result<Arc<Pipeline>> {
    type Cache = parking_lot::Mutex<HashMap<(usize, bool, bool, MatmulAct), Arc<Pipeline>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let key = (dev.index(), bias, res, act);
    let cache = CACHE.get_or_init(Default::default);
    if let Some(p) = cache.lock().get(&key) {
        return Ok(p.clone());
    }
    let src = winograd_output_kernel(bias, res, act);
    let p = dev.pipeline(Kernel { source: &src, entry: "main" })?;
    cache.lock().insert(key, p.clone());
    Ok(p)
}
