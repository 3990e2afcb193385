//! Launch of the implicit-GEMM conv kernel (`mpsrt-kernels/src/conv_gemm.rs`): ungrouped convs
//! computed straight from the NCHW input into an NCHW output with the bias, a residual and the
//! activation in the epilogue — no column matrix and no permute — or, on small maps, split
//! over K inside the kernel with one reduce pass for the epilogue. `gpu/conv_plan.rs` decides
//! when and with which tile; the knobs it reads from here: `MPSRT_CONV_GEMM` (`1`: every
//! ungrouped conv that fits, for tests; `0`: never; unset: the planner's choice),
//! `MPSRT_CONV_GEMM_MIN_TILES` (the legacy route's threshold, 64×64 tiles, default 256),
//! `MPSRT_CONV_GEMM_TILE=BMxBN` (64 or 128 each, or 32x128: the only tile considered) and
//! `MPSRT_CONV_SMS` (the cost model's SM count, default 132).

use super::conv::{as_f32, buffer};
use super::conv_plan::{CostModel, PlanLimits};
use super::matmul::{cached, SpecCache};
use super::{alloc_out, env_knob, grid};
use crate::activation::Activation;
use crate::conv::ConvGeom;
use crate::Tensor;
use mpsrt_core::{DType, Layout, Result};
use mpsrt_kernels::{conv_gemm_meta, conv_splitk_reduce_kernel, ConvGemmSpec, MatmulAct};
use mpsrt_runtime::{Binding, GpuBuffer, GpuDevice, Kernel, Pipeline, Storage};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

thread_local! {
    /// The destination set by [`with_conv_destination`], until a conv takes it.
    static DEST: RefCell<Option<Tensor>> = const { RefCell::new(None) };
    /// The input operation set by [`with_conv_input_scale`] or
    /// [`with_conv_input_affine_relu`], until a conv takes it.
    static GATE: RefCell<Option<InputOp>> = const { RefCell::new(None) };
}

/// An operation on a conv's input that the implicit GEMM applies while gathering it.
#[derive(Clone)]
pub(crate) enum InputOp {
    /// `x · gate[n, c]` (`[N, C, 1, 1]`).
    Gate(Tensor),
    /// `max(x · scale[c] + shift[c], 0)` (`scale`, `shift`: C values each).
    AffineRelu(Tensor, Tensor),
}

impl InputOp {
    /// The operation as separate ops (routes other than the implicit GEMM).
    pub(crate) fn apply(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            InputOp::Gate(g) => crate::multiply(x, g),
            InputOp::AffineRelu(s, t) => {
                // One kernel, the expression the engine's fused BN-ReLU step renders.
                use mpsrt_kernels::{BinaryFn, Expr, UnaryFn};
                let c = x.shape()[1] as isize;
                let (s, t) = (s.reshape(&[c, 1, 1])?, t.reshape(&[c, 1, 1])?);
                let (i, bin) = (Expr::input, Expr::binary);
                let e = bin(BinaryFn::Add, bin(BinaryFn::Mul, i(0), i(1)), i(2));
                let e = Expr::unary(UnaryFn::Relu, e);
                crate::fused_elementwise("conv input", &[x, &s, &t], DType::F32, e, &[])
            }
        }
    }
}

/// Run `f` with `scale` and `shift` (`C` values each, on a GPU) applied to the input of the
/// first GPU conv in `f` whose input has `C` channels: the conv computes
/// `conv(max(x · scale + shift, 0))` — a BatchNorm + Relu folded into the conv reading its
/// output (DenseNet's pre-activation on each concat, issue 22). As
/// [`with_conv_input_scale`]: the implicit GEMM applies it while gathering, other routes
/// first; [`input_scale_pending`] says whether it was taken.
pub fn with_conv_input_affine_relu<R>(scale: &Tensor, shift: &Tensor, f: impl FnOnce() -> R) -> R {
    set_input_op(InputOp::AffineRelu(scale.clone(), shift.clone()), f)
}

fn set_input_op<R>(op: InputOp, f: impl FnOnce() -> R) -> R {
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            GATE.with(|d| d.borrow_mut().take());
        }
    }
    let _clear = Clear;
    GATE.with(|d| *d.borrow_mut() = Some(op));
    f()
}

/// Run `f` with `gate` (`[N, C, 1, 1]`, on a GPU) as a per-image, per-channel scale of the
/// input of the first GPU conv in `f` whose input is `[N, C, H, W]`: the conv computes
/// `conv(x · gate)` — squeeze-excitation's `Mul` folded into the conv that reads its product
/// (issue 22: one dispatch and one full-size tensor fewer per block). The implicit-GEMM
/// kernel multiplies while gathering its input; every other route multiplies first (the same
/// f32 products). The caller checks [`input_scale_pending`] after `f`: a gate still pending
/// was not applied (no conv of that input ran), and `f`'s result must not be used.
pub fn with_conv_input_scale<R>(gate: &Tensor, f: impl FnOnce() -> R) -> R {
    set_input_op(InputOp::Gate(gate.clone()), f)
}

/// Whether an input operation set by [`with_conv_input_scale`] or
/// [`with_conv_input_affine_relu`] has not been taken by a conv yet.
pub fn input_scale_pending() -> bool {
    GATE.with(|d| d.borrow().is_some())
}

/// The pending input operation, taken if it fits an input `x` of `[N, C, H, W]` on the same
/// place: a gate of `[N, C, 1, 1]`, a scale and shift of `C` values each.
pub(crate) fn take_input_op(x: &Tensor) -> Option<InputOp> {
    GATE.with(|d| {
        let mut d = d.borrow_mut();
        let fits = x.ndim() == 4
            && match d.as_ref()? {
                InputOp::Gate(t) => {
                    t.shape() == [x.shape()[0], x.shape()[1], 1, 1] && t.place() == x.place()
                }
                InputOp::AffineRelu(s, t) => {
                    [s, t].iter().all(|v| v.numel() == x.shape()[1] && v.place() == x.place())
                }
            };
        if fits {
            d.take()
        } else {
            None
        }
    })
}

/// Whether `x` (4-D) is a channel slice of a wider NCHW tensor the implicit GEMM can read
/// without a copy: images `strides[0] ≥ C·H·W` apart, each dense.
pub(crate) fn channel_slice(x: &Tensor) -> bool {
    let (s, st) = (x.shape(), x.strides());
    s.len() == 4
        && x.dtype() == DType::F32
        && st[3] == 1
        && st[2] == s[3] as isize
        && st[1] == (s[2] * s[3]) as isize
        && st[0] >= (s[1] * s[2] * s[3]) as isize
}

/// Run `f` with `out` as the destination of the first implicit-GEMM conv in `f` whose result
/// has `out`'s shape `[N, OC, OH, OW]`: that conv stores straight into `out`'s memory. `out`
/// is a channel slice of a larger NCHW f32 GPU tensor (strides `[S, OH·OW, OW, 1]`, `S ≥
/// OC·OH·OW`, any offset): DenseNet's concat written in place by its producers (issue 22).
/// Routes that cannot (winograd, the lowered GEMM, a residual epilogue, operands past one
/// binding) ignore it, so the caller checks whether the result is `out` (same storage and
/// offset) and copies otherwise. The caller guarantees nothing `f` reads overlaps `out`.
/// `out` is forgotten when `f` returns.
pub fn with_conv_destination<R>(out: &Tensor, f: impl FnOnce() -> R) -> R {
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            DEST.with(|d| d.borrow_mut().take());
        }
    }
    let _clear = Clear;
    DEST.with(|d| *d.borrow_mut() = Some(out.clone()));
    f()
}

/// The pending destination, taken if it is a channel slice `[n, oc, p]` of an f32 tensor on
/// `dev` whose offset and image stride are multiples of 4 floats when `vec4` (the split-K
/// reduce pass stores vectors). Returns it with its image stride in floats.
fn take_destination(dev: &GpuDevice, shape: &[usize; 4], vec4: bool) -> Option<(Tensor, usize)> {
    DEST.with(|d| {
        let mut d = d.borrow_mut();
        let t = d.as_ref()?;
        let p = shape[2] * shape[3];
        let st = t.strides();
        let img = if shape[0] == 1 { shape[1] * p } else { st[0] as usize };
        let fits = t.dtype() == DType::F32
            && t.shape() == shape
            && matches!(t.storage(), Storage::Gpu(b) if b.device().index() == dev.index()
                && b.size() <= dev.properties().max_storage_buffer_binding_size)
            && st.len() == 4
            && st[1] == p as isize
            && st[2] == shape[3] as isize
            && st[3] == 1
            && st[0] >= (shape[1] * p) as isize
            && (!vec4 || (img.is_multiple_of(4) && t.layout().offset.is_multiple_of(4)))
            && u32::try_from(t.layout().offset + shape[0] * img).is_ok();
        if fits {
            d.take().map(|t| (t, img))
        } else {
            None
        }
    })
}

/// `MPSRT_CONV_GEMM`: `Some(true)` (`1`/`on`) forces the kernel for every conv it can run,
/// `Some(false)` (`0`/`off`) never takes it, unset leaves it to the planner.
fn route() -> Option<bool> {
    static R: OnceLock<Option<bool>> = OnceLock::new();
    *R.get_or_init(|| match std::env::var("MPSRT_CONV_GEMM").as_deref().map(str::trim) {
        Ok("1") | Ok("on") => Some(true),
        Ok("0") | Ok("off") => Some(false),
        _ => None,
    })
}

/// Smallest product (in 64×64 tiles) the legacy route takes (`MPSRT_CONV_GEMM_MIN_TILES`).
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
    (([64, 128].contains(&a) && [64, 128].contains(&b)) || (a, b) == (32, 128)).then_some((a, b))
}

/// The planner's view of `dev` and of the environment's knobs.
pub(crate) fn plan_limits(dev: &GpuDevice) -> PlanLimits {
    static SMS: OnceLock<usize> = OnceLock::new();
    let props = dev.properties();
    let sms = *SMS.get_or_init(|| env_knob("MPSRT_CONV_SMS", 132).max(1));
    PlanLimits {
        max_binding: props.max_storage_buffer_binding_size,
        max_wg_dim: props.max_compute_workgroups_per_dimension,
        gemm_route: route(),
        gemm_min_tiles: min_tiles(),
        tile_override: tile_override(),
        model: CostModel { sms, ..CostModel::default() },
    }
}

/// The conv through the implicit-GEMM kernel with the planner's `bm × bn` tile, whole K
/// (`kslice` 0: bias, residual and activation in the kernel's epilogue) or split into slices
/// of `kslice` (raw partials, then one [`conv_splitk_reduce_kernel`] pass with the epilogue).
/// The planner has checked that every operand fits one binding.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv(
    op: &str,
    dev: &Arc<GpuDevice>,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    g: &ConvGeom,
    (res, act): (Option<&Tensor>, Option<Activation>),
    (bm, bn, kslice): (u32, u32, u32),
    input: Option<&InputOp>,
) -> Result<Tensor> {
    let flat = |t: &Tensor| as_f32(&t.reshape(&[t.numel() as isize])?);
    let (gate, affine) = match input {
        Some(InputOp::Gate(g)) => (Some(as_f32(g)?), None),
        Some(InputOp::AffineRelu(s, t)) => (None, Some((flat(s)?, flat(t)?))),
        None => (None, None),
    };
    // A channel slice (`channel_slice`): its own image stride.
    let x_img = x.strides()[0] as usize;
    let in_img = if g.n > 1 && x_img != g.c * g.h * g.w { x_img } else { 0 };
    let p = g.oh * g.ow;
    let cols = g.n * p;
    let k = g.c * g.kh * g.kw;
    let total = g.oc * cols;
    let res = res.map(as_f32).transpose()?;
    let res_off = res.as_ref().map_or(0, |r| r.layout().offset);
    // The reduce pass reads the residual as vec4s.
    let split = kslice != 0 && res_off.is_multiple_of(4) && total.is_multiple_of(4);
    let u = |v: usize| v as u32;
    let (kind, p0, p1) = act.map_or((MatmulAct::None, 0.0, 0.0), |a| a.kernel());
    let shape = [g.n, g.oc, g.oh, g.ow];
    // A destination slice (`with_conv_destination`): the whole-K kernel stores into it with
    // its image stride; a split's reduce pass does (as vec4s, so only with 4-aligned strides).
    let dest = if res.is_some() {
        None
    } else if split {
        take_destination(dev, &shape, true).filter(|_| (g.oc * p).is_multiple_of(4))
    } else {
        take_destination(dev, &shape, false)
    };
    let vec_out = p.is_multiple_of(4)
        && res_off.is_multiple_of(4)
        && dest
            .as_ref()
            .is_none_or(|(t, img)| t.layout().offset.is_multiple_of(4) && img.is_multiple_of(4));
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
        vec_out,
        has_bias: b.is_some() && !split,
        has_res: res.is_some() && !split,
        act: if split { MatmulAct::None } else { kind },
        kslice: if split { kslice } else { 0 },
        out_img: match &dest {
            Some((_, img)) if !split => u(*img),
            _ => 0,
        },
        in_scale: gate.is_some(),
        in_affine: affine.is_some(),
        in_img: u(in_img),
    };
    // Rendered and compiled once per geometry and tile shape.
    static PIPELINES: SpecCache<ConvGemmSpec> = OnceLock::new();
    let pipeline = cached(&PIPELINES, dev, op, spec, ConvGemmSpec::render)?;
    let direct = dest.as_ref().filter(|_| !split);
    let out = match direct {
        Some(_) => None,
        None => Some(alloc_out(dev, op, total * spec.slices() as usize, 4)?),
    };
    let mut meta = conv_gemm_meta(
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
    if let Some((t, _)) = direct {
        meta[5] = u(t.layout().offset);
    }
    if let Some(gt) = &gate {
        meta[7] = u(gt.layout().offset);
    }
    if let Some((sc, sh)) = &affine {
        meta[8] = u(sc.layout().offset);
        meta[9] = u(sh.layout().offset);
    }
    let mut bindings = vec![Binding::from(&**buffer(op, x)?), Binding::from(&**buffer(op, w)?)];
    if spec.has_bias {
        if let Some(b) = b {
            bindings.push(Binding::from(&**buffer(op, b)?));
        }
    }
    if spec.has_res {
        if let Some(r) = &res {
            bindings.push(Binding::from(&**buffer(op, r)?));
        }
    }
    if let Some(gt) = &gate {
        bindings.push(Binding::from(&**buffer(op, gt)?));
    }
    if let Some((sc, sh)) = &affine {
        bindings.push(Binding::from(&**buffer(op, sc)?));
        bindings.push(Binding::from(&**buffer(op, sh)?));
    }
    match (&out, direct) {
        (Some(o), _) => bindings.push(Binding::from(o)),
        (None, Some((t, _))) => bindings.push(Binding::from(&**buffer(op, t)?)),
        (None, None) => unreachable!("a conv output is allocated unless it has a destination"),
    }
    dev.dispatch(op, &pipeline, &bindings, bytemuck::cast_slice(&meta), spec.grid(u(g.n)))?;
    let Some(out) = out else {
        return Ok(direct.map(|(t, _)| t.clone()).expect("destination"));
    };
    let out = if split {
        let bias = match b {
            Some(b) => Some((&**buffer(op, b)?, b.layout().offset)),
            None => None,
        };
        let res = match &res {
            Some(r) => Some((&**buffer(op, r)?, r.layout().offset)),
            None => None,
        };
        let dst = dest.as_ref().map(|(t, img)| Ok((&**buffer(op, t)?, t.layout().offset, *img)));
        let dst = dst.transpose()?;
        let ctx = [total, p, g.oc];
        let r = splitk_reduce(op, dev, &out, spec.slices(), ctx, bias, res, (kind, p0, p1), dst)?;
        match (r, &dest) {
            (None, Some((t, _))) => return Ok(t.clone()),
            (Some(r), _) => r,
            (None, None) => unreachable!("the reduce pass allocates unless it has a destination"),
        }
    } else {
        out
    };
    Ok(Tensor::from_parts(Storage::Gpu(Arc::new(out)), Layout::contiguous(&shape), DType::F32))
}

/// A bound operand and its offset in floats.
type Operand<'a> = Option<(&'a GpuBuffer, usize)>;

/// `act(Σ_z part[z] + bias + res)` over `slices` NCHW partials of `total` floats each, into a
/// fresh buffer, or into `dst` (buffer, offset, image stride in floats: a channel slice of a
/// larger output; then `None` is returned).
#[allow(clippy::too_many_arguments)]
fn splitk_reduce(
    op: &str,
    dev: &Arc<GpuDevice>,
    part: &GpuBuffer,
    slices: u32,
    [total, p, oc]: [usize; 3],
    bias: Operand<'_>,
    res: Operand<'_>,
    (kind, p0, p1): (MatmulAct, f32, f32),
    dst: Option<(&GpuBuffer, usize, usize)>,
) -> Result<Option<GpuBuffer>> {
    type Key = (usize, bool, bool, MatmulAct, bool);
    type Cache = parking_lot::Mutex<HashMap<Key, Arc<Pipeline>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let key = (dev.index(), bias.is_some(), res.is_some(), kind, dst.is_some());
    let cache = CACHE.get_or_init(Default::default);
    let cached = cache.lock().get(&key).cloned();
    let pipeline = match cached {
        Some(p) => p,
        None => {
            let src = conv_splitk_reduce_kernel(key.1, key.2, kind, key.4);
            let p = dev.pipeline(Kernel { source: &src, entry: "main" })?;
            cache.lock().insert(key, p.clone());
            p
        }
    };
    let out = match dst {
        Some(_) => None,
        None => Some(alloc_out(dev, op, total, 4)?),
    };
    let quads = total / 4;
    let wg =
        grid((quads as u64).div_ceil(256), dev.properties().max_compute_workgroups_per_dimension);
    let mut words = [0u32; 16];
    words[..8].copy_from_slice(&[
        quads as u32,
        p as u32,
        oc as u32,
        p0.to_bits(),
        wg[0] * 256,
        bias.as_ref().map_or(0, |b| b.1 as u32),
        res.as_ref().map_or(0, |r| (r.1 / 4) as u32),
        slices,
    ]);
    words[15] = p1.to_bits();
    if let Some((_, off, img)) = dst {
        words[8..11].copy_from_slice(&[(off / 4) as u32, (p * oc / 4) as u32, (img / 4) as u32]);
    }
    let mut bindings = vec![Binding::from(part)];
    if let Some((b, _)) = bias {
        bindings.push(Binding::from(b));
    }
    if let Some((r, _)) = res {
        bindings.push(Binding::from(r));
    }
    match (&out, dst) {
        (Some(o), _) => bindings.push(Binding::from(o)),
        (None, Some((b, _, _))) => bindings.push(Binding::from(b)),
        (None, None) => unreachable!("allocated above"),
    }
    dev.dispatch(op, &pipeline, &bindings, bytemuck::cast_slice(&words), wg)?;
    Ok(out)
}
