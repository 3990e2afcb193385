# gemm16 final request (issue 23, 8th session) — needs the working tree at/after commit c695fb5
# (coop f16 store default for every tune, its scratch within 23040 B). ~40 s. Writes $OUT/gemm16/.
# A/B in alternated fresh processes, every child checked against the f32 GEMM first: the new
# default (f16 store) vs MPSRT_COOP_F16_OUT=0 (f32 store + cast pass, the previous default for
# 4x4 tiles); shapes 4096^3, 2048x3072x768, 1024x3072x768 (BERT FFN up b16/b8) and 4000^3
# (partial blocks: the clamped-load path with the f16 store). First child = warm-up.
G="$OUT/gemm16"; mkdir -p "$G"
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader > "$G/device.txt" 2>&1
S=./target/release/examples/bench_coop_sweep
V="default default default@f32out default default@f32out default"
COOP_VARIANTS="$V" SWEEP_BUDGET_S=45 SWEEP_CHILD_S=12 \
  SWEEP_SHAPES="4096x4096x4096 2048x3072x768 1024x3072x768 4000x4000x4000" \
  timeout 52 $S > "$G/ab.csv" 2> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
tail -c 4000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
echo "ab.csv columns: variant,kernel(at 4096^3),check_ok,max_rel_err, then ms,TFLOP/s per shape: 4096^3, 2048x3072x768, 1024x3072x768, 4000^3" > "$G/README"
cat "$G/device.txt" "$G/ab.csv"
