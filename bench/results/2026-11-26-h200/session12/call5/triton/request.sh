# triton request 2 — needs the working tree at/after commit 18a8e7f ("tests: the Triton test modules
# select the wgpu driver explicitly") and the mpsrt wheel built from it in /tmp/site. ~110 s:
# 1. the Triton tests on the GPU (staged tl.dot on the matrix units; call 3's pytest failed only on
#    "2 active drivers" with the machine's triton 3.6, fixed in the tests);
# 2. softmax 256/1024/4096 in alternated fresh processes, new defaults vs session 11's widening
#    (call 3 had 1024 columns at 0.43 vs 1.38 with identical WGSL: checking whether that was noise);
# 3. the full add + matmul table with defaults; 4. matmul 2048/4096 with vec2<f16> slabs again.
mkdir -p "$OUT/triton"
export TRITON_DEFAULT_BACKEND=wgpu
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/triton/smi_before.txt" 2>&1
timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=line -rfE python/tests/test_triton_backend.py \
  python/tests/test_triton_features.py 2>&1 | tail -40 > "$OUT/triton/pytest.txt"
cat "$OUT/triton/pytest.txt"
# The softmax WGSL at 1024 and 4096 columns under both widening settings (diffed).
for w in 16 4; do
  MPSRT_TRITON_WIDEN_TO=$w timeout 60 python3 - > "$OUT/triton/dump_w$w.txt" 2>&1 <<'PY'
import importlib.util, os, numpy as np, mpsrt
spec = importlib.util.spec_from_file_location("tb", "bench/triton_backend.py"); B = importlib.util.module_from_spec(spec); spec.loader.exec_module(B)
from triton.runtime import driver
from mpsrt.triton_backend.driver import WgpuDriver
driver.set_active(WgpuDriver())
T = B.load_tutorials()
w = os.environ["MPSRT_TRITON_WIDEN_TO"]
for cols in (1024, 4096):
    s = mpsrt.to_tensor(np.zeros((64, cols), np.float32), place="mps")
    k = T.softmax_kernel.warmup(s, s, cols, cols, 64, cols, BLOCK_SIZE=cols, num_stages=2, num_warps=8, grid=(1,))
    open(f"{os.environ['OUT']}/triton/softmax_{cols}_w{w}.wgsl", "w").write(k.asm["wgsl"].decode())
    open(f"{os.environ['OUT']}/triton/softmax_{cols}_w{w}.ttir", "w").write(k.asm["ttir"])
    print(cols, w, k.metadata.shared)
PY
done
cat "$OUT/triton/dump_w16.txt" "$OUT/triton/dump_w4.txt"
diff -q "$OUT/triton/softmax_1024_w16.wgsl" "$OUT/triton/softmax_1024_w4.wgsl" && echo "softmax 1024: identical WGSL under both"
for run in new old new2 old2; do
  case $run in old*) envs="MPSRT_TRITON_WIDEN_TO=4" ;; *) envs="" ;; esac
  echo "== softmax $run $envs"
  env $envs timeout 60 python3 bench/triton_backend.py --only softmax 2>&1 \
    | tee "$OUT/triton/softmax_$run.jsonl" | grep -E '"ratio"|Error|error'
done
echo "== add,matmul defaults"
timeout 120 python3 bench/triton_backend.py --only add,matmul 2>&1 | tee "$OUT/triton/full_new.jsonl" \
  | grep -E '"ratio"|"matmul_f16", "impl": "triton"|Error|error'
echo "== matmul v2"
MPSRT_TRITON_VEC2_SLAB=1 timeout 60 python3 bench/triton_backend.py --only matmul --matmul-sizes 2048,4096 2>&1 \
  | tee "$OUT/triton/matmul_v2.jsonl" | grep -E '"ratio"|"matmul_f16", "impl": "triton"|Error|error'
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/triton/smi_after.txt" 2>&1
