#!/usr/bin/env bash
# The second 2026-11-25 device call: checks this session's graph pass (per-channel affine chains
# folded into convs) on a real GPU and refreshes the engine rows.
#   light   ONNX's nine light models through the conformance runner on the GPU (reference
#           outputs from the onnx wheel), then light_resnet50 / light_densenet121 timed at batch 1
#           on the GPU, the CPU of the device host, and the GPU without fusion
#   engine  torchvision resnet50 / densenet121 at batch 1 and 32 beside torch eager CUDA
#           (bench/device_session7.sh's engine part, same commands)
# Carried: target/release/mpsrt, target/release/examples/conformance, target/onnx-conformance/light
# (dumped by scripts/conformance.sh), .gl/.
# Usage (repo root): bash bench/device_session8.sh light,engine
source bench/device_env.sh
PARTS=${1:-light,engine}
part() { [[ ",$PARTS," == *",$1,"* ]]; }
if part light; then
  echo "== light"
  timeout 240 $E/conformance target/onnx-conformance --suite light --device gpu --verbose 2>&1 \
    | tee "$OUT/conformance_light_gpu.txt"
  for name in resnet50 densenet121; do
    f=target/onnx-conformance/light/light_$name/model.onnx
    timeout 60 $M bench $f --device gpu --iterations 30 --warmup 5 --json
    timeout 60 $M bench $f --device gpu --iterations 30 --warmup 5 --json --no-fusion
    timeout 120 $M bench $f --device cpu --iterations 10 --warmup 2 --json
  done 2>&1 | tee "$OUT/light_bench.jsonl"
fi
if part engine; then
  OUT=$OUT bash bench/device_session7.sh engine
fi
