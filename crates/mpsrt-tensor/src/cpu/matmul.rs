//! CPU reference for matrix products: a plain triple loop per batch element through the
//! operands' strides, accumulating in f64.

use super::reduce::tensor_f64;
use crate::matmul::Problem;
use crate::Tensor;
use mpsrt_core::{Error, Layout, Result};
use mpsrt_runtime::Storage;

fn data(t: &Tensor) -> Result<Vec<f64>> {
    match t.storage() {
        Storage::Cpu(b) => Ok(super::decode_f64(b.bytes(), t.dtype())),
        Storage::Gpu(_) => {
            Err(Error::device("matmul", "internal: GPU tensor reached the CPU backend"))
        }
    }
}

/// Offset of batch element `z` (row-major over `batch`) in a `[batch.., R, C]` layout.
pub(crate) fn batch_offset(l: &Layout, batch: &[usize], mut z: usize) -> isize {
    let mut off = l.offset as isize;
    for d in (0..batch.len()).rev() {
        off += (z % batch[d]) as isize * l.strides[d];
        z /= batch[d];
    }
    off
}

/// `[batch.., M, N]` f64 result of the problem.
pub(crate) fn matmul(p: &Problem<'_>) -> Result<Tensor> {
    let [m, n, k] = p.mnk;
    let (da, db) = (data(p.a_t)?, data(p.b_t)?);
    let nb = p.batch.len();
    let zc: usize = p.batch.iter().product();
    let (sam, sak) = (p.a.strides[nb], p.a.strides[nb + 1]);
    let (sbk, sbn) = (p.b.strides[nb], p.b.strides[nb + 1]);
    let c = match &p.c {
        Some((t, l)) => Some((data(t)?, l)),
        None => None,
    };
    let cells = zc.checked_mul(m).and_then(|v| v.checked_mul(n)).unwrap_or(usize::MAX);
    let mut out = mpsrt_runtime::host_vec("matmul", cells, 0.0)?;
    for z in 0..zc {
        let (oa, ob) = (batch_offset(&p.a, &p.batch, z), batch_offset(&p.b, &p.batch, z));
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0;
                for kk in 0..k {
                    let x = da[(oa + i as isize * sam + kk as isize * sak) as usize];
                    let y = db[(ob + kk as isize * sbk + j as isize * sbn) as usize];
                    s += x * y;
                }
                let mut v = p.alpha * s;
                if let Some((cd, cl)) = &c {
                    let o = cl.offset as isize
                        + i as isize * cl.strides[0]
                        + j as isize * cl.strides[1];
                    v += p.beta * cd[o as usize];
                }
                out[(z * m + i) * n + j] = v;
            }
        }
    }
    let mut shape = p.batch.clone();
    shape.extend([m, n]);
    tensor_f64(&out, &shape)
}
