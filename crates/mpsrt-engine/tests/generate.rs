//! Greedy decoding with the padded, bucketed KV cache (`mpsrt_engine::generate`) on the tiny
//! GPT-2 in `tests/data` (2 layers, hidden 64, vocab 1000, seeded random weights; made by
//! `scripts/gpt2_onnx.py`, which also recorded onnxruntime CPU's greedy tokens with an unpadded,
//! growing past in `tiny_gpt2_ref.json`). On the CPU and the GPU (lavapipe in CI): the first 32
//! tokens equal onnxruntime's, with one bucket and with buckets small enough to re-pad the cache
//! mid-generation, and the session builds one plan per bucket, not one per token.

use mpsrt_core::Place;
use mpsrt_engine::generate::{greedy, GenerateOptions};
use mpsrt_engine::{Precision, Session, SessionOptions};
use std::path::PathBuf;

fn places() -> Vec<Place> {
    let mut v = vec![Place::Cpu];
    if mpsrt_runtime::gpu_available() {
        v.push(Place::Gpu(0));
    } else {
        assert!(std::env::var("MPSRT_REQUIRE_GPU").as_deref() != Ok("1"), "no GPU adapter");
    }
    v
}

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn reference() -> (Vec<i64>, Vec<i64>) {
    let text = std::fs::read_to_string(data("tiny_gpt2_ref.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ints = |k: &str| -> Vec<i64> {
        v[k].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()
    };
    (ints("prompt"), ints("tokens"))
}

#[test]
fn tiny_gpt2_greedy_tokens_equal_onnxruntime() {
    let (prompt, want) = reference();
    assert_eq!(want.len(), 32);
    for place in places() {
        let s = Session::load(data("tiny_gpt2.onnx"), place, SessionOptions::default()).unwrap();
        // One bucket for prompt + 32 tokens: a prompt plan and one decode plan.
        let g = greedy(&s, &prompt, GenerateOptions { new_tokens: 32, bucket: 0 }).unwrap();
        assert_eq!(g.tokens, want, "{place}: greedy tokens differ from onnxruntime's");
        assert_eq!(g.buckets, vec![prompt.len() + 32], "{place}");
        assert!(g.decode_tokens_per_s() > 0.0);
        // Buckets of 8: the cache is re-padded every 8 positions, the tokens stay the same.
        let g = greedy(&s, &prompt, GenerateOptions { new_tokens: 32, bucket: 8 }).unwrap();
        assert_eq!(g.tokens, want, "{place}: bucket 8");
        assert_eq!(g.buckets, vec![8, 16, 24, 32, 40], "{place}");
    }
}

#[test]
fn tiny_gpt2_f16_precision_mostly_agrees() {
    // precision=f16 rounds weights and activations: greedy decoding may leave the f32 path
    // once two logits are within f16 rounding; the first tokens must agree.
    let (prompt, want) = reference();
    let place = *places().last().unwrap();
    let s = Session::load_with_precision(
        data("tiny_gpt2.onnx"),
        place,
        SessionOptions::default(),
        Precision::F16,
    )
    .unwrap();
    let g = greedy(&s, &prompt, GenerateOptions { new_tokens: 8, bucket: 0 }).unwrap();
    let same = g.tokens.iter().zip(&want).take_while(|(a, b)| a == b).count();
    assert!(same >= 4, "{place}: f16 tokens {:?} vs f32 {:?}", g.tokens, &want[..8]);
}

#[test]
fn generate_errors_name_what_is_missing() {
    let (prompt, _) = reference();
    let s = Session::load(data("tiny_gpt2.onnx"), Place::Cpu, SessionOptions::default()).unwrap();
    let e = greedy(&s, &[], GenerateOptions::default()).unwrap_err().to_string();
    assert!(e.contains("prompt is empty"), "{e}");
    // A model without past key/values is refused with the reason.
    let mut g = mpsrt_graph::Graph::new();
    let x =
        g.add_input("input_ids", mpsrt_core::DType::I64, vec![mpsrt_graph::Dim::Known(1)]).unwrap();
    g.outputs = vec![x];
    let s = Session::from_graph(g, Place::Cpu, SessionOptions::default()).unwrap();
    let e = greedy(&s, &prompt, GenerateOptions::default()).unwrap_err().to_string();
    assert!(e.contains("past_key_values"), "{e}");
}
