//! The cooperative conv's pure planner (`conv_coop.rs`): the device facts it reads, how the
//! caller wants the route decided, and [`plan_coop_conv`] — adapter configurations, subgroup
//! size, features, workgroup-memory limit, geometry → a spec or the reason it declines —
//! tested with fake configuration lists on lavapipe, which has no cooperative matrices.

use super::{ConvShape, CoopConvSpec, BK, WM, WN};
use crate::matmul::MatmulAct;
use crate::matmul_coop::{CoopConfig, CoopDecline};
use mpsrt_core::DType;

/// The device facts [`plan_coop_conv`] reads (`DeviceProperties` in plain values, so the
/// choice is testable without a GPU).
#[derive(Clone, Debug)]
pub struct CoopConvDevice<'a> {
    pub configs: &'a [CoopConfig],
    /// Subgroup size range (min, max).
    pub subgroup: (u32, u32),
    pub shader_f16: bool,
    pub subgroups: bool,
    /// `max_compute_workgroup_storage_size`.
    pub shared_limit: u32,
    pub max_invocations: u32,
    pub max_wg_dim: u32,
}

/// How the caller wants the route decided (`MPSRT_COOP_CONV`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoopConvRoute {
    /// `0`: never.
    Off,
    /// `1`: every conv the kernel can run, however small.
    Force,
    /// Unset: convs with at least `min_blocks` 64×64 output blocks (smaller ones fill too
    /// little of the GPU without split-K, which this kernel does not do: the f32 planner's
    /// split-K route is faster there).
    Auto { min_blocks: u32 },
}

/// Pick the cooperative conv kernel for an `n`-image conv of `shape` with `groups` groups on a
/// device, or say why not (the caller then runs the f16 conv's fallback path). Needs a square
/// 8×8 or 16×16 configuration with f16 A/B and **f32** accumulation, a fixed subgroup size,
/// shader-f16 and subgroups. The block: 128 × 64 outputs of 4 × 2 subgroups with 2 × 2 16×16
/// tiles each (4 × 4 8×8 tiles), else — where the device's workgroup memory, invocations or
/// grid do not allow it — 64 × 64 of 2 × 2 subgroups, then 128 × 128 of 2 × 2 subgroups with
/// 4 × 4 tiles. Measured on the H200 (session 13): per shape, 64 × 64 of 4 subgroups beat
/// 128×128, 64×128 and 128×64 of 4 subgroups on every batch-32 ResNet-50 shape timed (call 2:
/// the stem 0.34 ms vs 0.50–0.71, 3×3 64-channel 0.24 vs 0.37–0.51, 3×3 stride-2 0.26 vs
/// 0.30–0.41, 1×1 64→256 0.18 vs 0.24–0.27); end to end (ResNet-50 b32 f16, call 3, fresh
/// processes alternated), 128 × 64 of 8 subgroups ran 8.78–8.81 ms against 9.14 for 64 × 64
/// of 4 and 17.1 for 64 × 64 with a K step of 64. The launcher sets the operand-dependent
/// fields (`w_vec`, `x_vec`, bias, residual, activation) on the result.
pub fn plan_coop_conv(
    dev: &CoopConvDevice<'_>,
    shape: &ConvShape,
    n: u32,
    groups: u32,
    route: CoopConvRoute,
) -> Result<CoopConvSpec, CoopDecline> {
    if route == CoopConvRoute::Off {
        return Err(CoopDecline::Unsupported("MPSRT_COOP_CONV=0"));
    }
    let usable = |c: &&CoopConfig| {
        c.m == c.n
            && c.n == c.k
            && matches!(c.m, 8 | 16)
            && c.ab == DType::F16
            && c.cr == DType::F32
    };
    let best =
        dev.configs.iter().filter(usable).max_by_key(|c| c.m).ok_or(CoopDecline::NoConfig)?;
    let (lo, hi) = dev.subgroup;
    if lo != hi || !lo.is_power_of_two() || !(4..=128).contains(&lo) {
        return Err(CoopDecline::SubgroupSize(lo, hi));
    }
    if !dev.shader_f16 {
        return Err(CoopDecline::Unsupported("the device lacks shader-f16"));
    }
    if !dev.subgroups {
        return Err(CoopDecline::Unsupported("the device lacks subgroups"));
    }
    if groups != 1 {
        return Err(CoopDecline::Unsupported(
            "grouped and depthwise convs are not on the matrix units",
        ));
    }
    let cols = u64::from(n) * u64::from(shape.p());
    if shape.k() == 0 || cols == 0 || shape.oc == 0 {
        return Err(CoopDecline::TooSmall);
    }
    if let CoopConvRoute::Auto { min_blocks } = route {
        let blocks = u64::from(shape.oc).div_ceil(64) * cols.div_ceil(64);
        if blocks < u64::from(min_blocks) {
            return Err(CoopDecline::TooSmall);
        }
    }
    let s = best.m;
    let base = CoopConvSpec {
        shape: *shape,
        size: s,
        subgroup: lo,
        wm: 4,
        wn: WN,
        tm: 32 / s,
        tn: 32 / s,
        w_vec: false,
        x_vec: false,
        has_bias: false,
        bias_f16: false,
        has_res: false,
        act: MatmulAct::None,
        bk: BK,
        slabs: 2,
        alias: false,
        clamp: false,
        prefetch: true,
        pairs: false,
        splitk: 1,
        mask: false,
        emulate: false,
    };
    let square = CoopConvSpec { wm: WM, ..base };
    let wide = CoopConvSpec { wm: WM, tm: 64 / s, tn: 64 / s, ..base };
    for spec in [base, square, wide] {
        let gx = cols.div_ceil(u64::from(spec.block_n()));
        let gy = u64::from(shape.oc).div_ceil(u64::from(spec.block_m()));
        let lim = u64::from(dev.max_wg_dim);
        if spec.shared_bytes() <= dev.shared_limit
            && spec.threads() <= dev.max_invocations
            && gx <= lim
            && gy <= lim
        {
            return Ok(spec);
        }
    }
    Err(CoopDecline::Unsupported("the conv's grid or workgroup memory exceeds the device's limits"))
}
