# triton request 3 — needs the working tree at/after commit 3db9679 ("triton: staged tl.dot full blocks
# load runs of 8 halves"; also e53816c MPSRT_TRITON_UNCHECKED=1 in crates/mpsrt-python/src/jit.rs)
# and the mpsrt wheel built from it in /tmp/site.
# ~110 s. Call 5 measured the staged tl.dot at 67.6 TFLOP/s (4096^3) against a built-in GEMM that
# moved to 189 (coop's fi1_vs4_uc1 default, unchecked shader modules): A/B here of Triton kernels
# built without wgpu's bounds checks (opt-in), alternated fresh processes d/u/d2/u2; plus the
# vector-add 16M point (0.42 in call 5, 1.0 in session 11) measured again in each process.
mkdir -p "$OUT/triton"
export TRITON_DEFAULT_BACKEND=wgpu
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/triton/smi_before.txt" 2>&1
# Correctness (the staged dot's new 16-byte loads on odd shapes among them), checked and unchecked.
timeout 90 python3 -m pytest -q -p no:cacheprovider --tb=line -rfE \
  python/tests/test_triton_backend.py 2>&1 | tail -20 > "$OUT/triton/pytest.txt"
cat "$OUT/triton/pytest.txt"
MPSRT_TRITON_UNCHECKED=1 timeout 90 python3 -m pytest -q -p no:cacheprovider --tb=line -rfE \
  python/tests/test_triton_backend.py 2>&1 | tail -20 > "$OUT/triton/pytest_unchecked.txt"
cat "$OUT/triton/pytest_unchecked.txt"
for run in d u d2 u2; do
  case $run in u*) envs="MPSRT_TRITON_UNCHECKED=1" ;; *) envs="" ;; esac
  case $run in *2) sizes=4096 ;; *) sizes=2048,4096 ;; esac
  echo "== $run $envs"
  env $envs timeout 80 python3 bench/triton_backend.py --only add,softmax,matmul --softmax-cols 4096 \
    --matmul-sizes $sizes 2>&1 | tee "$OUT/triton/bench_$run.jsonl" \
    | grep -E '"ratio"|"matmul_f16", "impl": "triton"|Error|error'
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/triton/smi_after.txt" 2>&1
