//! The one entry point for elementwise work: checks places and broadcasting, then hands the
//! expression to the CPU reference or the GPU renderer.

use crate::{cpu, gpu, Scalar, Tensor};
use mpsrt_core::{broadcast_shapes, DType, Error, Place, Result};
use mpsrt_kernels::{Expr, VType};
use std::cell::RefCell;

thread_local! {
    /// The destination set by [`with_destination`], until a launch takes it.
    static DEST: RefCell<Option<Tensor>> = const { RefCell::new(None) };
}

/// Run `f` with `out` (a dense tensor on a GPU, its byte offset a multiple of 256) as the
/// destination of the first elementwise launch in `f` whose result has exactly `out`'s shape
/// and dtype: that launch writes into `out`'s memory instead of a fresh buffer. For callers
/// that own preallocated output memory (a framework plugin) and would otherwise copy the
/// result into it. The caller guarantees that nothing `f` reads overlaps `out`'s memory (a
/// value written there may be read back by later launches of `f`: it is `f`'s own result).
/// Whether the final result landed in `out` is for the caller to check (same storage and
/// offset); `out` is forgotten when `f` returns.
pub fn with_destination<R>(out: &Tensor, f: impl FnOnce() -> R) -> R {
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            DEST.with(|d| d.borrow_mut().take());
        }
    }
    let usable = matches!(out.place(), Place::Gpu(_))
        && out.layout().is_contiguous()
        && (out.layout().offset * out.dtype().size()).is_multiple_of(256);
    let _clear = Clear;
    if usable {
        DEST.with(|d| *d.borrow_mut() = Some(out.clone()));
    }
    f()
}

/// The pending destination, taken if it fits a result of `shape` / `dtype` on `place`.
fn take_destination(shape: &[usize], dtype: DType, place: Place) -> Option<Tensor> {
    DEST.with(|d| {
        let mut d = d.borrow_mut();
        let fits = d
            .as_ref()
            .is_some_and(|t| t.dtype() == dtype && t.place() == place && t.shape() == shape);
        if fits {
            d.take()
        } else {
            None
        }
    })
}

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
            let dst = take_destination(&shape, out_dtype, place);
            gpu::elementwise::eval(op, i, inputs, &shape, out_dtype, expr, scalars, dst.as_ref())
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
