# gemm16 call C (issue 23, 11th session), <= 150 s. Needs the tree at/after f753f90 (rp1 default,
# rq1 on the one-slab rp1 loop). Writes $OUT/gemm16/.
# 1) Driver stats: default (now su3_rp1), rp1 + rq1 (two register sets ahead: spills?), + fo1.
# 2) In-process A/B, 4 rounds: default (rp1) vs the old default (su3, no rp) vs su3_rp1_rq1,
#    _rq1_fo1, _fo1 at 4096^3, 2048x3072x768 and 4000^3 (partial blocks: the checked rp1 loop
#    the new default runs on edge shapes), each variant checked (edge/scalar/transposed cases).
# 3) split-K slices now take rp1 too: check-only run of default@splitk (long-K small grids).
# 4) BERT b8 shapes (128x128 tune): default vs old vs rq1.
# 5) BERT-base f16 b8 end to end: MPSRT_COOP_PLANNER=10 (old rule) vs default, alternated.
G="$OUT/gemm16"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
M=./target/release/mpsrt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
git log --oneline -1 >> "$G/device.txt" 2>&1
O="fi1_cl1_vs4_uc1_ov1_su3"
R="${O}_rp1"
COOP_STATS="default@f16out ${R}_rq1@f16out ${R}_rq1_fo1@f16out ${R}_fo1@f16out" \
  timeout 12 $S > "$G/stats.csv" 2> "$G/ab.err"
COOP_AB="default $O ${R}_rq1 ${R}_rq1_fo1 ${R}_fo1" COOP_AB_ROUNDS=4 COOP_AB_MS=25 \
  COOP_AB_BUDGET_S=50 COOP_AB_SHAPES="4096x4096x4096 2048x3072x768 4000x4000x4000" \
  timeout 56 $S > "$G/ab.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
COOP_AB="default@splitk ${O}@splitk" COOP_AB_ROUNDS=1 COOP_AB_MS=5 COOP_AB_BUDGET_S=10 \
  COOP_AB_SHAPES="256x256x4096" timeout 14 $S > "$G/splitk.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/splitk.csv"
COOP_AB="default $O ${R}_rq1" COOP_AB_ROUNDS=4 COOP_AB_MS=20 COOP_AB_BUDGET_S=18 \
  COOP_AB_SHAPES="1024x3072x768 1024x2304x768" \
  timeout 22 $S > "$G/bert.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/bert.csv"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
B=/tmp/models/bert_base.onnx
for p in 10 11 11 10; do
  echo "bert b8 f16 planner=$p $(MPSRT_COOP_PLANNER=$p timeout 8 $M bench $B --device gpu --batch 8 --precision f16 --iterations 40 --warmup 10 2>&1 | grep -E 'latency' | tr '\n' ' ')" >> "$G/bert_e2e.txt"
done
cat "$G/device.txt" "$G/stats.csv"; grep -v '^# r' "$G/ab.csv" "$G/splitk.csv" "$G/bert.csv"; cat "$G/bert_e2e.txt"
