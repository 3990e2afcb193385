# coop request 2 — needs the working tree at/after commit b92788f (cl knob; CoopTune::structures
# = the neighbours of fi1_vs4_uc1, the 186 TFLOP/s leader of call 2). ~100 s in all:
# (1) up to 25 fresh processes of bench_coop_sweep over CoopTune::structures() (baseline "3" =
#     current default first, middle, last), each a correctness check vs the f32 GEMM then 4096³,
#     2048×3072×768, 1024³ (20 timed calls each);
# (2) alternated A/B: old default tune ("3"), the new planner default ("default": fi1_vs4_uc1 /
#     w2x2_t2x2_k32_rp1_vs4_uc1 by shape), cl1_vs4_uc1 (fresh process each).
mkdir -p "$OUT/coop"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/coop/smi_before.txt" 2>&1
MPSRT_COOP_EXPERIMENTAL=1 COOP_VARIANTS=structures SWEEP_BUDGET_S=75 SWEEP_CHILD_S=15 \
  timeout 90 ./target/release/examples/bench_coop_sweep > "$OUT/coop/structures.csv" 2> "$OUT/coop/structures.err"
echo "rc=$?" >> "$OUT/coop/structures.csv"
MPSRT_COOP_EXPERIMENTAL=1 COOP_VARIANTS="3 default cl1_vs4_uc1 3 default cl1_vs4_uc1" SWEEP_BUDGET_S=25 SWEEP_CHILD_S=12 \
  timeout 35 ./target/release/examples/bench_coop_sweep > "$OUT/coop/ab.csv" 2>> "$OUT/coop/structures.err"
echo "rc=$?" >> "$OUT/coop/ab.csv"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/coop/smi_after.txt" 2>&1
tail -c 20000 "$OUT/coop/structures.err" > "$OUT/coop/structures.err.tail"; rm -f "$OUT/coop/structures.err"
cat "$OUT/coop/structures.csv" "$OUT/coop/ab.csv"
