#!/usr/bin/env bash
# Second device call of the 2026-11-23 afternoon session: the op benchmark after stream-ordered
# buffer reuse and register-row sums, the engine (resnet50 / densenet121 with the BatchNorm ->
# affine rewrite and conv epilogues, fusion on/off, a densenet121 --profile), and the server with
# KIND_CPU instances (native client overhead on the H100 host's CPU). Carried as for
# bench/device_session4.sh. Usage (repo root): bash bench/device_session4b.sh
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
timeout 90 $E/bench_ops_a | tee "$OUT/mpsrt_ops_a.jsonl"
timeout 120 python3 bench/engine_torch.py export /tmp/models 2>&1 | grep -v Warning | tail -2
B="timeout 60 $M bench"
for round in 1 2; do
  for name in resnet50 densenet121; do
    $B /tmp/models/$name.onnx --device gpu --batch 1 --iterations 50 --warmup 5 --json
    $B /tmp/models/$name.onnx --device gpu --batch 1 --iterations 50 --warmup 5 --json --no-fusion
  done
done | tee "$OUT/engine_b1.jsonl"
for name in resnet50 densenet121; do
  $B /tmp/models/$name.onnx --device gpu --batch 32 --iterations 20 --warmup 3 --json
done | tee "$OUT/engine_b32.jsonl"
$B /tmp/models/densenet121.onnx --device gpu --batch 1 --iterations 10 --profile > "$OUT/profile_densenet121.txt" 2>&1
head -20 "$OUT/profile_densenet121.txt"
timeout 120 python3 bench/engine_torch.py torch --iters 50 | tee "$OUT/torch_engine.jsonl"
LIGHT_REQUESTS=16 PERF_REQUESTS=3000 timeout 240 bash bench/serve_models.sh KIND_CPU 2>&1 | tee "$OUT/serve_models_cpu.jsonl"
