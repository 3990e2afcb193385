//! The tiled GEMM storing its product at given strides (`MatmulSpec::render_strided_out`):
//! attention's `p·v` written `[B, S, H, D]` (`mpsrt_tensor::matmul_seq_major`), so the heads'
//! transpose + merge after it is a view instead of a copy.

use super::matmul::{oversize, solve_to, Wins};
use super::matmul_plan::tiled_choice;
use super::matmul_plan::{splitk_target, tile128_min};
use crate::matmul::Problem;
use crate::Tensor;
use mpsrt_core::{DType, Layout, Result};

/// `p` (f32, no C, residual or activation) stored at `out`'s strides (batch dims then M; N is
/// unit-stride; `out` covers exactly `batch·M·N` elements) by one unsplit tiled-GEMM dispatch
/// (`MatmulSpec::render_strided_out`), or `None` where the plan would take another path
/// (split-K, stream-K, GEMV, pieces): the caller then stores the plain product itself.
pub(crate) fn matmul_strided(
    op: &str,
    device: usize,
    p: &Problem<'_>,
    out: &Layout,
) -> Result<Option<Tensor>> {
    let [m, n, k] = p.mnk;
    let z: usize = p.batch.iter().product();
    let plain = p.a_t.dtype() == DType::F32
        && p.b_t.dtype() == DType::F32
        && p.c.is_none()
        && p.res.is_none()
        && p.act.is_none()
        && m > 1
        && n > 1
        && z * m * n > 0
        && out.shape.len() == p.batch.len() + 2
        && out.strides.last() == Some(&1)
        && out.strides.iter().all(|&s| s > 0)
        && out.offset == 0
        && out.shape[..p.batch.len()] == p.batch[..]
        && out.shape[p.batch.len()..] == [m, n]
        && out.shape.iter().zip(&out.strides).map(|(&d, &s)| (d - 1) * s as usize).sum::<usize>()
            < z * m * n;
    if !plain || oversize(op, device, p)? {
        return Ok(None);
    }
    let plan = tiled_choice([m, n, k], z, true, tile128_min(), splitk_target());
    if plan.slices > 1 || plan.tune.sk {
        return Ok(None);
    }
    solve_to(op, device, p, &Wins::default(), Some(out)).map(Some)
}
