#!/usr/bin/env bash
# Split-K on the merged batched conv product (2026-11-24): ResNet-50's conv shapes at batch 32,
# synchronized per call, with `MPSRT_CONV_MERGE_SPLIT_TILES` (split the merged [OC,K]·[K,N·P]
# product when it has fewer 64×64 tiles than this; 0 = off) in interleaved runs, beside torch;
# then resnet50 / densenet121 at batch 32 through the engine with 0 and 1024.
# Carried: target/release/mpsrt, target/release/examples/bench_ops_b, .gl/.
# Usage (repo root): bash bench/device_session6_splitk.sh
source bench/device_env.sh
for v in 0 1024 0 1024 512; do
  MPSRT_CONV_MERGE_SPLIT_TILES=$v timeout 100 $E/bench_ops_b --batch 32 --iters 20 --sync-each \
    | sed "s/^{/{\"merge_split_tiles\": $v, /"
done 2>&1 | tee "$OUT/mpsrt_conv_b32_splitk.jsonl"
timeout 100 python3 bench/torch_reference.py convs --sync-each | tee "$OUT/torch_conv_sync.jsonl"
timeout 120 python3 bench/engine_torch.py export /tmp/models 2>&1 | grep -v Warning | tail -1
for v in 0 1024 0 1024; do
  for name in resnet50 densenet121; do
    MPSRT_CONV_MERGE_SPLIT_TILES=$v timeout 60 $M bench /tmp/models/$name.onnx --device gpu --batch 32 --iterations 10 --warmup 3 --json \
      | sed "s/^{/{\"merge_split_tiles\": $v, /"
  done
done 2>&1 | tee "$OUT/engine_b32_splitk.jsonl"
