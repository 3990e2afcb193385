# gemm16 request 2 (issue 23) — needs the working tree at/after commit 9266dff (05:14 UTC): the
# attention pass fuses transformers' NaN-guarded SDPA (BERT), precision=f16 keeps LayerNorm rows
# in f16 (no casts around norms), coop f16-out auto for 64×64 tunes, coop epilogue on by
# default, split-K behind MPSRT_COOP_SPLITK=1. ~90 s. Writes $OUT/gemm16/.
#  0. accuracy: BERT-base b8 output, mpsrt precision=f16 vs f32 on the same ONNX file and input
#     (the Python wheel, GPU; one sequence padded), before any timing;
#  1. torch eager f16 BERT-base b8 (same call, the peer);
#  2. mpsrt BERT-base b8 --precision f16: plan + per-op GPU profile; p50 in alternated fresh
#     processes: default / MPSRT_COOP_SPLITK=1 / MPSRT_FUSED_ATTENTION=0 (composed attention);
#     f32 b8 p50 (the attention fusion applies there too);
#  3. eager f16 4096³ (bench_ops_a BENCH_ONLY=f16: checks first, then the warmed row);
#  4. split-K numerics (a sweep child's check) then BERT GEMM shapes with/without split-K;
#  5. sweep: default vs @f32out vs sw8@f32out vs @splitk on 4096³ + BERT's four GEMM shapes.
G="$OUT/gemm16"; mkdir -p "$G"
E=./target/release/examples
M=./target/release/mpsrt
B=/tmp/models/bert_base.onnx
mark() { echo "$(date +%s.%N) $*" >> "$G/marks.txt"; }
nvidia-smi --query-gpu=timestamp,clocks.sm,utilization.gpu --format=csv,noheader -lms 250 > "$G/smi.csv" 2>&1 &
SMI=$!
mark start
timeout 40 python3 - > "$G/accuracy.json" 2> "$G/accuracy.err" <<'EOF'
import json, numpy as np, mpsrt.onnx as mo
B = "/tmp/models/bert_base.onnx"
rng = np.random.default_rng(0)
feed = {"input_ids": rng.integers(0, 30522, (8, 128)).astype(np.int64),
        "attention_mask": np.ones((8, 128), np.int64)}
feed["attention_mask"][1, 100:] = 0  # one padded sequence
y32 = mo.InferenceSession(B, place="gpu").run(None, feed)[0].astype(np.float64)
y16 = mo.InferenceSession(B, place="gpu", precision="f16").run(None, feed)[0].astype(np.float64)
d = np.abs(y16 - y32)
print(json.dumps({"f16_vs_f32_max_abs": float(d.max()), "f16_vs_f32_mean_abs": float(d.mean()),
                  "max_abs_f32": float(np.abs(y32).max()), "f16_finite": bool(np.isfinite(y16).all())}))
EOF
mark accuracy_done
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
mark torch_done
timeout 30 $M bench $B --device gpu --batch 8 --precision f16 --iterations 30 --warmup 10 --profile --json \
  > "$G/bert_f16_prof.json" 2> "$G/bert_f16_prof.err"
python3 - "$G/bert_f16_prof.json" > "$G/bert_f16_summary.txt" 2>&1 <<'EOF'
import json, sys, collections
v = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print({k: v[k] for k in v if not k.startswith("profile_")})
steps = v.get("profile_steps", [])
agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
for op, name, ms, host, gpu in steps:
    a = agg[op]; a[0] += 1; a[1] += gpu or 0.0; a[2] += host
print(f"GPU total {sum(a[1] for a in agg.values()):.3f} ms over {len(steps)} steps")
for op, (n, g, h) in sorted(agg.items(), key=lambda x: -x[1][1]):
    print(f"{op:28s} {n:4d} steps  gpu {g:8.3f} ms  host {h:8.3f} ms")
print("-- layer 3 steps in order (op, name, gpu ms)")
for op, name, ms, host, gpu in steps:
    if "layer.3/" in name:
        print(f"{op:20s} {name:70s} {gpu if gpu is None else round(gpu, 4)}")
EOF
mark prof_done
for r in 1 2; do for c in default splitk composed; do
  case $c in default) env="";; splitk) env="MPSRT_COOP_SPLITK=1";; composed) env="MPSRT_FUSED_ATTENTION=0";; esac
  echo "f16 b8 $c round=$r $(env $env timeout 20 $M bench $B --device gpu --batch 8 --precision f16 --iterations 30 --warmup 10 2>&1 | grep -E 'plan:|latency' | tr '\n' ' ')" >> "$G/bert_ab.txt"
done; done
for b in 8; do
  echo "f32 b$b default $(timeout 20 $M bench $B --device gpu --batch $b --iterations 40 --warmup 10 2>&1 | grep -E 'plan:|latency' | tr '\n' ' ')" >> "$G/bert_ab.txt"
done
mark bert_ab_done
BENCH_ONLY=f16 timeout 20 $E/bench_ops_a > "$G/ops_f16.jsonl" 2> "$G/ops.err"
mark ops_done
COOP_VARIANTS="default@splitk" SWEEP_SHAPES="1024x768x3072" timeout 15 $E/bench_coop_sweep > "$G/splitk_check.csv" 2>/dev/null
BENCH_ONLY=bert16 timeout 15 $E/bench_ops_a > "$G/bert16.jsonl" 2>> "$G/ops.err"
MPSRT_COOP_SPLITK=1 BENCH_ONLY=bert16 timeout 15 $E/bench_ops_a > "$G/bert16_splitk.jsonl" 2>> "$G/ops.err"
mark bert16_done
MPSRT_COOP_EXPERIMENTAL=1 COOP_VARIANTS="default default@f32out fi1_cl1_vs4_uc1_sw8@f32out default@splitk default" \
  SWEEP_BUDGET_S=20 SWEEP_CHILD_S=10 \
  SWEEP_SHAPES="4096x4096x4096 1024x2304x768 1024x768x768 1024x3072x768 1024x768x3072" \
  timeout 25 $E/bench_coop_sweep > "$G/sweep.csv" 2> /dev/null
echo "rc=$?" >> "$G/sweep.csv"
mark sweep_done
kill $SMI 2>/dev/null
cat "$G/accuracy.json" "$G/accuracy.err" "$G/torch_bert_f16.json" "$G/bert_ab.txt" "$G/ops_f16.jsonl" "$G/splitk_check.csv" "$G/bert16.jsonl" "$G/bert16_splitk.jsonl" "$G/sweep.csv"
head -30 "$G/bert_f16_summary.txt"
