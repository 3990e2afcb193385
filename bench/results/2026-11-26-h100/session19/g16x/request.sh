# g16x call 8 (issue 23, 13th session), <= 110 s. Writes $OUT/g16x/. Half steps (hs1): the ring on the
# slab's two K-16 halves as two stages, one barrier per half, the next chunk's stores beside this
# one's products (the one-slab loop has a store-only phase between two barriers: without global
# loads it ran 381-408 against 581 for the products alone).
G="$OUT/g16x"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
R="fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_ad1"
V="${R}_hs1 ${R}_hs1_sw4 ${R}_hs1_fo1"
COOP_STATS="$(for v in $V; do echo -n "$v@f16out "; done)" timeout 15 $S > "$G/stats.csv" 2> "$G/ab.err"
COOP_AB="default $V" COOP_AB_ROUNDS=5 COOP_AB_MS=25 COOP_AB_BUDGET_S=80 \
  COOP_AB_SHAPES="4096x4096x4096 8192x8192x8192 2048x3072x768 1024x3072x3072 1024x3072x768" timeout 90 $S > "$G/ab.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
cat "$G/device.txt"; cut -d, -f2,4 "$G/stats.csv" | cut -c1-200; grep -v '^# r' "$G/ab.csv" | grep -v "^#" | cut -d, -f1,2,4,6,7,8
