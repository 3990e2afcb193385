# g16z call 1 (issue 23, 14th session), <= 110 s. Writes $OUT/g16z/. More workgroups per SM: 64x128 / 128x64 /
# 64x64 blocks (13.8 / 14.8 / 9.7 KB without the store scratch, f32 out + ns1) - do 3 or 4 workgroups per SM fit
# (registers <= 168 / 128), and does the extra occupancy beat the 128x128 block's lower traffic?
G="$OUT/g16z"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
R="fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_ad1"; P="fi1_cl1_vs4_uc1_ov1_su3_rp1_ad1"
V="${R}_ns1@f32out w2x2_t2x4_k32_${R}_ns1@f32out w2x2_t4x2_k32_${R}_ns1@f32out w2x2_t2x2_k32_${R}_ns1@f32out w2x2_t2x4_k32_${P}_ns1@f32out w2x2_t4x2_k32_${P}_ns1@f32out w2x2_t2x2_k32_${P}_ns1@f32out w2x2_t2x4_k32_${R}@f16out"
COOP_STATS="$(for v in $V; do echo -n "${v%@f32out} "; done)" timeout 20 $S > "$G/stats.csv" 2> "$G/ab.err"
COOP_AB="default $V" COOP_AB_ROUNDS=4 COOP_AB_MS=25 COOP_AB_BUDGET_S=80 \
  COOP_AB_SHAPES="4096x4096x4096 8192x8192x8192" timeout 90 $S > "$G/ab.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
cat "$G/device.txt"; cut -d, -f2,4 "$G/stats.csv" | cut -c1-200; grep -v '^# r' "$G/ab.csv" | grep -v "^#" | cut -d, -f1,2,4,6,7,8
