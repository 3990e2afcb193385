#!/usr/bin/env bash
# Second device call of the 2026-11-23 evening session: after GEMV-with-bias, one-dispatch
# concat, the wide split-K rule with its fused reduce, and 200-call op timings. Parts:
# ops (bench_ops_a beside torch ops, both 200 calls for softmax/sum), batching (add 64M under
# larger batches / in-flight windows now that pending buffers are reused in stream order),
# engine (b1 with the split-K variants, host record time, profiles; b32; torch).
# Carried: target/release/mpsrt, target/release/examples/bench_ops_a, .gl/.
# Usage (repo root): bash bench/device_session5b.sh [PARTS]
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/models
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
M=./target/release/mpsrt
E=./target/release/examples
$M info | grep -q "GPU: none" && { $M info; echo "no Vulkan GPU: stopping"; exit 1; }
PARTS=${1:-ops,batching,engine}
part() { [[ ",$PARTS," == *",$1,"* ]]; }
if part engine; then
  echo "== engine"
  timeout 120 python3 bench/engine_torch.py export /tmp/models 2>&1 | grep -v Warning | tail -1
  for round in 1 2; do
    for name in resnet50 densenet121; do
      for mode in wide legacy off; do
        MPSRT_SPLIT_K=$mode timeout 60 $M bench /tmp/models/$name.onnx --device gpu --batch 1 --iterations 30 --warmup 5 --json | sed "s/^{/{\"split_k\": \"$mode\", /"
      done
    done
  done 2>&1 | tee "$OUT/engine_b1.jsonl"
  for name in resnet50 densenet121; do
    timeout 90 $M bench /tmp/models/$name.onnx --device gpu --batch 1 --iterations 10 --warmup 3 --json --profile --profile-repeat 20
    timeout 60 $M bench /tmp/models/$name.onnx --device gpu --batch 32 --iterations 10 --warmup 3 --json
  done 2>&1 | tee "$OUT/engine_profile_b32.jsonl"
  timeout 120 python3 bench/engine_torch.py torch --iters 50 | tee "$OUT/torch_engine.jsonl"
fi
if part ops; then
  echo "== ops"
  timeout 90 $E/bench_ops_a | tee "$OUT/mpsrt_ops_a.jsonl"
  timeout 150 python3 bench/torch_reference.py ops 2>&1 | grep -v conv2d | tee "$OUT/torch_ops.jsonl"
fi
if part batching; then
  echo "== add 64M: batch / in-flight windows"
  { timeout 60 python3 bench/torch_reference.py elementwise --iters 1000
    for mb in 256 1024 4096; do
      for inflight in 1024 4096; do
        MPSRT_MAX_MB_PER_BATCH=$mb MPSRT_MAX_INFLIGHT_MB=$inflight timeout 60 $M bench elementwise --json --iters 1000 | sed "s/^{/{\"batch_mb\": $mb, \"inflight_mb\": $inflight, /"
      done
    done
    timeout 60 python3 bench/torch_reference.py elementwise --iters 1000; } 2>&1 | tee "$OUT/batching.jsonl"
fi
