//! GPU launches: each file mirrors its `cpu/` twin and turns an op into WGSL dispatches
//! through `mpsrt-runtime`.

pub(crate) mod attention;
pub(crate) mod conv;
pub(crate) mod conv_coop;
pub(crate) mod conv_gemm;
pub(crate) mod conv_plan;
pub(crate) mod conv_se;
pub(crate) mod conv_split;
pub(crate) mod elementwise;
pub(crate) mod layernorm;
pub(crate) mod matmul;
pub(crate) mod matmul_coop;
pub(crate) mod matmul_plan;
pub(crate) mod matmul_strided;
pub(crate) mod pool;
pub(crate) mod reduce;
pub(crate) mod shape;
pub(crate) mod softmax_masked;
pub(crate) mod window;
pub(crate) mod winograd;

use mpsrt_core::Result;
use mpsrt_runtime::{GpuBuffer, GpuDevice};

/// A numeric launch knob read from the environment: `default` when unset or not a number.
/// Callers keep it in a `OnceLock` so the variable is read once per process.
pub(crate) fn env_knob(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

/// Split a workgroup count over x and y so no dimension exceeds the adapter's limit;
/// kernels rebuild the linear id as `gid.x + gid.y * num_workgroups.x * WG`.
pub(crate) fn grid(workgroups: u64, max_per_dim: u32) -> [u32; 3] {
    let max = max_per_dim.max(1) as u64;
    if workgroups <= max {
        return [workgroups as u32, 1, 1];
    }
    let y = workgroups.div_ceil(max);
    let x = workgroups.div_ceil(y);
    [x as u32, y as u32, 1]
}

/// A fresh output buffer for `numel` elements of `size` bytes.
pub(crate) fn alloc_out(dev: &GpuDevice, op: &str, numel: usize, size: usize) -> Result<GpuBuffer> {
    // Saturating: an unchecked huge count becomes a size the allocator refuses, not a wrap.
    dev.alloc(op, (numel as u64).saturating_mul(size as u64))
}
