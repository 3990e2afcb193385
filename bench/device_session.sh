#!/usr/bin/env bash
# One device call for issues 5, 6 and 7, most important first so a timeout still leaves results:
# the Triton tutorials through mpsrt.jit beside mpsrt's built-ins and torch (bench/jit_bench.py),
# then the engine and server (bench/device_engine.sh). Expects, carried from the dev machine:
# target/release/mpsrt, .gl/ (libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2) and .whl/mpsrt-*.whl (`maturin build --release`).
# Usage (repo root on the GPU machine): bash bench/device_session.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/site
for f in .gl/*.deb; do dpkg -x "$f" /; done  # Vulkan loader + glvnd (NVIDIA's ICD needs libGLX)
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
./target/release/mpsrt info | grep -q "GPU: none" && { ./target/release/mpsrt info; echo "no Vulkan GPU: stopping"; exit 1; }
export PYTHONUNBUFFERED=1
python3 -m zipfile -e .whl/mpsrt-*.whl /tmp/site
echo "== jit (issue 7)"
PYTHONPATH=/tmp/site timeout 200 python3 bench/jit_bench.py --iters 100 2>&1 | tee "$OUT/jit.jsonl"
echo "== engine and server (issues 5, 6)"
bash bench/device_engine.sh
