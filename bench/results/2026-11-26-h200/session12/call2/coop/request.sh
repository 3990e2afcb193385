# coop request 1 — needs the working tree at/after commit 49ded42
# (CoopTune::structures, COOP_VARIANTS=structures in bench_coop_sweep, uc launch in
# crates/mpsrt-tensor/src/gpu/matmul.rs). ~90 s: up to 26 fresh processes of bench_coop_sweep, each a
# correctness check vs the f32 GEMM then 4096³, 2048×3072×768, 1024³ (20 timed calls each).
# Baseline "3" (the current default) runs first, in the middle and at the end (if the budget allows).
mkdir -p "$OUT/coop"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/coop/smi_before.txt" 2>&1
MPSRT_COOP_EXPERIMENTAL=1 COOP_VARIANTS=structures SWEEP_BUDGET_S=88 SWEEP_CHILD_S=15 \
  timeout 105 ./target/release/examples/bench_coop_sweep > "$OUT/coop/structures.csv" 2> "$OUT/coop/structures.err"
echo "rc=$?" >> "$OUT/coop/structures.csv"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/coop/smi_after.txt" 2>&1
tail -c 20000 "$OUT/coop/structures.err" > "$OUT/coop/structures.err.tail"; rm -f "$OUT/coop/structures.err"
cat "$OUT/coop/structures.csv"
