//! CPU reference for softmax / log_softmax: per row, max and sum of exp(x - max) in f64.

use super::reduce::{lse_stats, rows, tensor_f64};
use crate::Tensor;
use mpsrt_core::{Layout, Result};

pub(crate) fn softmax(x: &Tensor, axis: usize, log: bool) -> Result<Tensor> {
    let (data, pl, r) = rows(x, &[axis])?;
    let shape = x.shape().to_vec();
    // The contiguous output walked in the same permuted order as the input rows.
    let c = Layout::contiguous(&shape);
    let mut perm: Vec<usize> = (0..shape.len()).filter(|&d| d != axis).collect();
    perm.push(axis);
    let cl = Layout {
        shape: perm.iter().map(|&d| c.shape[d]).collect(),
        strides: perm.iter().map(|&d| c.strides[d]).collect(),
        offset: 0,
    };
    // Offsets, outputs and their positions: three words per element of host scratch.
    mpsrt_runtime::check_host_alloc("softmax", x.numel().saturating_mul(24))?;
    let offs: Vec<usize> = pl.offsets().collect();
    let outs: Vec<usize> = cl.offsets().collect();
    let mut out = vec![0.0; offs.len()];
    if r > 0 {
        for (row, orow) in offs.chunks(r).zip(outs.chunks(r)) {
            let v: Vec<f64> = row.iter().map(|&i| data[i]).collect();
            let (m, s) = lse_stats(&v);
            let lse = if m.is_nan() || m.is_infinite() { m } else { m + s.ln() };
            for (&xv, &o) in v.iter().zip(orow) {
                out[o] = if log { xv - lse } else { (xv - m).exp() / s };
            }
        }
    }
    tensor_f64(&out, &shape)
}
