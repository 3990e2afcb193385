//! Greedy autoregressive decoding with a KV cache for decoder models exported with past
//! key/values in Hugging Face's interface (`input_ids`, `attention_mask`, `position_ids`,
//! `past_key_values.{i}.key|value` → `logits`, `present.{i}.key|value`; issue 23).
//!
//! Plans are specialized per input shape, so a past that grows by one position per token would
//! compile a new plan every token. Instead the past is held at a fixed **bucket** length `P` and
//! left-padded: the cache is `[pad (P - n), valid (n)]` along the sequence axis and
//! `attention_mask` is 0 on the padding (the model adds a large negative bias there, which the
//! softmax turns into exact zeros; GPT-2 has absolute position embeddings, fed as
//! `position_ids`, so a key's slot does not matter). A step with `T` new tokens returns
//! `present = [pad, valid, new]` of length `P + T`, and the next past is the view
//! `present[:, :, T:, :]` — still length `P`, no copy. Only when the valid part would outgrow
//! `P` is the cache re-padded to the next multiple of the bucket (one new plan per bucket).
//! So generating N tokens uses two plans (prompt, then one token) when the bucket covers the
//! prompt plus N, whatever N is.

use crate::session::Session;
use mpsrt_core::{DType, Error, Place, Result};
use mpsrt_tensor::Tensor;
use std::collections::HashMap;
use std::time::Instant;

const OP: &str = "generate";

/// Knobs of [`greedy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerateOptions {
    /// Tokens to generate after the prompt.
    pub new_tokens: usize,
    /// The past is padded to a multiple of this many positions (0: prompt + new tokens, one
    /// bucket for the whole generation).
    pub bucket: usize,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions { new_tokens: 32, bucket: 0 }
    }
}

/// The result of [`greedy`].
#[derive(Debug, Clone)]
pub struct Generation {
    /// The generated tokens (the prompt not included).
    pub tokens: Vec<i64>,
    /// Wall time of the prompt step (the first token), ms.
    pub prefill_ms: f64,
    /// Wall time of the following steps (each a one-token step), ms.
    pub decode_ms: f64,
    /// Distinct past lengths the session was run with (plans used besides the prompt's).
    pub buckets: Vec<usize>,
}

impl Generation {
    /// Tokens per second of the one-token steps (the first token comes from the prompt step).
    pub fn decode_tokens_per_s(&self) -> f64 {
        let n = self.tokens.len().saturating_sub(1);
        if self.decode_ms > 0.0 {
            n as f64 / (self.decode_ms / 1e3)
        } else {
            0.0
        }
    }
}

/// The decoder's layout, read from the session's inputs and outputs.
struct Layout {
    /// (past input name, present output name, heads, head dim) per cache tensor.
    caches: Vec<(String, String, usize, usize)>,
    kv_dtype: DType,
    has_mask: bool,
    has_positions: bool,
    ids_dtype: DType,
}

fn layout(s: &Session) -> Result<Layout> {
    let input = |n: &str| s.inputs().iter().find(|i| i.name == n);
    let ids = input("input_ids").ok_or_else(|| {
        Error::invalid(OP, "the model has no input \"input_ids\" (a decoder exported with past key/values is expected)")
    })?;
    let mut caches = Vec::new();
    let mut kv_dtype = DType::F32;
    for i in s.inputs().iter().filter(|i| i.name.starts_with("past_key_values.")) {
        let present = i.name.replacen("past_key_values.", "present.", 1);
        if !s.outputs().iter().any(|o| o.name == present) {
            return Err(Error::invalid(
                OP,
                format!("input {:?} has no matching output {present:?}", i.name),
            ));
        }
        let dims = i.dims_i64();
        let (heads, hd) = match dims.as_slice() {
            [_, h, _, d] if *h > 0 && *d > 0 => (*h as usize, *d as usize),
            _ => {
                return Err(Error::shape(
                    OP,
                    format!(
                        "input {:?}: expected [batch, heads, past, head_dim] with known heads \
                         and head_dim, the model declares {dims:?}",
                        i.name
                    ),
                ))
            }
        };
        kv_dtype = i.dtype;
        caches.push((i.name.clone(), present, heads, hd));
    }
    if caches.is_empty() {
        return Err(Error::invalid(
            OP,
            "the model has no past_key_values.* inputs (export it with past key/values)",
        ));
    }
    if !s.outputs().iter().any(|o| o.name == "logits") {
        return Err(Error::invalid(OP, "the model has no output \"logits\""));
    }
    Ok(Layout {
        caches,
        kv_dtype,
        has_mask: input("attention_mask").is_some(),
        has_positions: input("position_ids").is_some(),
        ids_dtype: ids.dtype,
    })
}

fn int_tensor(vals: &[i64], shape: &[usize], dtype: DType) -> Result<Tensor> {
    match dtype {
        DType::I64 => Tensor::from_slice(vals, shape, Place::Cpu),
        DType::I32 => {
            let v: Vec<i32> = vals.iter().map(|&x| x as i32).collect();
            Tensor::from_slice(&v, shape, Place::Cpu)
        }
        other => Err(Error::dtype(
            OP,
            format!("integer inputs must be int64 or int32, the model has {other}"),
        )),
    }
}

/// Greedy decoding of `opts.new_tokens` tokens after `prompt` (batch 1) with the left-padded,
/// bucketed KV cache described in the module doc.
pub fn greedy(s: &Session, prompt: &[i64], opts: GenerateOptions) -> Result<Generation> {
    if prompt.is_empty() {
        return Err(Error::invalid(OP, "the prompt is empty: give at least one token"));
    }
    let l = layout(s)?;
    if !l.has_mask {
        return Err(Error::invalid(
            OP,
            "the model has no attention_mask input: the padded cache needs it to hide padding",
        ));
    }
    let total = prompt.len() + opts.new_tokens;
    let bucket = if opts.bucket == 0 { total } else { opts.bucket };
    let round = |n: usize| n.div_ceil(bucket).max(1) * bucket;
    let place = s.place();
    // Cache length P and valid positions n; the prompt step starts from an all-padding past.
    let mut cap = round(prompt.len().saturating_sub(1).max(1));
    let mut valid = 0usize;
    let mut past: Vec<Tensor> = l
        .caches
        .iter()
        .map(|(_, _, h, d)| mpsrt_tensor::zeros(&[1, *h, cap, *d], l.kv_dtype, place))
        .collect::<Result<_>>()?;
    let mut ids: Vec<i64> = prompt.to_vec();
    let mut tokens = Vec::with_capacity(opts.new_tokens);
    let mut buckets = Vec::new();
    let (mut prefill_ms, mut decode_ms) = (0.0, 0.0);
    while tokens.len() < opts.new_tokens {
        let t0 = Instant::now();
        let t = ids.len();
        if valid + t > cap {
            // Re-pad on the left to the next bucket: one new plan per bucket.
            let grown = round(valid + t);
            past = past
                .iter()
                .zip(&l.caches)
                .map(|(p, (_, _, h, d))| {
                    let pad = mpsrt_tensor::zeros(&[1, *h, grown - cap, *d], l.kv_dtype, place)?;
                    mpsrt_tensor::concat(&[&pad, p], 2)
                })
                .collect::<Result<_>>()?;
            cap = grown;
        }
        if t == 1 && !buckets.contains(&cap) {
            buckets.push(cap);
        }
        let mut feeds: HashMap<String, Tensor> = HashMap::new();
        feeds.insert("input_ids".into(), int_tensor(&ids, &[1, t], l.ids_dtype)?);
        let mut mask = vec![0i64; cap - valid];
        mask.resize(cap + t, 1);
        feeds.insert("attention_mask".into(), int_tensor(&mask, &[1, cap + t], l.ids_dtype)?);
        if l.has_positions {
            let pos: Vec<i64> = (valid..valid + t).map(|p| p as i64).collect();
            feeds.insert("position_ids".into(), int_tensor(&pos, &[1, t], l.ids_dtype)?);
        }
        for ((name, _, _, _), p) in l.caches.iter().zip(&past) {
            feeds.insert(name.clone(), p.clone());
        }
        let mut outs: HashMap<String, Tensor> = s.run(&feeds)?.into_iter().collect();
        let logits = outs
            .remove("logits")
            .ok_or_else(|| Error::invalid(OP, "the session returned no logits"))?;
        // [1, T, vocab] → the last position's argmax, read back (one small sync per token).
        let last = logits.select(1, t as isize - 1)?;
        let best = mpsrt_tensor::argmax(&last, Some(-1), false)?;
        let tok = best.to(Place::Cpu)?.to_f64_vec()?.first().copied().ok_or_else(|| {
            Error::invalid(OP, "argmax of the logits is empty (vocabulary of size 0?)")
        })? as i64;
        for (k, (_, present, _, _)) in l.caches.iter().enumerate() {
            let p = outs.remove(present).ok_or_else(|| {
                Error::invalid(OP, format!("the session returned no {present:?}"))
            })?;
            // [pad, valid, new] (P + T) → drop T padding slots from the left: a view.
            past[k] = p.slice(2, Some(t as isize), None, 1)?;
        }
        valid += t;
        tokens.push(tok);
        ids = vec![tok];
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        if tokens.len() == 1 {
            prefill_ms = ms;
        } else {
            decode_ms += ms;
        }
    }
    Ok(Generation { tokens, prefill_ms, decode_ms, buckets })
}
