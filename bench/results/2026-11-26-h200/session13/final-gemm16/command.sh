# gemm16 request 3 (issue 23) — the final tree (at/after commit 20d1121): confirms the defaults
# as committed (NaN-guard attention fusion off, LayerNorm rows f16 under precision=f16, coop
# f16-out for 64×64 tunes, coop epilogue on, split-K off). ~60 s. Writes $OUT/gemm16/.
# For the lead's closing note (gemm16's last commit is before this call).
#  1. eager f16 checks + warmed 4096³ (bench_ops_a BENCH_ONLY=f16);
#  2. torch eager f16 BERT-base b8, then mpsrt BERT b8 f16 default / MPSRT_ATTENTION_NAN_GUARD=1,
#     alternated twice, and f32 b8 default.
G="$OUT/gemm16"; mkdir -p "$G"
E=./target/release/examples
M=./target/release/mpsrt
B=/tmp/models/bert_base.onnx
BENCH_ONLY=f16 timeout 20 $E/bench_ops_a > "$G/ops_f16.jsonl" 2> "$G/ops.err"
timeout 30 python3 - > "$G/torch_bert_f16.json" 2> "$G/torch.err" <<'EOF'
import json, sys, torch
sys.path.insert(0, "bench")
from engine_torch import bert, inputs, timed
m = bert().eval().cuda().half()
x = inputs("bert_base", 8, "cuda")
with torch.inference_mode():
    lat = timed(lambda: m(*x), 60)
print(json.dumps({"torch": "bert_base", "mode": "eager_f16", "batch": 8, "p50_ms": lat[len(lat) // 2],
                  "mean_ms": sum(lat) / len(lat), "device": torch.cuda.get_device_name(0)}))
EOF
for r in 1 2; do for c in default nanguard; do
  case $c in default) env="";; nanguard) env="MPSRT_ATTENTION_NAN_GUARD=1";; esac
  echo "f16 b8 $c round=$r $(env $env timeout 20 $M bench $B --device gpu --batch 8 --precision f16 --iterations 40 --warmup 10 2>&1 | grep -E 'plan:|latency' | tr '\n' ' ')" >> "$G/bert_ab.txt"
done; done
echo "f32 b8 default $(timeout 20 $M bench $B --device gpu --batch 8 --iterations 40 --warmup 10 2>&1 | grep -E 'plan:|latency' | tr '\n' ' ')" >> "$G/bert_ab.txt"
cat "$G/ops_f16.jsonl" "$G/torch_bert_f16.json" "$G/bert_ab.txt"
