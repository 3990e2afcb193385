//! The one entry point for elementwise work: checks places and broadcasting, then hands the
//! expression to the CPU reference or the GPU renderer.

use crate::{cpu, gpu, Scalar, Tensor};
use mpsrt_core::{broadcast_shapes, DType, Error, Place, Result};
use mpsrt_kernels::{Expr, VType};

/// Evaluate `expr` over broadcast `inputs` into a new contiguous tensor of `out_dtype`.
/// `scalars[k]` fills `Expr::Scalar(k, _)`.
pub(crate) fn map(
    op: &str,
    inputs: &[&Tensor],
    out_dtype: DType,
    expr: Expr,
    scalars: &[Scalar],
) -> Result<Tensor> {
    let place = same_place(op, inputs)?;
    // Equal shapes (the common case) need no broadcasting pass.
    let mut shape: Vec<usize> = match inputs {
        [first, rest @ ..] if rest.iter().all(|t| t.shape() == first.shape()) => {
            first.shape().to_vec()
        }
        _ => Vec::new(),
    };
    if shape.is_empty() {
        for t in inputs {
            shape = broadcast_shapes(op, &shape, t.shape())?;
        }
    }
    let types: Vec<VType> = inputs.iter().map(|t| VType::of(t.dtype())).collect();
    match expr.ty(&types) {
        Ok(t) if t == VType::of(out_dtype) => {}
        Ok(t) => {
            return Err(Error::dtype(
                op,
                format!("internal: expression yields {t:?}, output is {out_dtype}"),
            ))
        }
        Err(e) => {
            return Err(Error::dtype(
                op,
                format!(
                    "unsupported dtypes {:?}: {e}",
                    inputs.iter().map(|t| t.dtype().name()).collect::<Vec<_>>()
                ),
            ))
        }
    }
    match place {
        Place::Cpu => cpu::elementwise::eval(inputs, &shape, out_dtype, &expr, scalars),
        Place::Gpu(i) => {
            if let Some(t) = inputs.iter().find(|t| !t.dtype().gpu_supported()) {
                return Err(Error::dtype(op, format!("{} is not supported on the GPU", t.dtype())));
            }
            gpu::elementwise::eval(op, i, inputs, &shape, out_dtype, expr, scalars)
        }
    }
}

/// All inputs must live on one place; the error names each.
pub(crate) fn same_place(op: &str, inputs: &[&Tensor]) -> Result<Place> {
    let Some(first) = inputs.first() else {
        return Err(Error::invalid(op, "no input tensors"));
    };
    let p = first.place();
    if let Some(t) = inputs.iter().find(|t| t.place() != p) {
        return Err(Error::invalid(
            op,
            format!(
                "expected all tensors on the same place, got {p} and {}; move one with .to(place)",
                t.place()
            ),
        ));
    }
    Ok(p)
}

/// Run an arbitrary elementwise expression (a fused chain from the graph compiler, or a custom
/// op) over broadcast `inputs`: one generated kernel on the GPU, the reference evaluator on the
/// CPU. `scalars[k]` fills `Expr::Scalar(k, _)`.
pub fn fused_elementwise(
    op: &str,
    inputs: &[&Tensor],
    out_dtype: DType,
    expr: Expr,
    scalars: &[Scalar],
) -> Result<Tensor> {
    map(op, inputs, out_dtype, expr, scalars)
}
