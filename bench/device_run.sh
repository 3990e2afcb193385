#!/usr/bin/env bash
# One call on the GPU machine: load Vulkan (Debian's loader carried in .gl/, NVIDIA's ICD),
# show the device, then run mpsrt's benchmarks beside PyTorch's. Usage (from the repo root,
# with target/release/mpsrt built here and carried): bash bench/device_run.sh [elementwise|all]
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
what=${1:-elementwise}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
./target/release/mpsrt info || exit 1
echo "== mpsrt elementwise"
./target/release/mpsrt bench elementwise --json | tee "$OUT/mpsrt_elementwise.jsonl"
echo "== torch elementwise"
python3 bench/torch_reference.py elementwise | tee "$OUT/torch_elementwise.jsonl"
if [ "$what" = all ]; then
  for ex in target/release/examples/bench_ops_a target/release/examples/bench_ops_b; do
    [ -x "$ex" ] && { echo "== $ex"; timeout 240 "$ex" | tee "$OUT/$(basename "$ex").jsonl"; }
  done
  echo "== torch ops"
  timeout 240 python3 bench/torch_reference.py ops | tee "$OUT/torch_ops.jsonl"
fi
