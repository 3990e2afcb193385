#!/usr/bin/env bash
REQ=none bash .gpureq/run.sh 2>&1 | tail -1
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p $OUT/final
for round in 1 2; do
  for m in resnet50 densenet121 mobilenet_v3_small efficientnet_b0 bert_base; do
    timeout 150 python3 bench/ort_ep.py /tmp/models --models $m --iters 30 2>/dev/null | grep '^{' | sed "s/^{/{\"round\": $round, /" >> $OUT/final/ort_final.jsonl
  done
done
python3 - $OUT/final/ort_final.jsonl <<'PY'
import json, sys, collections
d = collections.defaultdict(dict)
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "p50_ms" in r: d[(r["round"], r["model"], r["batch"])][r["runtime"]] = r["p50_ms"]
for k, v in sorted(d.items()):
    ep, s, w = v.get("mpsrt_ep"), v.get("mpsrt_session"), v.get("webgpu_ep")
    print(k, "ep %.3f session %.3f webgpu %.3f  ep/session %.2f  webgpu/ep %.2f" % (ep, s, w, ep / s, w / ep))
PY
