"""Tutorial-03 K-loop probe (issue 24, session 14): the verbatim tutorial kernel through real
Triton at fixed 128x128x32 configs (num_warps 8 and 4), its WGSL rewritten by one variant of
bench/triton_wgsl_variants.py before the pipeline is built; device time at S^3 and SxSx2S
(PROBE_SIZE, default 4096: the K slope) beside the built-in GEMM (variant `base`). Run from the
repo root, one variant per fresh process, the MPSRT_TRITON_* knobs in the environment:
    python3 bench/triton_kloop_probe.py VARIANT [WGSL_OUT_DIR]"""
import json
import os
import sys
import tempfile

os.environ["TRITON_DEFAULT_BACKEND"] = "wgpu"
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import mpsrt  # noqa: E402
import triton  # noqa: E402
from triton_wgsl_variants import transform  # noqa: E402

VARIANT = sys.argv[1]
OUTDIR = sys.argv[2] if len(sys.argv) > 2 else None
_orig = mpsrt._C.triton_compile


def patched(text, threads, widen=False):
    k = dict(_orig(text, threads, widen=widen))
    if "coop_mat" in k["wgsl"]:
        k["wgsl"] = transform(k["wgsl"], VARIANT)
        if OUTDIR:
            js = os.environ.get("MPSRT_TRITON_JOINT_STAGE", "1")
            pf = os.environ.get("MPSRT_TRITON_PREFETCH", "1")
            hs = os.environ.get("MPSRT_TRITON_F16_STORE", "1")
            with open(os.path.join(OUTDIR, f"{VARIANT}_js{js}_pf{pf}_hs{hs}_{threads}.wgsl"), "w") as f:
                f.write(k["wgsl"])
    return k


mpsrt._C.triton_compile = patched
sys.path.insert(0, "bench")
import triton_backend as B  # noqa: E402
from triton.runtime import driver  # noqa: E402

from mpsrt.triton_backend.driver import WgpuDriver, device_time  # noqa: E402

driver.set_active(WgpuDriver())
T = B.load_tutorials()
fn0 = T.matmul_kernel.fn
rng = np.random.default_rng(0)


def dms(fn):
    fn()
    mpsrt.mps.synchronize()
    for _ in range(30):
        fn()
    mpsrt.mps.synchronize()
    t = sorted(device_time(fn, reps=7))
    return t[len(t) // 2]


S = int(os.environ.get('PROBE_SIZE', '4096'))
for K in (S, 2 * S):
    M = N = S
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    ta, tb = mpsrt.to_tensor(a, place="mps"), mpsrt.to_tensor(b, place="mps")
    want = None
    for nw in (8, 4):
        cfg = triton.Config({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 32,
                             'GROUP_SIZE_M': 8}, num_warps=nw)
        T.matmul_kernel = triton.autotune(configs=[cfg], key=['M', 'N', 'K'])(fn0)
        rec = dict(probe="variant", variant=VARIANT, K=K, num_warps=nw,
                   joint=os.environ.get("MPSRT_TRITON_JOINT_STAGE", "1"),
                   prefetch=os.environ.get("MPSRT_TRITON_PREFETCH", "1"),
                   f16_store=os.environ.get("MPSRT_TRITON_F16_STORE", "1"))
        try:
            out = T.matmul(ta, tb)
            if "noepi" not in VARIANT and K == S:
                if want is None:
                    want = a.astype(np.float32) @ b.astype(np.float32)
                got = out.numpy().astype(np.float32)
                rec["rel_err"] = float(np.abs(got - want).max() / np.abs(want).max())
            ms = dms(lambda: T.matmul(ta, tb))
            rec.update(device_ms=ms, tflops=2.0 * M * N * K / ms / 1e9)
        except Exception as e:  # noqa: BLE001
            rec["error"] = str(e)[:400]
        print(json.dumps(rec), flush=True)
    if VARIANT == "base":
        ms = dms(lambda: mpsrt.matmul(ta, tb))
        print(json.dumps(dict(probe="builtin", K=K, device_ms=ms,
                              tflops=2.0 * M * N * K / ms / 1e9)), flush=True)
