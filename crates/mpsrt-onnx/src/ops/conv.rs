//! Importers for convolutions and matrix products: Conv, ConvTranspose, MatMul, Gemm.

use super::Importer;
use crate::ctx::Ctx;
use mpsrt_core::Result;
use mpsrt_graph::{AutoPad, ConvAttrs, ConvTransposeAttrs, Op};

pub const OPS: &[(&str, Importer)] =
    &[("Conv", conv), ("ConvTranspose", conv_transpose), ("MatMul", matmul), ("Gemm", gemm)];

/// Parses ONNX `auto_pad`.
pub fn auto_pad(cx: &Ctx) -> Result<AutoPad> {
    Ok(match cx.string("auto_pad", "NOTSET")?.as_str() {
        "NOTSET" | "" => AutoPad::NotSet,
        "SAME_UPPER" => AutoPad::SameUpper,
        "SAME_LOWER" => AutoPad::SameLower,
        "VALID" => AutoPad::Valid,
        other => return Err(cx.invalid(format!("unknown auto_pad {other:?}"))),
    })
}

fn conv_attrs(cx: &Ctx) -> Result<ConvAttrs> {
    let group = cx.int("group", 1)?;
    if group < 1 {
        return Err(cx.invalid(format!("group must be >= 1, got {group}")));
    }
    Ok(ConvAttrs {
        kernel_shape: cx.usizes("kernel_shape")?,
        strides: cx.usizes("strides")?,
        pads: cx.usizes("pads")?,
        dilations: cx.usizes("dilations")?,
        group: group as usize,
        auto_pad: auto_pad(cx)?,
    })
}

/// Gathers `(x, w, bias?)`.
fn conv_inputs(cx: &Ctx) -> Result<Vec<mpsrt_graph::ValueId>> {
    let mut ins = vec![cx.input(0)?, cx.input(1)?];
    ins.extend(cx.opt_input(2)?);
    Ok(ins)
}

fn conv(cx: &mut Ctx) -> Result<()> {
    let attrs = conv_attrs(cx)?;
    let ins = conv_inputs(cx)?;
    cx.emit(Op::Conv(attrs), ins)
}

fn conv_transpose(cx: &mut Ctx) -> Result<()> {
    let attrs = ConvTransposeAttrs {
        conv: conv_attrs(cx)?,
        output_padding: cx.usizes("output_padding")?,
        output_shape: cx.usizes("output_shape")?,
    };
    let ins = conv_inputs(cx)?;
    cx.emit(Op::ConvTranspose(attrs), ins)
}

fn matmul(cx: &mut Ctx) -> Result<()> {
    let ins = vec![cx.input(0)?, cx.input(1)?];
    cx.emit(Op::MatMul, ins)
}

fn gemm(cx: &mut Ctx) -> Result<()> {
    let op = Op::Gemm {
        alpha: cx.float("alpha", 1.0)?,
        beta: cx.float("beta", 1.0)?,
        trans_a: cx.int("transA", 0)? != 0,
        trans_b: cx.int("transB", 0)? != 0,
    };
    let mut ins = vec![cx.input(0)?, cx.input(1)?];
    ins.extend(cx.opt_input(2)?);
    cx.emit(op, ins)
}
