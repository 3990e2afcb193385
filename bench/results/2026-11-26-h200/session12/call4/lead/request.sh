# lead: profiles in f16 (issue 23) + f32 BERT b8 (any tree).
mkdir -p "$OUT/lead"
M=./target/release/mpsrt
for mb in "bert_base 8 f16" "resnet50 32 f16" "bert_base 8 f32"; do
  set -- $mb
  timeout 60 $M bench /tmp/models/$1.onnx --device gpu --batch $2 --precision $3 --iterations 20 --warmup 5 --profile > "$OUT/lead/prof_$1_b$2_$3.txt" 2>&1
  grep -E "latency|host time" "$OUT/lead/prof_$1_b$2_$3.txt"
done
