# gemm16 FINAL confirmation (issue 23, 9th session), <= 60 s — needs the working tree at/after
# commit 394b1c9 (the 128x128 tune with the vector f16 store ov1 by default; the few-block
# default w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1 below 256 blocks; MPSRT_COOP_PLANNER=8 = old rule).
# Writes $OUT/gemm16/.
# 1) In-process A/B (one process, >=0.6 s warm-up, 3 rounds rotated; every variant checked vs
#    the f32 GPU GEMM, the f32 CPU product and the bias+residual+GELU epilogue vs the CPU):
#    the new default vs the 8th session's 128x128 tune (fi1_cl1_vs4_uc1, no ov1).
# 2) BERT-base --precision f16 end to end, new planner vs MPSRT_COOP_PLANNER=8, alternated fresh
#    processes: b8 two rounds, b1 one round.
G="$OUT/gemm16"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
M=./target/release/mpsrt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
COOP_AB="default fi1_cl1_vs4_uc1" COOP_AB_ROUNDS=3 COOP_AB_MS=25 COOP_AB_BUDGET_S=18 \
  COOP_AB_SHAPES="4096x4096x4096 2048x3072x768 1024x3072x768 1024x768x3072" \
  timeout 22 $S > "$G/ab.csv" 2> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
tail -c 3000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
B=/tmp/models/bert_base.onnx
for run in "8 9 1" "8 8 1" "8 9 2" "8 8 2" "1 9 1" "1 8 1"; do
  set -- $run
  echo "bert b$1 f16 planner=$2 round=$3 $(MPSRT_COOP_PLANNER=$2 timeout 8 $M bench $B --device gpu --batch $1 --precision f16 --iterations 40 --warmup 10 2>&1 | grep -E 'latency' | tr '\n' ' ')" >> "$G/bert_ab.txt"
done
cat "$G/device.txt"; grep -v '^# r' "$G/ab.csv"; cat "$G/bert_ab.txt"
