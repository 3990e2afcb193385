//! Importers for selection-style ops whose engine kernels are built from masks and reductions:
//! CumProd, OneHot and Einsum (TopK lives with the reductions in `reduce.rs`).

use super::Importer;
use crate::ctx::Ctx;
use mpsrt_core::Result;
use mpsrt_graph::Op;

pub const OPS: &[(&str, Importer)] =
    &[("CumProd", cumprod), ("OneHot", one_hot), ("Einsum", einsum)];

/// All inputs are operands; the equation is parsed (and checked) by shape inference.
fn einsum(cx: &mut Ctx) -> Result<()> {
    let equation = cx.string("equation", "")?;
    if equation.trim().is_empty() {
        return Err(cx.invalid("the equation attribute is required"));
    }
    let n = cx.node.input.len();
    let ins = (0..n).map(|i| cx.input(i)).collect::<Result<Vec<_>>>()?;
    cx.emit(Op::Einsum { equation }, ins)
}

/// Inputs `(x, axis)`; the axis stays an input read on the host by the engine, like CumSum's.
fn cumprod(cx: &mut Ctx) -> Result<()> {
    let op = Op::CumProd {
        exclusive: cx.int("exclusive", 0)? != 0,
        reverse: cx.int("reverse", 0)? != 0,
    };
    let ins = vec![cx.input(0)?, cx.input(1)?];
    cx.emit(op, ins)
}

/// ONNX inputs `(indices, depth, values)`. The output shape depends on `depth`, so a constant
/// depth becomes the attribute now; otherwise it is passed last (graph order `indices, values,
/// depth`) and canonicalization folds it in once its value is bound.
fn one_hot(cx: &mut Ctx) -> Result<()> {
    let axis = cx.int("axis", -1)?;
    let mut ins = vec![cx.input(0)?, cx.input(2)?];
    let depth = match cx.const_input(1)? {
        Some(t) => {
            let d = t.to_i64_vec().first().copied().ok_or_else(|| cx.invalid("depth is empty"))?;
            match usize::try_from(d) {
                Ok(d) if d > 0 => d,
                _ => return Err(cx.invalid(format!("depth must be a positive integer, got {d}"))),
            }
        }
        None => {
            ins.push(cx.input(1)?);
            0
        }
    };
    cx.emit(Op::OneHot { axis, depth }, ins)
}
