# g16p (issue 23, 12th session), <= 90 s. Writes $OUT/g16p/. Timing probes on 256x128 / 128x256
# blocks of eight 64x64 subgroups (one workgroup per SM) beside the 128x128 default's: does the
# global->shared staging alone (pr3) run faster with a quarter less traffic per product (the L2->SM
# bandwidth is the bound) or not (bytes in flight per SM are)?
G="$OUT/g16p"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
O="fi1_cl1_vs4_uc1_ov1_su3"
W="w2x4_t4x4_k32_fi1_cl1_vs4_uc1_ov1_su3"
V="w4x2_t4x4_k32_fi1_cl1_vs4_uc1_ov1_su3"
COOP_STATS="${W}@f16out ${W}_pr3@f16out ${V}_pr3@f16out" timeout 12 $S > "$G/stats.csv" 2> "$G/ab.err"
COOP_AB="default ${O} ${O}_pr3 ${O}_pr2 ${W} ${W}_pr2 ${W}_pr3 ${W}_pr4 ${V} ${V}_pr3" COOP_AB_ROUNDS=3 COOP_AB_MS=25 \
  COOP_AB_BUDGET_S=60 COOP_AB_SHAPES="4096x4096x4096" timeout 68 $S > "$G/ab.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
cat "$G/device.txt"; cut -d, -f2,4 "$G/stats.csv" | cut -c1-160; grep -v '^# r' "$G/ab.csv" | grep -v "^#" | cut -d, -f1,2,4,6,7,8
