# g16s call 3 (issue 23, 13th session), <= 110 s. Writes $OUT/g16s/. L2 locality of the wave: the
# raster runs 32 blocks along N, so a wave of 264 workgroups shares each A slab 32 ways and each B
# slab 8 ways (A's loads cost more at 4096^3: pr7/pr8). sw16/sw2 change the wave's footprint;
# K/N of 4224 take the power-of-two row strides away (L2 slice camping?).
G="$OUT/g16s"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
R="fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_ad1"
COOP_AB="default ${R}_sw16 ${R}_sw2 ${R}_sw4" COOP_AB_ROUNDS=4 COOP_AB_MS=25 COOP_AB_BUDGET_S=80 \
  COOP_AB_SHAPES="4096x4096x4096 4096x4096x4224 4096x4224x4096 8192x8192x8192" timeout 90 $S > "$G/ab.csv" 2> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
cat "$G/device.txt"; grep -v '^# r' "$G/ab.csv" | grep -v "^#" | cut -d, -f1,2,4,6,7,8
