# bert FINAL request (issue 23, 9th session), <= 60 s — HEAD at/after cb68237 (the sequence-major
# attention output only for >= 16 query rows, after call 3's GPT-2 f16 decode 186 vs 201 tok/s).
# Writes $OUT/bert/.
#  1. BERT b8 p50, alternated fresh processes, 2 rounds: f16 default (matrix-unit attention)
#     vs composed attention (MPSRT_ATTENTION_NAN_GUARD=0); f32 b1 default vs the row-form layer
#     norm (MPSRT_LAYERNORM_SEG=0; b1 read 3.08 in call 3); the f16 plan line;
#  2. GPT-2 greedy generation, 128 tokens, f16 and f32: default vs the row-form layer norm
#     (regression check; torch in the lead's gpt2 run).
G="$OUT/bert"; mkdir -p "$G"
M=./target/release/mpsrt
B=/tmp/models/bert_base.onnx
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$G/device.txt" 2>&1
run() {  # label env... -- precision batch
  local label=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  echo "$label b$2 $1 $(env "${envs[@]}" timeout 15 $M bench $B --device gpu --batch $2 --precision $1 \
    --iterations 40 --warmup 10 2>&1 | grep -E 'latency' | tr '\n' ' ')" >> "$G/bert_ab.txt"
}
for r in 1 2; do
  run "new r$r" -- f16 8
  run "composed r$r" MPSRT_ATTENTION_NAN_GUARD=0 -- f16 8
done
run "f32 new" -- f32 1
run "f32 ln-rowform" MPSRT_LAYERNORM_SEG=0 -- f32 1
cat "$G/bert_ab.txt"
timeout 15 $M bench $B --device gpu --batch 8 --precision f16 --iterations 5 --warmup 2 2>&1 | grep -E 'plan' > "$G/plan_f16.txt"
cat "$G/plan_f16.txt"
mkdir -p /tmp/gpt2
[ -f /tmp/gpt2/gpt2.onnx ] || timeout 25 python3 - 2> "$G/gpt2_build.err" <<'PY'
import sys, torch, onnx
sys.path.insert(0, "scripts")
import gpt2_onnx
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
m = GPT2LMHeadModel(GPT2Config()).eval()
onnx.save(gpt2_onnx.build(gpt2_onnx.weights_from_hf(m.state_dict()), heads=12), "/tmp/gpt2/gpt2.onnx")
PY
gen() {  # label precision env...
  local label=$1 p=$2; shift 2
  echo "$label $(env "$@" timeout 15 $M generate /tmp/gpt2/gpt2.onnx --prompt 464,2068,7586,21831,18045,625,262,16931 \
    --tokens 128 --device gpu --precision $p --json 2>&1 | tail -1)" >> "$G/gpt2.txt"
}
gen "f16 new" f16
gen "f16 ln-rowform" f16 MPSRT_LAYERNORM_SEG=0
gen "f32 new" f32
gen "f32 ln-rowform" f32 MPSRT_LAYERNORM_SEG=0
python3 - "$G/gpt2.txt" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    label, _, js = line.partition(" {")
    try:
        v = json.loads("{" + js)
        print(f"{label:18s} decode {v['decode_tokens_per_s']:7.1f} tok/s  prefill {v['prefill_ms']:6.2f} ms  first tokens {v['tokens'][:6]}")
    except Exception as e:
        print(label, "unparsed:", line[:200])
PY
tail -2 "$G/gpt2_build.err"
