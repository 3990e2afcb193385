#!/usr/bin/env bash
# One device call (session of 2026-11-23, afternoon) for issues 3, 5 and 6, most important
# first: softmax / row-sum / matmul op benchmark beside torch, conv2d on the ResNet-50 shapes
# synchronized per call (both sides), the engine (resnet50 / densenet121, batch 1 and 32, with
# and without fusion) beside torch eager, then the server through `mpsrt perf` (native client)
# and the Python client. Carried: target/release/mpsrt, target/release/examples/bench_ops_{a,b},
# .gl/ (see bench/device_session.sh). Usage (repo root): bash bench/device_session4.sh [PARTS]
# PARTS: any of ops,engine,serve (default all three).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/models
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
M=./target/release/mpsrt
$M info | grep -q "GPU: none" && { $M info; echo "no Vulkan GPU: stopping"; exit 1; }
E=./target/release/examples
PARTS=${1:-ops,engine,serve}
part() { [[ ",$PARTS," == *",$1,"* ]]; }
if part ops; then
echo "== ops (issue 3)"
timeout 90 $E/bench_ops_a | tee "$OUT/mpsrt_ops_a.jsonl"
timeout 150 python3 bench/torch_reference.py ops 2>&1 | grep -v conv2d | tee "$OUT/torch_ops.jsonl"
timeout 120 $E/bench_ops_b --batch 1,32 --iters 10 --sync-each | tee "$OUT/mpsrt_conv_sync.jsonl"
timeout 120 python3 bench/torch_reference.py convs --sync-each | tee "$OUT/torch_conv_sync.jsonl"
fi
if part engine; then
echo "== engine (issue 5)"
timeout 120 python3 bench/engine_torch.py export /tmp/models 2>&1 | grep -v Warning | tail -2
T=45
for round in 1 2; do
  for name in resnet50 densenet121; do
    for b in 1 32; do
      timeout $T $M bench /tmp/models/$name.onnx --device gpu --batch $b --iterations 30 --warmup 5 --json
    done
  done
done | tee "$OUT/engine.jsonl"
for name in resnet50 densenet121; do
  timeout $T $M bench /tmp/models/$name.onnx --device gpu --batch 1 --iterations 30 --warmup 5 --json --no-fusion
done | tee "$OUT/ablation.jsonl"
timeout 120 python3 bench/engine_torch.py torch --iters 50 | tee "$OUT/torch_engine.jsonl"
fi
if part serve; then
echo "== server (issue 6)"
LIGHT_REQUESTS=200 PERF_REQUESTS=3000 timeout 300 bash bench/serve_models.sh KIND_GPU 2>&1 | tee "$OUT/serve_models_gpu.jsonl"
fi
