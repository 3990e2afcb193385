//! Importers for linear (de)quantization: QuantizeLinear and DequantizeLinear with per-tensor,
//! per-axis and blocked scales.
//!
//! mpsrt stores int16/uint16 in int32, so the quantized type's saturation range cannot be read
//! off the mpsrt dtype; it is taken from the ONNX element type the model declares for the zero
//! point (or the `output_dtype` attribute) and recorded in the op.

use super::Importer;
use crate::ctx::Ctx;
use crate::proto::tensor_proto::DataType as T;
use crate::tensor::map_dtype;
use mpsrt_core::{DType, Result};
use mpsrt_graph::{Op, ValueId};

pub const OPS: &[(&str, Importer)] =
    &[("QuantizeLinear", quantize_linear), ("DequantizeLinear", dequantize_linear)];

/// `block_size` attribute (0 = not blocked).
fn block_size(cx: &Ctx) -> Result<usize> {
    let b = cx.int("block_size", 0)?;
    usize::try_from(b).map_err(|_| cx.invalid(format!("block_size must be >= 0, got {b}")))
}

/// The ONNX element type code of the zero point (input 2), when it can be known: the model's
/// declaration, else a constant's dtype where that dtype is unambiguous (uint8/int8).
fn zero_point_code(cx: &Ctx) -> Result<Option<i32>> {
    if !cx.has_input(2) {
        return Ok(None);
    }
    if let Some(c) = cx.onnx_elem_type(2) {
        return Ok(Some(c));
    }
    let dtype = match cx.const_input(2)? {
        Some(h) => Some(h.dtype),
        None => cast_target(cx, cx.input(2)?),
    };
    match dtype {
        Some(DType::U8) => Ok(Some(T::Uint8 as i32)),
        Some(DType::I8) => Ok(Some(T::Int8 as i32)),
        _ => Err(cx.unsupported(
            "the zero point's ONNX element type is not declared (value_info); it is needed to \
             tell int16/uint16/int32 saturation ranges apart",
        )),
    }
}

/// The dtype a value was cast to, when it comes (through Identity nodes) from a Cast node
/// already imported: expanded functions build zero points with `Cast(to=uint8)`.
fn cast_target(cx: &Ctx, mut v: ValueId) -> Option<DType> {
    loop {
        let node = cx.graph.nodes.iter().find(|n| n.outputs.contains(&v))?;
        match &node.op {
            Op::Cast { to } => return Some(*to),
            Op::Identity => v = *node.inputs.first()?,
            _ => return None,
        }
    }
}

/// mpsrt dtype and saturation range of an integer quantized ONNX type. int32 is only a
/// DequantizeLinear input type (ONNX has no int32 QuantizeLinear output).
fn quant_type(cx: &Ctx, code: i32, allow_i32: bool) -> Result<(DType, i64, i64)> {
    let name = T::try_from(code).map(|t| t.as_str_name()).unwrap_or("?");
    let range = match T::try_from(code) {
        Ok(T::Uint8) => (0, u8::MAX as i64),
        Ok(T::Int8) => (i8::MIN as i64, i8::MAX as i64),
        Ok(T::Uint16) => (0, u16::MAX as i64),
        Ok(T::Int16) => (i16::MIN as i64, i16::MAX as i64),
        Ok(T::Int32) if allow_i32 => (i32::MIN as i64, i32::MAX as i64),
        _ => {
            return Err(cx.unsupported(format!(
                "quantized type {name} ({code}) is not supported; expected uint8, int8, uint16, \
                 int16{}",
                if allow_i32 { " or int32" } else { "" }
            )))
        }
    };
    Ok((map_dtype(code, "quantized type")?, range.0, range.1))
}

fn quantize_linear(cx: &mut Ctx) -> Result<()> {
    let attr = cx.int("output_dtype", 0)? as i32;
    let code = match (zero_point_code(cx)?, attr) {
        (Some(z), a) if a != 0 && a != z => {
            return Err(cx.invalid(format!(
                "output_dtype {a} differs from the zero point's element type {z}"
            )))
        }
        (Some(z), _) => z,
        (None, 0) => T::Uint8 as i32,
        (None, a) => a,
    };
    let (to, lo, hi) = quant_type(cx, code, false)?;
    let op =
        Op::QuantizeLinear { axis: cx.int("axis", 1)?, block_size: block_size(cx)?, to, lo, hi };
    let mut ins = vec![cx.input(0)?, cx.input(1)?];
    ins.extend(cx.opt_input(2)?);
    cx.emit(op, ins)
}

fn dequantize_linear(cx: &mut Ctx) -> Result<()> {
    // The input's type decides whether this is an integer dequantization mpsrt can run.
    if let Some(code) = cx.onnx_elem_type(0) {
        quant_type(cx, code, true)?;
    }
    let to = match cx.int("output_dtype", 0)? as i32 {
        0 => None,
        c => Some(map_dtype(c, "output_dtype")?),
    };
    let op = Op::DequantizeLinear { axis: cx.int("axis", 1)?, block_size: block_size(cx)?, to };
    let mut ins = vec![cx.input(0)?, cx.input(1)?];
    ins.extend(cx.opt_input(2)?);
    cx.emit(op, ins)
}
