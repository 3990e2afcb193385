//! GPU launches for convolutions (kernels in `mpsrt-kernels/src/conv.wgsl`): implicit GEMM for
//! dense and grouped convs, a direct kernel for depthwise convs (and grids too large for the
//! GEMM tiling), a gather kernel for transposed convs. f16 tensors are widened to f32 around
//! the f32 kernels (f32 accumulation either way).

use super::{alloc_out, grid};
use crate::conv::ConvGeom;
use crate::Tensor;
use mpsrt_core::{DType, Error, Layout, Result};
use mpsrt_runtime::{Binding, GpuBuffer, Kernel, Storage};
use std::sync::{Arc, OnceLock};

const SOURCE: &str = include_str!("../../../mpsrt-kernels/src/conv.wgsl");
const TILE: u64 = 64;
const BIG_TILE: u64 = 128;

/// `conv_gemm` with 128×128×8 block tiles and 8×8 register tiles, for problems with enough
/// tiles to fill the GPU (twice the arithmetic intensity per workgroup-memory load).
fn big_source() -> &'static str {
    static SRC: OnceLock<String> = OnceLock::new();
    SRC.get_or_init(|| {
        SOURCE
            .replace("const BM: u32 = 64u;", "const BM: u32 = 128u;")
            .replace("const BN: u32 = 64u;", "const BN: u32 = 128u;")
            .replace("const BK: u32 = 16u;", "const BK: u32 = 8u;")
            .replace("const TM: u32 = 4u;", "const TM: u32 = 8u;")
            .replace("const TN: u32 = 4u;", "const TN: u32 = 8u;")
    })
}

/// The GPU buffer behind `t`, or an internal error naming `op`.
pub(crate) fn buffer<'a>(op: &str, t: &'a Tensor) -> Result<&'a Arc<GpuBuffer>> {
    match t.storage() {
        Storage::Gpu(b) => Ok(b),
        Storage::Cpu(_) => Err(Error::device(op, "internal: CPU tensor reached the GPU backend")),
    }
}

/// Little-endian bytes of `words`, zero-padded to `vec4s` uniform rows.
pub(crate) fn meta_bytes(words: &[u32], vec4s: usize) -> Vec<u8> {
    let mut w = words.to_vec();
    w.resize(vec4s * 4, 0);
    bytemuck::cast_slice(&w).to_vec()
}

/// `t` as a contiguous f32 tensor (f16 widened).
pub(crate) fn as_f32(t: &Tensor) -> Result<Tensor> {
    t.astype(DType::F32)?.contiguous()
}

fn u(v: usize) -> u32 {
    v as u32
}

pub(crate) fn conv(
    op: &str,
    device: usize,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    g: &ConvGeom,
    transposed: bool,
) -> Result<Tensor> {
    let dev = mpsrt_runtime::gpu_device(device)?;
    let dtype = x.dtype();
    let (x, w) = (as_f32(x)?, as_f32(w)?);
    let b = b.map(as_f32).transpose()?;
    let shape = [g.n, g.oc, g.oh, g.ow];
    let total = g.n * g.oc * g.oh * g.ow;
    let out = alloc_out(&dev, op, total, 4)?;
    if total > 0 {
        let maxd = dev.properties().max_compute_workgroups_per_dimension;
        let (icg, ocg) = (g.c / g.groups, g.oc / g.groups);
        let m = (g.n * g.oh * g.ow) as u64;
        let big = m.div_ceil(BIG_TILE) * (ocg as u64).div_ceil(BIG_TILE) * g.groups as u64 >= 128
            && ocg >= 128;
        let tile = if big { BIG_TILE } else { TILE };
        let m_tiles = m.div_ceil(tile);
        let n_tiles = (ocg as u64).div_ceil(tile);
        let direct_only = transposed || (icg == 1 && g.groups > 1);
        let gemm = !direct_only
            && m_tiles <= maxd as u64
            && n_tiles <= maxd as u64
            && g.groups as u64 <= maxd as u64;
        let (entry, wg) = if transposed {
            ("conv_transpose_direct", grid((total as u64).div_ceil(256), maxd))
        } else if gemm {
            ("conv_gemm", [m_tiles as u32, n_tiles as u32, g.groups as u32])
        } else {
            ("conv_direct", grid((total as u64).div_ceil(256), maxd))
        };
        let source = if gemm && big { big_source() } else { SOURCE };
        let bias_buf = match &b {
            Some(b) => buffer(op, b)?.clone(),
            None => buffer(op, &w)?.clone(),
        };
        let words = [
            u(g.n),
            u(g.c),
            u(g.h),
            u(g.w),
            u(g.oc),
            u(g.oh),
            u(g.ow),
            u(g.kh),
            u(g.kw),
            u(g.sh),
            u(g.sw),
            u(g.pt),
            u(g.pl),
            u(g.dh),
            u(g.dw),
            u(g.groups),
            b.is_some() as u32,
            u(x.layout().offset),
            u(w.layout().offset),
            b.as_ref().map_or(0, |b| u(b.layout().offset)),
            u(total),
            wg[0] * 256,
        ];
        let pipeline = dev.pipeline(Kernel { source, entry })?;
        let bindings = [
            Binding::from(&**buffer(op, &x)?),
            Binding::from(&**buffer(op, &w)?),
            Binding::from(&*bias_buf),
            Binding::from(&out),
        ];
        dev.dispatch(op, &pipeline, &bindings, &meta_bytes(&words, 6), wg)?;
    }
    let y = Tensor::from_parts(Storage::Gpu(Arc::new(out)), Layout::contiguous(&shape), DType::F32);
    y.astype(dtype)
}
