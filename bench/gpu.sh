#!/usr/bin/env bash
# The GPU benchmark: one call on the lent NVIDIA machine measures mpsrt beside its peers, each
# part writing JSON lines to $OUT/<part>.jsonl (copy them to bench/results/<date>-<device>/).
#
# Usage (repo root, on the GPU machine): bash bench/gpu.sh PART[,PART...]   (default: all)
# Parts, in the order they run:
#   elementwise  f32 add bandwidth (64M elements) and 1,000 tiny eager ops per sync, twice each,
#                beside torch CUDA measured the same way (bench/torch_reference.py)
#   light        ONNX's nine light models through the conformance runner on the GPU
#   models       torchvision resnet50 / densenet121 / mobilenet_v3_small / efficientnet_b0 at
#                batch 1 and 32 and BERT-base (seq 128) at batch 1 and 8, exported to ONNX
#                (bench/engine_torch.py export): `mpsrt bench` on the GPU, torch eager and torch
#                CUDA graphs (TF32 off) in the same call
#   replay       (not in the default set) plan replay's host cost (issue 22): `mpsrt bench` at
#                batch 1 on the `models` files with MPSRT_REPLAY_THREADS=1/2/4 (host_record_us_per_step),
#                then `--profile` (profile_mode gpu-timestamps: host and GPU ms per step)
#   ops          matmul (f32, f16; 4096³ among them), softmax and row sums (bench_ops_a) beside
#                torch (`torch_reference.py ops`)
#   convs        ResNet-50's and DenseNet-121's conv2d shapes at batch 1 and 32, each call
#                synchronized, per conv algorithm (MPSRT_CONV_ALGO=auto|legacy|gemm|splitk|
#                winograd; ALGOS="..." picks others, e.g. winograd2 winograd4), beside torch (cuDNN)
#   ort          the ONNX Runtime plugin EP vs mpsrt's own InferenceSession vs
#                onnxruntime-ep-webgpu on the `models` files (bench/ort_ep.py)
#   jit          Triton's tutorials 01-03 through mpsrt.jit beside the built-ins and torch
#                (bench/jit_bench.py)
#   triton       Triton's tutorials through mpsrt's `triton.backends` entry point beside the
#                built-ins (bench/triton_backend.py), then its launch overhead (bench/triton_launch.py)
#   paddle       Paddle on the mpsrt CustomDevice plugin beside Paddle CPU and torch
#                (bench/paddle_plugin.py; needs the paddlepaddle wheel, see below)
#   coopsweep    (not in the default set) every cooperative-matrix f16 GEMM variant (tiled,
#                generations 1/2, generation 3's tune family) in a fresh process each: a
#                correctness check vs the f32 GEMM, then 4096³, 2048×3072×768 and 1024³; one CSV
#                line per variant in $OUT/coopsweep.csv (bench_coop_sweep; COOP_VARIANTS=... picks)
#
# Carried from the dev machine (`carry`): target/release/mpsrt and target/release/examples/*
# (`cargo build --release -p mpsrt-cli && cargo build --release -p mpsrt-tensor --examples
# -p mpsrt-engine --example conformance`), target/onnx-conformance/light (scripts/conformance.sh
# dumps it), .gl/ (Debian's Vulkan loader and libglvnd .debs: the device README's "Headless
# rendering"), .whl/ (wheels: mpsrt from `maturin build --release`, onnxruntime-ep-webgpu,
# onnxruntime when the machine's is older than the EP needs; paddlepaddle is 195 MB, above one
# call's 64 MiB, so the paddle part runs only where Paddle is already installed).
set -uo pipefail
PARTS=${1:-elementwise,light,models,ops,convs,ort,jit,triton,paddle}
part() { [[ ",$PARTS," == *",$1,"* ]]; }
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/models /tmp/site

# Vulkan on the NVIDIA machine: Debian's loader (carried), NVIDIA's ICD.
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export PYTHONUNBUFFERED=1
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
M=./target/release/mpsrt
E=./target/release/examples
$M info | tee "$OUT/info.txt" | grep -q "GPU: none" && { cat "$OUT/info.txt"; echo "no Vulkan GPU: stopping"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/nvidia_smi.txt"
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
models() { [ -f /tmp/models/resnet50.onnx ] || timeout 300 python3 bench/engine_torch.py export /tmp/models 2>&1 | grep -v Warning | tail -6; }

if part elementwise; then
  echo "== elementwise"
  { timeout 60 python3 bench/torch_reference.py elementwise --iters 1000
    timeout 60 $M bench elementwise --json --iters 1000
    timeout 60 $M bench elementwise --json --iters 1000
    timeout 60 python3 bench/torch_reference.py elementwise --iters 1000; } 2>&1 | tee "$OUT/elementwise.jsonl"
fi
if part light; then
  echo "== light"
  timeout 240 $E/conformance target/onnx-conformance --suite light --device gpu 2>&1 | tail -3 | tee "$OUT/light.txt"
fi
if part models; then
  echo "== models"
  models
  for name in resnet50 densenet121 mobilenet_v3_small efficientnet_b0 bert_base; do
    [ -f /tmp/models/$name.onnx ] || continue
    batches="1 32"; [ $name = bert_base ] && batches="1 8"
    for b in $batches; do
      it=30; [ $b -gt 1 ] && it=10
      # The GPU's state before each process (memory used / utilisation by anyone else, clocks).
      echo "$name b$b $(nvidia-smi --query-gpu=memory.used,utilization.gpu,clocks.sm,temperature.gpu,power.draw --format=csv,noheader)" >> "$OUT/gpu_state.txt"
      timeout 90 $M bench /tmp/models/$name.onnx --device gpu --batch $b --iterations $it --warmup 5 --json \
        | sed "s/^{/{\"model\": \"$name\", /"
    done
  done 2>&1 | tee "$OUT/models.jsonl"
  # precision=f16 (issue 23): ResNet-50 b32 and BERT-base b8 beside torch eager f16 (--f16).
  for mb in resnet50:32 bert_base:8; do
    name=${mb%:*}; b=${mb#*:}
    [ -f /tmp/models/$name.onnx ] && timeout 90 $M bench /tmp/models/$name.onnx --device gpu --batch $b \
      --iterations 10 --warmup 5 --precision f16 --json | sed "s/^{/{\"model\": \"$name\", \"precision\": \"f16\", /"
  done 2>&1 | tee -a "$OUT/models.jsonl"
  timeout 300 python3 bench/engine_torch.py torch --iters 50 --f16 2>&1 | grep '^{' | tee "$OUT/models_torch.jsonl"
fi
if part replay; then
  echo "== replay"
  models
  for name in densenet121 resnet50 mobilenet_v3_small efficientnet_b0 bert_base; do
    [ -f /tmp/models/$name.onnx ] || continue
    for t in 1 2 4; do
      MPSRT_REPLAY_THREADS=$t timeout 90 $M bench /tmp/models/$name.onnx --device gpu --batch 1 --iterations 50 \
        --warmup 5 --json | sed "s/^{/{\"model\": \"$name\", \"replay_threads\": $t, /"
    done
    timeout 120 $M bench /tmp/models/$name.onnx --device gpu --batch 1 --iterations 5 --warmup 3 --profile --json \
      | sed "s/^{/{\"model\": \"$name\", \"profiled\": true, /"
  done 2>&1 | tee "$OUT/replay.jsonl"
fi
if part ops; then
  echo "== ops"
  timeout 200 $E/bench_ops_a | tee "$OUT/ops.jsonl"
  timeout 120 python3 bench/torch_reference.py ops | tee "$OUT/ops_torch.jsonl"
fi
if part convs; then
  echo "== convs"
  # Each conv algorithm (MPSRT_CONV_ALGO) on each shape in a fresh process: under Vulkan the
  # H100's SM clock drops from 1980 to ~345 MHz a few seconds into a busy process (BENCHMARKS.md,
  # "two speeds per process"), so one long process would time most shapes at the low clock.
  # 23 ResNet-50 + 6 DenseNet-121 shapes (--densenet) at batch 32 for every algorithm; batch 1
  # (the planner's choice) with CONV_B1=1.
  NSHAPES=${NSHAPES:-29}
  { for algo in ${ALGOS:-auto legacy gemm splitk winograd}; do
      for i in $(seq 0 $((NSHAPES - 1))); do
        MPSRT_CONV_ALGO=$algo timeout 30 $E/bench_ops_b --batch 32 --shapes $i --iters 20 --sync-each --densenet --warm-s 0.3
      done
    done
    if [ -n "${CONV_B1:-}" ]; then
      for i in $(seq 0 $((NSHAPES - 1))); do
        timeout 30 $E/bench_ops_b --batch 1 --shapes $i --iters 20 --sync-each --densenet --warm-s 0.3
      done
    fi; } | tee "$OUT/convs.jsonl"
  timeout 150 python3 bench/torch_reference.py convs --sync-each --densenet | tee "$OUT/convs_torch.jsonl"
fi
if part ort && [ -f bench/ort_ep.py ]; then
  echo "== ort"
  models
  timeout 400 python3 bench/ort_ep.py /tmp/models 2>&1 | tee "$OUT/ort.jsonl"
fi
if part jit; then
  echo "== jit"
  timeout 200 python3 bench/jit_bench.py --iters 100 2>&1 | tee "$OUT/jit.jsonl"
fi
if part triton && [ -f bench/triton_backend.py ]; then
  echo "== triton"
  timeout 200 python3 bench/triton_backend.py 2>&1 | tee "$OUT/triton.jsonl"
  timeout 60 python3 bench/triton_launch.py 2>&1 | tee -a "$OUT/triton.jsonl"
fi
if part coopsweep; then
  echo "== coopsweep"
  timeout 540 $E/bench_coop_sweep 2>&1 | tee "$OUT/coopsweep.csv"
fi
if part paddle && [ -f bench/paddle_plugin.py ]; then
  echo "== paddle"
  if python3 -c 'import paddle' 2> /dev/null; then
    timeout 300 python3 bench/paddle_plugin.py 2>&1 | tee "$OUT/paddle.jsonl"
  else
    echo "paddle is not installed on this machine: part skipped" | tee "$OUT/paddle.jsonl"
  fi
fi
