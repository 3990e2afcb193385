# gemm32 request C (~115 s; issue 23 BERT-base f32 b8/b16). Needs main at or after d0c23a2 (MPSRT_GEMM_REDUCE4, MPSRT_GEMM_BIG_MIN, sqk shapes, stream-K rule 2 default since 59bde51).
# 1. In-process A/B on b8z, b16z (BERT's linear layers as the engine runs them) and sqk (4096^2 at K 768/3072, no epilogue):
#    gen2 (the new default: wave-model stream-K on Q/K/V), gen2sk0 (stream-K off), gen2@r4 (vec4 split-K reduction:
#    changes attention out and FFN down, which split 4 ways), 128x64_db1_wl1 forced (b16 FFN up's MPSRT_GEMM_BIG_MIN=528 block;
#    on sqk: the K-length cost of 128x128 vs 128x64 at full waves).
# 2. End to end, alternated fresh processes: BERT b8 x3 rounds {SK=0 (old default), default, REDUCE4=1};
#    BERT b16 x2 rounds {default, BIG_MIN=528, REDUCE4=1}.
# 3. torch eager f32 BERT b8 (3 timings in one process) and b16, TF32 off, same call. Writes under $OUT/gemm32/.
G="$OUT/gemm32"; mkdir -p "$G"
M=./target/release/mpsrt
AB=./target/release/examples/bench_ops_a
BERT=/tmp/models/bert_base.onnx
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
t=$(date +%s)
V="gen2;gen2sk0;gen2@r4;128x64_db1_wl1"
BENCH_ONLY=gemm32 GEMM_AB_SHAPES=b8z,b16z,sqk GEMM_AB="$V" GEMM_AB_BUDGET_S=30 timeout 45 $AB > "$G/ab.jsonl" 2> "$G/ab.err"
echo "ab rc=$? $(( $(date +%s) - t )) s"
t=$(date +%s)
run() { # round cfg batch env...
  local r=$1 c=$2 b=$3; shift 3
  env "$@" timeout 12 $M bench $BERT --device gpu --batch $b --iterations 20 --warmup 5 --json 2>/dev/null \
    | sed "s/^{/{\"round\": $r, \"cfg\": \"$c\", /"
}
for round in 1 2 3; do
  run $round sk0 8 MPSRT_GEMM_SK=0
  run $round default 8 MPSRT_NOTHING=1
  run $round r4 8 MPSRT_GEMM_REDUCE4=1
done > "$G/bert.jsonl"
for round in 1 2; do
  run $round default 16 MPSRT_NOTHING=1
  run $round big528 16 MPSRT_GEMM_BIG_MIN=528
  run $round r4 16 MPSRT_GEMM_REDUCE4=1
done >> "$G/bert.jsonl"
echo "models $(( $(date +%s) - t )) s"
t=$(date +%s)
timeout 30 python3 - > "$G/torch.jsonl" 2> "$G/torch.err" <<'PYEOF'
import json, sys, torch
sys.path.insert(0, "bench")
import engine_torch as et
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
m = et.bert().eval().cuda()
for b in (8, 8, 16, 8):
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
        print(f'{r["gemm_ab"]:24s} {r["variant"]:20s} {r["ms_med"]:.4f} ms {r["tflops_med"]:6.2f} TF  min {r["ms_min"]:.4f} max {r["ms_max"]:.4f} ok={r["ok"]}')
    elif r.get("ok") is False or "gemm_ab_skip" in r or "gemm_ab_budget" in r:
        print("!!", l.strip())
for l in open(g + "/bert.jsonl"):
    try: r = json.loads(l)
    except Exception: continue
    print("round", r["round"], r["cfg"], "bert batch", r["batch"], "p50", round(r["p50_ms"], 3), "p90", round(r["p90_ms"], 3))
PYEOF
cat "$G/torch.jsonl"
tail -3 "$G/ab.err"
