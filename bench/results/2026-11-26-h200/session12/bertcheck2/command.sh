#!/usr/bin/env bash
REQ=none bash .gpureq/run.sh 2>&1 | tail -1
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p $OUT/final
mkdir -p /tmp/ort_dump && rm -f /tmp/ort_dump/* && MPSRT_ORT_DUMP_DIR=/tmp/ort_dump timeout 120 python3 -c "
import onnxruntime as ort, mpsrt.ort as mo
mo.register()
s = ort.InferenceSession('/tmp/models/bert_base.onnx', providers=['MpsrtExecutionProvider', 'CPUExecutionProvider'])
print('dumped')" 2>&1 | tail -1
for f in /tmp/models/bert_base.onnx /tmp/ort_dump/group_0_*.onnx; do
  echo "== $f"; timeout 60 ./target/release/mpsrt bench $f --device gpu --batch 1 --iterations 20 --warmup 5 --profile 2>/dev/null | sed -n 2,20p
done > $OUT/final/bert_ep_graph_profile.txt 2>&1
grep -E "==|plan:|MatMul  " $OUT/final/bert_ep_graph_profile.txt
for round in 1 2 3 4 5; do
  timeout 150 python3 bench/ort_ep.py /tmp/models --models bert_base --iters 40 --runtimes ep,mpsrt 2>/dev/null | grep '^{' | sed "s/^{/{\"round\": $round, /" | tee -a $OUT/final/ort_bert.jsonl | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['round'], r.get('model'), r.get('batch'), r.get('runtime'), round(r.get('p50_ms', 0), 3))"
done
