//! The attributes of the fused `Attention` op (ONNX `Attention`, opsets 23-25) and its dtype and
//! shape inference. Kept apart from `infer.rs` because the op has four outputs whose shapes
//! depend on the input rank (3-D packed heads vs 4-D), the key/value cache and the optional
//! inputs, which are encoded as presence flags (the graph IR only has trailing optional inputs).

use crate::infer::{Cx, InferIn, OutInfo};
use crate::ir::{shape_str, Dim};
use mpsrt_core::{DType, Result};

/// Attributes of `Op::Attention`.
///
/// Inputs are `(q, k, v, attn_mask?, past_key?, past_value?, nonpad_kv_seqlen?)`, where the
/// optional ones are present exactly when the matching flag is set (past key and value come as a
/// pair). Outputs are `(y, present_key?, present_value?, qk_matmul_output?)`.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionAttrs {
    /// Query `i` (of the new block) may attend key `j` only if `j <= i + offset`, where the offset
    /// is the past length (or `nonpad_kv_seqlen[b] - q_len` for an external cache).
    pub is_causal: bool,
    /// Head counts; required for 3-D inputs `[batch, seq, heads * head_size]`.
    pub q_num_heads: Option<usize>,
    pub kv_num_heads: Option<usize>,
    /// Which intermediate the fourth output holds: 0/1 the (softcapped) `q @ k^T`, 2 that plus
    /// the mask bias, 3 the softmax probabilities.
    pub qk_matmul_output_mode: u8,
    /// Scale of `q @ k^T`; `None` means `1 / sqrt(head_size)`.
    pub scale: Option<f32>,
    /// `softcap * tanh(x / softcap)` on the scores when positive.
    pub softcap: f32,
    /// Dtype the softmax is computed in (`None`: the default compute type).
    pub softmax_precision: Option<DType>,
    /// Sliding window bounds (keys at most this far left/right of the query's absolute
    /// position); negative means unbounded.
    pub left_window_size: i64,
    pub right_window_size: i64,
    pub has_mask: bool,
    pub has_past: bool,
    pub has_nonpad: bool,
}

impl AttentionAttrs {
    /// Input indices of `(attn_mask, past_key, nonpad_kv_seqlen)` (past value follows past key).
    pub fn input_slots(&self) -> (Option<usize>, Option<usize>, Option<usize>) {
        let mut next = 3;
        let mut take = |present: bool, n: usize| {
            let slot = present.then_some(next);
            next += if present { n } else { 0 };
            slot
        };
        let mask = take(self.has_mask, 1);
        let past = take(self.has_past, 2);
        let nonpad = take(self.has_nonpad, 1);
        (mask, past, nonpad)
    }

    /// How many inputs a node with these attributes has.
    pub fn num_inputs(&self) -> usize {
        3 + usize::from(self.has_mask)
            + 2 * usize::from(self.has_past)
            + usize::from(self.has_nonpad)
    }
}

/// `a / n` when `a` is known (it must divide), a fresh symbol otherwise.
fn div_dim(cx: &mut Cx, a: &Dim, n: usize, what: &str) -> Result<Dim> {
    match a.known() {
        Some(x) if n == 0 || x % n != 0 => {
            Err(cx.shape_err(format!("{what} size {x} is not a multiple of the head count {n}")))
        }
        Some(x) => Ok(Dim::Known(x / n)),
        None => Ok(cx.fresh()),
    }
}

fn add_dim(cx: &mut Cx, a: &Dim, b: &Dim) -> Dim {
    match (a.known(), b.known()) {
        (Some(x), Some(y)) => Dim::Known(x + y),
        _ => cx.fresh(),
    }
}

/// Output dtypes and shapes of an `Attention` node with `n_out` outputs.
pub fn infer(
    cx: &mut Cx,
    a: &AttentionAttrs,
    ins: &[InferIn],
    n_out: usize,
) -> Result<Vec<OutInfo>> {
    if ins.len() != a.num_inputs() {
        return Err(cx.invalid(format!(
            "expected {} inputs for the present optional inputs, got {}",
            a.num_inputs(),
            ins.len()
        )));
    }
    let (q, k, v) = (ins[0].shape, ins[1].shape, ins[2].shape);
    let dt = ins[0].dtype;
    if !dt.is_float() || ins[1].dtype != dt || ins[2].dtype != dt {
        return Err(cx.invalid(format!(
            "Q, K and V must share one float dtype, got {}, {} and {}",
            dt, ins[1].dtype, ins[2].dtype
        )));
    }
    let rank = q.len();
    if !(rank == 3 || rank == 4) || k.len() != rank || v.len() != rank {
        return Err(cx.shape_err(format!(
            "Q, K and V must all be 3-D or all 4-D, got {}, {} and {}",
            shape_str(q),
            shape_str(k),
            shape_str(v)
        )));
    }
    // Per-head views: [batch, heads, seq, head_size].
    let (b, hq, sq, hkv, skv, d, dv, y) = if rank == 4 {
        let y = vec![q[0].clone(), q[1].clone(), q[2].clone(), v[3].clone()];
        (&q[0], q[1].clone(), &q[2], k[1].clone(), &k[2], k[3].clone(), v[3].clone(), y)
    } else {
        let (Some(qh), Some(kvh)) = (a.q_num_heads, a.kv_num_heads) else {
            return Err(cx.invalid("3-D inputs need the q_num_heads and kv_num_heads attributes"));
        };
        let d = div_dim(cx, &k[2], kvh, "K hidden")?;
        div_dim(cx, &q[2], qh, "Q hidden")?;
        let dv = div_dim(cx, &v[2], kvh, "V hidden")?;
        let yh = match dv.known() {
            Some(x) => Dim::Known(x * qh),
            None => cx.fresh(),
        };
        let y = vec![q[0].clone(), q[1].clone(), yh];
        (&q[0], Dim::Known(qh), &q[1], Dim::Known(kvh), &k[1], d, dv, y)
    };
    if let (Some(x), Some(n)) = (hq.known(), hkv.known()) {
        if n == 0 || x % n != 0 {
            return Err(
                cx.shape_err(format!("q_num_heads {x} must be a multiple of kv_num_heads {n}"))
            );
        }
    }
    let (mask, past, nonpad) = a.input_slots();
    if let Some(m) = mask {
        let md = ins[m].dtype;
        if md != DType::Bool && md != dt {
            return Err(cx.invalid(format!("attn_mask must be bool or {dt}, got {md}")));
        }
    }
    if let Some(n) = nonpad {
        if !ins[n].dtype.is_int() {
            return Err(cx.invalid(format!("nonpad_kv_seqlen must be int64, got {}", ins[n].dtype)));
        }
    }
    let total = match past {
        Some(p) => {
            let pk = ins[p].shape;
            if pk.len() != 4 || ins[p + 1].shape.len() != 4 {
                return Err(cx.shape_err(format!(
                    "past_key/past_value must be 4-D, got {} and {}",
                    shape_str(pk),
                    shape_str(ins[p + 1].shape)
                )));
            }
            add_dim(cx, &pk[2], skv)
        }
        None => skv.clone(),
    };
    let mut out = vec![
        (dt, y),
        (dt, vec![b.clone(), hkv.clone(), total.clone(), d]),
        (dt, vec![b.clone(), hkv, total.clone(), dv]),
        (dt, vec![b.clone(), hq, sq.clone(), total]),
    ];
    out.truncate(n_out);
    Ok(out)
}
