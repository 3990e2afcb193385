//! `mpsrt generate MODEL.onnx`: greedy decoding of N tokens with a decoder exported with past
//! key/values (`mpsrt_engine::generate`), printing the tokens and tokens/s.

use crate::model_cmd::{parse_precision, place, Device};
use mpsrt::{Error, Result};
use mpsrt_engine::generate::{greedy, GenerateOptions};
use mpsrt_engine::{Precision, Session, SessionOptions};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct GenerateArgs {
    /// Decoder ONNX model with `input_ids`, `attention_mask`, `position_ids`,
    /// `past_key_values.{i}.key|value` inputs and `logits`, `present.{i}.key|value` outputs.
    model: PathBuf,
    /// Prompt token ids, comma-separated.
    #[arg(long, default_value = "50256")]
    prompt: String,
    /// Tokens to generate.
    #[arg(long, default_value_t = 32)]
    tokens: usize,
    /// Pad the KV cache to multiples of this many positions (0: prompt + tokens, one plan for
    /// all one-token steps).
    #[arg(long, default_value_t = 0)]
    bucket: usize,
    /// Untimed generations first (pipelines and plans compiled, allocator warm).
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    #[arg(long, value_enum)]
    device: Option<Device>,
    /// `f16`: run a float32 model's heavy ops in float16 (sensitive ones stay f32).
    #[arg(long, default_value = "f32", value_parser = parse_precision)]
    precision: Precision,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn parse_prompt(s: &str) -> Result<Vec<i64>> {
    s.split(',')
        .filter(|t| !t.trim().is_empty())
        .map(|t| {
            t.trim().parse::<i64>().map_err(|e| {
                Error::invalid("generate", format!("--prompt: token {t:?} is not an integer: {e}"))
            })
        })
        .collect()
}

pub fn run(a: GenerateArgs) -> Result<()> {
    let place = place(a.device);
    let prompt = parse_prompt(&a.prompt)?;
    let t0 = Instant::now();
    let session =
        Session::load_with_precision(&a.model, place, SessionOptions::default(), a.precision)?;
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    let opts = GenerateOptions { new_tokens: a.tokens, bucket: a.bucket };
    for _ in 0..a.warmup {
        greedy(&session, &prompt, opts)?;
    }
    let g = greedy(&session, &prompt, opts)?;
    let tps = g.decode_tokens_per_s();
    let total_s = (g.prefill_ms + g.decode_ms) / 1e3;
    let overall = if total_s > 0.0 { g.tokens.len() as f64 / total_s } else { 0.0 };
    if a.json {
        let v = serde_json::json!({
            "model": a.model.display().to_string(), "place": place.to_string(),
            "precision": a.precision.name(), "prompt": prompt, "tokens": g.tokens,
            "prefill_ms": g.prefill_ms, "decode_ms": g.decode_ms,
            "decode_tokens_per_s": tps, "tokens_per_s": overall, "buckets": g.buckets,
            "load_ms": load_ms,
        });
        println!("{v}");
    } else {
        println!(
            "{} on {place}, precision {}: {} tokens after a {}-token prompt",
            a.model.display(),
            a.precision,
            g.tokens.len(),
            prompt.len()
        );
        let toks: Vec<String> = g.tokens.iter().map(|t| t.to_string()).collect();
        println!("  tokens: {}", toks.join(","));
        println!(
            "  prompt step {:.2} ms; {} one-token steps in {:.2} ms: {tps:.1} tokens/s \
             ({overall:.1} tokens/s with the prompt step); cache lengths {:?}",
            g.prefill_ms,
            g.tokens.len().saturating_sub(1),
            g.decode_ms,
            g.buckets
        );
    }
    Ok(())
}
