//! Attention-family contrib ops rewritten onto ONNX `Attention` (opset 23 semantics, which the
//! importer accepts at any opset): `Attention` (packed QKV projection, ORT's `mask_index` in
//! every CPU form, `unidirectional`, `past`/`present`, `attention_bias`),
//! `MultiHeadAttention` (separate 3-D Q/K/V, key padding masks, past/present KV) and
//! `GroupQueryAttention` (kv heads < q heads, past/present KV, `seqlens_k`, rotary,
//! local window, softcap).

use super::{float_attr, int_attr, Builder, Known};

type R<T> = std::result::Result<T, String>;

/// Attributes every rewrite gives ONNX Attention: the head counts and the scale.
fn head_attrs(b: &Builder, q_heads: i64, kv_heads: i64) -> Vec<crate::proto::AttributeProto> {
    let mut attrs = vec![int_attr("q_num_heads", q_heads), int_attr("kv_num_heads", kv_heads)];
    if let Some(s) = b.attr("scale").and_then(|a| a.f).filter(|&s| s != 0.0) {
        attrs.push(float_attr("scale", s));
    }
    attrs
}

fn num_heads(b: &Builder, name: &str) -> R<i64> {
    let h = b.int(name, 0);
    if h <= 0 {
        return Err(b.refuse(format!("{name} must be positive, got {h}")));
    }
    Ok(h)
}

/// ORT's `mask_index` as an additive f32 bias (0 where a key may be attended, `filter`
/// elsewhere) broadcastable to `[batch, heads, q_len, total]`, following the CPU kernel's
/// `PrepareMask`: rank 1 holds each row's end position (`[batch]`), or end then start
/// positions (`[2 * batch]`, told apart at run time); rank 2 is a raw `[batch, total]` mask,
/// rank 3 a `[batch, q_len, total]` one (entries > 0 attend). `batch_of` is a value whose dim 0
/// is the batch, `total` a 1-element int64 key count.
fn mask_index_bias(
    b: &mut Builder,
    known: &Known,
    mask: &str,
    batch_of: &str,
    total: &str,
) -> R<String> {
    let filter = b.float("mask_filter_value", -10000.0);
    let m = b.cast(mask, 7);
    let valid = match known.rank(mask) {
        Some(1) => {
            // [B] or [2B] → rows [end, (start)], then a zero row so row 1 is the start either way.
            let batch = b.dim(batch_of, 0);
            let minus1 = b.constant_i64(&[-1]);
            let shape = b.value("Concat", &[&minus1, &batch], vec![int_attr("axis", 0)], None);
            let rows = b.value("Reshape", &[&m, &shape], vec![], None);
            let first = b.slice(&rows, 0, 0, 1);
            let zero = b.value("Sub", &[&first, &first], vec![], None);
            let rows = b.value("Concat", &[&rows, &zero], vec![int_attr("axis", 0)], None);
            let end = b.slice(&rows, 0, 0, 1);
            let start = b.slice(&rows, 0, 1, 2);
            let end = b.reshape(&end, &[-1, 1]);
            let start = b.reshape(&start, &[-1, 1]);
            let t = b.range(total);
            let before_end = b.value("Less", &[&t, &end], vec![], None);
            let after_start = b.value("GreaterOrEqual", &[&t, &start], vec![], None);
            let v = b.value("And", &[&before_end, &after_start], vec![], None);
            b.reshape(&v, &[0, 1, 1, -1])
        }
        Some(2) => {
            let zero = b.scalar_i64(0);
            let v = b.value("Greater", &[&m, &zero], vec![], None);
            b.reshape(&v, &[0, 1, 1, -1])
        }
        Some(3) => {
            let zero = b.scalar_i64(0);
            let v = b.value("Greater", &[&m, &zero], vec![], None);
            b.unsqueeze(&v, &[1])
        }
        Some(r) => {
            return Err(b.refuse(format!(
                "a {r}-D mask_index is not rewritten (1-D lengths, 2-D and 3-D masks are)"
            )))
        }
        None => return Err(b.refuse(format!("the rank of mask {mask:?} is unknown"))),
    };
    let zero = b.constant_f32(0.0);
    let f = b.constant_f32(filter);
    Ok(b.value("Where", &[&valid, &zero, &f], vec![], None))
}

/// The attn_mask input: the mask bias cast like `like`, plus the `attention_bias` input.
fn combine_mask(
    b: &mut Builder,
    mask: Option<String>,
    bias: Option<&str>,
    like: &str,
) -> Option<String> {
    let mask = mask.map(|m| b.value("CastLike", &[&m, like], vec![], None));
    match (mask, bias) {
        (Some(m), Some(a)) => Some(b.value("Add", &[&m, a], vec![], None)),
        (m, a) => m.or(a.map(str::to_string)),
    }
}

/// Runs ONNX Attention and names its outputs: `y`, and the present key/value when asked
/// (without a past, an empty one is fed so the node returns the new keys/values as present).
#[allow(clippy::too_many_arguments)]
fn emit_attention(
    b: &mut Builder,
    qkv: [&str; 3],
    mask: Option<&str>,
    past: Option<(&str, &str)>,
    attrs: Vec<crate::proto::AttributeProto>,
    y: &str,
    present: Option<(String, String)>,
    kv_heads: i64,
) {
    let empty = match (past, &present) {
        (None, Some(_)) => Some((empty_past(b, qkv[1], kv_heads), empty_past(b, qkv[2], kv_heads))),
        _ => None,
    };
    let past = past.or(empty.as_ref().map(|(k, v)| (k.as_str(), v.as_str())));
    let mut ins: Vec<&str> = qkv.to_vec();
    ins.push(mask.unwrap_or(""));
    if let Some((pk, pv)) = past {
        ins.extend([pk, pv]);
    }
    while ins.last() == Some(&"") {
        ins.pop();
    }
    let outs: Vec<String> = match present {
        Some((k, v)) => vec![y.to_string(), k, v],
        None => vec![y.to_string()],
    };
    let outs: Vec<&str> = outs.iter().map(String::as_str).collect();
    b.emit_multi("Attention", &ins, &outs, attrs);
}

/// `Attention`: packed QKV projection `input @ weights + bias`, split, scaled dot product.
pub(super) fn attention(b: &mut Builder, known: &Known, y: &str) -> R<()> {
    b.only_outputs(&[0, 1])?;
    if b.int("do_rotary", 0) != 0 {
        return Err(b.refuse("do_rotary is not rewritten"));
    }
    if b.int("past_present_share_buffer", 0) != 0 {
        return Err(b.refuse("past_present_share_buffer is not rewritten"));
    }
    b.no_inputs(&[(6, "past_sequence_length")])?;
    let heads = num_heads(b, "num_heads")?;
    let x = b.need_input(0, "input")?;
    let w = b.need_input(1, "weights")?;
    let wd = known.const_dims(w).filter(|d| d.len() == 2 && d[1] > 0);
    let total =
        wd.ok_or_else(|| b.refuse("weights must be a constant [in, q + k + v hidden]"))?[1] as i64;
    let sizes = match b.attr("qkv_hidden_sizes").map(|a| a.ints.clone()) {
        Some(s) if s.len() == 3 => s,
        Some(s) => return Err(b.refuse(format!("qkv_hidden_sizes must have 3 entries, got {s:?}"))),
        None if total % 3 == 0 => vec![total / 3; 3],
        None => return Err(b.refuse(format!("weights width {total} is not 3 * hidden"))),
    };
    if sizes.iter().sum::<i64>() != total
        || sizes[0] != sizes[1]
        || sizes.iter().any(|s| s % heads != 0)
    {
        return Err(b.refuse(format!(
            "qkv_hidden_sizes {sizes:?} must sum to the weights width {total}, with q = k and each a multiple of num_heads {heads}"
        )));
    }
    let mut qkv = b.value("MatMul", &[x, w], vec![], None);
    if let Some(bias) = b.input(2) {
        qkv = b.value("Add", &[&qkv, bias], vec![], None);
    }
    let q = b.slice_last(&qkv, 0, sizes[0]);
    let k = b.slice_last(&qkv, sizes[0], sizes[0] + sizes[1]);
    let v = b.slice_last(&qkv, sizes[0] + sizes[1], total);
    let past = b.input(4);
    let s_len = b.dim(x, 1);
    let t_len = match past {
        Some(p) => {
            let pl = b.dim(p, 3);
            b.value("Add", &[&s_len, &pl], vec![], None)
        }
        None => s_len,
    };
    let mask = match b.input(3) {
        Some(m) => Some(mask_index_bias(b, known, m, x, &t_len)?),
        None => None,
    };
    let mask = combine_mask(b, mask, b.input(5), &q);
    let mut attrs = head_attrs(b, heads, heads);
    if b.int("unidirectional", 0) != 0 {
        attrs.push(int_attr("is_causal", 1));
    }
    let past_kv = past.map(|p| {
        let (i0, i1) = (b.scalar_i64(0), b.scalar_i64(1));
        let pk = b.value("Gather", &[p, &i0], vec![int_attr("axis", 0)], None);
        let pv = b.value("Gather", &[p, &i1], vec![int_attr("axis", 0)], None);
        (pk, pv)
    });
    let present_out = b.output(1);
    let present = present_out.map(|_| (b.tmp(), b.tmp()));
    let past_ref = past_kv.as_ref().map(|(k, v)| (k.as_str(), v.as_str()));
    emit_attention(b, [&q, &k, &v], mask.as_deref(), past_ref, attrs, y, present.clone(), heads);
    if let (Some(out), Some((pk, pv))) = (present_out, present) {
        let k = b.unsqueeze(&pk, &[0]);
        let v = b.unsqueeze(&pv, &[0]);
        b.value("Concat", &[&k, &v], vec![int_attr("axis", 0)], Some(out));
    }
    Ok(())
}

/// `MultiHeadAttention` with separate 3-D query, key and value (optionally a packed bias, a key
/// padding mask in any CPU form, an attention bias and a past KV state).
pub(super) fn multi_head_attention(b: &mut Builder, known: &Known, y: &str) -> R<()> {
    b.only_outputs(&[0, 1, 2])?;
    b.no_inputs(&[(8, "past_sequence_length"), (9, "cache_indirection")])?;
    let heads = num_heads(b, "num_heads")?;
    let q = b.need_input(0, "query")?;
    let k = b.need_input(1, "key")?;
    let v = b.need_input(2, "value")?;
    for x in [q, k, v] {
        if known.rank(x) != Some(3) {
            return Err(b.refuse(format!(
                "{x:?} must be 3-D [batch, sequence, hidden] (packed or pre-projected BNSH layouts are not rewritten)"
            )));
        }
    }
    let mut qkv = [q.to_string(), k.to_string(), v.to_string()];
    if let Some(bias) = b.input(3) {
        let d = known.const_dims(bias).filter(|d| d.len() == 1 && d[0] > 0 && d[0] % 3 == 0);
        let h = d.ok_or_else(|| b.refuse("bias must be a constant [3 * hidden]"))?[0] as i64 / 3;
        for (i, x) in qkv.iter_mut().enumerate() {
            let part = b.slice_last(bias, i as i64 * h, (i as i64 + 1) * h);
            *x = b.value("Add", &[x.as_str(), &part], vec![], None);
        }
    }
    let past = match (b.input(6), b.input(7)) {
        (Some(pk), Some(pv)) => Some((pk, pv)),
        (None, None) => None,
        _ => return Err(b.refuse("past_key and past_value must be given together")),
    };
    let kv_len = b.dim(k, 1);
    let t_len = match past {
        Some((pk, _)) => {
            let pl = b.dim(pk, 2);
            b.value("Add", &[&kv_len, &pl], vec![], None)
        }
        None => kv_len,
    };
    let mask = match b.input(4) {
        Some(m) => Some(mask_index_bias(b, known, m, q, &t_len)?),
        None => None,
    };
    let mask = combine_mask(b, mask, b.input(5), &qkv[0]);
    let mut attrs = head_attrs(b, heads, heads);
    if b.int("unidirectional", 0) != 0 {
        attrs.push(int_attr("is_causal", 1));
    }
    let present = match (b.output(1), b.output(2)) {
        (None, None) => None,
        (k, v) => Some((
            k.map_or_else(|| b.tmp(), str::to_string),
            v.map_or_else(|| b.tmp(), str::to_string),
        )),
    };
    emit_attention(b, [&qkv[0], &qkv[1], &qkv[2]], mask.as_deref(), past, attrs, y, present, heads);
    Ok(())
}

/// Rotary embedding of a 3-D `[batch, seq, heads * head]` value with ORT's cos/sin caches
/// (`[max_position, rotary_dim / 2]`) at `positions` (`[seq]` or `[batch, seq]`).
#[allow(clippy::too_many_arguments)]
fn rotary(
    b: &mut Builder,
    x: &str,
    heads: i64,
    head: i64,
    half: i64,
    cs: (&str, &str),
    pos: &str,
    per_batch: bool,
) -> String {
    // GroupQueryAttention names the layout `rotary_interleaved`, RotaryEmbedding `interleaved`.
    let interleaved = b.int("rotary_interleaved", 0) == 1 || b.int("interleaved", 0) == 1;
    let rd = 2 * half;
    let x4 = b.reshape(x, &[0, 0, heads, head]);
    let gathered: Vec<String> = [cs.0, cs.1]
        .iter()
        .map(|c| {
            let g = b.value("Gather", &[c, pos], vec![], None);
            // [S, half] → [1, S, 1, half]; [B, S, half] → [B, S, 1, half].
            if per_batch {
                b.unsqueeze(&g, &[2])
            } else {
                b.unsqueeze(&g, &[0, 2])
            }
        })
        .collect();
    let (mut cos, mut sin) = (gathered[0].clone(), gathered[1].clone());
    let rot = if rd < head { b.slice_last(&x4, 0, rd) } else { x4.clone() };
    let (x1, x2, rot5) = if interleaved {
        let r5 = b.reshape(&rot, &[0, 0, 0, half, 2]);
        cos = b.unsqueeze(&cos, &[-1]);
        sin = b.unsqueeze(&sin, &[-1]);
        (b.slice_last(&r5, 0, 1), b.slice_last(&r5, 1, 2), true)
    } else {
        (b.slice_last(&rot, 0, half), b.slice_last(&rot, half, rd), false)
    };
    let a = b.value("Mul", &[&x1, &cos], vec![], None);
    let c = b.value("Mul", &[&x2, &sin], vec![], None);
    let y1 = b.value("Sub", &[&a, &c], vec![], None);
    let a = b.value("Mul", &[&x2, &cos], vec![], None);
    let c = b.value("Mul", &[&x1, &sin], vec![], None);
    let y2 = b.value("Add", &[&a, &c], vec![], None);
    let mut y = b.value("Concat", &[&y1, &y2], vec![int_attr("axis", -1)], None);
    if rot5 {
        y = b.reshape(&y, &[0, 0, 0, rd]);
    }
    if rd < head {
        let rest = b.slice_last(&x4, rd, head);
        y = b.value("Concat", &[&y, &rest], vec![int_attr("axis", -1)], None);
    }
    b.reshape(&y, &[0, 0, -1])
}

/// `GroupQueryAttention`: the new keys/values are appended after `past_key`/`past_value`
/// (present = past ++ new), the queries attend causally to them and to their row's own past
/// (`seqlens_k[b] + 1 - S` entries). The output equals ORT's for every past layout ORT takes
/// (exact past, padded rows, a shared max-length buffer) except a local window over a padded
/// or shared past; `present` equals ORT's when every row's past fills `past_key` (no padded
/// rows, no shared buffer: ORT writes the new entries in place after each row's past there,
/// into a buffer of the same length, where ours is longer by S).
pub(super) fn group_query_attention(b: &mut Builder, known: &Known, y: &str) -> R<()> {
    b.only_outputs(&[0, 1, 2])?;
    // ORT reports its defaults for unset attributes (smooth_softmax -1, qk_output -1 or 0):
    // only the documented "on" values count.
    if b.int("smooth_softmax", 0) == 1 {
        return Err(b.refuse("smooth_softmax is not rewritten"));
    }
    if b.int("qk_output", 0) > 0 {
        return Err(b.refuse("qk_output is not rewritten"));
    }
    b.no_inputs(&[(11, "head_sink")])?;
    let heads = num_heads(b, "num_heads")?;
    let kv_heads = num_heads(b, "kv_num_heads")?;
    if heads % kv_heads != 0 {
        return Err(
            b.refuse(format!("num_heads {heads} is not a multiple of kv_num_heads {kv_heads}"))
        );
    }
    let query = b.need_input(0, "query")?;
    let seqlens = b.need_input(5, "seqlens_k")?;
    let past = match (b.input(3), b.input(4)) {
        (Some(pk), Some(pv)) => Some((pk, pv)),
        (None, None) => None,
        _ => return Err(b.refuse("past_key and past_value must be given together")),
    };
    let (q, k, v) = match (b.input(1), b.input(2)) {
        (Some(k), Some(v)) => (query.to_string(), k.to_string(), v.to_string()),
        (None, None) => {
            let q4 = b.reshape(query, &[0, 0, heads + 2 * kv_heads, -1]);
            let parts =
                [(0, heads), (heads, heads + kv_heads), (heads + kv_heads, heads + 2 * kv_heads)];
            let mut out = parts.iter().map(|&(s, e)| {
                let p = b.slice(&q4, 2, s, e);
                b.reshape(&p, &[0, 0, -1])
            });
            let (q, k, v) = (
                out.next().unwrap_or_default(),
                out.next().unwrap_or_default(),
                out.next().unwrap_or_default(),
            );
            (q, k, v)
        }
        _ => {
            return Err(
                b.refuse("key and value must be given together (or neither, for packed QKV)")
            )
        }
    };
    let s_len = b.dim(query, 1);
    let p_len = past.map(|(pk, _)| b.dim(pk, 2));
    let t_len = match &p_len {
        Some(p) => b.value("Add", &[&s_len, p], vec![], None),
        None => s_len.clone(),
    };
    // Row b's past length is seqlens_k[b] + 1 - S (ORT's `past_seqlen`; negative in a padded
    // first prompt, where causality alone hides the padding from the rows that matter).
    let lens = b.cast(seqlens, 7);
    let one = b.constant_i64(&[1]);
    let total_b = b.value("Add", &[&lens, &one], vec![], None);
    let past_b = b.value("Sub", &[&total_b, &s_len], vec![], None);
    let past_b = b.reshape(&past_b, &[-1, 1]);
    let (q, k) = if b.int("do_rotary", 0) == 1 {
        let (cos, sin) = match (b.input(7), b.input(8)) {
            (Some(c), Some(s)) => (c, s),
            _ => return Err(b.refuse("do_rotary needs cos_cache and sin_cache")),
        };
        let half = known.const_dims(cos).filter(|d| d.len() == 2).map(|d| d[1] as i64);
        let half = half.ok_or_else(|| {
            b.refuse("cos_cache must be a constant [max_position, rotary_dim / 2]")
        })?;
        let hidden = (known.dims)(query).and_then(|d| d.last()?.parse::<i64>().ok());
        let width = if b.input(1).is_some() { heads } else { heads + 2 * kv_heads };
        let head = hidden
            .filter(|h| h % width == 0)
            .map(|h| h / width)
            .ok_or_else(|| b.refuse("rotary needs the query's hidden size (a static last dim)"))?;
        if 2 * half > head {
            return Err(b.refuse(format!("rotary dim {} exceeds the head size {head}", 2 * half)));
        }
        let (pos, per_batch) = match b.input(9) {
            Some(p) => (b.cast(p, 7), true),
            None => {
                // Positions max(past_b, 0) + s, as ORT derives them from seqlens_k.
                let s_idx = b.range(&s_len);
                let zero = b.scalar_i64(0);
                let start = b.value("Max", &[&past_b, &zero], vec![], None);
                (b.value("Add", &[&start, &s_idx], vec![], None), true)
            }
        };
        let q = rotary(b, &q, heads, head, half, (cos, sin), &pos, per_batch);
        let k = rotary(b, &k, kv_heads, head, half, (cos, sin), &pos, per_batch);
        (q, k)
    } else {
        (q, k)
    };
    // The new keys sit at P.. (after the whole past buffer, P = past_key's length); row b's past
    // keys at or after past_b are not its own (a padded row, or the unused tail of a shared
    // max-length buffer): masked with -inf (ORT leaves them out).
    let t = b.range(&t_len);
    let own_past = b.value("Less", &[&t, &past_b], vec![], None);
    let m = match &p_len {
        Some(p) => {
            let new = b.value("GreaterOrEqual", &[&t, p], vec![], None);
            let valid = b.value("Or", &[&own_past, &new], vec![], None);
            let valid = b.reshape(&valid, &[0, 1, 1, -1]);
            let zero = b.constant_f32(0.0);
            let ninf = b.constant_f32(f32::NEG_INFINITY);
            Some(b.value("Where", &[&valid, &zero, &ninf], vec![], None))
        }
        None => None,
    };
    let mask = combine_mask(b, m, b.input(10), &q);
    let mut attrs = head_attrs(b, heads, kv_heads);
    attrs.push(int_attr("is_causal", 1));
    let window = b.int("local_window_size", -1);
    if window > 0 {
        // ORT's CPU kernel attends to the last `local_window_size` positions, the query's own
        // included (ONNX's left_window_size counts the keys before it).
        attrs.push(int_attr("left_window_size", window - 1));
    }
    let softcap = b.float("softcap", 0.0);
    if softcap > 0.0 {
        attrs.push(float_attr("softcap", softcap));
    }
    let present = match (b.output(1), b.output(2)) {
        (None, None) => None,
        (pk, pv) => Some((
            pk.map_or_else(|| b.tmp(), str::to_string),
            pv.map_or_else(|| b.tmp(), str::to_string),
        )),
    };
    emit_attention(b, [&q, &k, &v], mask.as_deref(), past, attrs, y, present, kv_heads);
    Ok(())
}

/// A `[batch, kv_heads, 0, head]` past for `x` (`[batch, seq, kv_heads * head]`).
fn empty_past(b: &mut Builder, x: &str, kv_heads: i64) -> String {
    let x4 = b.reshape(x, &[0, 0, kv_heads, -1]);
    let t = b.value("Transpose", &[&x4], vec![super::ints_attr("perm", &[0, 2, 1, 3])], None);
    b.slice(&t, 2, 0, 0)
}

/// `RotaryEmbedding` on a 3-D `[batch, seq, hidden]` or 4-D `[batch, heads, seq, head]` input,
/// with `position_ids` as `[batch, seq]` or a 1-element offset (positions offset + s).
pub(super) fn rotary_embedding(b: &mut Builder, known: &Known, y: &str) -> R<()> {
    b.only_outputs(&[0])?;
    if b.int("is_packed_batching", 0) != 0 {
        return Err(b.refuse("is_packed_batching is not rewritten"));
    }
    let x = b.need_input(0, "input")?;
    let pids = b.need_input(1, "position_ids")?;
    let cos = b.need_input(2, "cos_cache")?;
    let sin = b.need_input(3, "sin_cache")?;
    let half = known.const_dims(cos).filter(|d| d.len() == 2).map(|d| d[1] as i64);
    let half = half
        .ok_or_else(|| b.refuse("cos_cache must be a constant [max_position, rotary_dim / 2]"))?;
    let xd = (known.dims)(x).ok_or_else(|| b.refuse(format!("the rank of {x:?} is unknown")))?;
    let last = xd.last().and_then(|d| d.parse::<i64>().ok());
    let four_d = xd.len() == 4;
    let head = if four_d {
        last.ok_or_else(|| b.refuse("a 4-D input needs a static head size"))?
    } else if xd.len() == 3 {
        match b.int("num_heads", 0) {
            n if n > 0 => last
                .filter(|h| h % n == 0)
                .map(|h| h / n)
                .ok_or_else(|| b.refuse("num_heads needs a static hidden size it divides"))?,
            _ => 2 * half,
        }
    } else {
        return Err(b.refuse(format!("input must be 3-D or 4-D, got rank {}", xd.len())));
    };
    let rd = b.int("rotary_embedding_dim", 0);
    if rd != 0 && rd != 2 * half {
        return Err(b.refuse(format!("rotary_embedding_dim {rd} != 2 * cos_cache's width {half}")));
    }
    if 2 * half > head {
        return Err(b.refuse(format!("rotary dim {} exceeds the head size {head}", 2 * half)));
    }
    let (pos, per_batch) = match known.rank(pids) {
        Some(2) => (b.cast(pids, 7), true),
        Some(1) => {
            let x3 = if four_d { None } else { Some(x) };
            let s_len = match x3 {
                Some(x) => b.dim(x, 1),
                None => b.dim(x, 2),
            };
            let s_idx = b.range(&s_len);
            let off = b.cast(pids, 7);
            (b.value("Add", &[&off, &s_idx], vec![], None), false)
        }
        r => return Err(b.refuse(format!("position_ids must be 1-D or 2-D, got rank {r:?}"))),
    };
    if four_d {
        let perm = super::ints_attr("perm", &[0, 2, 1, 3]);
        let t = b.value("Transpose", &[x], vec![perm.clone()], None);
        let x3 = b.reshape(&t, &[0, 0, -1]);
        let r = rotary(b, &x3, -1, head, half, (cos, sin), &pos, per_batch);
        let r4 = b.reshape(&r, &[0, 0, -1, head]);
        b.value("Transpose", &[&r4], vec![perm], Some(y));
    } else {
        let r = rotary(b, x, -1, head, half, (cos, sin), &pos, per_batch);
        b.value("Identity", &[&r], vec![], Some(y));
    }
    Ok(())
}
