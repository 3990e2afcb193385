//! Importer for ONNX `Attention` (opsets 23-25): resolves attribute defaults and records which of
//! the optional inputs (attn_mask, past_key/past_value, nonpad_kv_seqlen) are present, since
//! the graph IR passes only the present ones.

use super::Importer;
use crate::ctx::Ctx;
use mpsrt_core::{DType, Result};
use mpsrt_graph::{AttentionAttrs, Op};

pub const OPS: &[(&str, Importer)] = &[("Attention", attention)];

/// An optional positive head-count attribute.
fn heads(cx: &Ctx, name: &str) -> Result<Option<usize>> {
    match cx.int(name, 0)? {
        0 => Ok(None),
        n => usize::try_from(n)
            .map(Some)
            .map_err(|_| cx.invalid(format!("{name} must be positive, got {n}"))),
    }
}

/// A window bound: -1 (unbounded) or non-negative.
fn window(cx: &Ctx, name: &str) -> Result<i64> {
    let w = cx.int(name, -1)?;
    if w < -1 {
        return Err(cx.invalid(format!("{name} must be -1 or non-negative, got {w}")));
    }
    Ok(w)
}

fn attention(cx: &mut Ctx) -> Result<()> {
    let mode = cx.int("qk_matmul_output_mode", 0)?;
    let qk_matmul_output_mode = u8::try_from(mode)
        .ok()
        .filter(|m| *m <= 3)
        .ok_or_else(|| cx.invalid(format!("qk_matmul_output_mode must be 0..=3, got {mode}")))?;
    // TensorProto data type codes.
    let softmax_precision = match cx.int("softmax_precision", 0)? {
        0 => None,
        1 => Some(DType::F32),
        10 => Some(DType::F16),
        11 => Some(DType::F64),
        p => {
            return Err(cx.unsupported(format!(
                "softmax_precision {p} is not supported (float, float16 or double)"
            )))
        }
    };
    let has_past = cx.has_input(4);
    if has_past != cx.has_input(5) {
        return Err(cx.invalid("past_key and past_value must be given together"));
    }
    let has_nonpad = cx.has_input(6);
    if has_nonpad && has_past {
        return Err(cx.invalid("nonpad_kv_seqlen cannot be combined with past_key/past_value"));
    }
    if cx.node.input.len() > 7 {
        return Err(cx.invalid(format!("expected at most 7 inputs, got {}", cx.node.input.len())));
    }
    let scale = cx.node.attribute.iter().any(|a| a.name.as_deref() == Some("scale"));
    let attrs = AttentionAttrs {
        is_causal: cx.int("is_causal", 0)? != 0,
        q_num_heads: heads(cx, "q_num_heads")?,
        kv_num_heads: heads(cx, "kv_num_heads")?,
        qk_matmul_output_mode,
        scale: if scale { Some(cx.float("scale", 1.0)?) } else { None },
        softcap: cx.float("softcap", 0.0)?,
        softmax_precision,
        left_window_size: window(cx, "left_window_size")?,
        right_window_size: window(cx, "right_window_size")?,
        has_mask: cx.has_input(3),
        has_past,
        has_nonpad,
    };
    let mut ins = vec![cx.input(0)?, cx.input(1)?, cx.input(2)?];
    for i in 3..7 {
        ins.extend(cx.opt_input(i)?);
    }
    cx.emit(Op::Attention(attrs), ins)
}
