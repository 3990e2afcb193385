#!/usr/bin/env bash
# Final call (twelfth session): f16 GEMM 4096^3 (bench_ops_a x3) beside torch f16 matmul (x3), the
# product-rate probes, BERT f32 b8/b1 fresh processes interleaved with torch eager BERT f32, BERT f16
# b8 and ResNet-50 f16 b32 beside torch f16, GPT-2 generation.
REQ=none bash .gpureq/run.sh 2>&1 | tail -2
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
F=$OUT/final; mkdir -p $F
M=./target/release/mpsrt; E=./target/release/examples
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > $F/device.txt
git log --oneline -1 >> $F/device.txt 2>/dev/null
for r in 1 2 3; do
  BENCH_ONLY=f16gemm timeout 8 $E/bench_ops_a 2>&1 | grep matmul_f16 | cut -c1-200
  timeout 30 python3 - <<'PY'
import json, torch, time
a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16); b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
for _ in range(3): a @ b
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(20): a @ b
torch.cuda.synchronize(); s = (time.perf_counter() - t) / 20
print(json.dumps({"torch": torch.__version__, "bench": "matmul_f16", "m": 4096, "ms": s * 1e3, "tflops": 2 * 4096**3 / s / 1e12}))
PY
done > $F/f16gemm.txt 2>&1; cat $F/f16gemm.txt
O="fi1_cl1_vs4_uc1_ov1_su3"
COOP_AB="default ${O}_pr2 ${O}_pr3 ${O}_pr4 ${O}_pr5" COOP_AB_ROUNDS=3 COOP_AB_MS=25 COOP_AB_BUDGET_S=40 \
  COOP_AB_SHAPES="4096x4096x4096" timeout 50 $E/bench_coop_sweep 2>/dev/null | grep -v "^# r" > $F/probes.csv
cut -d, -f1,2,4,6,7,8 $F/probes.csv | grep -v "^#"
t=$(date +%s)
for round in 1 2 3; do
  for mb in "bert_base 8 40 f32" "bert_base 1 60 f32"; do
    set -- $mb
    timeout 60 $M bench /tmp/models/$1.onnx --device gpu --batch $2 --iterations $3 --warmup 10 --precision $4 --json 2>/dev/null \
      | sed "s/^{/{\"round\": $round, \"name\": \"$1\", /"
  done
  timeout 60 python3 bench/engine_torch.py torch --only bert_base --iters 50 --repeat 2 2>/dev/null | grep '^{' | grep eager | sed "s/^{/{\"round\": $round, /" >> $F/torch_bert_f32.jsonl
done > $F/fresh.jsonl
for mb in "bert_base 8 40 f16" "resnet50 32 20 f16" "bert_base 8 40 f16" "resnet50 32 20 f16"; do
  set -- $mb
  timeout 60 $M bench /tmp/models/$1.onnx --device gpu --batch $2 --iterations $3 --warmup 10 --precision $4 --json 2>/dev/null | sed "s/^{/{\"name\": \"$1\", /"
done >> $F/fresh.jsonl
echo "fresh $(( $(date +%s) - t )) s"
t=$(date +%s); timeout 120 python3 bench/engine_torch.py torch --iters 50 --f16-only --repeat 2 2>&1 | grep '^{' > $F/torch_f16.jsonl; echo "torch f16 $(( $(date +%s) - t )) s"
python3 - $F/fresh.jsonl $F/torch_f16.jsonl $F/torch_bert_f32.jsonl <<'PY'
import json, sys, collections
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    try: r = json.loads(l)
    except Exception: continue
    d[(r["name"], r["batch"], r.get("precision"))].append(r["p50_ms"])
for k in d: print(k, "p50", [round(x, 3) for x in d[k]])
for f in sys.argv[2:]:
    for l in open(f):
        r = json.loads(l); print(r["torch"], r["mode"], r.get("name", r.get("model")), r["batch"], r.get("round"), round(r["p50_ms"], 3))
PY
t=$(date +%s); timeout 150 python3 bench/gpt2_generate.py --tokens 128 --out /tmp/gpt2 > $F/gpt2.jsonl 2> $F/gpt2.err; echo "gpt2 rc=$? $(( $(date +%s) - t )) s"; grep "^{" $F/gpt2.jsonl | cut -c1-300
cp .gpureq/final.sh $F/command.sh
