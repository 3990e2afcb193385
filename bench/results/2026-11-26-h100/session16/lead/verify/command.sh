#!/usr/bin/env bash
# Verification call (tenth session) on the final build: batch-32 plans (> 256 MiB of intermediates
# take the direct native path) and ResNet-50 f16 b32 across replay paths, fresh processes.
REQ=none bash .gpureq/run.sh 2>&1 | tail -2
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p $OUT/verify
M=./target/release/mpsrt
t=$(date +%s)
for round in 1 2 3; do
  for mb in "densenet121 32 10 f32 default" "resnet50 32 10 f16 default" "resnet50 32 10 f16 direct" "resnet50 32 10 f16 0" "densenet121 1 30 f32 default" "resnet50 1 30 f32 default" "resnet50 32 10 f32 default" "bert_base 8 10 f32 default"; do
    set -- $mb
    if [ "$5" = default ]; then unset MPSRT_REPLAY_NATIVE; else export MPSRT_REPLAY_NATIVE=$5; fi
    timeout 60 $M bench /tmp/models/$1.onnx --device gpu --batch $2 --iterations $3 --warmup 5 --precision $4 --json 2>/dev/null \
      | sed "s/^{/{\"round\": $round, \"name\": \"$1\", \"native\": \"$5\", /"
  done
done > $OUT/verify/fresh.jsonl
unset MPSRT_REPLAY_NATIVE
echo "fresh $(( $(date +%s) - t )) s"
python3 - $OUT/verify/fresh.jsonl <<'PY'
import json, sys, collections
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    try: r = json.loads(l)
    except Exception: continue
    k = (r["name"], r["batch"], r.get("precision"), r["native"])
    d[k].append((round(r["p50_ms"], 3), round(r.get("host_record_us_per_step", 0), 2), r.get("replay", "").split("path ")[-1]))
for k in d: print(k, d[k])
PY
