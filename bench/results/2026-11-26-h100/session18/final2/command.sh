#!/usr/bin/env bash
# Final call 2 (twelfth session): the new coop planner (rq1_ad1 from K >= 1024 or 512 blocks, ad1 on
# the 64x64 tune). f16 GEMM 4096^3 in three fresh processes beside torch f16 matmul; in-process
# default vs the 11th session's tune at 4096^3 and 8192^3; BERT-base f16 b8 end to end, planner 11 vs
# default alternated; ResNet-50 f16 b32 and BERT f16 b8 beside torch eager f16; GPT-2 generation.
REQ=none bash .gpureq/run.sh 2>&1 | tail -2
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
F=$OUT/final2; mkdir -p $F
M=./target/release/mpsrt; E=./target/release/examples
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > $F/device.txt
for r in 1 2 3; do
  BENCH_ONLY=f16gemm timeout 8 $E/bench_ops_a 2>&1 | grep matmul_f16 | cut -c1-220
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
COOP_AB="default fi1_cl1_vs4_uc1_ov1_su3_rp1" COOP_AB_ROUNDS=3 COOP_AB_MS=25 COOP_AB_BUDGET_S=30 \
  COOP_AB_SHAPES="4096x4096x4096 8192x8192x8192 2048x3072x768" timeout 40 $E/bench_coop_sweep 2>/dev/null | grep -v "^# r" > $F/ab.csv
cut -d, -f1,2,3,4,6,7,8 $F/ab.csv | grep -v "^#" | cut -c1-250
B=/tmp/models/bert_base.onnx
run() { echo "bert b8 f16 $1 $(env $1 timeout 10 $M bench $B --device gpu --batch 8 --precision f16 --iterations 60 --warmup 15 2>&1 | grep -E 'latency' | tr '\n' ' ')" >> $F/bert_e2e.txt; }
for r in 1 2 3; do run MPSRT_COOP_PLANNER=11; run MPSRT_COOP_PLANNER=0; done; cat $F/bert_e2e.txt
for mb in "resnet50 32 20 f16" "resnet50 32 20 f16" "bert_base 32 20 f16"; do
  set -- $mb
  timeout 60 $M bench /tmp/models/$1.onnx --device gpu --batch $2 --iterations $3 --warmup 10 --precision $4 --json 2>/dev/null | sed "s/^{/{\"name\": \"$1\", /"
done > $F/fresh.jsonl
echo "bert b32 f16 planner 11: $(MPSRT_COOP_PLANNER=11 timeout 60 $M bench $B --device gpu --batch 32 --iterations 20 --warmup 10 --precision f16 2>&1 | grep latency)" >> $F/bert_e2e.txt
python3 -c "
import json,sys
for l in open('$F/fresh.jsonl'):
    r=json.loads(l); print(r['name'], r['batch'], r.get('precision'), round(r['p50_ms'],3))"
t=$(date +%s); timeout 120 python3 bench/engine_torch.py torch --iters 50 --f16-only --repeat 2 2>&1 | grep '^{' > $F/torch_f16.jsonl; echo "torch f16 $(( $(date +%s) - t )) s"
python3 -c "
import json
for l in open('$F/torch_f16.jsonl'):
    r=json.loads(l); print(r['torch'], r['mode'], r.get('model'), r['batch'], round(r['p50_ms'],3))"
t=$(date +%s); timeout 150 python3 bench/gpt2_generate.py --tokens 128 --out /tmp/gpt2 > $F/gpt2.jsonl 2> $F/gpt2.err; echo "gpt2 rc=$? $(( $(date +%s) - t )) s"; grep "^{" $F/gpt2.jsonl | cut -c1-300
cp .gpureq/final.sh $F/command.sh
