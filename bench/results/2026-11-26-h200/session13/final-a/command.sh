#!/usr/bin/env bash
# Final call A (seventh session): Paddle on the plugin (wheel carried in four pieces), the ORT EP
# per model (two rounds), eager tiny ops with long vs 64-dispatch batches.
REQ=none bash .gpureq/run.sh 2>&1 | tail -2
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p $OUT/final
if ls /tmp/pw1 /tmp/pw2 /tmp/pw3 /tmp/pw4 > /dev/null 2>&1; then
  cat /tmp/pw1 /tmp/pw2 /tmp/pw3 /tmp/pw4 > /tmp/paddlepaddle-3.3.1-cp312-cp312-linux_x86_64.whl
  t=$(date +%s); python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site /tmp/paddlepaddle-3.3.1-cp312-cp312-linux_x86_64.whl 2>&1 | tail -2
  echo "paddle install $(( $(date +%s) - t )) s"; python3 -c 'import paddle; print("paddle", paddle.__version__)' 2>&1 | tail -1
else
  echo "paddle pieces missing"; ls -la .pw* 2>&1 | head
fi
if python3 -c 'import paddle' > /dev/null 2>&1; then
  BENCH_REPEAT=3 timeout 280 python3 bench/paddle_plugin.py mps cpu 2> $OUT/final/paddle.err | tee $OUT/final/paddle.jsonl | cut -c1-300
  REQ=paddle REQ_LIMIT=120 bash -c 'mkdir -p $OUT/paddle; timeout 120 bash .gpureq/paddle/request.sh > $OUT/paddle/stdout.txt 2>&1; echo "paddle request rc=$?"'
fi
M=./target/release/mpsrt
for r in 1 2 3 4 5; do
  for cfg in long512 old64; do
    if [ $cfg = old64 ]; then export MPSRT_MAX_OPS_PER_LONG_BATCH=64; else unset MPSRT_MAX_OPS_PER_LONG_BATCH; fi
    timeout 60 $M bench elementwise --json --iters 1000 2>/dev/null | sed "s/^{/{\"cfg\": \"$cfg\", \"round\": $r, /" >> $OUT/final/elementwise.jsonl
  done
done
unset MPSRT_MAX_OPS_PER_LONG_BATCH
timeout 60 python3 bench/torch_reference.py elementwise --iters 1000 > $OUT/final/elementwise_torch.jsonl 2>&1
python3 -c "
import json
for l in open('$OUT/final/elementwise.jsonl'):
    r = json.loads(l); print(r['cfg'], r['round'], 'tiny_op_us %.2f record %.2f' % (r['tiny_op_us'], r['tiny_op_record_us']))"

ROUNDS=1 timeout 110 bash .gpureq/ort_final.sh | tail -11
