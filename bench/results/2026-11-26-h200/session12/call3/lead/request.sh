# lead: fresh GPU-timestamp profiles of the models still behind their targets (any tree).
mkdir -p "$OUT/lead"
M=./target/release/mpsrt
for mb in "bert_base 8" "bert_base 1" "efficientnet_b0 1" "densenet121 32"; do
  set -- $mb
  timeout 40 $M bench /tmp/models/$1.onnx --device gpu --batch $2 --iterations 30 --warmup 5 --profile > "$OUT/lead/prof_$1_b$2.txt" 2>&1
  head -8 "$OUT/lead/prof_$1_b$2.txt" | grep -E "latency|host time"
done
