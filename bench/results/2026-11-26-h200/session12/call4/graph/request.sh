# graph helper (issue 22: DenseNet concat written in place + its BN-ReLUs folded into the 1x1
# convs; EfficientNet-B0 SE gate Mul folded into the projection conv + the SE gate's two 1x1
# convs as one dispatch). Needs the working tree at or after commit "issue 22: BatchNorm+Relu
# steps ... folded into the conv reading them".
# A/B in fresh processes, alternated, 2 rounds: base = MPSRT_CONCAT_INPLACE=0 MPSRT_GATE_FOLD=0
# (the previous default), new = default; effnet also se0 = MPSRT_SE_FUSE=0 (Mul fold only),
# densenet also cat = MPSRT_GATE_FOLD=0 (concat in place only, BN-ReLU steps kept).
mkdir -p "$OUT/graph"
M=./target/release/mpsrt
G="$OUT/graph"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$G/nvidia_smi.txt" 2>&1
row() { # model batch iters mode
  local env=""
  case $4 in base) env="MPSRT_CONCAT_INPLACE=0 MPSRT_GATE_FOLD=0";; se0) env="MPSRT_SE_FUSE=0";; cat) env="MPSRT_GATE_FOLD=0";; esac
  env $env timeout 60 $M bench /tmp/models/$1.onnx --device gpu --batch $2 --iterations $3 --warmup 5 --json 2>>"$G/stderr.txt" \
    | sed "s/^{/{\"tag\": \"$1 b$2 $4 r$round\", /"
}
for round in 1 2; do
  row efficientnet_b0 1 30 base; row efficientnet_b0 1 30 new; row efficientnet_b0 1 30 se0
  row densenet121 1 30 base; row densenet121 1 30 new; row densenet121 1 30 cat
  row densenet121 32 10 base; row densenet121 32 10 new; row densenet121 32 10 cat
  row resnet50 1 30 base; row resnet50 1 30 new
done > "$G/ab.jsonl"
python3 - "$G/ab.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"): continue
    try: r = json.loads(line)
    except Exception: continue
    print("%-28s p50 %.3f ms  host %.2f us/step  %s" % (r["tag"], r["p50_ms"], r.get("host_record_us_per_step", 0), r.get("plan", "").split(";")[0]))
PY
# Outputs of the rewrites vs the previous plan on the GPU (3 runs each, the third replayed).
timeout 150 cargo build --release -q -p mpsrt-engine --example concat_check 2>&1 | tail -3
if [ -x ./target/release/examples/concat_check ]; then
  for mb in "densenet121 1" "densenet121 32" "efficientnet_b0 1"; do
    set -- $mb; echo "== $1 b$2"
    timeout 60 ./target/release/examples/concat_check /tmp/models/$1.onnx $2 2>&1
  done | tee "$G/concat_check.txt"
fi
# Per-step profiles (GPU timestamps), default plan.
timeout 40 $M bench /tmp/models/efficientnet_b0.onnx --device gpu --batch 1 --iterations 30 --warmup 5 --profile > "$G/prof_efficientnet_b0_b1.txt" 2>&1
timeout 40 $M bench /tmp/models/densenet121.onnx --device gpu --batch 32 --iterations 10 --warmup 3 --profile > "$G/prof_densenet121_b32.txt" 2>&1
head -8 "$G/prof_efficientnet_b0_b1.txt" "$G/prof_densenet121_b32.txt" | grep -E "==>|latency|host time|plan"
