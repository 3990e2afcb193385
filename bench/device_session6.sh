#!/usr/bin/env bash
# The 2026-11-24 device call: the jit vector add at 16M/32M/64M (tutorial and probe cases), the
# elementwise benchmark beside torch, the row ops (isolated and in the full op run) beside torch,
# the ResNet-50 conv shapes (each call synchronized, both sides), and the engine at batch 1 and 32
# beside torch with the fusion / memory-planning ablation.
# Carried: target/release/mpsrt, target/release/examples/{bench_ops_a,bench_ops_b}, .gl/, .whl/.
# Usage (repo root): bash bench/device_session6.sh [PARTS]   (PARTS: jit,jit64,elementwise,tiny,ops,convs,engine)
source bench/device_env.sh
PARTS=${1:-jit,elementwise,ops,convs,engine}
part() { [[ ",$PARTS," == *",$1,"* ]]; }
ls .whl/mpsrt-*.whl >/dev/null 2>&1 && python3 -m zipfile -e .whl/mpsrt-*.whl /tmp/site
if part jit && ls .whl/mpsrt-*.whl >/dev/null 2>&1; then
  echo "== jit"
  for n in 16777216 33554432 67108864; do
    PYTHONPATH=/tmp/site timeout 120 python3 bench/jit_probe.py $n
  done 2>&1 | tee "$OUT/jit_probe.jsonl"
  PYTHONPATH=/tmp/site timeout 150 python3 bench/jit_bench.py --iters 1000 --only add 2>&1 | tee "$OUT/jit_add.jsonl"
fi
if part jit64 && ls .whl/mpsrt-*.whl >/dev/null 2>&1; then
  # The tutorial add at 64M: alone in a fresh process, after the 1M/16M sizes (as in the table),
  # and the probe with as many iterations — history in the process vs iteration count.
  echo "== jit64"
  { PYTHONPATH=/tmp/site timeout 60 python3 bench/jit_bench.py --iters 1000 --only add --no-torch --add-sizes 67108864
    PYTHONPATH=/tmp/site timeout 60 python3 bench/jit_bench.py --iters 1000 --only add --no-torch
    PYTHONPATH=/tmp/site timeout 60 python3 bench/jit_bench.py --iters 200 --only add --no-torch
    PYTHONPATH=/tmp/site timeout 90 python3 bench/jit_probe.py 67108864 1000; } 2>&1 | tee "$OUT/jit64.jsonl"
fi
if part elementwise; then
  echo "== elementwise"
  { timeout 60 python3 bench/torch_reference.py elementwise --iters 1000
    timeout 60 $M bench elementwise --json --iters 1000
    timeout 60 $M bench elementwise --json --iters 1000
    timeout 60 python3 bench/torch_reference.py elementwise --iters 1000; } 2>&1 | tee "$OUT/elementwise.jsonl"
fi
if part tiny; then
  # Eager overhead split into host recording and the rest, by dispatches per submission.
  echo "== tiny"
  for n in 64 256 1024; do
    for r in 1 2; do
      MPSRT_MAX_OPS_PER_BATCH=$n timeout 60 $M bench elementwise --json --size 1048576 --iters 10 \
        | sed "s/^{/{\"max_ops_per_batch\": $n, /"
    done
  done 2>&1 | tee "$OUT/tiny_ops.jsonl"
fi
if part ops; then
  echo "== ops"
  { BENCH_ONLY=rows timeout 60 $E/bench_ops_a | sed 's/^{/{"run": "rows_only", /'
    timeout 120 $E/bench_ops_a | sed 's/^{/{"run": "full", /'; } 2>&1 | tee "$OUT/mpsrt_ops.jsonl"
  timeout 150 python3 bench/torch_reference.py ops 2>&1 | grep -v conv2d | tee "$OUT/torch_ops.jsonl"
fi
if part convs; then
  echo "== convs"
  timeout 150 $E/bench_ops_b --batch 1,32 --iters 20 --sync-each | tee "$OUT/mpsrt_conv_sync.jsonl"
  timeout 120 python3 bench/torch_reference.py convs --sync-each | tee "$OUT/torch_conv_sync.jsonl"
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
