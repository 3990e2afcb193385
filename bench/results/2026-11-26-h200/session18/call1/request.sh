# g16 call 1 (issue 23, 12th session), <= 200 s. Writes $OUT/g16/. Calls 1 and 2 ran this script
# (call 1 on build 2e68298, where sb1's subgroupBarrier failed validation: the device lacked
# SUBGROUP_BARRIER, so its A/B stopped after the default; call 2 on 4cd0693, which requests it).
# 1) Driver stats (registers): default (rp1), + pp1, + sb1.
# 2) In-process A/B, 4 rounds, every variant checked: default vs sb1 (subgroup-barrier store),
#    pp1/pp2/pp3 (persistent pairs (w, w+S) / (2i, 2i+1) / persistent unpaired), pp1_sb1, pp2_sb1
#    at 4096^3 and 2048x3072x768; BERT b8's 128x128-tune shapes.
# 3) BERT-base f32 b8 end to end: MPSRT_GEMM_REDUCE4=0/1 alternated, 3 each.
G="$OUT/g16"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
M=./target/release/mpsrt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
R="fi1_cl1_vs4_uc1_ov1_su3_rp1"
COOP_STATS="default@f16out ${R}_pp1@f16out ${R}_sb1@f16out ${R}_pp1_sb1@f16out" \
  timeout 12 $S > "$G/stats.csv" 2> "$G/ab.err"
COOP_AB="default ${R}_sb1 ${R}_pp1 ${R}_pp2 ${R}_pp3 ${R}_pp1_sb1 ${R}_pp2_sb1" COOP_AB_ROUNDS=4 COOP_AB_MS=25 \
  COOP_AB_BUDGET_S=70 COOP_AB_SHAPES="4096x4096x4096 2048x3072x768" \
  timeout 78 $S > "$G/ab.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
COOP_AB="default ${R}_sb1 ${R}_pp1 ${R}_pp2" COOP_AB_ROUNDS=4 COOP_AB_MS=20 COOP_AB_BUDGET_S=22 \
  COOP_AB_SHAPES="1024x3072x768 1024x2304x768" \
  timeout 26 $S > "$G/bert.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/bert.csv"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
B=/tmp/models/bert_base.onnx
for r in 0 1 0 1 1 0; do
  echo "bert b8 f32 reduce4=$r $(MPSRT_GEMM_REDUCE4=$r timeout 10 $M bench $B --device gpu --batch 8 --iterations 60 --warmup 15 2>&1 | grep -E 'latency' | tr '\n' ' ')" >> "$G/bert_e2e.txt"
done
cat "$G/device.txt" "$G/stats.csv"; grep -v '^# r' "$G/ab.csv" "$G/bert.csv"; cat "$G/bert_e2e.txt"
