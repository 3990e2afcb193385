# g16p call 4 (issue 23, 12th session), <= 90 s. Writes $OUT/g16p/. The new default (rq1_ad1) with
# the cheap knobs on top: fo1 (one A fragment live), sw8 (grouped order), sb1 (subgroup-barrier
# store), nb1; stats for spills.
G="$OUT/g16p"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
D="fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_ad1"
COOP_STATS="${D}_fo1@f16out ${D}_sw8@f16out ${D}_sb1@f16out" timeout 12 $S > "$G/stats.csv" 2> "$G/ab.err"
COOP_AB="default ${D}_fo1 ${D}_sw8 ${D}_sb1 ${D}_sw4" COOP_AB_ROUNDS=4 COOP_AB_MS=25 COOP_AB_BUDGET_S=55 \
  COOP_AB_SHAPES="4096x4096x4096 8192x8192x8192" timeout 62 $S > "$G/ab.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
cat "$G/device.txt"; cut -d, -f2,4 "$G/stats.csv" | cut -c1-200; grep -v '^# r' "$G/ab.csv" | grep -v "^#" | cut -d, -f1,2,4,6,7,8
