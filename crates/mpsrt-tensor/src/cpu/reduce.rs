//! CPU reference for reductions and softmax: rows are gathered through a permuted layout
//! (kept dims first, reduced dims last) and reduced in f64 (floats) or wrapping int32/int64.

use crate::Tensor;
use mpsrt_core::{DType, Error, Layout, Result};
use mpsrt_kernels::ReduceOp;
use mpsrt_runtime::{CpuBuffer, Storage};
use std::sync::Arc;

/// All elements of the storage as f64 plus the layout permuted to `[kept.., reduced..]`.
pub(crate) fn rows(x: &Tensor, axes: &[usize]) -> Result<(Vec<f64>, Layout, usize)> {
    let Storage::Cpu(buf) = x.storage() else {
        return Err(Error::device("reduce", "internal: GPU tensor reached the CPU backend"));
    };
    let data = super::decode_f64(buf.bytes(), x.dtype());
    let l = x.layout();
    let mut perm: Vec<usize> = (0..l.ndim()).filter(|d| !axes.contains(d)).collect();
    perm.extend_from_slice(axes);
    let pl = Layout {
        shape: perm.iter().map(|&d| l.shape[d]).collect(),
        strides: perm.iter().map(|&d| l.strides[d]).collect(),
        offset: l.offset,
    };
    let r = axes.iter().map(|&a| l.shape[a]).product();
    Ok((data, pl, r))
}

pub(crate) fn tensor_f64(v: &[f64], shape: &[usize]) -> Result<Tensor> {
    Ok(Tensor::from_parts(
        Storage::Cpu(Arc::new(CpuBuffer::from_slice("reduce", v)?)),
        Layout::contiguous(shape),
        DType::F64,
    ))
}

fn tensor_i64(v: &[i64], shape: &[usize]) -> Result<Tensor> {
    Ok(Tensor::from_parts(
        Storage::Cpu(Arc::new(CpuBuffer::from_slice("reduce", v)?)),
        Layout::contiguous(shape),
        DType::I64,
    ))
}

/// (max, sum of exp(x - max)) with exp(0) for x == max (so +inf rows stay finite in the sum).
pub(crate) fn lse_stats(row: &[f64]) -> (f64, f64) {
    let m = fmax(row);
    if m.is_nan() {
        return (m, f64::NAN);
    }
    let s = row
        .iter()
        .filter(|&&x| x != f64::NEG_INFINITY)
        .map(|&x| if x == m { 1.0 } else { (x - m).exp() })
        .sum();
    (m, s)
}

fn fmax(row: &[f64]) -> f64 {
    row.iter()
        .fold(f64::NEG_INFINITY, |a, &x| if a.is_nan() || x.is_nan() { f64::NAN } else { a.max(x) })
}
fn fmin(row: &[f64]) -> f64 {
    row.iter()
        .fold(f64::INFINITY, |a, &x| if a.is_nan() || x.is_nan() { f64::NAN } else { a.min(x) })
}

fn arg(row: &[f64], max: bool) -> f64 {
    if let Some(i) = row.iter().position(|x| x.is_nan()) {
        return i as f64;
    }
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if (max && x > row[best]) || (!max && x < row[best]) {
            best = i;
        }
    }
    best as f64
}

fn var(row: &[f64], correction: f64) -> f64 {
    let n = row.len() as f64;
    let mean = row.iter().sum::<f64>() / n;
    let m2: f64 = row.iter().map(|x| (x - mean) * (x - mean)).sum();
    let den = (n - correction).max(0.0);
    if den <= 0.0 {
        return if m2 == 0.0 || m2.is_nan() { f64::NAN } else { f64::INFINITY };
    }
    m2 / den
}

fn float_row(op: ReduceOp, row: &[f64], param: f64) -> f64 {
    use ReduceOp::*;
    let n = row.len() as f64;
    match op {
        Sum => row.iter().sum(),
        Mean if row.is_empty() => f64::NAN,
        Mean => row.iter().sum::<f64>() / n,
        Prod => row.iter().product(),
        Max => fmax(row),
        Min => fmin(row),
        ArgMax => arg(row, true),
        ArgMin => arg(row, false),
        Var | Moments => var(row, param),
        Std => var(row, param).sqrt(),
        Norm2 => row.iter().map(|x| x * x).sum::<f64>().sqrt(),
        LogSumExp | Softmax | LogSoftmax => {
            let (m, s) = lse_stats(row);
            if m.is_nan() || m.is_infinite() {
                m
            } else {
                m + s.ln()
            }
        }
    }
}

/// Reduce `axes` of `x`; the result is flat `[n_out]` (f64 for floats, i64 for ints, arg ops
/// i64) or `[2, n_out]` (mean; variance) for `Moments`.
pub(crate) fn reduce(x: &Tensor, op: ReduceOp, axes: &[usize], param: f64) -> Result<Tensor> {
    let (data, pl, r) = rows(x, axes)?;
    let offs: Vec<usize> = pl.offsets().collect();
    let n_out = offs
        .len()
        .checked_div(r)
        .unwrap_or_else(|| pl.shape[..pl.ndim() - axes.len()].iter().product());
    let row_of =
        |o: usize| -> Vec<f64> { offs[o * r..(o + 1) * r].iter().map(|&i| data[i]).collect() };
    let int = !x.dtype().is_float();
    if int && !op.is_arg() {
        let wide = x.dtype() == DType::I64;
        let out: Vec<i64> = (0..n_out)
            .map(|o| {
                let row: Vec<i64> = row_of(o).iter().map(|&v| v as i64).collect();
                let v = match op {
                    ReduceOp::Sum => row.iter().fold(0i64, |a, &b| a.wrapping_add(b)),
                    ReduceOp::Prod if wide => row.iter().fold(1i64, |a, &b| a.wrapping_mul(b)),
                    ReduceOp::Prod => {
                        row.iter().fold(1i32, |a, &b| a.wrapping_mul(b as i32)) as i64
                    }
                    ReduceOp::Max => row.iter().copied().max().unwrap_or(i64::MIN),
                    _ => row.iter().copied().min().unwrap_or(i64::MAX),
                };
                if wide {
                    v
                } else {
                    v as i32 as i64
                }
            })
            .collect();
        return tensor_i64(&out, &[n_out]);
    }
    if op.is_arg() {
        let out: Vec<i64> = (0..n_out).map(|o| float_row(op, &row_of(o), param) as i64).collect();
        return tensor_i64(&out, &[n_out]);
    }
    if op == ReduceOp::Moments {
        let mut out = mpsrt_runtime::host_vec("moments", 2 * n_out, 0.0)?;
        for o in 0..n_out {
            let row = row_of(o);
            out[o] =
                if row.is_empty() { f64::NAN } else { row.iter().sum::<f64>() / row.len() as f64 };
            out[n_out + o] = var(&row, param);
        }
        return tensor_f64(&out, &[2, n_out]);
    }
    let out: Vec<f64> = (0..n_out).map(|o| float_row(op, &row_of(o), param)).collect();
    tensor_f64(&out, &[n_out])
}
