# triton request 4 (session 15, helper "triton", issue 24, FINAL) — needs the working tree at or
# after commit af5687f (bench/triton_backend.py interleaving) in the release
# wheel. ~45 s.
# 1. the layout tests and tutorial-02 tests on the GPU (one-subgroup layout on 32-lane subgroups);
# 2. the committed benchmark (bench/gpu.sh triton's softmax part; device times now interleaved);
# 3. the one-process A/B probe at 256 columns (base = session 14's code, ob, def = defaults).
T=$OUT/triton; mkdir -p $T
export TRITON_DEFAULT_BACKEND=wgpu
export TRITON_CACHE_DIR=$(mktemp -d)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > $T/smi_before.txt 2>&1
python3 -c 'import mpsrt; print(mpsrt._C.triton_compiler_version())' > $T/version.txt 2>&1
timeout 25 python3 -m pytest -q -p no:cacheprovider --tb=short -rfE python/tests/test_triton_layout.py \
  python/tests/test_triton_backend.py -k "layout or steer or softmax or reduc or cache_key" 2>&1 | tail -12 > $T/pytest.txt
tail -1 $T/pytest.txt
timeout 25 python3 bench/triton_backend.py --only softmax 2>>$T/err.txt | grep -v XDG > $T/bench.jsonl
grep ratio $T/bench.jsonl
timeout 20 python3 bench/triton_softmax_ab.py --cols 256 --rounds 5 2>>$T/err.txt | grep -v XDG > $T/ab.jsonl
grep median_us $T/ab.jsonl
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > $T/smi_after.txt 2>&1
