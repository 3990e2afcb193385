//! Launch of the implicit-GEMM conv kernel (`mpsrt-kernels/src/conv_gemm.rs`): ungrouped convs
//! with enough output tiles to fill the GPU, computed straight from the NCHW input into an
//! NCHW output with the bias, a residual and the activation in the epilogue — no column matrix
//! and no permute. `MPSRT_CONV_GEMM` picks the route: `auto` (default: when the product has at
//! least `MPSRT_CONV_GEMM_MIN_TILES` 64×64 tiles, default 256), `1` (every ungrouped conv that
//! fits, for tests and comparisons) or `0` (never: im2col + matmul as before).
//! `MPSRT_CONV_GEMM_TILE=BMxBN` (64 or 128 each) overrides the tile choice.

use super::conv::{as_f32, buffer};
use super::matmul::{cached, SpecCache};
use super::{alloc_out, env_knob};
use crate::activation::Activation;
use crate::conv::ConvGeom;
use crate::Tensor;
use mpsrt_core::{DType, Layout, Result};
use mpsrt_kernels::{conv_gemm_meta, ConvGemmSpec, MatmulAct};
use mpsrt_runtime::{Binding, GpuDevice, Storage};
use std::sync::{Arc, OnceLock};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    Auto,
    Always,
    Never,
}

fn route() -> Route {
    static R: OnceLock<Route> = OnceLock::new();
    *R.get_or_init(|| match std::env::var("MPSRT_CONV_GEMM").as_deref().map(str::trim) {
        Ok("1") | Ok("on") => Route::Always,
        Ok("0") | Ok("off") => Route::Never,
        _ => Route::Auto,
    })
}

/// Smallest product (in 64×64 tiles) the automatic route takes (`MPSRT_CONV_GEMM_MIN_TILES`).
fn min_tiles() -> usize {
    static T: OnceLock<usize> = OnceLock::new();
    *T.get_or_init(|| env_knob("MPSRT_CONV_GEMM_MIN_TILES", 256))
}

/// `(bm, bn)` from `MPSRT_CONV_GEMM_TILE=BMxBN`, if set and valid. Read per call (a few
/// hundred nanoseconds against a conv) so one test process can cover every tile shape.
fn tile_override() -> Option<(u32, u32)> {
    let v = std::env::var("MPSRT_CONV_GEMM_TILE").ok()?;
    let (a, b) = v.trim().split_once('x')?;
    let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
    ([64, 128].contains(&a) && [64, 128].contains(&b)).then_some((a, b))
}

/// Tile shape for `oc` channels × `cols` columns: 128 channels per tile once there are that
/// many (64-channel layers would compute a half-empty tile), 128 columns while that still
/// gives ≥ 264 workgroups (two per SM on a 132-SM H100), else 64 for more workgroups.
fn tiles(oc: usize, cols: usize) -> (u32, u32) {
    if let Some(t) = tile_override() {
        return t;
    }
    let bm = if oc >= 128 { 128 } else { 64 };
    let bn = if oc.div_ceil(bm) * cols.div_ceil(128) >= 264 { 128 } else { 64 };
    (bm as u32, bn as u32)
}

/// The conv through the implicit-GEMM kernel, or `None` when the route, the geometry or the
/// adapter's limits say the im2col path should take it.
pub(crate) fn conv(
    op: &str,
    dev: &Arc<GpuDevice>,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    g: &ConvGeom,
    (res, act): (Option<&Tensor>, Option<Activation>),
) -> Result<Option<Tensor>> {
    let r = route();
    if r == Route::Never || g.groups != 1 {
        return Ok(None);
    }
    let p = g.oh * g.ow;
    let cols = g.n * p;
    let k = g.c * g.kh * g.kw;
    let total = g.oc * cols;
    let tiles64 = g.oc.div_ceil(64) * cols.div_ceil(64);
    if total == 0 || (r == Route::Auto && tiles64 < min_tiles()) {
        return Ok(None);
    }
    let props = dev.properties();
    let (bm, bn) = tiles(g.oc, cols);
    let fits = |elems: usize| (elems as u64) * 4 <= props.max_storage_buffer_binding_size;
    let in_elems = x.layout().offset + g.n * g.c * g.h * g.w;
    if !fits(in_elems)
        || !fits(total)
        || !fits(w.layout().offset + g.oc * k)
        || in_elems > i32::MAX as usize
        || cols.div_ceil(bn as usize) > props.max_compute_workgroups_per_dimension as usize
    {
        return Ok(None);
    }
    let res = res.map(as_f32).transpose()?;
    let res_off = res.as_ref().map_or(0, |r| r.layout().offset);
    let u = |v: usize| v as u32;
    let (kind, p0, p1) = act.map_or((MatmulAct::None, 0.0, 0.0), |a| a.kernel());
    let spec = ConvGemmSpec {
        c: u(g.c),
        h: u(g.h),
        w: u(g.w),
        oc: u(g.oc),
        oh: u(g.oh),
        ow: u(g.ow),
        kh: u(g.kh),
        kw: u(g.kw),
        sh: u(g.sh),
        sw: u(g.sw),
        ph: u(g.pt),
        pw: u(g.pl),
        dh: u(g.dh),
        dw: u(g.dw),
        bm,
        bn,
        w_vec: k.is_multiple_of(4) && w.layout().offset.is_multiple_of(4),
        vec_out: p.is_multiple_of(4) && res_off.is_multiple_of(4),
        has_bias: b.is_some(),
        has_res: res.is_some(),
        act: kind,
    };
    // Rendered and compiled once per geometry and tile shape.
    static PIPELINES: SpecCache<ConvGemmSpec> = OnceLock::new();
    let pipeline = cached(&PIPELINES, dev, op, spec, ConvGemmSpec::render)?;
    let out = alloc_out(dev, op, total, 4)?;
    let meta = conv_gemm_meta(
        u(cols),
        [
            u(x.layout().offset),
            u(w.layout().offset),
            b.map_or(0, |b| u(b.layout().offset)),
            u(res_off),
        ],
        p0,
        p1,
    );
    let mut bindings = vec![Binding::from(&**buffer(op, x)?), Binding::from(&**buffer(op, w)?)];
    if let Some(b) = b {
        bindings.push(Binding::from(&**buffer(op, b)?));
    }
    if let Some(r) = &res {
        bindings.push(Binding::from(&**buffer(op, r)?));
    }
    bindings.push(Binding::from(&out));
    dev.dispatch(op, &pipeline, &bindings, bytemuck::cast_slice(&meta), spec.grid(u(g.n)))?;
    let shape = [g.n, g.oc, g.oh, g.ow];
    Ok(Some(Tensor::from_parts(
        Storage::Gpu(Arc::new(out)),
        Layout::contiguous(&shape),
        DType::F32,
    )))
}
