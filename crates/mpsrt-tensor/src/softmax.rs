//! softmax / log_softmax over any axis, numerically stable (max-subtracted) with NaN
//! propagating; integer inputs produce float32.

use crate::{cpu, elementwise::same_place, gpu, Tensor};
use mpsrt_core::{normalize_axis, Place, Result};
use mpsrt_kernels::ReduceOp;

fn run(opn: &str, op: ReduceOp, x: &Tensor, axis: isize) -> Result<Tensor> {
    let place = same_place(opn, &[x])?;
    if x.ndim() == 0 {
        let y = run(opn, op, &x.reshape(&[1])?, axis)?;
        return y.reshape(&[]);
    }
    let a = normalize_axis(opn, axis, x.ndim())?;
    let d = x.dtype().to_float();
    let xc = x.astype(d)?;
    let y = match place {
        Place::Cpu => cpu::softmax::softmax(&xc, a, op == ReduceOp::LogSoftmax)?,
        Place::Gpu(i) => gpu::reduce::reduce(opn, i, &xc, op, &[a], 0.0)?,
    };
    y.astype(d)
}

/// `exp(x - max) / sum(exp(x - max))` along `axis`.
pub fn softmax(x: &Tensor, axis: isize) -> Result<Tensor> {
    run("softmax", ReduceOp::Softmax, x, axis)
}

/// `x - max - log(sum(exp(x - max)))` along `axis`.
pub fn log_softmax(x: &Tensor, axis: isize) -> Result<Tensor> {
    run("log_softmax", ReduceOp::LogSoftmax, x, axis)
}
