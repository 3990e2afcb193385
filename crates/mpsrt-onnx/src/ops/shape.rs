//! Importers for shape manipulation and data movement. Several of these moved parameters from
//! attributes to inputs across opsets (Slice 10, Split/Squeeze/Unsqueeze 13, Pad 11); the
//! importers normalize both forms to the graph's canonical op.

use super::Importer;
use crate::ctx::Ctx;
use mpsrt_core::{DType, Result};
use mpsrt_graph::{HostTensor, Op, PadMode};

pub const OPS: &[(&str, Importer)] = &[
    ("Reshape", reshape),
    ("Transpose", transpose),
    ("Concat", concat),
    ("Split", split),
    ("Slice", slice),
    ("Gather", gather),
    ("GatherElements", gather_elements),
    ("Unsqueeze", unsqueeze),
    ("Squeeze", squeeze),
    ("Flatten", flatten),
    ("Expand", expand),
    ("Shape", shape),
    ("Size", size),
    ("Pad", pad),
    ("Tile", tile),
    ("Constant", constant),
    ("ConstantOfShape", constant_of_shape),
    ("Range", range),
    ("DepthToSpace", depth_to_space),
    ("SpaceToDepth", space_to_depth),
    ("Trilu", trilu),
    ("EyeLike", eye_like),
];

fn reshape(cx: &mut Ctx) -> Result<()> {
    let allowzero = cx.int("allowzero", 0)? != 0;
    let ins = vec![cx.input(0)?, cx.input(1)?];
    cx.emit(Op::Reshape { allowzero }, ins)
}

fn transpose(cx: &mut Ctx) -> Result<()> {
    let perm = cx.ints("perm")?;
    let perm = match perm {
        Some(p) => Some(
            p.iter()
                .map(|&v| {
                    usize::try_from(v)
                        .map_err(|_| cx.invalid(format!("perm {p:?} has a negative entry")))
                })
                .collect::<Result<Vec<_>>>()?,
        ),
        None => None,
    };
    let x = cx.input(0)?;
    cx.emit(Op::Transpose { perm }, vec![x])
}

fn concat(cx: &mut Ctx) -> Result<()> {
    let axis = cx.req_int("axis")?;
    let ins = (0..cx.node.input.len()).map(|i| cx.input(i)).collect::<Result<Vec<_>>>()?;
    cx.emit(Op::Concat { axis }, ins)
}

fn to_usizes(cx: &Ctx, v: &[i64], what: &str) -> Result<Vec<usize>> {
    v.iter()
        .map(|&x| {
            usize::try_from(x).map_err(|_| cx.invalid(format!("{what} {v:?} has a negative entry")))
        })
        .collect()
}

fn split(cx: &mut Ctx) -> Result<()> {
    let axis = cx.int("axis", 0)?;
    let mut ins = vec![cx.input(0)?];
    let splits = if cx.opset < 13 {
        cx.ints("split")?
    } else {
        match cx.const_input(1)? {
            Some(t) => Some(t.to_i64_vec()),
            None => {
                // Runtime split sizes: canonicalized by the graph once bound.
                ins.extend(cx.opt_input(1)?);
                None
            }
        }
    };
    let splits = match splits {
        Some(s) if !s.is_empty() => Some(to_usizes(cx, &s, "split")?),
        _ => None,
    };
    cx.emit(Op::Split { axis, splits }, ins)
}

/// Slice takes starts/ends/axes as attributes before opset 10 and as inputs after; the graph
/// form is always inputs, so attribute values become initializers.
fn slice(cx: &mut Ctx) -> Result<()> {
    let x = cx.input(0)?;
    if cx.opset < 10 {
        let starts =
            cx.ints("starts")?.ok_or_else(|| cx.invalid("attribute \"starts\" is required"))?;
        let ends = cx.ints("ends")?.ok_or_else(|| cx.invalid("attribute \"ends\" is required"))?;
        let axes = cx.ints("axes")?.unwrap_or_else(|| (0..starts.len() as i64).collect());
        let mk = |cx: &mut Ctx, v: &[i64]| cx.constant(HostTensor::from_i64(vec![v.len()], v));
        let ins = vec![x, mk(cx, &starts), mk(cx, &ends), mk(cx, &axes)];
        return cx.emit(Op::Slice, ins);
    }
    let mut ins = vec![x, cx.input(1)?, cx.input(2)?];
    match (cx.opt_input(3)?, cx.opt_input(4)?) {
        (None, None) => {}
        (Some(a), None) => ins.push(a),
        (Some(a), Some(s)) => ins.extend([a, s]),
        (None, Some(s)) => {
            // Skipped axes with explicit steps: materialize the default axes 0..len(starts).
            let starts = cx.req_const_input(1, "starts (with default axes and explicit steps)")?;
            let axes: Vec<i64> = (0..starts.numel() as i64).collect();
            let a = cx.constant(HostTensor::from_i64(vec![axes.len()], &axes));
            ins.extend([a, s]);
        }
    }
    cx.emit(Op::Slice, ins)
}

fn gather(cx: &mut Ctx) -> Result<()> {
    let axis = cx.int("axis", 0)?;
    let ins = vec![cx.input(0)?, cx.input(1)?];
    cx.emit(Op::Gather { axis }, ins)
}

fn gather_elements(cx: &mut Ctx) -> Result<()> {
    let axis = cx.int("axis", 0)?;
    let ins = vec![cx.input(0)?, cx.input(1)?];
    cx.emit(Op::GatherElements { axis }, ins)
}

/// Axes from the attribute (opset < 13) or a constant input; a non-constant axes input is kept
/// as the node's second input (returned in `ins`) for the graph to canonicalize later.
fn axes_attr_or_input(cx: &Ctx, ins: &mut Vec<mpsrt_graph::ValueId>) -> Result<Option<Vec<i64>>> {
    ins.push(cx.input(0)?);
    if cx.opset < 13 {
        return cx.ints("axes");
    }
    match cx.const_input(1)? {
        Some(t) => Ok(Some(t.to_i64_vec())),
        None => {
            ins.extend(cx.opt_input(1)?);
            Ok(None)
        }
    }
}

fn unsqueeze(cx: &mut Ctx) -> Result<()> {
    let mut ins = Vec::new();
    let axes = axes_attr_or_input(cx, &mut ins)?;
    if axes.is_none() && ins.len() == 1 {
        return Err(cx.invalid("axes are required"));
    }
    cx.emit(Op::Unsqueeze { axes: axes.unwrap_or_default() }, ins)
}

fn squeeze(cx: &mut Ctx) -> Result<()> {
    let mut ins = Vec::new();
    let axes = axes_attr_or_input(cx, &mut ins)?.filter(|a| !a.is_empty());
    cx.emit(Op::Squeeze { axes }, ins)
}

fn flatten(cx: &mut Ctx) -> Result<()> {
    let axis = cx.int("axis", 1)?;
    let x = cx.input(0)?;
    cx.emit(Op::Flatten { axis }, vec![x])
}

fn expand(cx: &mut Ctx) -> Result<()> {
    let ins = vec![cx.input(0)?, cx.input(1)?];
    cx.emit(Op::Expand, ins)
}

fn shape(cx: &mut Ctx) -> Result<()> {
    let start = cx.int("start", 0)?;
    let has_end = cx.node.attribute.iter().any(|a| a.name.as_deref() == Some("end"));
    let end = if has_end { Some(cx.req_int("end")?) } else { None };
    let x = cx.input(0)?;
    cx.emit(Op::Shape { start, end }, vec![x])
}

fn size(cx: &mut Ctx) -> Result<()> {
    let x = cx.input(0)?;
    cx.emit(Op::Size, vec![x])
}

/// Pad: attributes before opset 11; inputs (pads, constant_value, axes from 18) after, which
/// must be constants. Partial `axes` are expanded to pads over every axis.
fn pad(cx: &mut Ctx) -> Result<()> {
    let mode = match cx.string("mode", "constant")?.as_str() {
        "constant" => PadMode::Constant,
        "reflect" => PadMode::Reflect,
        "edge" => PadMode::Edge,
        "wrap" => PadMode::Wrap,
        other => return Err(cx.invalid(format!("unknown pad mode {other:?}"))),
    };
    let (pads, value, axes) = if cx.opset < 11 {
        let pads = cx.ints("pads")?.ok_or_else(|| cx.invalid("attribute \"pads\" is required"))?;
        (pads, cx.float("value", 0.0)?, None)
    } else if !cx.has_input(3)
        && (cx.const_input(1)?.is_none() || (cx.has_input(2) && cx.const_input(2)?.is_none()))
    {
        // Runtime pads/value: kept as inputs, canonicalized by the graph once bound.
        let mut ins = vec![cx.input(0)?, cx.input(1)?];
        ins.extend(cx.opt_input(2)?);
        return cx.emit(Op::Pad { mode, pads: vec![], value: 0.0 }, ins);
    } else {
        let pads = cx.req_const_input(1, "pads")?.to_i64_vec();
        let value = match cx.has_input(2) {
            true => cx
                .req_const_input(2, "constant_value")?
                .to_f64_vec()
                .first()
                .copied()
                .unwrap_or(0.0) as f32,
            false => 0.0,
        };
        let axes = match cx.has_input(3) {
            true => Some(cx.req_const_input(3, "axes")?.to_i64_vec()),
            false => None,
        };
        (pads, value, axes)
    };
    let pads = match axes {
        None => pads,
        Some(axes) => {
            // Needs the input rank, known only from a declared input shape at import time.
            let x = cx.input(0)?;
            let rank = cx.graph.value(x).shape.as_ref().map(|s| s.len()).ok_or_else(|| {
                cx.unsupported("Pad with explicit axes on a value of unknown rank is not supported")
            })?;
            if pads.len() != 2 * axes.len() {
                return Err(cx.invalid(format!("pads {pads:?} do not match axes {axes:?}")));
            }
            let mut full = vec![0i64; 2 * rank];
            for (k, &a) in axes.iter().enumerate() {
                let a = if a < 0 { a + rank as i64 } else { a };
                if a < 0 || a >= rank as i64 {
                    return Err(cx.invalid(format!("axis {a} out of range for rank {rank}")));
                }
                full[a as usize] = pads[k];
                full[a as usize + rank] = pads[k + axes.len()];
            }
            full
        }
    };
    let x = cx.input(0)?;
    cx.emit(Op::Pad { mode, pads, value }, vec![x])
}

fn tile(cx: &mut Ctx) -> Result<()> {
    let ins = vec![cx.input(0)?, cx.input(1)?];
    cx.emit(Op::Tile, ins)
}

/// Constant nodes become initializers, so folding and `const_input` see them.
fn constant(cx: &mut Ctx) -> Result<()> {
    let t = if let Some(t) = cx.tensor("value")? {
        t
    } else if cx.node.attribute.iter().any(|a| a.name.as_deref() == Some("value_float")) {
        HostTensor::from_f32(vec![], &[cx.float("value_float", 0.0)?])
    } else if let Some(v) = cx.floats("value_floats")? {
        HostTensor::from_f32(vec![v.len()], &v)
    } else if cx.node.attribute.iter().any(|a| a.name.as_deref() == Some("value_int")) {
        HostTensor::from_i64(vec![], &[cx.req_int("value_int")?])
    } else if let Some(v) = cx.ints("value_ints")? {
        HostTensor::from_i64(vec![v.len()], &v)
    } else {
        return Err(cx.unsupported(
            "Constant without a tensor/float/int value (sparse or string) is not supported",
        ));
    };
    cx.bind_constant(t)
}

fn constant_of_shape(cx: &mut Ctx) -> Result<()> {
    let fill = match cx.tensor("value")? {
        Some(t) if t.numel() == 1 => HostTensor { shape: vec![], ..t },
        Some(_) => return Err(cx.invalid("value must hold exactly one element")),
        None => HostTensor::from_f64(DType::F32, vec![], &[0.0]),
    };
    let x = cx.input(0)?;
    cx.emit(Op::ConstantOfShape(fill), vec![x])
}

fn range(cx: &mut Ctx) -> Result<()> {
    let ins = vec![cx.input(0)?, cx.input(1)?, cx.input(2)?];
    cx.emit(Op::Range, ins)
}

fn blocksize(cx: &Ctx) -> Result<usize> {
    let b = cx.req_int("blocksize")?;
    usize::try_from(b)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| cx.invalid(format!("blocksize must be positive, got {b}")))
}

fn depth_to_space(cx: &mut Ctx) -> Result<()> {
    let crd = match cx.string("mode", "DCR")?.as_str() {
        "DCR" => false,
        "CRD" => true,
        other => return Err(cx.invalid(format!("unknown mode {other:?}"))),
    };
    let op = Op::DepthToSpace { blocksize: blocksize(cx)?, crd };
    let x = cx.input(0)?;
    cx.emit(op, vec![x])
}

fn space_to_depth(cx: &mut Ctx) -> Result<()> {
    let op = Op::SpaceToDepth { blocksize: blocksize(cx)? };
    let x = cx.input(0)?;
    cx.emit(op, vec![x])
}

fn trilu(cx: &mut Ctx) -> Result<()> {
    let upper = cx.int("upper", 1)? != 0;
    let mut ins = vec![cx.input(0)?];
    ins.extend(cx.opt_input(1)?);
    cx.emit(Op::Trilu { upper }, ins)
}

fn eye_like(cx: &mut Ctx) -> Result<()> {
    let has_dtype = cx.node.attribute.iter().any(|a| a.name.as_deref() == Some("dtype"));
    let dtype = if has_dtype {
        Some(crate::tensor::map_dtype(cx.req_int("dtype")? as i32, "EyeLike dtype")?)
    } else {
        None
    };
    let op = Op::EyeLike { dtype, k: cx.int("k", 0)? };
    let x = cx.input(0)?;
    cx.emit(op, vec![x])
}
