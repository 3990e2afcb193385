#!/usr/bin/env bash
# Final call part 1: models beside torch eager / CUDA graphs / f16, then fresh-process alternated reruns.
REQ=none bash .gpureq/run.sh 2>&1 | tail -3
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p $OUT/final
timeout 420 bash bench/gpu.sh models > $OUT/final/gpu_models.log 2>&1; echo "models rc=$?"
cp $OUT/models.jsonl $OUT/models_torch.jsonl $OUT/final/ 2>/dev/null; rm -f $OUT/models.jsonl $OUT/models_torch.jsonl $OUT/info.txt $OUT/nvidia_smi.txt
M=./target/release/mpsrt
for round in 1 2 3; do
  MPSRT_GATE_FOLD=1 timeout 60 $M bench /tmp/models/efficientnet_b0.onnx --device gpu --batch 1 --iterations 30 --warmup 5 --json 2>/dev/null \
    | sed "s/^{/{\"round\": $round, \"name\": \"efficientnet_b0_gatefold\", /"
  for mb in "efficientnet_b0 1 30" "densenet121 32 10" "densenet121 1 30" "resnet50 1 30" "mobilenet_v3_small 1 30" "resnet50 32 10"; do
    set -- $mb
    timeout 60 $M bench /tmp/models/$1.onnx --device gpu --batch $2 --iterations $3 --warmup 5 --json 2>/dev/null \
      | sed "s/^{/{\"round\": $round, \"name\": \"$1\", /"
  done
done > $OUT/final/fresh.jsonl
python3 - $OUT/final/fresh.jsonl <<'PY'
import json, sys, collections
d = collections.defaultdict(list); h = collections.defaultdict(list)
for l in open(sys.argv[1]):
    try: r = json.loads(l)
    except Exception: continue
    d[(r["name"], r["batch"])].append(r["p50_ms"]); h[(r["name"], r["batch"])].append(r.get("host_record_us_per_step", 0))
for k in d: print(k, "p50", [round(x, 3) for x in d[k]], "host us/step", [round(x, 2) for x in h[k]])
PY
