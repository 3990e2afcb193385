#!/usr/bin/env bash
# The 2026-11-25 device calls. Parts (comma-separated, first argument):
#   gemm   the GEMMs ResNet-50's batch-32 convs lower to, batched / merged / padded / B^T forms
#          (examples/bench_gemm_shapes, 2 rounds)
#   sync   synchronization latency: batch-1 conv shapes and the engine at batch 1 with the host
#          wait blocking (MPSRT_SYNC_SPIN_US=0) or spinning first (200, 2000)
#   convs  the conv shapes b1/b32, each call synchronized, beside torch (cuDNN) in the same call
#   engine the engine at batch 1 and 32 beside torch eager
#   convgemm  the conv shapes at batch 32 (and 1) through the implicit-GEMM kernel
#          (MPSRT_CONV_GEMM auto / 0, tile overrides) beside torch; the engine at batch 1 and 32
#          with and without it
#   diag   is a slow batch-32 conv slow by itself or later in a process? single shapes in fresh
#          processes, a slow shape before and after fast ones, the whole list twice with the
#          allocator's pool on and off; clocks/power/throttle reasons logged every 250 ms
#   fresh  every conv shape in its own short process (0.3 s warm-up), so each timing runs before
#          the driver lowers the SM clock (the diag part's nvidia-smi log: 1980 -> 345 MHz a few
#          seconds into a long process): batch 32 under each tile shape and the im2col route,
#          batch 1; torch in the same call; clocks logged throughout
#   clock  does the clock drop under continuous load? 12 s of back-to-back 2048^3 matmuls (8 per
#          sync) then one conv shape, with the default spin and with MPSRT_SYNC_SPIN_US=0;
#          clocks logged
#   tiny   1000 tiny ops per sync (elementwise bench) twice beside torch twice
# Carried: target/release/mpsrt, target/release/examples/{bench_ops_b,bench_gemm_shapes}, .gl/.
# Usage (repo root): bash bench/device_session7.sh gemm,sync
source bench/device_env.sh
PARTS=${1:-gemm,sync}
part() { [[ ",$PARTS," == *",$1,"* ]]; }
models() { [ -f /tmp/models/resnet50.onnx ] || timeout 120 python3 bench/engine_torch.py export /tmp/models 2>&1 | grep -v Warning | tail -1; }
if part gemm; then
  echo "== gemm"
  timeout 150 $E/bench_gemm_shapes --rounds 2 | tee "$OUT/gemm_shapes.jsonl"
fi
if part sync; then
  echo "== sync"
  models
  for spin in 0 200 2000 0 2000; do
    MPSRT_SYNC_SPIN_US=$spin timeout 60 $E/bench_ops_b --batch 1 --iters 20 --sync-each | sed "s/^{/{\"spin_us\": $spin, /"
    for name in resnet50 densenet121; do
      MPSRT_SYNC_SPIN_US=$spin timeout 60 $M bench /tmp/models/$name.onnx --device gpu --batch 1 --iterations 30 --warmup 5 --json | sed "s/^{/{\"spin_us\": $spin, /"
    done
  done 2>&1 | tee "$OUT/sync_spin.jsonl"
fi
if part convgemm; then
  echo "== convgemm"
  for v in "auto -" "0 -" "auto 128x128" "auto 64x128" "auto 128x64" "auto -"; do
    set -- $v
    tile=$2; [ "$tile" = - ] && tile=
    MPSRT_CONV_GEMM=$1 MPSRT_CONV_GEMM_TILE=$tile timeout 100 $E/bench_ops_b --batch 32 --iters 20 --sync-each \
      | sed "s/^{/{\"conv_gemm\": \"$1\", \"tile\": \"$2\", /"
  done 2>&1 | tee "$OUT/conv_gemm_b32.jsonl"
  MPSRT_CONV_GEMM=auto timeout 100 $E/bench_ops_b --batch 1 --iters 20 --sync-each | tee "$OUT/conv_gemm_b1.jsonl"
  timeout 120 python3 bench/torch_reference.py convs --sync-each | tee "$OUT/torch_conv_sync.jsonl"
  models
  for v in auto 0 auto 0; do
    for name in resnet50 densenet121; do
      for b in 1 32; do
        MPSRT_CONV_GEMM=$v timeout 60 $M bench /tmp/models/$name.onnx --device gpu --batch $b --iterations 20 --warmup 3 --json | sed "s/^{/{\"conv_gemm\": \"$v\", /"
      done
    done
  done 2>&1 | tee "$OUT/engine_conv_gemm.jsonl"
fi
if part diag; then
  echo "== diag"
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,memory.used,clocks_throttle_reasons.active --format=csv -lms 250 > "$OUT/smi_log.csv" &
  SMI=$!
  {
    for sh in 10 4 16; do timeout 60 $E/bench_ops_b --batch 32 --iters 20 --sync-each --shapes $sh | sed "s/^{/{\"run\": \"alone$sh\", /"; done
    timeout 60 $E/bench_ops_b --batch 32 --iters 20 --sync-each --shapes 10,0,1,2,3,10,16,2 | sed 's/^{/{"run": "mixed", /'
    timeout 100 $E/bench_ops_b --batch 32 --iters 20 --sync-each --rounds 2 | sed 's/^{/{"run": "twice", /'
    MPS_MAX_POOL_SIZE=0 timeout 100 $E/bench_ops_b --batch 32 --iters 20 --sync-each --rounds 2 | sed 's/^{/{"run": "twice_nopool", /'
  } 2>&1 | tee "$OUT/diag.jsonl"
  kill $SMI
fi
if part fresh; then
  echo "== fresh"
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv -lms 250 > "$OUT/smi_fresh.csv" &
  SMI=$!
  for i in $(seq 0 22); do
    for v in "auto -" "auto 128x128" "auto 64x128" "auto 128x64" "auto 64x64" "0 -"; do
      set -- $v
      tile=$2; [ "$tile" = - ] && tile=
      MPSRT_CONV_GEMM=$1 MPSRT_CONV_GEMM_TILE=$tile timeout 30 $E/bench_ops_b --batch 32 --iters 10 --sync-each --warm-s 0.3 --shapes $i \
        | sed "s/^{/{\"conv_gemm\": \"$1\", \"tile\": \"$2\", /"
    done
    timeout 30 $E/bench_ops_b --batch 1 --iters 20 --sync-each --warm-s 0.3 --shapes $i | sed 's/^{/{"conv_gemm": "auto", "tile": "-", /'
  done 2>&1 | tee "$OUT/fresh.jsonl"
  kill $SMI
  timeout 120 python3 bench/torch_reference.py convs --sync-each | tee "$OUT/torch_conv_sync.jsonl"
fi
if part clock; then
  echo "== clock"
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu --format=csv -lms 250 > "$OUT/smi_clock.csv" &
  SMI=$!
  { timeout 60 $E/bench_ops_b --batch 32 --iters 10 --sync-each --warm-s 12 --shapes 10 | sed 's/^{/{"run": "warm12", /'
    sleep 2
    MPSRT_SYNC_SPIN_US=0 timeout 60 $E/bench_ops_b --batch 32 --iters 10 --sync-each --warm-s 12 --shapes 10 | sed 's/^{/{"run": "warm12_nospin", /'
  } 2>&1 | tee "$OUT/clock.jsonl"
  kill $SMI
fi
if part convs; then
  echo "== convs"
  timeout 150 $E/bench_ops_b --batch 1,32 --iters 20 --sync-each | tee "$OUT/mpsrt_conv_sync.jsonl"
  timeout 120 python3 bench/torch_reference.py convs --sync-each | tee "$OUT/torch_conv_sync.jsonl"
fi
if part engine; then
  echo "== engine"
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 250 > "$OUT/smi_engine.csv" &
  SMI=$!
  models
  for round in 1 2; do
    for name in resnet50 densenet121; do
      timeout 60 $M bench /tmp/models/$name.onnx --device gpu --batch 1 --iterations 30 --warmup 5 --json
      timeout 60 $M bench /tmp/models/$name.onnx --device gpu --batch 32 --iterations 10 --warmup 3 --json
    done
    for name in resnet50 densenet121; do
      MPSRT_CONV_GEMM=0 timeout 60 $M bench /tmp/models/$name.onnx --device gpu --batch 32 --iterations 10 --warmup 3 --json | sed 's/^{/{"conv_gemm": "0", /'
    done
  done 2>&1 | tee "$OUT/engine.jsonl"
  kill $SMI
  timeout 120 python3 bench/engine_torch.py torch --iters 50 | tee "$OUT/torch_engine.jsonl"
fi
if part tiny; then
  echo "== tiny"
  { timeout 60 python3 bench/torch_reference.py elementwise --iters 1000
    timeout 60 $M bench elementwise --json --iters 1000
    timeout 60 $M bench elementwise --json --iters 1000
    timeout 60 python3 bench/torch_reference.py elementwise --iters 1000; } 2>&1 | tee "$OUT/elementwise.jsonl"
fi
