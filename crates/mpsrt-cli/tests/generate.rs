//! `mpsrt generate` as a user runs it: the built binary on the tiny GPT-2 of the engine's tests
//! (`crates/mpsrt-engine/tests/data`), on the CPU with `--json`: the tokens equal onnxruntime's
//! recorded greedy tokens, tokens/s is reported, and a bad `--precision` or prompt is an error
//! naming the option.

use std::path::{Path, PathBuf};
use std::process::Command;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../mpsrt-engine/tests/data").join(name)
}

#[test]
fn generate_prints_onnxruntime_tokens_and_rate() {
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data("tiny_gpt2_ref.json")).unwrap())
            .unwrap();
    let prompt: Vec<String> = reference["prompt"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap().to_string())
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_mpsrt"))
        .arg("generate")
        .arg(data("tiny_gpt2.onnx"))
        .args(["--prompt", &prompt.join(","), "--tokens", "32", "--device", "cpu", "--json"])
        .args(["--warmup", "0"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["tokens"], reference["tokens"]);
    assert!(v["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(v["buckets"], serde_json::json!([prompt.len() + 32]));

    for (args, want) in
        [(vec!["--precision", "bf16"], "precision"), (vec!["--prompt", "1,x"], "--prompt")]
    {
        let out = Command::new(env!("CARGO_BIN_EXE_mpsrt"))
            .arg("generate")
            .arg(data("tiny_gpt2.onnx"))
            .args(["--device", "cpu"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{args:?}: {err}");
    }
}
