#!/usr/bin/env bash
# Final call (eleventh session): models beside torch eager / CUDA graphs (gpu.sh models), fresh-process
# rounds interleaved with torch eager BERT f32 repeats, torch f16 repeats, GPT-2, the f16 GEMM.
REQ=none bash .gpureq/run.sh 2>&1 | tail -2
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p $OUT/final
if [ "${PART:-1}" = 1 ]; then
t=$(date +%s); timeout 240 bash bench/gpu.sh models > $OUT/final/gpu_models.log 2>&1; echo "models rc=$? $(( $(date +%s) - t )) s"
mv $OUT/models.jsonl $OUT/models_torch.jsonl $OUT/gpu_state.txt $OUT/final/ 2>/dev/null; rm -f $OUT/info.txt $OUT/nvidia_smi.txt
t=$(date +%s); timeout 150 python3 bench/gpt2_generate.py --tokens 128 --out /tmp/gpt2 > $OUT/final/gpt2.jsonl 2> $OUT/final/gpt2.err; echo "gpt2 rc=$? $(( $(date +%s) - t )) s"; grep "^{" $OUT/final/gpt2.jsonl | cut -c1-300
for r in 1 2 3; do BENCH_ONLY=f16gemm timeout 8 ./target/release/examples/bench_ops_a 2>&1 | grep matmul_f16 | cut -c1-200; done > $OUT/final/f16gemm.txt; cat $OUT/final/f16gemm.txt
exit 0
fi
M=./target/release/mpsrt
t=$(date +%s)
for round in 1 2 3; do
  for mb in "bert_base 8 20 f32" "bert_base 1 30 f32" "bert_base 8 20 f16" "resnet50 32 10 f16" "resnet50 32 10 f32" "resnet50 1 30 f32" "densenet121 1 30 f32"; do
    set -- $mb
    timeout 60 $M bench /tmp/models/$1.onnx --device gpu --batch $2 --iterations $3 --warmup 5 --precision $4 --json 2>/dev/null \
      | sed "s/^{/{\"round\": $round, \"name\": \"$1\", /"
  done
  timeout 60 python3 bench/engine_torch.py torch --only bert_base --iters 50 --repeat 2 2>/dev/null | grep '^{' | grep eager | sed "s/^{/{\"round\": $round, /" >> $OUT/final/torch_bert_f32.jsonl
done > $OUT/final/fresh.jsonl
echo "fresh $(( $(date +%s) - t )) s"
t=$(date +%s); timeout 120 python3 bench/engine_torch.py torch --iters 50 --f16-only --repeat 3 2>&1 | grep '^{' > $OUT/final/torch_f16.jsonl; echo "torch f16 $(( $(date +%s) - t )) s"
python3 - $OUT/final/fresh.jsonl $OUT/final/torch_f16.jsonl $OUT/final/torch_bert_f32.jsonl <<'PY'
import json, sys, collections
d = collections.defaultdict(list); h = collections.defaultdict(list)
for l in open(sys.argv[1]):
    try: r = json.loads(l)
    except Exception: continue
    k = (r["name"], r["batch"], r.get("precision"))
    d[k].append(r["p50_ms"]); h[k].append(r.get("host_record_us_per_step", 0))
for k in d: print(k, "p50", [round(x, 3) for x in d[k]], "host us/step", [round(x, 2) for x in h[k]])
for f in sys.argv[2:]:
    for l in open(f):
        r = json.loads(l); print(r["torch"], r["mode"], r["batch"], r.get("round"), round(r["p50_ms"], 3))
PY
