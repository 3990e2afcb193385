#!/usr/bin/env bash
# One call on the GPU machine for the ONNX engine and the server (issues 5 and 6): Vulkan setup,
# torchvision resnet50/densenet121 exported to ONNX, `mpsrt bench` on the GPU (fusion and memory
# planning on / off for resnet50, batch 1 and 8) beside torch eager CUDA (TF32 off), then `mpsrt serve`
# throughput on the example repository at concurrency 1/8/32 and the engine-only latency.
# Usage (repo root, target/release/mpsrt built here and carried with .gl): bash bench/device_engine.sh
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done  # Vulkan loader + glvnd (NVIDIA's ICD needs libGLX)
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/models
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
./target/release/mpsrt info | head -5
./target/release/mpsrt info | grep -q "GPU: none" && { echo "no Vulkan GPU: stopping"; exit 1; }
M=./target/release/mpsrt
timeout 120 python3 bench/engine_torch.py export /tmp/models 2>&1 | grep -v Warning | tail -3
T=${BENCH_TIMEOUT:-45}
for name in resnet50 densenet121; do
  for b in 1 32; do
    timeout $T $M bench /tmp/models/$name.onnx --device gpu --batch $b --iterations 30 --warmup 5 --json
  done
done | tee "$OUT/mpsrt_engine.jsonl"
timeout 120 python3 bench/engine_torch.py torch --iters 50 | tee "$OUT/torch_engine.jsonl"
for b in 1 32; do
  timeout $T $M bench /tmp/models/resnet50.onnx --device gpu --batch $b --iterations 30 --warmup 5 --json --no-fusion
  timeout $T $M bench /tmp/models/resnet50.onnx --device gpu --batch $b --iterations 30 --warmup 5 --json --no-memory-planning
done | tee "$OUT/mpsrt_engine_ablation.jsonl"
echo "== serve"
timeout 30 $M bench examples/model_repository/simple/1/model.onnx --device gpu --batch 1 --iterations 500 --warmup 20 --json | tee "$OUT/simple_direct.json"
$M serve --model-repository examples/model_repository --http-port 8000 --grpc-port 8001 --metrics-port 8002 > "$OUT/serve.log" 2>&1 &
SP=$!
for i in $(seq 1 60); do curl -sf localhost:8000/v2/health/ready >/dev/null && break; sleep 0.5; done
for c in 1 8 32; do
  timeout 120 python3 bench/serve_load.py 127.0.0.1:8000 simple $c $((2000 / c))
done | tee "$OUT/serve_load.jsonl"
curl -s localhost:8002/metrics | grep -E "^nv_inference_(count|exec_count)" | tee "$OUT/metrics.txt"
kill -TERM $SP; wait $SP; echo "serve exit: $?"
