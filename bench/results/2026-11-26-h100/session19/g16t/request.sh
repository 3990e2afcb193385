# g16t call 4 (issue 23, 13th session), <= 120 s. Writes $OUT/g16t/. K rotation (kr1): block (i, j)
# starts its K walk at slab (i + j) mod steps, so a wave's 32 readers of an A slab (8 of a B slab)
# no longer hit the same L2 lines at once. On the default (rq1_ad1) and on rp1_ad1.
G="$OUT/g16t"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
R="fi1_cl1_vs4_uc1_ov1_su3_rp1"
V="${R}_rq1_ad1_kr1 ${R}_ad1_kr1 ${R}_rq1_ad1_kr1_sw4"
COOP_STATS="$(for v in $V; do echo -n "$v@f16out "; done)" timeout 15 $S > "$G/stats.csv" 2> "$G/ab.err"
COOP_AB="default $V" COOP_AB_ROUNDS=4 COOP_AB_MS=25 COOP_AB_BUDGET_S=85 \
  COOP_AB_SHAPES="4096x4096x4096 8192x8192x8192 4096x4096x4224 2048x3072x768 1024x3072x3072" timeout 95 $S > "$G/ab.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
cat "$G/device.txt"; cut -d, -f2,4 "$G/stats.csv" | cut -c1-200; grep -v '^# r' "$G/ab.csv" | grep -v "^#" | cut -d, -f1,2,4,6,7,8
