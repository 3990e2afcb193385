# gemm16 FINAL (issue 23, 10th session), <= 60 s. Needs the working tree at/after 25449af
# (planner default: 128x128 fi1_cl1_vs4_uc1_ov1_su3 from 128 blocks, 64x64 K-64 ..._ov1_su1
# below; MPSRT_COOP_PLANNER=9 = the 9th session's rule). Writes $OUT/gemm16/.
# 1) In-process A/B (each variant checked vs the f32 GPU GEMM, the f32 CPU product and the
#    bias+residual+GELU epilogue first): the new default vs the 9th session's two tunes.
# 2) Alternated fresh processes, bench_ops_a's 4096^3 f16 row: default vs MPSRT_COOP_PLANNER=9.
# 3) BERT-base f16 b8 end to end: MPSRT_COOP_PLANNER=9 vs default, one round each.
G="$OUT/gemm16"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
A=./target/release/examples/bench_ops_a
M=./target/release/mpsrt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
COOP_AB="default fi1_cl1_vs4_uc1_ov1 w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1" COOP_AB_ROUNDS=3 COOP_AB_MS=25 COOP_AB_BUDGET_S=20 \
  COOP_AB_SHAPES="4096x4096x4096 2048x3072x768 1024x3072x768 1024x768x3072 1024x768x768 1024x2304x768" \
  timeout 25 $S > "$G/ab.csv" 2> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
tail -c 3000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
for r in 1 2; do
  for p in 10 9; do
    echo "f16gemm planner=$p round=$r $(MPSRT_COOP_PLANNER=$p BENCH_ONLY=f16gemm timeout 6 $A 2>&1 | grep -E 'matmul_f16' | tr '\n' ' ')" >> "$G/fresh.txt"
  done
done
B=/tmp/models/bert_base.onnx
for p in 9 10; do
  echo "bert b8 f16 planner=$p $(MPSRT_COOP_PLANNER=$p timeout 8 $M bench $B --device gpu --batch 8 --precision f16 --iterations 40 --warmup 10 2>&1 | grep -E 'latency' | tr '\n' ' ')" >> "$G/bert_ab.txt"
done
cat "$G/device.txt"; grep -v '^# r' "$G/ab.csv"; cat "$G/fresh.txt" "$G/bert_ab.txt"
