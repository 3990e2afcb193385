#!/usr/bin/env bash
# Third device call of the 2026-11-23 evening session, after raising the batch / in-flight byte
# windows to 4 GiB: ops (bench_ops_a full and rows-only, the row-sum probe, torch ops), the
# elementwise benchmark beside torch, the engine at batch 1 beside torch, and the jit tutorials
# (if .whl/ holds a wheel). Carried: target/release/mpsrt, target/release/examples/{bench_ops_a,
# probe_reduce}, .gl/, optionally .whl/. Usage (repo root): bash bench/device_session5c.sh [PARTS]
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/models /tmp/site
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export PYTHONUNBUFFERED=1
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
M=./target/release/mpsrt
E=./target/release/examples
$M info | grep -q "GPU: none" && { $M info; echo "no Vulkan GPU: stopping"; exit 1; }
PARTS=${1:-ops,elementwise,engine,jit}
part() { [[ ",$PARTS," == *",$1,"* ]]; }
if part ops; then
  echo "== ops"
  { BENCH_ONLY=rows timeout 60 $E/bench_ops_a | sed 's/^{/{"run": "rows_only", /'
    timeout 120 $E/bench_ops_a | sed 's/^{/{"run": "full", /'
    timeout 60 $E/probe_reduce 8192 8192 200; } 2>&1 | tee "$OUT/mpsrt_ops.jsonl"
  timeout 150 python3 bench/torch_reference.py ops 2>&1 | grep -v conv2d | tee "$OUT/torch_ops.jsonl"
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
  timeout 120 python3 bench/engine_torch.py export /tmp/models 2>&1 | grep -v Warning | tail -1
  for round in 1 2 3; do
    for name in resnet50 densenet121; do
      timeout 60 $M bench /tmp/models/$name.onnx --device gpu --batch 1 --iterations 30 --warmup 5 --json
    done
  done 2>&1 | tee "$OUT/engine_b1.jsonl"
  for name in resnet50 densenet121; do
    timeout 60 $M bench /tmp/models/$name.onnx --device gpu --batch 1 --iterations 30 --warmup 5 --json --no-fusion
    timeout 60 $M bench /tmp/models/$name.onnx --device gpu --batch 1 --iterations 30 --warmup 5 --json --no-memory-planning
    timeout 60 $M bench /tmp/models/$name.onnx --device gpu --batch 32 --iterations 10 --warmup 3 --json
  done 2>&1 | tee "$OUT/engine_ablation_b32.jsonl"
  timeout 120 python3 bench/engine_torch.py torch --iters 50 | tee "$OUT/torch_engine.jsonl"
fi
if part jit && ls .whl/mpsrt-*.whl >/dev/null 2>&1; then
  echo "== jit"
  python3 -m zipfile -e .whl/mpsrt-*.whl /tmp/site
  PYTHONPATH=/tmp/site timeout 150 python3 bench/jit_bench.py --iters 1000 --only add 2>&1 | tee "$OUT/jit.jsonl"
fi
