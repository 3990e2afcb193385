//! ONNX `Attention` (opsets 23-25) built from tensor-library ops, so the same code runs on the CPU
//! and GPU places: `softmax(softcap(q*s @ (k*s)^T) + bias) @ v` with an optional KV cache
//! (concatenated before the new keys/values), grouped-query heads (a broadcast batched matmul
//! instead of copying repeated KV heads), and a bias combining the attn_mask with causal,
//! sliding-window and `nonpad_kv_seqlen` padding constraints.
//!
//! The steps follow the ONNX reference implementation, including where it rounds to the input
//! dtype: `q` and `k` are each scaled by `sqrt(scale)` in the input dtype, `q @ k^T` and the
//! probabilities fed to the final matmul are in the input dtype; softcap and bias are computed in
//! f32 for f16 inputs (exact for the 0/-inf bias) and the softmax in the `softmax_precision`
//! dtype, else the input dtype (f16 rounding emulated step by step). Rows whose bias is entirely
//! `-inf` (no key may be attended) produce zero probabilities instead of NaN.
//!
//! When the scores output is not requested and no softcap, window or external cache length is
//! set, the node runs as one fused kernel instead (`mpsrt_tensor::scaled_dot_product_attention`:
//! f32 arithmetic throughout; f16 inputs only with `softmax_precision` = float);
//! `MPSRT_FUSED_ATTENTION=0` keeps the composition.

use crate::ops::{Ctx, OpEntry};
use crate::reduce::to_out;
use mpsrt_core::{DType, Error, Place, Result};
use mpsrt_graph::{AttentionAttrs, Node, Op};
use mpsrt_tensor::{self as t, BinaryFn as B, Expr, Scalar, Tensor, UnaryFn as U, VType};

/// The op table entries of this family.
pub(crate) fn entries() -> Vec<OpEntry> {
    vec![OpEntry { name: "Attention", run: attention, host_from: usize::MAX }]
}

fn attention(ctx: &Ctx<'_>, node: &Node, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let Op::Attention(a) = &node.op else {
        return Err(ctx.err(node, "not Attention"));
    };
    let label = ctx.label(node);
    // The fourth output (the scores) exists only in the unfused composition.
    let want_qk = node.outputs.len() > 3;
    let outs = run(&label, ctx.place, a, inputs, want_qk, node.outputs.len()).map_err(|e| {
        if e.op == label {
            e
        } else {
            ctx.wrap(node, e)
        }
    })?;
    outs.into_iter()
        .take(node.outputs.len())
        .enumerate()
        .map(|(i, y)| to_out(ctx, node, i, y))
        .collect()
}

/// Shape of a 4-D tensor, or an error naming `what`.
fn dims4(label: &str, x: &Tensor, what: &str) -> Result<[usize; 4]> {
    <[usize; 4]>::try_from(x.shape()).map_err(|_| {
        Error::shape(label, format!("{what} must be 4-D here, got shape {:?}", x.shape()))
    })
}

/// Views a 3-D `[batch, seq, heads * head_size]` input as `[batch, heads, seq, head_size]`.
fn split_heads(label: &str, x: &Tensor, heads: Option<usize>, what: &str) -> Result<Tensor> {
    if x.ndim() == 4 {
        return Ok(x.clone());
    }
    let heads = heads.ok_or_else(|| {
        Error::invalid(label, "3-D inputs need the q_num_heads and kv_num_heads attributes")
    })?;
    let s = x.shape();
    if x.ndim() != 3 || heads == 0 || !s[2].is_multiple_of(heads) {
        return Err(Error::shape(
            label,
            format!("{what} {s:?} is not [batch, seq, heads * head_size] with {heads} heads"),
        ));
    }
    let shape = [s[0] as isize, s[1] as isize, heads as isize, (s[2] / heads) as isize];
    x.reshape(&shape)?.permute(&[0, 2, 1, 3])
}

/// `x * s` computed in float and stored as `out`.
fn scale_by(label: &str, x: &Tensor, s: f64, out: DType) -> Result<Tensor> {
    let e = Expr::binary(
        B::Mul,
        Expr::cast(VType::Float, Expr::input(0)),
        Expr::Scalar(0, VType::Float),
    );
    t::fused_elementwise(label, &[x], out, e, &[Scalar::F(s)])
}

/// `sqrt(scale)` rounded to the input dtype, as the reference applies it to both `q` and `k`.
fn half_scale(a: &AttentionAttrs, head_size: usize, dt: DType) -> f64 {
    let scale = a.scale.map_or(1.0 / (head_size as f64).sqrt(), f64::from);
    let s = scale.sqrt();
    match dt {
        DType::F16 => half::f16::from_f64(s).to_f64(),
        DType::F32 => s as f32 as f64,
        _ => s,
    }
}

fn run(
    label: &str,
    place: Place,
    a: &AttentionAttrs,
    ins: &[Tensor],
    want_qk: bool,
    n_out: usize,
) -> Result<Vec<Tensor>> {
    if ins.len() != a.num_inputs() {
        return Err(Error::invalid(
            label,
            format!("expected {} inputs, got {}", a.num_inputs(), ins.len()),
        ));
    }
    let (mask_i, past_i, nonpad_i) = a.input_slots();
    let (q_in, k_in, v_in) = (&ins[0], &ins[1], &ins[2]);
    if k_in.ndim() != q_in.ndim() || v_in.ndim() != q_in.ndim() {
        return Err(Error::shape(
            label,
            format!(
                "Q, K and V must have the same rank, got {:?}, {:?} and {:?}",
                q_in.shape(),
                k_in.shape(),
                v_in.shape()
            ),
        ));
    }
    let three_d = q_in.ndim() == 3;
    let q = split_heads(label, q_in, a.q_num_heads, "Q")?;
    let k = split_heads(label, k_in, a.kv_num_heads, "K")?;
    let v = split_heads(label, v_in, a.kv_num_heads, "V")?;
    let (k, v, past_len) = match past_i {
        Some(p) => {
            let (pk, pv) = (&ins[p], &ins[p + 1]);
            dims4(label, pk, "past_key")?;
            dims4(label, pv, "past_value")?;
            (t::concat(&[pk, &k], 2)?, t::concat(&[pv, &v], 2)?, pk.shape()[2])
        }
        None => (k, v, 0),
    };
    let [b, hq, sq, d] = dims4(label, &q, "Q")?;
    let [kb, hkv, total, kd] = dims4(label, &k, "K")?;
    let [vb, vh, vt, dv] = dims4(label, &v, "V")?;
    if kb != b || vb != b || kd != d || vh != hkv || vt != total {
        return Err(Error::shape(
            label,
            format!(
                "per-head Q {:?}, K {:?} and V {:?} (after the cache) do not match: \
                 expected K [{b}, kv_heads, kv_len, {d}] and V [{b}, kv_heads, kv_len, v_size]",
                q.shape(),
                k.shape(),
                v.shape()
            ),
        ));
    }
    if hkv == 0 || hq % hkv != 0 {
        return Err(Error::shape(
            label,
            format!("q heads ({hq}) must be a multiple of kv heads ({hkv})"),
        ));
    }
    let dt = q.dtype();
    // f16 on a GPU with ≥ 16 query rows: the matrix-unit kernel, else the composition (the
    // register-tiled kernel is slower than it for f16), unless MPSRT_ATTENTION_F16_SCALAR=1.
    // Decoding steps (fewer rows: GPT-2's one-token steps) keep the row kernel.
    let f16_route = dt != DType::F16
        || !place.is_gpu()
        || sq < 16
        || f16_scalar_ok()
        || t::sdpa_on_matrix_units(&q, &k, &v, mask_i.map(|i| mask_dtype(&ins[i], dt)));
    if !want_qk && f32_composed(place, a, dt, sq) {
        return composed_f32(
            label,
            place,
            a,
            ins,
            (mask_i, nonpad_i),
            [b, hq, hkv, sq, total, d, dv],
            past_len,
            three_d,
            [&q, &k, &v],
            n_out,
        );
    }
    if !want_qk && f16_route && fusable(place, a, dt, d, dv) {
        // An f16 mask stays f16 for f16 inputs (the kernels read either): no cast per run.
        let mcf = |m: &Tensor| mask_dtype(m, dt);
        let mask = mask_i.map(|i| mask_bias(label, &ins[i], total, mcf(&ins[i]))).transpose()?;
        // 4-D inputs get the output computed sequence-major and returned as the permuted view:
        // exported graphs transpose it back to `[b, s, h, dv]` and reshape to `[b, s, h·dv]`,
        // which is then free instead of a copy (`MPSRT_ATTENTION_SEQ_MAJOR=0` off).
        // Decoding steps (< 16 query rows) keep the head-major output: the view was measured
        // slower there (H100 call 3: GPT-2 f16 decode 186 vs 201 tokens/s).
        let seq_major = three_d || (seq_major_views() && sq >= 16);
        let opts = t::SdpaOptions {
            scale: a.scale.map_or(1.0 / (d as f64).sqrt(), f64::from),
            causal_offset: a.is_causal.then_some(past_len as i64),
            seq_major,
        };
        let y = t::scaled_dot_product_attention(&q, &k, &v, mask.as_ref(), opts)?;
        let y = if three_d {
            y.reshape(&[b as isize, sq as isize, (hq * dv) as isize])?
        } else if seq_major {
            y.permute(&[0, 2, 1, 3])?
        } else {
            y
        };
        // present_key / present_value only when the node has those outputs (each a copy of
        // a permuted view otherwise).
        let mut outs = vec![y];
        if n_out > 1 {
            outs.push(k.contiguous()?);
            outs.push(v.contiguous()?);
        }
        return Ok(outs);
    }
    let groups = hq / hkv;
    // f16 keeps the reference's rounding points but computes the rest in f32.
    let cf = if dt == DType::F16 { DType::F32 } else { dt };
    let s = half_scale(a, d, dt);
    let qs = scale_by(label, &q, s, dt)?;
    let ks = scale_by(label, &k, s, dt)?;
    // Grouped heads: query head g * groups + i uses kv head g, so split the query heads and
    // broadcast each kv head over its group instead of materializing repeats.
    let grouped = |x: &Tensor, rows: usize, cols: usize| {
        x.reshape(&[b as isize, hkv as isize, groups as isize, rows as isize, cols as isize])
    };
    let qk = t::matmul(&grouped(&qs, sq, d)?, &ks.transpose(-1, -2)?.unsqueeze(2)?)?.reshape(&[
        b as isize,
        hq as isize,
        sq as isize,
        total as isize,
    ])?;
    let mut scores = qk.astype(cf)?;
    if a.softcap > 0.0 {
        let c = || Expr::Scalar(0, VType::Float);
        let x = Expr::cast(VType::Float, Expr::input(0));
        let e = Expr::binary(B::Mul, Expr::unary(U::Tanh, Expr::binary(B::Div, x, c())), c());
        scores = t::fused_elementwise(label, &[&scores], cf, e, &[Scalar::F(a.softcap as f64)])?;
    }
    let bias = build_bias(label, place, a, ins, (mask_i, nonpad_i), past_len, b, sq, total, cf)?;
    let with_bias = match &bias {
        Some(bias) => t::add(&scores, bias)?,
        None => scores.clone(),
    };
    // The GPU has no f64: a double-precision request falls back to f32 there, as for f64 tensors.
    let sd = match a.softmax_precision {
        Some(p) if place.is_gpu() && !p.gpu_supported() => p.gpu_fallback(),
        Some(p) => p,
        None => dt,
    };
    let mut p = if sd == DType::F16 {
        softmax_f16(label, &with_bias)?.astype(cf)?
    } else {
        t::softmax(&with_bias.astype(sd)?, -1)?.astype(cf)?
    };
    if let Some(bias) = &bias {
        // Rows with every key masked (the bias max is -inf) get zero probabilities; `select`
        // rather than a multiply so their NaN softmax does not leak into the output.
        let row_max = t::max(bias, Some(&[-1]), true)?;
        let dead = t::less_scalar(&row_max, Scalar::F(f32::MIN as f64))?;
        let e = Expr::select(Expr::input(0), Expr::Scalar(0, VType::Float), Expr::input(1));
        p = t::fused_elementwise(label, &[&dead, &p], cf, e, &[Scalar::F(0.0)])?;
    }
    let qk_out = match a.qk_matmul_output_mode {
        2 => with_bias,
        3 => p.clone(),
        _ => scores,
    };
    let y = t::matmul(&grouped(&p.astype(dt)?, sq, total)?, &v.unsqueeze(2)?)?;
    let y = if three_d {
        y.reshape(&[b as isize, hq as isize, sq as isize, dv as isize])?
            .permute(&[0, 2, 1, 3])?
            .reshape(&[b as isize, sq as isize, (hq * dv) as isize])?
    } else {
        y.reshape(&[b as isize, hq as isize, sq as isize, dv as isize])?
    };
    Ok(vec![y, k.contiguous()?, v.contiguous()?, qk_out.astype(dt)?])
}

/// Whether f32 attention on a GPU runs as `q·kᵀ` (GEMM) → [`t::masked_softmax`] (scale, mask
/// and softmax in one pass) → `p·v` (GEMM): prompts of ≥ 16 query rows without softcap, windows
/// or external cache lengths, softmax in f32. On the H100 the register-tiled fused kernel took
/// 112 us per BERT-base layer at b8 against 60 us for the unfused graph chain (ninth session),
/// whose scale + mask add and NaN guard this route folds into the softmax.
/// `MPSRT_ATTENTION_F32_COMPOSED=0` (read once) keeps the fused kernels. Decoding steps (< 16
/// query rows) keep the row kernel.
fn f32_composed(place: Place, a: &AttentionAttrs, dt: DType, sq: usize) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| {
        std::env::var("MPSRT_ATTENTION_F32_COMPOSED").map_or(true, |v| v.trim() != "0")
    });
    on && place.is_gpu()
        && dt == DType::F32
        && sq >= 16
        && a.softcap <= 0.0
        && a.left_window_size < 0
        && a.right_window_size < 0
        && !a.has_nonpad
        && a.softmax_precision.is_none_or(|p| matches!(p, DType::F32 | DType::F64))
}

/// The [`f32_composed`] route. `dims`: `(B, Hq, Hkv, Sq, Skv, D, Dv)`; `qkv` the per-head views.
#[allow(clippy::too_many_arguments)]
fn composed_f32(
    label: &str,
    place: Place,
    a: &AttentionAttrs,
    ins: &[Tensor],
    slots: (Option<usize>, Option<usize>),
    [b, hq, hkv, sq, total, d, dv]: [usize; 7],
    past_len: usize,
    three_d: bool,
    [q, k, v]: [&Tensor; 3],
    n_out: usize,
) -> Result<Vec<Tensor>> {
    let groups = hq / hkv;
    let scale = a.scale.map_or(1.0 / (d as f64).sqrt(), f64::from);
    let bias = build_bias(label, place, a, ins, slots, past_len, b, sq, total, DType::F32)?;
    let (bi, hi) = (b as isize, hkv as isize);
    // Grouped heads as in the reference composition; one group keeps the operands' own views.
    let (qk, p_shape) = if groups == 1 {
        (t::matmul(q, &k.transpose(-1, -2)?)?, None)
    } else {
        let g = groups as isize;
        let qg = q.reshape(&[bi, hi, g, sq as isize, d as isize])?;
        let s = t::matmul(&qg, &k.transpose(-1, -2)?.unsqueeze(2)?)?;
        (s.reshape(&[bi, hq as isize, sq as isize, total as isize])?, Some(g))
    };
    let p = t::masked_softmax(&qk, scale, bias.as_ref())?;
    let y = match p_shape {
        // Sequence-major `[B, S, H, Dv]` storage: the exporter's transpose + reshape (or the
        // 3-D merge below) after it is a view.
        None if f32_seq_major() => t::matmul_seq_major(&p, v)?,
        None => t::matmul(&p, v)?,
        Some(g) => {
            let pg = p.reshape(&[bi, hi, g, sq as isize, total as isize])?;
            t::matmul(&pg, &v.unsqueeze(2)?)?.reshape(&[
                bi,
                hq as isize,
                sq as isize,
                dv as isize,
            ])?
        }
    };
    let y = if three_d {
        y.permute(&[0, 2, 1, 3])?.reshape(&[bi, sq as isize, (hq * dv) as isize])?
    } else {
        y
    };
    let mut outs = vec![y];
    if n_out > 1 {
        outs.push(k.contiguous()?);
        outs.push(v.contiguous()?);
    }
    Ok(outs)
}

/// `MPSRT_ATTENTION_F32_SEQ_MAJOR` (default on, `0` off; read per call, at plan time; H100
/// call C of the eleventh session, BERT-base f32 mean of alternated p50s: b8 7.00 vs 7.01 ms,
/// b1 2.29 vs 2.39, 149 vs 161 replayed dispatches): the composed f32 attention's `p·v` stores
/// `[B, S, H, Dv]`
/// ([`t::matmul_seq_major`]) so the heads' transpose + merge after it is a view — BERT-base
/// copied 5.8 us per layer at b8 there (H100 call A's `Reshape_3`).
fn f32_seq_major() -> bool {
    std::env::var("MPSRT_ATTENTION_F32_SEQ_MAJOR").map_or(true, |v| v.trim() != "0")
}

/// Whether the fused kernel computes this node: no softcap, sliding window or external-cache
/// lengths, a softmax in f32 (f16 inputs only with `softmax_precision` = float: the default is
/// the reference's step-rounded f16 softmax, which the composition reproduces to the bit), head
/// sizes the device's kernel takes, on a GPU (the CPU keeps the composition, whose products run
/// on the fast SGEMM); `MPSRT_FUSED_ATTENTION=0` turns it off (to compare with the composition).
fn fusable(place: Place, a: &AttentionAttrs, dt: DType, d: usize, dv: usize) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| std::env::var("MPSRT_FUSED_ATTENTION").map_or(true, |v| v != "0"));
    on && place.is_gpu()
        && a.softcap <= 0.0
        && a.left_window_size < 0
        && a.right_window_size < 0
        && !a.has_nonpad
        && match a.softmax_precision {
            Some(p) => matches!(p, DType::F32 | DType::F64),
            None => dt != DType::F16,
        }
        && t::sdpa_fusable(place, dt, d, dv)
}

/// The dtype `mask_bias` gives this mask for inputs of `dt` (what the fused kernels read).
fn mask_dtype(m: &Tensor, dt: DType) -> DType {
    if m.dtype() == DType::F16 && dt == DType::F16 {
        DType::F16
    } else {
        DType::F32
    }
}

/// `MPSRT_ATTENTION_F16_SCALAR=1` (read once): f16 attention that the matrix units do not take
/// still runs the scalar fused kernels instead of the composition.
fn f16_scalar_ok() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MPSRT_ATTENTION_F16_SCALAR").is_ok_and(|v| v.trim() == "1"))
}

/// `MPSRT_ATTENTION_SEQ_MAJOR` (default on), read once: whether the fused kernel writes 4-D
/// attention outputs sequence-major (see `run`).
fn seq_major_views() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MPSRT_ATTENTION_SEQ_MAJOR").map_or(true, |v| v.trim() != "0"))
}

/// Softmax over the last axis in f16 arithmetic: each step (`x - max`, `exp`, the row sum, the
/// division) is computed in f32 and rounded to f16, as the reference does for f16 inputs, so
/// results agree to the bit rather than within an f16 ulp of an all-f32 softmax.
fn softmax_f16(label: &str, x: &Tensor) -> Result<Tensor> {
    let x = x.astype(DType::F16)?.astype(DType::F32)?;
    let m = t::max(&x, Some(&[-1]), true)?;
    let float = |i| Expr::cast(VType::Float, Expr::input(i));
    let shifted = t::fused_elementwise(
        label,
        &[&x, &m],
        DType::F16,
        Expr::binary(B::Sub, float(0), float(1)),
        &[],
    )?;
    let e =
        t::fused_elementwise(label, &[&shifted], DType::F16, Expr::unary(U::Exp, float(0)), &[])?;
    let sum = t::sum(&e.astype(DType::F32)?, Some(&[-1]), true)?.astype(DType::F16)?;
    t::fused_elementwise(
        label,
        &[&e, &sum],
        DType::F16,
        Expr::binary(B::Div, float(0), float(1)),
        &[],
    )
}

/// The attn_mask as an additive bias in `cf`: bool `true` (attend) becomes 0 and `false` `-inf`;
/// a mask shorter than the key length is padded with masked positions.
fn mask_bias(label: &str, m: &Tensor, total: usize, cf: DType) -> Result<Tensor> {
    let bias = if m.dtype() == DType::Bool {
        t::where_scalar(m, Scalar::F(0.0), Scalar::F(f64::NEG_INFINITY), cf)?
    } else {
        m.astype(cf)?
    };
    let last = *bias.shape().last().ok_or_else(|| {
        Error::shape(label, "attn_mask must have at least one dimension, got a scalar")
    })?;
    if last > total {
        return Err(Error::shape(
            label,
            format!("attn_mask {:?} covers {last} keys but there are only {total}", m.shape()),
        ));
    }
    if last == total {
        return Ok(bias);
    }
    let mut pad_shape = bias.shape().to_vec();
    *pad_shape.last_mut().unwrap_or(&mut 0) = total - last;
    let pad = t::full(&pad_shape, Scalar::F(f64::NEG_INFINITY), cf, bias.place())?;
    t::concat(&[&bias, &pad], -1)
}

/// The combined additive bias, broadcastable to `[batch, q_heads, q_len, total]`, or `None` when
/// nothing is masked. Causal and window constraints compare the query's absolute position
/// (`offset + i`) with the key index; the offset is the past length, or per batch
/// `nonpad_kv_seqlen[b] - q_len` for an external cache.
#[allow(clippy::too_many_arguments)]
fn build_bias(
    label: &str,
    place: Place,
    a: &AttentionAttrs,
    ins: &[Tensor],
    (mask_i, nonpad_i): (Option<usize>, Option<usize>),
    past_len: usize,
    b: usize,
    sq: usize,
    total: usize,
    cf: DType,
) -> Result<Option<Tensor>> {
    let mask = mask_i.map(|i| mask_bias(label, &ins[i], total, cf)).transpose()?;
    let nonpad = match nonpad_i {
        Some(i) => {
            let n = ins[i].astype(DType::I32)?;
            if n.numel() != b {
                return Err(Error::shape(
                    label,
                    format!("nonpad_kv_seqlen {:?} must have one entry per batch ({b})", n.shape()),
                ));
            }
            Some(n.reshape(&[b as isize, 1, 1])?)
        }
        None => None,
    };
    // Key positions only where a causal/window/padding rule reads them: on a GPU the arange is
    // an upload, one extra command per layer in every replay (BERT's plain padding mask has none).
    let window = a.left_window_size >= 0 || a.right_window_size >= 0;
    let j_idx = if a.is_causal || window || nonpad.is_some() {
        t::arange(0.0, total as f64, 1.0, DType::I32, place)?.reshape(&[1, -1])?
    } else {
        return Ok(mask);
    };
    let mut allowed: Option<Tensor> = None;
    let mut and = |c: Tensor| -> Result<()> {
        allowed = Some(match allowed.take() {
            Some(x) => t::logical_and(&x, &c)?,
            None => c,
        });
        Ok(())
    };
    if a.is_causal || window {
        let i_idx = t::arange(0.0, sq as f64, 1.0, DType::I32, place)?.reshape(&[-1, 1])?;
        // Absolute query positions: [q, 1], or [batch, q, 1] with a per-batch offset.
        let pos = match &nonpad {
            Some(n) => t::add(&i_idx, &t::subtract_scalar(n, Scalar::I(sq as i64))?)?,
            None => t::add_scalar(&i_idx, Scalar::I(past_len as i64))?,
        };
        let diff = t::subtract(&pos, &j_idx)?;
        let per_batch = |c: Tensor| {
            if nonpad.is_some() {
                c.reshape(&[b as isize, 1, sq as isize, total as isize])
            } else {
                Ok(c)
            }
        };
        if a.is_causal {
            and(per_batch(t::greater_equal_scalar(&diff, Scalar::I(0))?)?)?;
        }
        if a.left_window_size >= 0 {
            and(per_batch(t::less_equal_scalar(&diff, Scalar::I(a.left_window_size))?)?)?;
        }
        if a.right_window_size >= 0 {
            let c = t::greater_equal_scalar(&diff, Scalar::I(-a.right_window_size))?;
            and(per_batch(c)?)?;
        }
    }
    if let Some(n) = &nonpad {
        // Keys at or past a batch's valid length are padding.
        let valid = t::less(&j_idx, &n.reshape(&[b as isize, 1])?)?;
        and(valid.reshape(&[b as isize, 1, 1, total as isize])?)?;
    }
    Ok(match (mask, allowed) {
        (None, None) => None,
        (Some(m), None) => Some(m),
        (None, Some(al)) => {
            Some(t::where_scalar(&al, Scalar::F(0.0), Scalar::F(f64::NEG_INFINITY), cf)?)
        }
        (Some(m), Some(al)) => {
            let e = Expr::select(
                Expr::input(0),
                Expr::cast(VType::Float, Expr::input(1)),
                Expr::Scalar(0, VType::Float),
            );
            let refs = [&al, &m];
            Some(t::fused_elementwise(label, &refs, cf, e, &[Scalar::F(f64::NEG_INFINITY)])?)
        }
    })
}
