# g16q call 1 (issue 23, 13th session), <= 130 s. Writes $OUT/g16q/. Where does the rq1_ad1 kernel's
# time go beyond the staging: pr6 (ring refills from slab 0: global loads served by L1), lp3/lp4
# (L1 touch-prefetch 1-2 steps ahead of the register sets), wide blocks with the ring (25% less L2
# traffic, one workgroup per SM), 8 subgroups on 128x128, the two-stage K-16 ring.
G="$OUT/g16q"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
R="fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_ad1"
V="${R}_pr6 ${R}_lp3 ${R}_lp4 w4x2_t4x4_k32_${R} w2x4_t4x4_k32_${R} w4x2_t2x4_k32_${R} w2x2_t4x4_k16_db1_fi1_cl1_vs4_uc1_rq1_ov1_pa0"
COOP_STATS="$(for v in $V; do echo -n "$v@f16out "; done)" timeout 20 $S > "$G/stats.csv" 2> "$G/ab.err"
COOP_AB="default $V" COOP_AB_ROUNDS=4 COOP_AB_MS=25 COOP_AB_BUDGET_S=90 \
  COOP_AB_SHAPES="4096x4096x4096 8192x8192x8192" timeout 100 $S > "$G/ab.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
cat "$G/device.txt"; cut -d, -f2,4 "$G/stats.csv" | cut -c1-200; grep -v '^# r' "$G/ab.csv" | grep -v "^#" | cut -d, -f1,2,4,6,7,8
