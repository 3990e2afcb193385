//! Launch of the cooperative-matrix implicit-GEMM conv (`mpsrt-kernels/src/conv_coop.rs`,
//! issue 23): an f16 conv (f16 input and weights) on an adapter with cooperative matrices runs
//! on the matrix units with f32 accumulation and its bias / residual / activation epilogue,
//! straight from the f16 NCHW input to an f16 NCHW output. Everything else — and any conv the
//! planner declines (`plan_coop_conv`: no f16→f32 configuration, varying subgroup size, grouped
//! or transposed convs, too few output blocks, operands past one binding, a pending input
//! operation) — keeps the f16 fallback: widen to f32, the f32 planner's route, narrow back.
//!
//! `MPSRT_COOP_CONV` (read per call): `0` never, `1` every conv the kernel can run, unset the
//! planner's choice (`MPSRT_COOP_CONV_MIN_BLOCKS`, default 32 blocks of 64×64: smaller convs
//! would leave most of the GPU idle without split-K). `MPSRT_CONV_PLAN_LOG=1` prints the choice;
//! `MPSRT_COOP_CONV_CHECKED=1` compiles the kernels with wgpu's bounds checks (default off);
//! `MPSRT_COOP_CONV_CLAMP=1` renders branch-free clamped loads; `MPSRT_COOP_CONV_PREFETCH=0`
//! loads the epilogue's residual and bias per element instead of up front (A/B);
//! `MPSRT_COOP_CONV_PAIRS=1` stores pairs of adjacent columns (even output maps);
//! `MPSRT_COOP_CONV_MASK=1` checks the gather's padding with per-column tap masks;
//! `MPSRT_COOP_CONV_OC64=0` runs convs of ≤ 64 output channels on the default 4 × 2 subgroups
//! instead of 2 × 2 (64 × 64 blocks); `MPSRT_COOP_CONV_TILE=TMxTN`
//! overrides the tiles per subgroup, `MPSRT_COOP_CONV_WARPS=WMxWN` the subgroups per workgroup
//! `MPSRT_COOP_CONV_BK=16|32|64` the K step, `MPSRT_COOP_CONV_SLABS=1|2` the slab stages and
//! `MPSRT_COOP_CONV_ALIAS=0|1` whether the epilogue's scratch lives in the slab memory (for
//! timing, read per call; ignored where the device's workgroup memory is too small);
//! `MPSRT_COOP_CONV_EMULATE=1` (testing) runs the kernel with its matrix products in f32
//! registers on any f16-capable device, so lavapipe checks its gather and epilogue.
//! `MPSRT_COOP_CONV_DIRECT` routes 1×1 stride-1 convs whose map, channels and output channels
//! are multiples of 16 to the direct kernel (`conv_coop_direct.rs`: fragments straight from
//! global memory; `MPSRT_COOP_DIRECT_TILE`, `_SGS`, `_KU` time its shape);
//! `MPSRT_COOP_CONV_SUBSAMPLE` runs strided 1×1 convs on a subsampled copy of the input at
//! stride 1; `MPSRT_COOP_CONV_MASK64` gives windows of 33–64 taps two mask words.

use super::conv::{buffer, Epi};
use super::matmul::{cached, cached_unchecked, SpecCache};
use super::{alloc_out, env_knob};
use crate::conv::ConvGeom;
use crate::Tensor;
use mpsrt_core::{DType, Error, Layout, Result};
use mpsrt_kernels::conv_coop::{coop_conv_splitk_reduce, coop_splitk_meta, SPLITK_REDUCE_WG};
use mpsrt_kernels::{
    conv_coop::{
        auto_splitk, tuned_structure, tuned_structure_of, ConvClass, ConvStructure, CoopDirectSpec,
    },
    conv_gemm_meta, plan_coop_conv, ConvShape, CoopConfig, CoopConvDevice, CoopConvRoute,
    CoopConvSpec, CoopDecline, MatmulAct,
};
use mpsrt_runtime::{Binding, DeviceProperties, GpuDevice, Kernel, Pipeline, Storage};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// `MPSRT_COOP_CONV` and `MPSRT_COOP_CONV_MIN_BLOCKS`, read per call so one process can
/// compare both routes.
fn route() -> CoopConvRoute {
    match std::env::var("MPSRT_COOP_CONV").as_deref().map(str::trim) {
        Ok("0") | Ok("off") => CoopConvRoute::Off,
        Ok("1") | Ok("on") => CoopConvRoute::Force,
        _ => CoopConvRoute::Auto { min_blocks: env_knob("MPSRT_COOP_CONV_MIN_BLOCKS", 32) as u32 },
    }
}

/// The cooperative conv's plan for an `n`-image conv of geometry `g` on a device with `props`
/// (the adapter's facts mapped for the pure planner), or why not.
pub fn plan_f16_conv(
    props: &DeviceProperties,
    shape: &ConvShape,
    n: u32,
    groups: u32,
    route: CoopConvRoute,
) -> std::result::Result<CoopConvSpec, CoopDecline> {
    let configs: Vec<CoopConfig> = props
        .coop_matrix
        .iter()
        .map(|c| CoopConfig { m: c.m, n: c.n, k: c.k, ab: c.ab, cr: c.cr })
        .collect();
    let dev = CoopConvDevice {
        configs: &configs,
        subgroup: (props.subgroup_min_size, props.subgroup_max_size),
        shader_f16: props.shader_f16,
        subgroups: props.subgroups,
        shared_limit: props.max_compute_workgroup_storage_size,
        max_invocations: props.max_compute_invocations_per_workgroup,
        max_wg_dim: props.max_compute_workgroups_per_dimension,
    };
    plan_coop_conv(&dev, shape, n, groups, route)
}

/// `MPSRT_COOP_CONV_TILE=TMxTN` (cooperative tiles per subgroup) or `MPSRT_COOP_CONV_WARPS=
/// WMxWN` (subgroups per workgroup; 1, 2 or 4 each; the block is `WM·TM·S × WN·TN·S`), for
/// timing other shapes of the kernel; read per call.
fn pair_knob(name: &str) -> Option<(u32, u32)> {
    let v = std::env::var(name).ok()?;
    let (a, b) = v.trim().split_once('x')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Whether the timing knobs apply to a conv of `class` (`MPSRT_COOP_CONV_KNOB_CLASSES`, a
/// list of `wide`, `spatial64`, `spatial`, `pointshort`, `pointlong`, `pointstrided` separated
/// by `,` or `+`; unset: every class).
fn knobs_apply(class: ConvClass) -> bool {
    let Ok(list) = std::env::var("MPSRT_COOP_CONV_KNOB_CLASSES") else { return true };
    let name = format!("{class:?}").to_ascii_lowercase();
    list.split([',', '+']).any(|c| c.trim().eq_ignore_ascii_case(&name))
}

static LAUNCHES: AtomicUsize = AtomicUsize::new(0);

static DIRECT_LAUNCHES: AtomicUsize = AtomicUsize::new(0);

/// Convs run on the cooperative kernel so far in this process (tests check the route taken).
pub fn conv_coop_launches() -> usize {
    LAUNCHES.load(Ordering::Relaxed)
}

/// Of those, the convs run on the direct pointwise kernel (`conv_coop_direct.rs`).
pub fn conv_coop_direct_launches() -> usize {
    DIRECT_LAUNCHES.load(Ordering::Relaxed)
}

fn log(g: &ConvGeom, what: &str) {
    static ON: OnceLock<bool> = OnceLock::new();
    if *ON.get_or_init(|| std::env::var("MPSRT_CONV_PLAN_LOG").is_ok_and(|v| v == "1")) {
        eprintln!(
            "conv plan f16: n{} c{} {}x{} -> oc{} {}x{} k{}x{} s{}x{}: {what}",
            g.n, g.c, g.h, g.w, g.oc, g.oh, g.ow, g.kh, g.kw, g.sh, g.sw
        );
    }
}

/// `MPSRT_COOP_CONV_DUMP=<dir>`: each kernel's WGSL to `<dir>/<geometry and tile>.wgsl`, once
/// per spec (the direct kernel's as `direct_*.wgsl`) (for the NVIDIA compiler's statistics: `COOP_STATS=wgsl:<file>` in
/// `bench_coop_sweep`).
fn dump(spec: &CoopConvSpec) {
    static DONE: OnceLock<parking_lot::Mutex<std::collections::HashSet<CoopConvSpec>>> =
        OnceLock::new();
    let Ok(dir) = std::env::var("MPSRT_COOP_CONV_DUMP") else { return };
    if !DONE.get_or_init(Default::default).lock().insert(*spec) {
        return;
    }
    let (sh, e) = (&spec.shape, u8::from(spec.has_res));
    let name = format!(
        "{dir}/c{}_h{}_oc{}_k{}s{}_b{}x{}_w{}_k{}_s{}_a{}_r{e}.wgsl",
        sh.c,
        sh.h,
        sh.oc,
        sh.kh,
        sh.sh,
        spec.block_m(),
        spec.block_n(),
        spec.threads() / spec.subgroup,
        spec.bk,
        spec.slabs,
        u8::from(spec.alias)
    );
    if let Ok(src) = spec.render() {
        let _ = std::fs::write(name, src);
    }
}

/// K slices for a conv of `spec` (`MPSRT_COOP_CONV_SPLITK`: `0` none, `N` N slices, `auto` —
/// or unset where the tuned structure asks for it (`auto`) — [`auto_splitk`]: grids under
/// `MPSRT_COOP_CONV_SPLITK_BELOW` (132) workgroups split until they reach
/// `MPSRT_COOP_CONV_SPLITK_WGS` (396)), each at least 4 K steps, at most 8; only where the
/// output's size and the residual's offset are multiples of 4 (the sum's `vec4` accesses) and
/// the partials fit one binding.
fn splitk_slices(
    spec: &CoopConvSpec,
    n: u32,
    total: usize,
    res_off: Option<usize>,
    lim: u64,
    auto: bool,
) -> u32 {
    let want = match std::env::var("MPSRT_COOP_CONV_SPLITK").as_deref().map(str::trim) {
        Ok("auto") => None,
        Ok(v) => match v.parse::<u32>() {
            Ok(k) => Some(k),
            Err(_) => return 1,
        },
        Err(_) if auto => None,
        Err(_) => return 1,
    };
    if !total.is_multiple_of(4) || res_off.is_some_and(|o| !o.is_multiple_of(4)) {
        return 1;
    }
    let [gx, gy, _] = spec.grid(n);
    let blocks = gx.saturating_mul(gy).max(1);
    let slices = want.unwrap_or_else(|| {
        let below = env_knob("MPSRT_COOP_CONV_SPLITK_BELOW", 132) as u32;
        let target = env_knob("MPSRT_COOP_CONV_SPLITK_WGS", 396) as u32;
        auto_splitk(blocks, spec.shape.k(), spec.bk, below, target)
    });
    let slices = slices.min(spec.shape.k() / (spec.bk * 4)).min(8);
    if slices < 2 || u64::from(slices) * (total as u64) * 4 > lim {
        return 1;
    }
    slices
}

/// The kernel's pipeline, compiled once per spec and device. Without wgpu's runtime checks
/// (naga's index clamping on every access, which the cooperative GEMM measured as a large
/// cost) unless `MPSRT_COOP_CONV_CHECKED=1`.
fn pipeline(dev: &GpuDevice, op: &str, spec: CoopConvSpec) -> Result<Arc<Pipeline>> {
    static CHECKED: SpecCache<CoopConvSpec> = OnceLock::new();
    static UNCHECKED: SpecCache<CoopConvSpec> = OnceLock::new();
    if env_knob("MPSRT_COOP_CONV_CHECKED", 0) != 0 {
        return cached(&CHECKED, dev, op, spec, CoopConvSpec::render);
    }
    // SAFETY: every access of the kernel is in bounds by construction (`conv_coop.rs`): input
    // loads only for columns < N·P with the window inside the image (padding checks; pointwise
    // windows are inside by geometry) and K rows < K; weight loads for rows < OC and K < K
    // (vector loads: K % 8 == 0, so all 8 halves); bias, residual and output accesses for
    // channels < OC and columns < N·P (split-K partials: also slice < S, the buffer holding S
    // outputs); workgroup indices stay inside their fixed-size arrays
    // (the subgroup size is fixed: the planner requires min == max). The launcher binds
    // contiguous operands of exactly the conv's shapes.
    unsafe { cached_unchecked(&UNCHECKED, dev, op, spec, CoopConvSpec::render) }
}

/// The conv on the matrix units, or `None` when the planner declines it (the caller runs the
/// fallback). `x` and `w` are f16; the result is f16.
#[allow(clippy::too_many_arguments)]
pub(crate) fn try_conv(
    op: &str,
    dev: &Arc<GpuDevice>,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    g: &ConvGeom,
    transposed: bool,
    epi: Epi<'_>,
) -> Result<Option<Tensor>> {
    if x.dtype() != DType::F16 || w.dtype() != DType::F16 || transposed {
        return Ok(None);
    }
    let total = g.n * g.oc * g.oh * g.ow;
    if total == 0 || super::conv_gemm::input_scale_pending() {
        return Ok(None);
    }
    // A strided 1×1 conv reads every `sh`-th row and `sw`-th column: copy those pixels to a
    // contiguous map first and run the conv at stride 1, where the B tile is read 4 columns
    // per vector load instead of as scattered halves — where the subsampled map allows that
    // (`P % 4 == 0`; `MPSRT_COOP_CONV_SUBSAMPLE=0`: the strided gather). H100, this session's
    // call 1: layer 3's downsample (512 → 1024, 28² → 14²) 0.096 → 0.072 ms with the copy.
    if g.kh == 1
        && g.kw == 1
        && g.pt == 0
        && g.pl == 0
        && (g.sh > 1 || g.sw > 1)
        && (g.oh * g.ow).is_multiple_of(4)
        && env_knob("MPSRT_COOP_CONV_SUBSAMPLE", 1) != 0
    {
        let end = |o: usize, s: usize| Some(((o - 1) * s + 1) as isize);
        let xs = x
            .slice(2, Some(0), end(g.oh, g.sh), g.sh as isize)?
            .slice(3, Some(0), end(g.ow, g.sw), g.sw as isize)?
            .contiguous()?;
        let g1 = ConvGeom { h: g.oh, w: g.ow, sh: 1, sw: 1, ..*g };
        return try_conv(op, dev, &xs, w, b, &g1, transposed, epi);
    }
    let u = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    let shape = ConvShape {
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
    };
    let props = dev.properties();
    let emulate = env_knob("MPSRT_COOP_CONV_EMULATE", 0) != 0;
    let plan = if emulate {
        // Testing: a 16×16 f16→f32 configuration in logical subgroups of 32, products in f32.
        let fake = [CoopConfig { m: 16, n: 16, k: 16, ab: DType::F16, cr: DType::F32 }];
        let d = CoopConvDevice {
            configs: &fake,
            subgroup: (32, 32),
            shader_f16: props.shader_f16,
            subgroups: true,
            shared_limit: props.max_compute_workgroup_storage_size,
            max_invocations: props.max_compute_invocations_per_workgroup,
            max_wg_dim: props.max_compute_workgroups_per_dimension,
        };
        plan_coop_conv(&d, &shape, u(g.n), u(g.groups), route())
    } else {
        plan_f16_conv(props, &shape, u(g.n), u(g.groups), route())
    };
    let mut spec = match plan {
        Ok(s) => s,
        Err(why) => {
            log(g, &format!("fallback ({why})"));
            return Ok(None);
        }
    };
    let x = x.contiguous()?;
    let w = w.contiguous()?;
    let res = match epi.0 {
        Some(r) => Some(r.astype(DType::F16)?.contiguous()?),
        None => None,
    };
    let b = match b {
        Some(b) if matches!(b.dtype(), DType::F16 | DType::F32) => Some(b.contiguous()?),
        Some(b) => Some(b.astype(DType::F32)?.contiguous()?),
        None => None,
    };
    // Every operand in one binding, every index in u32.
    let lim = props.max_storage_buffer_binding_size;
    let mut fits = (total as u64) * 2 <= lim && x.numel() < (1 << 31);
    for t in [Some(&x), Some(&w), b.as_ref(), res.as_ref()].into_iter().flatten() {
        fits &= buffer(op, t)?.size() <= lim;
    }
    if !fits {
        log(g, "fallback (an operand exceeds one binding)");
        return Ok(None);
    }
    let (xo, wo) = (x.layout().offset, w.layout().offset);
    let k = g.c * g.kh * g.kw;
    // 8-half vectors (16-byte loads with aliased slabs): K and the offset multiples of 8.
    spec.w_vec = k.is_multiple_of(8) && wo.is_multiple_of(8);
    spec.x_vec = shape.pointwise()
        && g.sh == 1
        && g.sw == 1
        && (g.oh * g.ow).is_multiple_of(4)
        && xo.is_multiple_of(4);
    spec.has_bias = b.is_some();
    spec.bias_f16 = b.as_ref().is_some_and(|b| b.dtype() == DType::F16);
    spec.has_res = res.is_some();
    let (kind, p0, p1) = epi.1.map_or((MatmulAct::None, 0.0, 0.0), |a| a.kernel());
    spec.act = kind;
    spec.emulate = emulate;
    if let Some(out) = try_direct(op, dev, &spec, &x, &w, b.as_ref(), res.as_ref(), g, (p0, p1))? {
        return Ok(Some(out));
    }
    spec.clamp = env_knob("MPSRT_COOP_CONV_CLAMP", 0) != 0;
    // Only where a residual is read: with bias alone the up-front loads cost the long-K 3×3
    // convs 10–35 µs each (H100, call 2: registers held across the epilogue), and the bias
    // reads hit the cache anyway.
    spec.prefetch = res.is_some() && env_knob("MPSRT_COOP_CONV_PREFETCH", 1) != 0;
    // The structure measured fastest for this kind of conv (`conv_coop_tune.rs`), where the
    // device allows it; `MPSRT_COOP_CONV_TUNED=0`: the planner's block (64 × 64 for ≤ 64
    // channels, below), two slabs of K 32, as before.
    let dev_ok = |t: &CoopConvSpec| {
        let [gx, gy, _] = t.grid(u(g.n));
        t.shared_bytes() <= props.max_compute_workgroup_storage_size
            && t.threads() <= props.max_compute_invocations_per_workgroup
            && gx.max(gy) <= props.max_compute_workgroups_per_dimension
            && t.is_valid()
    };
    // `MPSRT_COOP_CONV_TUNED=15`: the table as session 15 left it (A/B).
    let tuned = match env_knob("MPSRT_COOP_CONV_TUNED", 1) {
        0 => None,
        15 => tuned_structure_of(&shape, spec.size, 15),
        _ => tuned_structure(&shape, spec.size),
    };
    let mut want_split = false;
    if let Some(t) = tuned {
        let cand = spec.with_structure(&ConvStructure { pairs: false, mask: false, ..t });
        if dev_ok(&cand) {
            spec = cand;
            want_split = t.split;
        }
    }
    // Tap masks where the window allows; paired column stores where the output map is even
    // (no pair straddles two images) and the residual offset too (`vec2<f16>` reads).
    let (mask0, pairs0) = tuned.map_or((0, 0), |t| (usize::from(t.mask), usize::from(t.pairs)));
    // Windows of 33-64 taps (the 7×7 stem) take two mask words: `MPSRT_COOP_CONV_MASK64=1`.
    let taps = if env_knob("MPSRT_COOP_CONV_MASK64", 0) != 0 { 64 } else { 32 };
    spec.mask = env_knob("MPSRT_COOP_CONV_MASK", mask0) != 0
        && !shape.pointwise()
        && g.kh * g.kw <= taps
        && !spec.x_vec;
    spec.pairs = env_knob("MPSRT_COOP_CONV_PAIRS", pairs0) != 0
        && (g.oh * g.ow).is_multiple_of(2)
        && res.as_ref().is_none_or(|r| r.layout().offset.is_multiple_of(2));
    // The timing knobs below apply to every conv, or only to the classes listed in
    // `MPSRT_COOP_CONV_KNOB_CLASSES` (e.g. `spatial,spatial64`: fewer kernels to compile).
    // (Loads two K steps ahead in a second register set measured slower and were removed:
    // H100, session 16 call 1, layer 3's six 3×3 convs 0.548 -> 0.604 ms.)
    let here = knobs_apply(ConvClass::of(&shape));
    let knob = |name: &str, default: usize| if here { env_knob(name, default) } else { default };
    let pair = |name: &str| if here { pair_knob(name) } else { None };
    let bk = match knob("MPSRT_COOP_CONV_BK", spec.bk as usize) {
        16 => 16,
        64 => 64,
        _ => 32,
    };
    let slabs = if knob("MPSRT_COOP_CONV_SLABS", spec.slabs as usize) == 1 { 1 } else { 2 };
    // NVIDIA's compiler (driver 580, H100) refuses f16 matrix loads from an f32-typed
    // workgroup array (session 15 call 2: NVVM fails on a 20-line probe, scalar or vec2
    // elements), so the aliased scratch stays a tested form for the emulated kernel only.
    let alias = emulate && env_knob("MPSRT_COOP_CONV_ALIAS", usize::from(spec.alias)) != 0;
    let (tm, tn) = pair("MPSRT_COOP_CONV_TILE").unwrap_or((spec.tm, spec.tn));
    // Convs of at most 64 output channels (the stem and layer 1 of ResNet-50) on 2 × 2
    // subgroups instead of 4 × 2, whose upper half of 128 block rows would hold no channel
    // (H100, call 2, b32 f16: stem 0.426 -> 0.276 ms, 3×3 64-channel 0.266 -> 0.209, p50
    // 7.38–7.41 -> 6.93–7.01 ms; `MPSRT_COOP_CONV_OC64=0` keeps 4 × 2).
    let narrow =
        tuned.is_none() && spec.wm == 4 && g.oc <= 64 && env_knob("MPSRT_COOP_CONV_OC64", 1) != 0;
    let wm_default = if narrow { 2 } else { spec.wm };
    let (wm, wn) = pair("MPSRT_COOP_CONV_WARPS").unwrap_or((wm_default, spec.wn));
    if (tm, tn, bk, wm, wn, slabs, alias)
        != (spec.tm, spec.tn, spec.bk, spec.wm, spec.wn, spec.slabs, spec.alias)
    {
        let t = CoopConvSpec { tm, tn, bk, wm, wn, slabs, alias, ..spec };
        if dev_ok(&t) {
            spec = t;
        }
    }
    // Split-K: the conv writes f32 partials, a second pass sums them with the epilogue.
    let res_off = res.as_ref().map(|r| r.layout().offset);
    let slices = splitk_slices(&spec, u(g.n), total, res_off, lim, want_split);
    let epi_spec = spec;
    if slices > 1 {
        spec = CoopConvSpec {
            splitk: slices,
            has_bias: false,
            has_res: false,
            pairs: false,
            prefetch: false,
            act: MatmulAct::None,
            ..spec
        };
    }
    let (s, bm, bn) = (spec.size, spec.block_m(), spec.block_n());
    let (bk, cl, nt) = (spec.bk, u8::from(spec.clamp), spec.threads());
    let (sl, al, sb) = (spec.slabs, u8::from(spec.alias), spec.shared_bytes());
    let pr = u8::from(spec.pairs);
    log(
        g,
        &format!("coop {s}x{s} tile {bm}x{bn} threads {nt} k{bk} slabs {sl} alias {al} pairs {pr} split {slices} shared {sb} B clamp {cl}"),
    );
    dump(&spec);
    let pipeline = pipeline(dev, op, spec)?;
    let out = alloc_out(dev, op, total, 2)?;
    if slices > 1 {
        let part = alloc_out(dev, op, total * slices as usize, 4)?;
        let bindings =
            [Binding::from(&**buffer(op, &x)?), Binding::from(&**buffer(op, &w)?), (&part).into()];
        let meta = conv_gemm_meta(u(g.n * g.oh * g.ow), [u(xo), u(wo), 0, 0], 0.0, 0.0);
        dev.dispatch(op, &pipeline, &bindings, bytemuck::cast_slice(&meta), spec.grid(u(g.n)))?;
        static REDUCE: SpecCache<(bool, bool, bool, MatmulAct)> = OnceLock::new();
        let key = (epi_spec.has_bias, epi_spec.bias_f16, epi_spec.has_res, kind);
        let rp =
            cached(&REDUCE, dev, op, key, |k| Ok(coop_conv_splitk_reduce(k.0, k.1, k.2, k.3)))?;
        let total4 = total / 4;
        let wg = SPLITK_REDUCE_WG as usize;
        let grid =
            super::grid(total4.div_ceil(wg) as u64, props.max_compute_workgroups_per_dimension);
        let meta = coop_splitk_meta(
            u(total4),
            u(g.oh * g.ow),
            u(g.oc),
            grid[0] * SPLITK_REDUCE_WG,
            b.as_ref().map_or(0, |b| u(b.layout().offset)),
            u(res_off.unwrap_or(0) / 4),
            slices,
            p0,
            p1,
        );
        let mut bindings = vec![Binding::from(&part)];
        if let Some(b) = &b {
            bindings.push(Binding::from(&**buffer(op, b)?));
        }
        if let Some(r) = &res {
            bindings.push(Binding::from(&**buffer(op, r)?));
        }
        bindings.push(Binding::from(&out));
        dev.dispatch(op, &rp, &bindings, bytemuck::cast_slice(&meta), grid)?;
        LAUNCHES.fetch_add(1, Ordering::Relaxed);
        let shape = [g.n, g.oc, g.oh, g.ow];
        return Ok(Some(Tensor::from_parts(
            Storage::Gpu(Arc::new(out)),
            Layout::contiguous(&shape),
            DType::F16,
        )));
    }
    let meta = conv_gemm_meta(
        u(g.n * g.oh * g.ow),
        [
            u(xo),
            u(wo),
            b.as_ref().map_or(0, |b| u(b.layout().offset)),
            res.as_ref().map_or(0, |r| u(r.layout().offset)),
        ],
        p0,
        p1,
    );
    let mut bindings = vec![Binding::from(&**buffer(op, &x)?), Binding::from(&**buffer(op, &w)?)];
    if let Some(b) = &b {
        bindings.push(Binding::from(&**buffer(op, b)?));
    }
    if let Some(r) = &res {
        bindings.push(Binding::from(&**buffer(op, r)?));
    }
    bindings.push(Binding::from(&out));
    dev.dispatch(op, &pipeline, &bindings, bytemuck::cast_slice(&meta), spec.grid(u(g.n)))?;
    LAUNCHES.fetch_add(1, Ordering::Relaxed);
    let shape = [g.n, g.oc, g.oh, g.ow];
    Ok(Some(Tensor::from_parts(
        Storage::Gpu(Arc::new(out)),
        Layout::contiguous(&shape),
        DType::F16,
    )))
}

/// The direct pointwise kernel (`conv_coop_direct.rs`: fragments loaded straight from global
/// memory, no slabs) for a 1×1 stride-1 conv whose map, channels and output channels are
/// multiples of 16, with 16-byte aligned operands; `None` where it does not apply or
/// `MPSRT_COOP_CONV_DIRECT=0`. `MPSRT_COOP_DIRECT_TILE=TMxTN` (tiles per subgroup),
/// `MPSRT_COOP_DIRECT_SGS` (subgroups per workgroup), `MPSRT_COOP_DIRECT_KU` (K steps loaded
/// before their products) are timing knobs, read per call.
#[allow(clippy::too_many_arguments)]
fn try_direct(
    op: &str,
    dev: &Arc<GpuDevice>,
    spec: &CoopConvSpec,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    res: Option<&Tensor>,
    g: &ConvGeom,
    (p0, p1): (f32, f32),
) -> Result<Option<Tensor>> {
    let shape = spec.shape;
    if env_knob("MPSRT_COOP_CONV_DIRECT", 0) == 0
        || !CoopDirectSpec::fits(&shape)
        || spec.size != 16
        || !x.layout().offset.is_multiple_of(8)
        || !w.layout().offset.is_multiple_of(8)
        || res.is_some_and(|r| !r.layout().offset.is_multiple_of(2))
    {
        return Ok(None);
    }
    let (tm, tn) = pair_knob("MPSRT_COOP_DIRECT_TILE").unwrap_or((2, 2));
    let d = CoopDirectSpec {
        shape,
        subgroup: spec.subgroup,
        sgs: env_knob("MPSRT_COOP_DIRECT_SGS", 1) as u32,
        tm,
        tn,
        ku: CoopDirectSpec::k_unroll(&shape, env_knob("MPSRT_COOP_DIRECT_KU", 2) as u32),
        has_bias: b.is_some(),
        bias_f16: b.is_some_and(|b| b.dtype() == DType::F16),
        has_res: res.is_some(),
        act: spec.act,
        emulate: spec.emulate,
    };
    let props = dev.properties();
    let n = g.n as u32;
    let [gx, gy, _] = d.grid(n);
    if !d.is_valid()
        || d.shared_bytes() > props.max_compute_workgroup_storage_size
        || d.threads() > props.max_compute_invocations_per_workgroup
        || gx.max(gy) > props.max_compute_workgroups_per_dimension
    {
        return Ok(None);
    }
    let (bm, bn) = (d.block_m(), d.block_n());
    log(g, &format!("coop direct tile {bm}x{bn} sgs {} ku {}", d.sgs, d.ku));
    static DIRECT: SpecCache<CoopDirectSpec> = OnceLock::new();
    let cache = DIRECT.get_or_init(Default::default);
    let key = (dev.index(), d);
    let cached_p = cache.lock().get(&key).cloned();
    let pipeline = match cached_p {
        Some(p) => p,
        None => {
            let src = d.render().map_err(|e| Error::dtype(op, e))?;
            if let Ok(dir) = std::env::var("MPSRT_COOP_CONV_DUMP") {
                let sh = &d.shape;
                let name = format!(
                    "{dir}/direct_c{}_h{}_oc{}_k{}s{}_b{}x{}_s{}_u{}_r{}.wgsl",
                    sh.c,
                    sh.h,
                    sh.oc,
                    sh.kh,
                    sh.sh,
                    d.block_m(),
                    d.block_n(),
                    d.sgs,
                    d.ku,
                    u8::from(d.has_res)
                );
                let _ = std::fs::write(name, &src);
            }
            // SAFETY: in bounds by construction (`conv_coop_direct.rs`): fragment loads read
            // rows < OC of the `[OC, C]` weights and, for column tiles < N·P (others read
            // tile 0), 16 columns of one image (P % 16 == 0) over C rows; epilogue accesses
            // only for channels < OC and columns < N·P; the scratch index stays inside the
            // subgroup's 256 floats (fixed subgroup size). Operands are contiguous and of
            // exactly the conv's shapes.
            let p = unsafe { dev.pipeline_unchecked(Kernel { source: &src, entry: "main" })? };
            cache.lock().insert(key, p.clone());
            p
        }
    };
    let total = g.n * g.oc * g.oh * g.ow;
    let out = alloc_out(dev, op, total, 2)?;
    let u = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    let meta = conv_gemm_meta(
        u(g.n * g.oh * g.ow),
        [
            u(x.layout().offset),
            u(w.layout().offset),
            b.map_or(0, |b| u(b.layout().offset)),
            res.map_or(0, |r| u(r.layout().offset)),
        ],
        p0,
        p1,
    );
    let mut bindings = vec![Binding::from(&**buffer(op, x)?), Binding::from(&**buffer(op, w)?)];
    if let Some(b) = b {
        bindings.push(Binding::from(&**buffer(op, b)?));
    }
    if let Some(r) = res {
        bindings.push(Binding::from(&**buffer(op, r)?));
    }
    bindings.push(Binding::from(&out));
    dev.dispatch(op, &pipeline, &bindings, bytemuck::cast_slice(&meta), [gx, gy, 1])?;
    LAUNCHES.fetch_add(1, Ordering::Relaxed);
    DIRECT_LAUNCHES.fetch_add(1, Ordering::Relaxed);
    let shape = [g.n, g.oc, g.oh, g.ow];
    Ok(Some(Tensor::from_parts(
        Storage::Gpu(Arc::new(out)),
        Layout::contiguous(&shape),
        DType::F16,
    )))
}
