# g16u call 5 (issue 23, 13th session), <= 110 s. Writes $OUT/g16u/. A pairs (ap1): the ring loads A's
# next two K-32 slabs together every other step, so each warp load covers whole 128-byte lines
# (pr7/pr8: A's loads cost about twice B's at 4096^3; a K-32 row of A is half a line).
G="$OUT/g16u"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
R="fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_ad1"
V="${R}_ap1 ${R}_ap1_sw4"
COOP_STATS="$(for v in $V; do echo -n "$v@f16out "; done)" timeout 12 $S > "$G/stats.csv" 2> "$G/ab.err"
COOP_AB="default $V" COOP_AB_ROUNDS=5 COOP_AB_MS=25 COOP_AB_BUDGET_S=75 \
  COOP_AB_SHAPES="4096x4096x4096 8192x8192x8192 4096x4096x4224 2048x3072x768 1024x3072x3072 1024x3072x768" timeout 85 $S > "$G/ab.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
cat "$G/device.txt"; cut -d, -f2,4 "$G/stats.csv" | cut -c1-200; grep -v '^# r' "$G/ab.csv" | grep -v "^#" | cut -d, -f1,2,4,6,7,8
