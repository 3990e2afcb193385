#!/usr/bin/env bash
# Batched convs on small maps (2026-11-24): ResNet-50's conv shapes at batch 32, each call
# synchronized, under the merged-batch GEMM (`MPSRT_CONV_MERGE_P`: largest OH·OW run as one
# [OC, K]·[K, N·P] product; 0 = one product per image) and the 128-tile threshold
# (`MPSRT_GEMM_TILE128_MIN`), beside torch (cuDNN) in the same call; then the engine at batch 32
# with and without the merge. Carried: target/release/mpsrt, target/release/examples/bench_ops_b,
# .gl/. Usage (repo root): bash bench/device_session6_conv.sh
source bench/device_env.sh
for v in "256 128" "1024 128" "0 128" "256 128" "1024 128" "4096 128" "1024 512"; do
  set -- $v
  MPSRT_CONV_MERGE_P=$1 MPSRT_GEMM_TILE128_MIN=$2 timeout 100 $E/bench_ops_b --batch 32 --iters 20 --sync-each \
    | sed "s/^{/{\"merge_p\": $1, \"tile128_min\": $2, /"
done 2>&1 | tee "$OUT/mpsrt_conv_b32_variants.jsonl"
timeout 100 python3 bench/torch_reference.py convs --sync-each | tee "$OUT/torch_conv_sync.jsonl"
timeout 120 python3 bench/engine_torch.py export /tmp/models 2>&1 | grep -v Warning | tail -1
for v in 0 1024; do
  for name in resnet50 densenet121; do
    MPSRT_CONV_MERGE_P=$v timeout 60 $M bench /tmp/models/$name.onnx --device gpu --batch 32 --iterations 10 --warmup 3 --json \
      | sed "s/^{/{\"merge_p\": $v, /"
  done
done 2>&1 | tee "$OUT/engine_b32_merge.jsonl"
