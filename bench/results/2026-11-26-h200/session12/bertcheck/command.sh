#!/usr/bin/env bash
REQ=none bash .gpureq/run.sh 2>&1 | tail -1
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p $OUT/final
for round in 1 2 3 4; do
  timeout 150 python3 bench/ort_ep.py /tmp/models --models bert_base --iters 40 --runtimes ep,mpsrt 2>/dev/null | grep '^{' | sed "s/^{/{\"round\": $round, /" | tee -a $OUT/final/ort_bert.jsonl | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['round'], r.get('model'), r.get('batch'), r.get('runtime'), round(r.get('p50_ms', 0), 3))"
done
