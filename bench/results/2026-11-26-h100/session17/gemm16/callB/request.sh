# gemm16 call B (issue 23, 11th session), <= 150 s. Needs the tree at/after ddab600 (CoopTune::wide,
# MPSRT_COOP_PLANNER=11/12). Writes $OUT/gemm16/.
# 1) Driver stats (registers / shared bytes) of the wide candidates (spills?).
# 2) In-process A/B at 4096^3 and 2048x3072x768: default (su3), su3_rp1 (call A's best, 235.8-238.3),
#    256x128 8-subgroup su3 (call A 171-176) vs the wide candidates: 256x128 / 128x256 blocks of eight
#    64x64 subgroups with rp1 (su3 units; ph1: only B held, fewer registers) or two K-16 slabs (un1 su1 pa0):
#    a quarter less global traffic per product. Probes pr2/pr3 on 256x128 su3 (FAIL the check by design):
#    does the load-path ceiling (pr3: 325 at 128x128) rise with the block?
# 3) BERT-base b8 shapes in process: default vs su3_rp1 vs the 64x64 K-64 tune with rp1.
# 4) BERT-base f16 b8 end to end: MPSRT_COOP_PLANNER=10 (current) / 11 (rp1 on 128x128) / 12 (rp1 on both).
G="$OUT/gemm16"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
M=./target/release/mpsrt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
R="fi1_cl1_vs4_uc1_ov1_su3_rp1"
W0="w4x2_t4x4_k32_fi1_cl1_vs4_uc1_ov1_su3"
W1="${W0}_rp1"
W2="w2x4_t4x4_k32_fi1_cl1_vs4_uc1_ov1_su3_rp1"
W3="w4x2_t4x4_k16_db1_fi1_cl1_vs4_uc1_un1_ov1_pa0_su1"
W4="w2x4_t4x4_k16_db1_fi1_cl1_vs4_uc1_un1_ov1_pa0_su1"
SM="w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1"
COOP_STATS="${W1}@f16out ${W1}_ph1@f16out ${W2}@f16out ${W3}@f16out ${W4}@f16out ${SM}_rp1@f16out ${SM}@f16out" \
  timeout 15 $S > "$G/stats.csv" 2> "$G/stats.err"
tail -c 800 "$G/stats.err" > "$G/stats.err.tail"; rm -f "$G/stats.err"
COOP_AB="default $R $W1 $W2 $W3 $W4 $W0 ${W1}_ph1 ${W0}_pr2 ${W0}_pr3" COOP_AB_ROUNDS=4 COOP_AB_MS=25 \
  COOP_AB_BUDGET_S=53 COOP_AB_SHAPES="4096x4096x4096 2048x3072x768" \
  timeout 59 $S > "$G/ab.csv" 2> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
COOP_AB="default $R ${SM}_rp1" COOP_AB_ROUNDS=4 COOP_AB_MS=20 COOP_AB_BUDGET_S=22 \
  COOP_AB_SHAPES="1024x768x768 1024x3072x768 1024x768x3072 1024x2304x768" \
  timeout 27 $S > "$G/bert.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/bert.csv"
tail -c 2500 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
B=/tmp/models/bert_base.onnx
for p in 10 11 12 12 11 10; do
  echo "bert b8 f16 planner=$p $(MPSRT_COOP_PLANNER=$p timeout 8 $M bench $B --device gpu --batch 8 --precision f16 --iterations 40 --warmup 10 2>&1 | grep -E 'latency' | tr '\n' ' ')" >> "$G/bert_e2e.txt"
done
cat "$G/device.txt" "$G/stats.csv"; grep -v '^# r' "$G/ab.csv" "$G/bert.csv"; cat "$G/bert_e2e.txt"
