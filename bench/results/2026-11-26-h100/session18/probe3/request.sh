# g16p call 3 (issue 23, 12th session), <= 120 s. Writes $OUT/g16p/. Where does rq1_ad1 (two
# register sets, loads two K steps ahead, affine addresses; 255 registers, no spill) win? Shapes by
# K and block count; the 64x64 K-64 tune with rp1_rq1_ad1 on BERT's long-K shape.
G="$OUT/g16p"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
R="fi1_cl1_vs4_uc1_ov1_su3_rp1"
Q="w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1"
COOP_STATS="${Q}_rp1_rq1_ad1@f16out" timeout 10 $S > "$G/stats.csv" 2> "$G/ab.err"
COOP_AB="default ${R}_rq1_ad1" COOP_AB_ROUNDS=3 COOP_AB_MS=25 COOP_AB_BUDGET_S=70 \
  COOP_AB_SHAPES="4096x4096x4096 8192x8192x8192 4096x4096x1024 4096x4096x2048 2048x2048x4096 2048x4096x2048 2048x3072x768 4096x4096x768 1024x3072x3072" \
  timeout 78 $S > "$G/ab.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
COOP_AB="default ${Q}_rp1_rq1_ad1 ${Q}_ad1" COOP_AB_ROUNDS=3 COOP_AB_MS=20 COOP_AB_BUDGET_S=16 \
  COOP_AB_SHAPES="1024x768x3072 1024x768x768" timeout 20 $S > "$G/small.csv" 2>> "$G/ab.err"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
cat "$G/device.txt"; cut -d, -f2,4 "$G/stats.csv" | cut -c1-200; grep -v '^# r' "$G/ab.csv" "$G/small.csv" | grep -v ":#" | cut -d, -f1,2,4,6,7,8
