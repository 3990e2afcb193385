#!/usr/bin/env bash
REQ=none bash .gpureq/run.sh 2>&1 | tail -1
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p $OUT/final
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv
for round in 1 2; do
  for m in densenet121 efficientnet_b0; do
    for ci in 1 0; do
      MPSRT_CONCAT_INPLACE=$ci timeout 150 python3 bench/ort_ep.py /tmp/models --models $m --iters 30 2>/dev/null | grep '^{' | sed "s/^{/{\"round\": $round, \"concat_inplace\": $ci, /" | tee -a $OUT/final/ort_check.jsonl | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['round'], r['concat_inplace'], r.get('model'), r.get('batch'), r.get('runtime'), round(r.get('p50_ms', 0), 3))"
    done
  done
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv
