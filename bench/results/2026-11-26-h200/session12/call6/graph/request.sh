# graph helper (issue 22). Needs the working tree at or after commit "issue 22: gate/BN-ReLU folds
# and the fused SE gate off by default". Optional: ./target/release/examples/concat_check (cargo
# build --release -p mpsrt-engine --example concat_check) for the on-GPU output check; skipped if absent.
# A/B in fresh processes, alternated, 2 rounds:
#   base = MPSRT_CONCAT_INPLACE=0 (concat steps, the previous default)
#   new  = default (DenseNet's concats written in place by their producers)
#   fold = MPSRT_GATE_FOLD=1 (+ SE gate Mul / BN-ReLU folded into the conv's gather; opt-in)
mkdir -p "$OUT/graph"
M=./target/release/mpsrt
G="$OUT/graph"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$G/nvidia_smi.txt" 2>&1
row() { # model batch iters mode
  local env=""
  case $4 in base) env="MPSRT_CONCAT_INPLACE=0";; fold) env="MPSRT_GATE_FOLD=1";; esac
  env $env timeout 60 $M bench /tmp/models/$1.onnx --device gpu --batch $2 --iterations $3 --warmup 5 --json 2>>"$G/stderr.txt" \
    | sed "s/^{/{\"tag\": \"$1 b$2 $4 r$round\", /"
}
for round in 1 2; do
  row efficientnet_b0 1 30 new; row efficientnet_b0 1 30 fold
  row densenet121 1 30 base; row densenet121 1 30 new; row densenet121 1 30 fold
  row densenet121 32 10 base; row densenet121 32 10 new; row densenet121 32 10 fold
  row resnet50 1 30 base; row resnet50 1 30 new
done > "$G/ab.jsonl"
python3 - "$G/ab.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"): continue
    try: r = json.loads(line)
    except Exception: continue
    print("%-28s p50 %.3f ms  host %.2f us/step" % (r["tag"], r["p50_ms"], r.get("host_record_us_per_step", 0)))
PY
if [ -x ./target/release/examples/concat_check ]; then
  for mb in "densenet121 1" "densenet121 32" "efficientnet_b0 1"; do
    set -- $mb; echo "== $1 b$2"
    MPSRT_GATE_FOLD=1 timeout 60 ./target/release/examples/concat_check /tmp/models/$1.onnx $2 2>&1
  done | tee "$G/concat_check.txt"
fi
# Per-step GPU-timestamp profiles: effnet b1 default and with the Mul fold (where does it lose?).
timeout 40 $M bench /tmp/models/efficientnet_b0.onnx --device gpu --batch 1 --iterations 30 --warmup 5 --profile > "$G/prof_efficientnet_b0_b1.txt" 2>&1
MPSRT_GATE_FOLD=1 timeout 40 $M bench /tmp/models/efficientnet_b0.onnx --device gpu --batch 1 --iterations 30 --warmup 5 --profile > "$G/prof_efficientnet_b0_b1_fold.txt" 2>&1
head -4 "$G/prof_efficientnet_b0_b1.txt" "$G/prof_efficientnet_b0_b1_fold.txt" | grep -E "==>|latency"
