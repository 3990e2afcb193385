# g16 call 3 (issue 23, 12th session), <= 220 s. Writes $OUT/g16/.
# 1) Driver stats: default, el1, el1_sb1, sw8.
# 2) In-process A/B, 4 rounds, every variant checked: default vs sb1 / el1 / el1_sb1 / sw8 /
#    el1_sb1_sw8 at 4096^3, 2048x3072x768 and BERT b8's 128x128-tune shapes.
# 3) The 64x64 K-64 tune with sb1 on BERT's small shapes.
# 4) BERT-base f16 b8 end to end: default vs MPSRT_COOP_SB=1 vs MPSRT_COOP_SB=1 MPSRT_COOP_EL=1,
#    alternated fresh processes, 3 each.
G="$OUT/g16"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
M=./target/release/mpsrt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
R="fi1_cl1_vs4_uc1_ov1_su3_rp1"
Q="w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1"
COOP_STATS="default@f16out ${R}_el1@f16out ${R}_el1_sb1@f16out ${R}_sw8@f16out" \
  timeout 12 $S > "$G/stats.csv" 2> "$G/ab.err"
COOP_AB="default ${R}_sb1 ${R}_el1 ${R}_el1_sb1 ${R}_sw8 ${R}_el1_sb1_sw8" COOP_AB_ROUNDS=4 COOP_AB_MS=25 \
  COOP_AB_BUDGET_S=80 COOP_AB_SHAPES="4096x4096x4096 2048x3072x768 1024x3072x768 1024x2304x768" \
  timeout 88 $S > "$G/ab.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
COOP_AB="default ${Q}_sb1" COOP_AB_ROUNDS=4 COOP_AB_MS=20 COOP_AB_BUDGET_S=16 \
  COOP_AB_SHAPES="1024x768x768 1024x768x3072" \
  timeout 20 $S > "$G/small.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/small.csv"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
B=/tmp/models/bert_base.onnx
run() { echo "bert b8 f16 $1 $(env $1 timeout 10 $M bench $B --device gpu --batch 8 --precision f16 --iterations 60 --warmup 15 2>&1 | grep -E 'latency' | tr '\n' ' ')" >> "$G/bert_e2e.txt"; }
for r in 1 2 3; do run MPSRT_COOP_SB=0; run MPSRT_COOP_SB=1; run "MPSRT_COOP_SB=1 MPSRT_COOP_EL=1"; done
cat "$G/device.txt" "$G/stats.csv"; grep -v '^# r' "$G/ab.csv" "$G/small.csv"; cat "$G/bert_e2e.txt"
