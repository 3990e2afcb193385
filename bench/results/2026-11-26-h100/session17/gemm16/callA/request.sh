# gemm16 call A (issue 23, 11th session), <= 120 s. Needs the tree at/after 8f9ff10. Writes $OUT/gemm16/.
# 1) Driver stats (registers / shared bytes) of the new kernels: do they keep 2 workgroups per SM?
# 2) In-process A/B, COOP_AB=occupancy: the default (su3) vs timing probes pr1 (no store) / pr2 (no
#    global loads in the K loop) / pr3 (no products) -- probes FAIL the check by design --, su3+rp1
#    (register prefetch with unit staging; ph1/ph2: only B / only A), two K-16 slabs with unpadded A
#    (pa0: 20992 B, two workgroups per SM) un1/rq1 and un1 with su1 staging,
#    and the 8-subgroup blocks with su3. Each real variant is checked vs the f32 GPU GEMM and CPU.
#    @f32out rows: 8 subgroups on 128x128 with no store scratch (ns1: 18944 B) -- 16 warps per SM?
G="$OUT/gemm16"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
T="fi1_cl1_vs4_uc1_ov1_su3"
COOP_STATS="default@f16out ${T}_rp1@f16out k16_db1_fi1_cl1_vs4_uc1_un1_ov1_pa0@f16out k16_db1_fi1_cl1_vs4_uc1_rq1_ov1_pa0@f16out w2x4_t4x2_k32_fi1_cl1_vs4_uc1_ov1_su3@f16out w4x2_t2x4_k32_fi1_cl1_vs4_uc1_ov1_su3@f16out w4x2_t4x4_k32_fi1_cl1_vs4_uc1_ov1_su3@f16out ${T}_pr2@f16out k16_db1_fi1_cl1_vs4_uc1_un1_ov1_pa0_su1@f16out ${T}_rp1_ph1@f16out ${T}_rp1_ph2@f16out w2x4_t4x2_k32_fi1_cl1_vs4_uc1_ns1_su3@f32out" \
  timeout 30 $S > "$G/stats.csv" 2> "$G/stats.err"
tail -c 1500 "$G/stats.err" > "$G/stats.err.tail"; rm -f "$G/stats.err"
COOP_AB="occupancy default@f32out fi1_cl1_vs4_uc1_ns1_su3@f32out w2x4_t4x2_k32_fi1_cl1_vs4_uc1_ns1_su3@f32out w4x2_t2x4_k32_fi1_cl1_vs4_uc1_ns1_su3@f32out" COOP_AB_ROUNDS=5 COOP_AB_MS=25 COOP_AB_BUDGET_S=75 \
  COOP_AB_SHAPES="4096x4096x4096 2048x3072x768" \
  timeout 85 $S > "$G/ab.csv" 2> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
tail -c 3000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
cat "$G/device.txt" "$G/stats.csv"; grep -v '^# r' "$G/ab.csv"
