//! Importers for index-addressed writes and reads: ScatterElements (and its deprecated alias
//! Scatter), ScatterND and GatherND.

use super::Importer;
use crate::ctx::Ctx;
use mpsrt_core::Result;
use mpsrt_graph::op::ScatterReduction;
use mpsrt_graph::Op;

pub const OPS: &[(&str, Importer)] = &[
    ("ScatterElements", scatter_elements),
    ("Scatter", scatter_elements),
    ("ScatterND", scatter_nd),
    ("GatherND", gather_nd),
];

/// The `reduction` attribute (`none` when absent, as before opset 16).
fn reduction(cx: &Ctx) -> Result<ScatterReduction> {
    Ok(match cx.string("reduction", "none")?.as_str() {
        "none" => ScatterReduction::None,
        "add" => ScatterReduction::Add,
        "mul" => ScatterReduction::Mul,
        "max" => ScatterReduction::Max,
        "min" => ScatterReduction::Min,
        other => {
            return Err(
                cx.invalid(format!("reduction {other:?} is not one of none, add, mul, max, min"))
            )
        }
    })
}

fn three_inputs(cx: &Ctx) -> Result<Vec<mpsrt_graph::ValueId>> {
    (0..3).map(|i| cx.input(i)).collect()
}

fn scatter_elements(cx: &mut Ctx) -> Result<()> {
    let op = Op::ScatterElements { axis: cx.int("axis", 0)?, reduction: reduction(cx)? };
    let ins = three_inputs(cx)?;
    cx.emit(op, ins)
}

fn scatter_nd(cx: &mut Ctx) -> Result<()> {
    let op = Op::ScatterND { reduction: reduction(cx)? };
    let ins = three_inputs(cx)?;
    cx.emit(op, ins)
}

fn gather_nd(cx: &mut Ctx) -> Result<()> {
    let b = cx.int("batch_dims", 0)?;
    let batch_dims =
        usize::try_from(b).map_err(|_| cx.invalid(format!("batch_dims must be >= 0, got {b}")))?;
    let ins = vec![cx.input(0)?, cx.input(1)?];
    cx.emit(Op::GatherND { batch_dims }, ins)
}
