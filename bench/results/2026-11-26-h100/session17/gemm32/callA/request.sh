# gemm32 request A (~90 s; issue 23 BERT-base f32 b8). Needs main at or after "f32 tiled GEMM: stream-K".
# 1. In-process A/B of stream-K (tune suffix _sk, @wN workgroups) vs generation 2 on BERT b8's linear
#    layers as the engine runs them (b8z) and on 4096^3; 2. BERT b8/b1 end to end, MPSRT_GEMM_SK=0 vs 1
#    alternated in fresh processes (3 rounds b8, 1 round b1), ResNet-50 b32 once each (rule can't fire);
#    3. torch eager f32 BERT b8/b1 (TF32 off) in the same call. Writes under $OUT/gemm32/.
G="$OUT/gemm32"; mkdir -p "$G"
M=./target/release/mpsrt
AB=./target/release/examples/bench_ops_a
BERT=/tmp/models/bert_base.onnx
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
t=$(date +%s)
V="gen2;gen2sk;128x128_db0_wl1_k16_sk@w264;128x128_db0_wl1_k16_sk@w132;128x128_db0_wl1_k16_sk@w396;128x128_db0_wl1_sk@w264;128x64_db1_wl1_sk@w396;128x64_db0_wl1_k16_sk@w264"
BENCH_ONLY=gemm32 GEMM_AB_SHAPES=b8z GEMM_AB="$V" GEMM_AB_BUDGET_S=45 timeout 60 $AB > "$G/ab.jsonl" 2> "$G/ab.err"
echo "ab rc=$? $(( $(date +%s) - t )) s"
t=$(date +%s)
BENCH_ONLY=gemm32 GEMM_AB_SHAPES=sq GEMM_AB="gen2;128x128_db0_wl1_k16_sk@w264;128x128_db0_wl1_k16_sk@w132" GEMM_AB_ROUNDS=3 timeout 30 $AB >> "$G/ab.jsonl" 2>> "$G/ab.err"
echo "ab sq rc=$? $(( $(date +%s) - t )) s"
t=$(date +%s)
for round in 1 2 3; do
  for c in 0 1; do
    for b in 8 1; do
      [ $b = 1 ] && [ $round != 1 ] && continue
      MPSRT_GEMM_SK=$c timeout 12 $M bench $BERT --device gpu --batch $b --iterations 20 --warmup 5 --json 2>/dev/null \
        | sed "s/^{/{\"round\": $round, \"cfg\": \"sk$c\", /"
    done
  done
done > "$G/bert.jsonl"
for c in 0 1; do
  MPSRT_GEMM_SK=$c timeout 12 $M bench /tmp/models/resnet50.onnx --device gpu --batch 32 --iterations 20 --warmup 3 --json 2>/dev/null \
    | sed "s/^{/{\"round\": 1, \"cfg\": \"sk$c\", \"name\": \"resnet50\", /"
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
python3 - "$G" <<'PYEOF'
import json, sys
g = sys.argv[1]
for l in open(g + "/ab.jsonl"):
    try: r = json.loads(l)
    except Exception: continue
    if "gemm_ab" in r:
        print(f'{r["gemm_ab"]:22s} {r["variant"]:34s} {r["ms_med"]:.4f} ms {r["tflops_med"]:6.2f} TF  min {r["ms_min"]:.4f} max {r["ms_max"]:.4f} ok={r["ok"]}')
    elif r.get("ok") is False or "gemm_ab_skip" in r or "gemm_ab_budget" in r:
        print("!!", l.strip())
for l in open(g + "/bert.jsonl"):
    try: r = json.loads(l)
    except Exception: continue
    print("round", r["round"], r["cfg"], r.get("name", "bert"), "batch", r["batch"], "p50", round(r["p50_ms"], 3), "p90", round(r["p90_ms"], 3))
PYEOF
cat "$G/torch.jsonl"
tail -3 "$G/ab.err"
