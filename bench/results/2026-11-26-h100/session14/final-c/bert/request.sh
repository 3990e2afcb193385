# bert request 3 (issue 23), ≤ 60 s — the working tree at/after 2127717 (no bert changes since call 2).
# A/B of BERT-base b8 in fresh processes, alternated, 2 rounds: new (defaults) vs old (this session's
# bert work switched off: MPSRT_MATMUL_EPILOGUE=0 MPSRT_SOFTMAX_SHORT_ROWS=0 MPSRT_GEMM_TILE128_MIN=128
# MPSRT_F16_GATHER_WORDS=0), f32 and --precision f16; f16 also noepi (only MPSRT_MATMUL_EPILOGUE=0:
# call 2 on an H100 read 4.39/4.18 new vs 4.29/4.38 noepi, i.e. noise). The lead's gpu.sh models
# gives torch in the same call. Writes $OUT/bert/bert_ab.txt.
G="$OUT/bert"; mkdir -p "$G"
M=./target/release/mpsrt
B=/tmp/models/bert_base.onnx
OLD="MPSRT_MATMUL_EPILOGUE=0 MPSRT_SOFTMAX_SHORT_ROWS=0 MPSRT_GEMM_TILE128_MIN=128 MPSRT_F16_GATHER_WORDS=0"
nvidia-smi --query-gpu=name --format=csv,noheader > "$G/device.txt" 2>&1
for r in 1 2; do for cfg in "f32 new" "f32 old" "f16 new" "f16 old" "f16 noepi"; do
  set -- $cfg
  case $2 in new) env="";; old) env="$OLD";; noepi) env="MPSRT_MATMUL_EPILOGUE=0";; esac
  echo "b8 $1 $2 round=$r $(env $env timeout 12 $M bench $B --device gpu --batch 8 --precision $1 --iterations 40 --warmup 10 2>&1 | grep -E 'latency' | tr '\n' ' ')" >> "$G/bert_ab.txt"
done; done
cat "$G/device.txt" "$G/bert_ab.txt"
