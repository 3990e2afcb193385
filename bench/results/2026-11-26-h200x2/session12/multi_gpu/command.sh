#!/usr/bin/env bash
# Lead's 2-GPU call (issue 25): setup, Python multi-GPU tests, serve_multi_gpu.sh twice.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p /tmp/site /tmp/models
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/mpsrt-*.whl && export PYTHONPATH=/tmp/site
date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv
./target/release/mpsrt info 2>&1 | grep -v XDG | tee $OUT/info.txt | head -30
python3 python/tests/test_multi_gpu.py 2>&1 | grep -v XDG | tee $OUT/test_multi_gpu.txt
python3 -c "
import torch, torchvision
m = torchvision.models.resnet50(weights=None).eval()
torch.onnx.export(m, (torch.randn(1, 3, 224, 224),), '/tmp/models/resnet50.onnx', input_names=['x'], output_names=['y'],
                  dynamic_axes={'x': {0: 'batch'}, 'y': {0: 'batch'}}, opset_version=17, dynamo=False)
print('exported')" 2>&1 | grep -v -i warn | tail -2
timeout 200 bash bench/serve_multi_gpu.sh /tmp/models/resnet50.onnx x 2>&1 | grep -v XDG | tee $OUT/serve_multi_gpu.jsonl
MAX_BATCH=32 timeout 200 bash bench/serve_multi_gpu.sh /tmp/models/resnet50.onnx x 2>&1 | grep -v XDG | tee $OUT/serve_multi_gpu_dynbatch.jsonl
date -u
