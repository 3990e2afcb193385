#!/usr/bin/env bash
# Final call A (eighth session): Paddle on the plugin (wheel carried in four pieces): the paddle
# helper's request (tiny-add A/B, ResNet-50 rows), mpsrt's own eager tiny ops.
REQ=none EXPORT=0 bash .gpureq/run.sh 2>&1 | tail -2
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p $OUT/final
if ls /tmp/pw1 /tmp/pw2 /tmp/pw3 /tmp/pw4 > /dev/null 2>&1; then
  cat /tmp/pw1 /tmp/pw2 /tmp/pw3 /tmp/pw4 > /tmp/paddlepaddle-3.3.1-cp312-cp312-linux_x86_64.whl
  t=$(date +%s); python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site /tmp/paddlepaddle-3.3.1-cp312-cp312-linux_x86_64.whl 2>&1 | tail -2
  echo "paddle install $(( $(date +%s) - t )) s"; python3 -c 'import paddle; print("paddle", paddle.__version__)' 2>&1 | tail -1
else
  echo "paddle pieces missing"; ls -la /tmp/pw* 2>&1 | head
fi
mkdir -p $OUT/paddle; t=$(date +%s)
timeout 200 bash .gpureq/paddle/request.sh > $OUT/paddle/stdout.txt 2>&1; echo "paddle request rc=$? $(( $(date +%s) - t )) s"
tail -15 $OUT/paddle/stdout.txt
t=$(date +%s); GLOG_minloglevel=2 BENCH_REPEAT=1 timeout 150 python3 bench/paddle_plugin.py mps 2> $OUT/final/paddle.err | tee $OUT/final/paddle.jsonl | cut -c1-300
echo "paddle resnet rows $(( $(date +%s) - t )) s"
M=./target/release/mpsrt
for r in 1 2 3; do
  timeout 60 $M bench elementwise --json --iters 1000 2>/dev/null | sed "s/^{/{\"round\": $r, /" >> $OUT/final/elementwise.jsonl
done
timeout 60 python3 bench/torch_reference.py elementwise --iters 1000 > $OUT/final/elementwise_torch.jsonl 2>&1
python3 -c "
import json
for l in open('$OUT/final/elementwise.jsonl'):
    r = json.loads(l); print(r['round'], 'tiny_op_us %.2f record %.2f' % (r['tiny_op_us'], r['tiny_op_record_us']))"
grep -h tiny $OUT/final/elementwise_torch.jsonl | cut -c1-200
