# g16p call 2 (issue 23, 12th session), <= 150 s. Writes $OUT/g16p/. Affine unit addresses (ad1):
# fewer registers? Then two register sets (rq1) without spills, loads two K steps ahead.
G="$OUT/g16p"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
M=./target/release/mpsrt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
R="fi1_cl1_vs4_uc1_ov1_su3_rp1"
Q="w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1"
COOP_STATS="default@f16out ${R}_ad1@f16out ${R}_rq1@f16out ${R}_rq1_ad1@f16out ${R}_el1_ad1@f16out ${Q}_ad1@f16out" \
  timeout 14 $S > "$G/stats.csv" 2> "$G/ab.err"
COOP_AB="default ${R}_ad1 ${R}_rq1_ad1 ${R}_el1_ad1 ${R}_rq1" COOP_AB_ROUNDS=4 COOP_AB_MS=25 \
  COOP_AB_BUDGET_S=60 COOP_AB_SHAPES="4096x4096x4096 2048x3072x768 1024x3072x768 1024x2304x768" \
  timeout 68 $S > "$G/ab.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
COOP_AB="default ${Q}_ad1" COOP_AB_ROUNDS=4 COOP_AB_MS=20 COOP_AB_BUDGET_S=14 \
  COOP_AB_SHAPES="1024x768x768 1024x768x3072" timeout 18 $S > "$G/small.csv" 2>> "$G/ab.err"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
B=/tmp/models/bert_base.onnx
run() { echo "bert b8 f16 $1 $(env $1 timeout 10 $M bench $B --device gpu --batch 8 --precision f16 --iterations 60 --warmup 15 2>&1 | grep -E 'latency' | tr '\n' ' ')" >> "$G/bert_e2e.txt"; }
for r in 1 2; do run MPSRT_COOP_AD=0; run MPSRT_COOP_AD=1; done
cat "$G/device.txt"; cut -d, -f2,4 "$G/stats.csv" | cut -c1-170; grep -v '^# r' "$G/ab.csv" "$G/small.csv" | grep -v "^#" | cut -d, -f1,2,4,6,7,8; cat "$G/bert_e2e.txt"
