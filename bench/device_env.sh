# Sourced by the device scripts (bench/device_session6*.sh): loads Vulkan on the lent NVIDIA
# machine (Debian's loader and libglvnd packages carried in .gl/, NVIDIA's ICD), sets $OUT, $M
# (the mpsrt binary) and $E (its examples), records the date, the device and its clocks, and
# stops when no Vulkan GPU is visible.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/models /tmp/site
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
