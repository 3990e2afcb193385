#!/usr/bin/env bash
# Final call B (eighth session): models beside torch eager / CUDA graphs / f16 (gpu.sh models),
# fresh-process reruns (p50, host record per step), Triton tutorials.
REQ=none bash .gpureq/run.sh 2>&1 | tail -2
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p $OUT/final
t=$(date +%s); timeout 240 bash bench/gpu.sh models > $OUT/final/gpu_models.log 2>&1; echo "models rc=$? $(( $(date +%s) - t )) s"
mv $OUT/models.jsonl $OUT/models_torch.jsonl $OUT/final/ 2>/dev/null; rm -f $OUT/info.txt $OUT/nvidia_smi.txt
grep -v '^{' $OUT/final/gpu_models.log | tail -30
M=./target/release/mpsrt
t=$(date +%s)
for round in 1 2; do
  for mb in "efficientnet_b0 1 30" "densenet121 1 30" "resnet50 1 30" "mobilenet_v3_small 1 30" "resnet50 32 10" "densenet121 32 10"; do
    set -- $mb
    timeout 60 $M bench /tmp/models/$1.onnx --device gpu --batch $2 --iterations $3 --warmup 5 --json 2>/dev/null \
      | sed "s/^{/{\"round\": $round, \"name\": \"$1\", /"
  done
done > $OUT/final/fresh.jsonl
echo "fresh $(( $(date +%s) - t )) s"
python3 - $OUT/final/fresh.jsonl <<'PY'
import json, sys, collections
d = collections.defaultdict(list); h = collections.defaultdict(list)
for l in open(sys.argv[1]):
    try: r = json.loads(l)
    except Exception: continue
    d[(r["name"], r["batch"])].append(r["p50_ms"]); h[(r["name"], r["batch"])].append(r.get("host_record_us_per_step", 0))
for k in d: print(k, "p50", [round(x, 3) for x in d[k]], "host us/step", [round(x, 2) for x in h[k]])
PY
t=$(date +%s); timeout 150 bash bench/gpu.sh triton > $OUT/final/gpu_triton.log 2>&1; echo "triton rc=$? $(( $(date +%s) - t )) s"
mv $OUT/triton.jsonl $OUT/final/ 2>/dev/null; grep ratio $OUT/final/triton.jsonl
