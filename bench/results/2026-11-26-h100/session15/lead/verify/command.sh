#!/usr/bin/env bash
# Verification (ninth session, final build): b1 models + b32 in alternated fresh processes.
REQ=none bash .gpureq/run.sh 2>&1 | tail -2
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p $OUT/verify; M=./target/release/mpsrt
for round in 1 2 3 4; do
  for mb in "densenet121 1 30 f32" "resnet50 1 30 f32" "mobilenet_v3_small 1 30 f32" "efficientnet_b0 1 30 f32" "resnet50 32 10 f32" "densenet121 32 10 f32" "resnet50 32 10 f16" "bert_base 8 10 f16"; do
    set -- $mb
    timeout 60 $M bench /tmp/models/$1.onnx --device gpu --batch $2 --iterations $3 --warmup 5 --precision $4 --json 2>/dev/null \
      | sed "s/^{/{\"round\": $round, \"name\": \"$1\", /"
  done
done > $OUT/verify/fresh.jsonl
python3 - $OUT/verify/fresh.jsonl <<'PY'
import json, sys, collections
d = collections.defaultdict(list); h = collections.defaultdict(list)
for l in open(sys.argv[1]):
    try: r = json.loads(l)
    except Exception: continue
    k = (r["name"], r["batch"], r.get("precision"))
    d[k].append(r["p50_ms"]); h[k].append(r.get("host_record_us_per_step", 0))
for k in d: print(k, "p50", [round(x, 3) for x in d[k]], "host us/step", [round(x, 2) for x in h[k]])
PY
