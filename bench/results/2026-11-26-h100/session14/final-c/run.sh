#!/usr/bin/env bash
# Lead's driver for one GPU call (not committed): standard setup, then each helper's request.
set -uo pipefail
OUT=${OUT:-/tmp/out}; export OUT
T0=$(date +%s)
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/site /tmp/models "$OUT/lead"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
./target/release/mpsrt info > "$OUT/lead/info.txt" 2>&1; head -20 "$OUT/lead/info.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
[ "${EXPORT:-1}" = 1 ] && [ ! -f /tmp/models/resnet50.onnx ] && timeout 240 python3 bench/engine_torch.py export /tmp/models 2>&1 | grep -v -i warn | tail -8
echo "setup took $(( $(date +%s) - T0 )) s"
for r in ${REQ:-$(ls .gpureq)}; do
  [ -f ".gpureq/$r/request.sh" ] || continue
  mkdir -p "$OUT/$r"; t=$(date +%s)
  echo "== $r"
  timeout "${REQ_LIMIT:-150}" bash ".gpureq/$r/request.sh" > "$OUT/$r/stdout.txt" 2>&1; echo "rc=$? in $(( $(date +%s) - t )) s"
  tail -5 "$OUT/$r/stdout.txt"
done
echo "total $(( $(date +%s) - T0 )) s"
