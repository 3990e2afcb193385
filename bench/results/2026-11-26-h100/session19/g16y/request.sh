# g16y call 9 (issue 23, 13th session), <= 110 s. Writes $OUT/g16y/. Where the ring issues a step's
# global loads: before the products (default), between their K-16 halves (lo1), after them (lo2) -
# are the step's first fragment loads queued behind 16 global loads? (hs1: short product phases
# are slow, so the start of a phase matters.)
G="$OUT/g16y"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
R="fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_ad1"
V="${R}_lo1 ${R}_lo2 ${R}_lo1_fo1"
COOP_STATS="$(for v in $V; do echo -n "$v@f16out "; done)" timeout 15 $S > "$G/stats.csv" 2> "$G/ab.err"
COOP_AB="default $V" COOP_AB_ROUNDS=5 COOP_AB_MS=25 COOP_AB_BUDGET_S=80 \
  COOP_AB_SHAPES="4096x4096x4096 8192x8192x8192 2048x3072x768 1024x3072x3072 1024x3072x768" timeout 90 $S > "$G/ab.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
cat "$G/device.txt"; cut -d, -f2,4 "$G/stats.csv" | cut -c1-200; grep -v '^# r' "$G/ab.csv" | grep -v "^#" | cut -d, -f1,2,4,6,7,8
