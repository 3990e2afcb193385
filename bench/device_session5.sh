#!/usr/bin/env bash
# One device call (session of 2026-11-23, evening): the row-sum probe (issue 3), the elementwise
# benchmark beside torch (issue 2, first H100 numbers), and per-step GPU profiles of the engine at
# batch 1 (issue 5: `--profile --profile-repeat 20`, each step's own cost without the submit round
# trip) beside torch eager. Carried: target/release/mpsrt, target/release/examples/probe_reduce,
# .gl/ (see bench/device_session.sh). Usage (repo root): bash bench/device_session5.sh [PARTS]
# PARTS: any of reduce,elementwise,engine (default all).
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
E=./target/release/examples
$M info | grep -q "GPU: none" && { $M info; echo "no Vulkan GPU: stopping"; exit 1; }
PARTS=${1:-reduce,elementwise,engine}
part() { [[ ",$PARTS," == *",$1,"* ]]; }
if part reduce; then
  echo "== row-sum probe"
  for shape in "8192 8192" "65536 1024" "4096 16384"; do
    timeout 60 $E/probe_reduce $shape 200
  done 2>&1 | tee "$OUT/probe_reduce.jsonl"
  timeout 100 python3 bench/torch_reference.py ops 2>&1 | grep -E "sum|softmax" | tee "$OUT/torch_ops.jsonl"
fi
if part elementwise; then
  echo "== elementwise"
  { timeout 60 python3 bench/torch_reference.py elementwise --iters 1000
    timeout 60 $M bench elementwise --json --iters 1000
    timeout 60 $M bench elementwise --json --iters 1000
    timeout 60 python3 bench/torch_reference.py elementwise --iters 1000; } 2>&1 | tee "$OUT/elementwise.jsonl"
fi
if part engine; then
  echo "== engine"
  timeout 120 python3 bench/engine_torch.py export /tmp/models 2>&1 | grep -v Warning | tail -2
  for name in resnet50 densenet121; do
    timeout 60 $M bench /tmp/models/$name.onnx --device gpu --batch 1 --iterations 30 --warmup 5 --json
    timeout 90 $M bench /tmp/models/$name.onnx --device gpu --batch 1 --iterations 10 --warmup 3 --json --profile --profile-repeat 20
  done 2>&1 | tee "$OUT/engine_profile.jsonl"
  timeout 120 python3 bench/engine_torch.py torch --iters 50 | tee "$OUT/torch_engine.jsonl"
fi
