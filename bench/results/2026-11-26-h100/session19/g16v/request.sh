# g16v call 6 (issue 23, 13th session), <= 110 s. Writes $OUT/g16v/. 16-byte staging units (xw1 B,
# xw2 A, xw3 both) on the default ring: half the global load instructions (is the staging bound by
# load/store instruction issue rather than bytes?).
G="$OUT/g16v"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
R="fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_ad1"
V="${R}_xw1 ${R}_xw2 ${R}_xw3"
COOP_STATS="$(for v in $V; do echo -n "$v@f16out "; done)" timeout 15 $S > "$G/stats.csv" 2> "$G/ab.err"
COOP_AB="default $V" COOP_AB_ROUNDS=5 COOP_AB_MS=25 COOP_AB_BUDGET_S=80 \
  COOP_AB_SHAPES="4096x4096x4096 8192x8192x8192 2048x3072x768 1024x3072x3072 1024x3072x768" timeout 90 $S > "$G/ab.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
cat "$G/device.txt"; cut -d, -f2,4 "$G/stats.csv" | cut -c1-200; grep -v '^# r' "$G/ab.csv" | grep -v "^#" | cut -d, -f1,2,4,6,7,8
