#!/usr/bin/env python3
"""GPT-2 (124M) greedy generation: mpsrt's KV-cache decoding (`mpsrt generate`) beside torch
eager's Hugging Face `generate` with its cache, in one call (issue 23). For the GPU machine,
where torch and transformers are installed (no network: random weights from `GPT2Config()`).

  python3 bench/gpt2_generate.py [--tokens 128] [--mpsrt target/release/mpsrt] [--out DIR]

1. Builds `GPT2LMHeadModel(GPT2Config())` (seeded random weights) and writes the same weights
   as an ONNX decoder with past key/values (`scripts/gpt2_onnx.py`: HF's interface, built with
   onnx.helper from the state dict rather than torch.onnx.export) to DIR/gpt2.onnx.
2. mpsrt: `mpsrt generate DIR/gpt2.onnx --tokens N --device gpu --json`, with
   `--precision f32` and `--precision f16` (heavy ops in f16, the f32 ONNX file unchanged).
3. torch: `model.generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False,
   use_cache=True)` on CUDA, f32 (TF32 off) and f16 (`model.half()`), warm-up run first.
Prints one JSON line per case: tokens/s over the whole generation (prompt step included) and,
for mpsrt, of the one-token steps; plus how many leading greedy tokens agree with torch f32 on
the same weights (random weights have near-ties, so a late divergence is rounding, not a bug).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import gpt2_onnx  # noqa: E402

PROMPT = [464, 2068, 7586, 21831, 18045, 625, 262, 16931]  # 8 token ids


def torch_case(model, dtype, n, reps=3):
    from transformers import GenerationConfig
    m = model.to(dtype)
    ids = torch.tensor([PROMPT], device="cuda")
    cfg = GenerationConfig(max_new_tokens=n, min_new_tokens=n, do_sample=False, use_cache=True,
                           pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        out = m.generate(ids, attention_mask=torch.ones_like(ids), generation_config=cfg)
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            out = m.generate(ids, attention_mask=torch.ones_like(ids), generation_config=cfg)
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
    tokens = out[0, len(PROMPT):].tolist()
    return tokens, {"impl": "torch eager generate (HF cache)", "dtype": str(dtype).split(".")[-1],
                    "tokens": n, "seconds": best, "tokens_per_s": n / best}


def mpsrt_case(exe, path, precision, n, reps=3):
    cmd = [exe, "generate", path, "--prompt", ",".join(map(str, PROMPT)), "--tokens", str(n),
           "--device", "gpu", "--precision", precision, "--warmup", "1", "--json"]
    best = None
    for _ in range(reps):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            return None, {"impl": "mpsrt generate", "precision": precision,
                          "error": (r.stderr or r.stdout).strip()[-500:]}
        v = json.loads(r.stdout.strip().splitlines()[-1])
        if best is None or v["tokens_per_s"] > best["tokens_per_s"]:
            best = v
    seconds = (best["prefill_ms"] + best["decode_ms"]) / 1e3
    return best["tokens"], {"impl": "mpsrt generate", "precision": precision, "tokens": n,
                            "seconds": seconds, "tokens_per_s": best["tokens_per_s"],
                            "decode_tokens_per_s": best["decode_tokens_per_s"],
                            "prefill_ms": best["prefill_ms"], "cache_lengths": best["buckets"]}


def agree(a, b):
    k = 0
    while a and b and k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--mpsrt", default="target/release/mpsrt")
    ap.add_argument("--out", default="/tmp/models")
    a = ap.parse_args()
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).eval()
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "gpt2.onnx")
    if not os.path.exists(path):
        t0 = time.perf_counter()
        onnx_model = gpt2_onnx.build(gpt2_onnx.weights_from_hf(model.state_dict()), heads=12)
        import onnx
        onnx.save(onnx_model, path)
        print(json.dumps({"wrote": path, "bytes": os.path.getsize(path),
                          "seconds": time.perf_counter() - t0}), flush=True)
    model = model.cuda()
    ref, row = torch_case(model, torch.float32, a.tokens)
    print(json.dumps(row), flush=True)
    _, row = torch_case(model, torch.float16, a.tokens)
    print(json.dumps(row), flush=True)
    for precision in ("f32", "f16"):
        toks, row = mpsrt_case(a.mpsrt, path, precision, a.tokens)
        if toks is not None:
            row["tokens_agreeing_with_torch_f32"] = agree(toks, ref)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
