# triton request 3 (session 13, helper "triton", final) — needs the working tree at/after d960bd4
# (final session-13 Triton state: vec4 slabs, self-bounded modules, pruning, uniform_fast,
# benchmarker warm-up), wheel built from it.  ~90 s.
# 1. python/tests/test_triton_backend.py in full on the H200 (final correctness).
# 2. d/d2: headline ratios (add/softmax/matmul 2048, 4096) in two fresh processes.
# 3. epilogue probe (diagnostic for the next session): the same K loop with the tutorial's f16
#    store vs an f32 block store, 128x128x32 at nw 8/4, K = 4096 / 8192 (does the epilogue's
#    register footprint slow the loop? per-K-step cost from the two K).
mkdir -p "$OUT/triton"
export TRITON_DEFAULT_BACKEND=wgpu
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/triton/smi_before.txt" 2>&1
python3 -c 'import mpsrt; print(mpsrt._C.triton_compiler_version())' > "$OUT/triton/version.txt" 2>&1
timeout 45 python3 -m pytest -q -p no:cacheprovider --tb=short -rfE \
  python/tests/test_triton_backend.py 2>&1 | tail -40 > "$OUT/triton/pytest.txt"
tail -2 "$OUT/triton/pytest.txt"
for run in d d2; do
  echo "== $run"
  case $run in d) only=add,softmax,matmul ;; *) only=matmul ;; esac
  timeout 40 python3 bench/triton_backend.py --only $only --softmax-cols 4096 \
    --matmul-sizes 2048,4096 2>&1 | tee "$OUT/triton/bench_$run.jsonl" \
    | grep -E '"ratio"|"matmul_f16", "impl": "triton"|Error|error'
done
cat > /tmp/triton_epilogue_probe.py <<'PYEOF'
# Epilogue probe (session 13, triton helper): does the read-out/store after tutorial 03's K loop
# change the loop's speed (register pressure of the whole kernel)? Same K loop, three epilogues:
# t16 = the tutorial's (truncf + masked f16 block store), f32 = the f32 block stored as is
# (no f16 rounding array, plain stores). Fixed 128x128x32 configs, K = 4096 and 8192.
import json, os
os.environ.setdefault("TRITON_DEFAULT_BACKEND", "wgpu")
import numpy as np
import mpsrt
import triton
import triton.language as tl
from triton.runtime import driver
from mpsrt.triton_backend.driver import WgpuDriver, device_time
driver.set_active(WgpuDriver())


@triton.jit
def body(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
         BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
         GROUP_SIZE_M: tl.constexpr, EPI: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    if EPI == "t16":
        tl.store(c_ptrs, accumulator.to(tl.float16), mask=c_mask)
    elif EPI == "f32":
        tl.store(c_ptrs, accumulator, mask=c_mask)
    else:
        tl.store(c_ptr + pid, tl.sum(tl.sum(accumulator, axis=1), axis=0))


rng = np.random.default_rng(0)
for K in (4096, 8192):
    M = N = 4096
    a = mpsrt.to_tensor(rng.standard_normal((M, K)).astype(np.float16), place="mps")
    b = mpsrt.to_tensor(rng.standard_normal((K, N)).astype(np.float16), place="mps")
    for nw in (8, 4):
        for epi in ("t16", "f32"):
            dt = "float16" if epi == "t16" else "float32"
            c = mpsrt.empty([M, N], dtype=dt, place="mps")
            grid = (triton.cdiv(M, 128) * triton.cdiv(N, 128),)
            fn = lambda: body[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                    c.stride(0), c.stride(1), BLOCK_SIZE_M=128, BLOCK_SIZE_N=128,
                                    BLOCK_SIZE_K=32, GROUP_SIZE_M=8, EPI=epi, num_warps=nw)
            try:
                fn()
                mpsrt.mps.synchronize()
                for _ in range(200):
                    fn()
                mpsrt.mps.synchronize()
                t = sorted(device_time(fn, reps=7, n_max=8))
                ms = t[len(t) // 2]
                print(json.dumps(dict(probe="epilogue", K=K, num_warps=nw, epi=epi, device_ms=ms,
                                      tflops=2.0 * M * N * K / ms / 1e9)), flush=True)
            except Exception as e:  # noqa: BLE001
                print(json.dumps(dict(probe="epilogue", K=K, num_warps=nw, epi=epi, error=str(e)[:300])), flush=True)
PYEOF
echo "== probe"
timeout 30 python3 /tmp/triton_epilogue_probe.py 2>&1 | tee "$OUT/triton/probe.jsonl" | grep -v XDG
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/triton/smi_after.txt" 2>&1
