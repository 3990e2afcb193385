# gemm32 request 4 (final, ~55 s; issue 23 BERT-base f32). Needs the working tree at or after gemm32's
# commit "f32 tiled GEMM: MPSRT_GEMM_K16_MIN". Writes under $OUT/gemm32/.
# 1. BERT b8 (2 rounds) / b1 f32 p50, MPSRT_GEMM_GEN=1 vs 2 (default), alternated fresh processes;
# 2. ResNet-50 b1 f32: gen2 (16-deep 64x64 slabs), gen2 with MPSRT_GEMM_K16_MIN=1000000 (8-deep),
#    gen1, 3 rounds alternated; 3. torch eager f32 BERT b8/b1 (TF32 off) in the same call.
G="$OUT/gemm32"; mkdir -p "$G"
M=./target/release/mpsrt
BERT=/tmp/models/bert_base.onnx
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
t=$(date +%s)
CFGS="gen1:MPSRT_GEMM_GEN=1 gen2:MPSRT_GEMM_GEN=2"
for round in 1 2; do
  for cv in $CFGS; do
    c=${cv%%:*}; e=$(echo "${cv#*:}" | tr ',' ' ')
    for b in 8 1; do
      [ $b = 1 ] && [ $round != 1 ] && continue
      env $e timeout 12 $M bench $BERT --device gpu --batch $b --iterations 20 --warmup 5 --json 2>/dev/null \
        | sed "s/^{/{\"round\": $round, \"cfg\": \"$c\", /"
    done
  done
done > "$G/bert.jsonl"
RCFGS="gen2:MPSRT_GEMM_GEN=2 gen2k8:MPSRT_GEMM_GEN=2,MPSRT_GEMM_K16_MIN=1000000 gen1:MPSRT_GEMM_GEN=1"
for round in 1 2 3; do
  for cv in $RCFGS; do
    c=${cv%%:*}; e=$(echo "${cv#*:}" | tr ',' ' ')
    env $e timeout 10 $M bench /tmp/models/resnet50.onnx --device gpu --batch 1 --iterations 20 --warmup 3 --json 2>/dev/null \
      | sed "s/^{/{\"round\": $round, \"cfg\": \"$c\", \"name\": \"resnet50\", /"
  done
done >> "$G/bert.jsonl"
echo "models $(( $(date +%s) - t )) s"
t=$(date +%s)
timeout 25 python3 - > "$G/torch.jsonl" 2> "$G/torch.err" <<'PYEOF'
import json, sys, torch
sys.path.insert(0, "bench")
import engine_torch as et
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
m = et.bert().eval().cuda()
for b in (8, 1):
    x = et.inputs("bert_base", b, "cuda")
    with torch.inference_mode():
        lat = et.timed(lambda: m(*x), 50)
    print(json.dumps({"torch": "bert_base", "mode": "eager_f32", "batch": b, "p50_ms": lat[len(lat)//2], "device": torch.cuda.get_device_name(0)}), flush=True)
PYEOF
echo "torch rc=$? $(( $(date +%s) - t )) s"
cat "$G/device.txt"
python3 -c '
import json,sys
for l in open(sys.argv[1]):
    try: r=json.loads(l)
    except Exception: continue
    print("round",r["round"],r["cfg"],r.get("name","bert"),"batch",r["batch"],"p50",round(r["p50_ms"],3),"p90",round(r["p90_ms"],3))
' "$G/bert.jsonl"
cat "$G/torch.jsonl"
