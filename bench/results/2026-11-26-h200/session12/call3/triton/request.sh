# triton request 1 — needs the working tree at/after commit 70c156e ("triton: MPSRT_TRITON_EMULATE_COOP")
# (crates/mpsrt-jit ttir/dot_stage.rs, MPSRT_TRITON_DOT_STAGE / MPSRT_TRITON_VEC2_SLAB in
# crates/mpsrt-python/src/jit.rs, bench/triton_backend.py --softmax-cols/--matmul-sizes) and the
# mpsrt wheel built from it in /tmp/site. ~90 s: correctness of the Triton tutorials on the GPU
# (cooperative matrices on: lavapipe can't run them), the generated WGSL, then A/B in fresh
# processes: new defaults vs session 11's behaviour (MPSRT_TRITON_WIDEN_TO=4 MPSRT_TRITON_DOT_STAGE=0).
mkdir -p "$OUT/triton"
export TRITON_DEFAULT_BACKEND=wgpu
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/triton/smi_before.txt" 2>&1
# 1. Correctness on the GPU (tl.dot on cooperative matrices, staged operands; odd sizes and masks).
timeout 150 python3 -m pytest -q -p no:cacheprovider --tb=line -rfE python/tests/test_triton_backend.py 2>&1 | tail -40 > "$OUT/triton/pytest.txt"
cat "$OUT/triton/pytest.txt"
timeout 60 python3 - > "$OUT/triton/odd_matmul.txt" 2>&1 <<'PY'
# Odd shapes through the GPU-sized configs (staged loads' masked / unaligned words).
import importlib.util, sys, numpy as np, mpsrt, triton
sys.argv = ["x"]
spec = importlib.util.spec_from_file_location("tb", "bench/triton_backend.py"); B = importlib.util.module_from_spec(spec); spec.loader.exec_module(B)
from triton.runtime import driver
from mpsrt.triton_backend.driver import WgpuDriver
driver.set_active(WgpuDriver())
T = B.load_tutorials()
rng = np.random.default_rng(1)
for cfg in B.gpu_configs():
    k = triton.autotune(configs=[cfg], key=['M', 'N', 'K'])(T.matmul_kernel.fn)
    T.matmul_kernel = k
    for (M, N, K) in ((300, 200, 100), (129, 257, 70), (512, 384, 96), (64, 64, 33)):
        a = rng.standard_normal((M, K)).astype(np.float16); b = rng.standard_normal((K, N)).astype(np.float16)
        try:
            got = T.matmul(mpsrt.to_tensor(a, place="mps"), mpsrt.to_tensor(b, place="mps")).numpy().astype(np.float32)
        except Exception as e:
            print(cfg, (M, N, K), "SKIP", type(e).__name__, str(e)[:120]); break
        want = a.astype(np.float32) @ b.astype(np.float32)
        err = float(np.abs(got - want).max() / (np.abs(want).max() + 1e-6))
        print(cfg, (M, N, K), "rel_err", round(err, 6), "OK" if err < 1e-2 else "FAIL")
PY
cat "$OUT/triton/odd_matmul.txt"
# 2. The WGSL of softmax (4096 columns) and matmul (the GPU configs) as compiled here.
timeout 60 python3 - > "$OUT/triton/dump.txt" 2>&1 <<'PY'
import importlib.util, sys, os, numpy as np, mpsrt
spec = importlib.util.spec_from_file_location("tb", "bench/triton_backend.py"); B = importlib.util.module_from_spec(spec); spec.loader.exec_module(B)
from triton.runtime import driver
from mpsrt.triton_backend.driver import WgpuDriver
driver.set_active(WgpuDriver())
T = B.load_tutorials()
out = os.environ["OUT"] + "/triton"
dev = lambda s, d="float32": mpsrt.to_tensor(np.zeros(s, dtype=d), place="mps")
s = dev((64, 4096))
k = T.softmax_kernel.warmup(s, s, 4096, 4096, 64, 4096, BLOCK_SIZE=4096, num_stages=2, num_warps=8, grid=(1,))
open(f"{out}/softmax_4096.wgsl", "w").write(k.asm["wgsl"].decode()); print("softmax", k.metadata.shared)
a = dev((4096, 4096), "float16")
for cfg in B.gpu_configs():
    kw = dict(cfg.kwargs); nw = cfg.num_warps
    k = T.matmul_kernel.fn.warmup(a, a, a, 4096, 4096, 4096, 4096, 1, 4096, 1, 4096, 1, ACTIVATION="", num_warps=nw, grid=(1,), **kw)
    name = f"matmul_{kw['BLOCK_SIZE_M']}x{kw['BLOCK_SIZE_N']}x{kw['BLOCK_SIZE_K']}_w{nw}.wgsl"
    open(f"{out}/{name}", "w").write(k.asm["wgsl"].decode()); print(name, k.metadata.shared)
PY
cat "$OUT/triton/dump.txt"
# 3. A/B, alternated fresh processes: new defaults (new), session 11 (old).
# v2: vec2<f16> slabs (one store per staged pair; needs the driver to take cooperative loads
# through vector-typed pointers), matmul only.
for run in new old v2; do
  only=softmax,matmul
  case $run in
    old) envs="MPSRT_TRITON_WIDEN_TO=4 MPSRT_TRITON_DOT_STAGE=0" ;;
    v2) envs="MPSRT_TRITON_VEC2_SLAB=1"; only=matmul ;;
    *) envs="" ;;
  esac
  echo "== $run $envs"
  env $envs timeout 100 python3 bench/triton_backend.py --only $only --softmax-cols 1024,4096 \
    --matmul-sizes 2048,4096 2>&1 | tee "$OUT/triton/bench_$run.jsonl" | grep -E '"ratio"|"matmul_f16", "impl": "triton"|Error|error'
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/triton/smi_after.txt" 2>&1
