# coop request 3 — needs the working tree at/after commit 5d99760 (planner default
# fi1_cl1_vs4_uc1 / w2x2_t2x2_k32_cl1_vs4_uc1 by shape; cl trusted). ~60 s: one alternated A/B of
# fresh bench_coop_sweep processes (correctness check vs the f32 GEMM, then 20 timed calls per
# shape) over 4 shapes: 4096³, 2048×3072×768, 1024³ and 4000³ (partial blocks: the clamped-load
# path of the default). "3" (former default tune) first, as the cold-start warm-up.
mkdir -p "$OUT/coop"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/coop/smi_before.txt" 2>&1
V="3 default w2x2_t2x2_k32_fi1_cl1_vs4_uc1 k16_fi1_cl1_vs4_uc1 w2x4_t2x2_k32_fi1_cl1_vs4_uc1"
V="$V w2x2_t4x2_k32_fi1_cl1_vs4_uc1 w2x2_t2x4_k32_fi1_cl1_vs4_uc1 default"
V="$V w2x2_t2x2_k32_fi1_cl1_vs4_uc1 k16_fi1_cl1_vs4_uc1 w2x4_t2x2_k32_fi1_cl1_vs4_uc1 default 3"
MPSRT_COOP_EXPERIMENTAL=1 COOP_VARIANTS="$V" SWEEP_BUDGET_S=75 SWEEP_CHILD_S=15 \
  SWEEP_SHAPES="4096x4096x4096 2048x3072x768 1024x1024x1024 4000x4000x4000" \
  timeout 90 ./target/release/examples/bench_coop_sweep > "$OUT/coop/ab3.csv" 2> "$OUT/coop/ab3.err"
echo "rc=$?" >> "$OUT/coop/ab3.csv"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/coop/smi_after.txt" 2>&1
tail -c 20000 "$OUT/coop/ab3.err" > "$OUT/coop/ab3.err.tail"; rm -f "$OUT/coop/ab3.err"
echo "columns: variant,kernel(at 4096³),check_ok,max_rel_err, then ms,TFLOP/s per shape: 4096³, 2048x3072x768, 1024³, 4000³" > "$OUT/coop/ab3.README"
cat "$OUT/coop/ab3.csv"
