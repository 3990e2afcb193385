"""Tutorial 02 (fused softmax, verbatim kernel of python/tests/test_triton_backend.py) in
compiler variants, interleaved in ONE process with the built-in softmax, so GPU clock drift
between processes cannot decide an A/B (the ~5 µs kernels at 256 columns moved 3x between
fresh processes of one H100 call).

Each variant is its own `triton.jit` of the same function (Triton's in-memory kernel cache is
per JITFunction), compiled under its environment switches (`MPSRT_TRITON_NARROW`,
`MPSRT_TRITON_ONE_BARRIER`, ..., which the Rust compiler reads at compile time and which are
part of the backend's cache key). After a warm-up of `--warm-s` seconds of back-to-back
launches, rounds time every variant and the built-in in rotated order with the driver's GPU
timestamp benchmarker (`device_time`, 3 samples of 48 launches); each line of output is one
JSON object: per-round samples, then per variant the median device µs and its ratio to the
built-in (`triton_over_builtin` = built-in time / variant time).

Usage: python3 bench/triton_softmax_ab.py [--rows 4096] [--cols 256,1024] [--rounds 5]
       [--variants base,ob,def] [--warm-s 1.0]
Variants: base = MPSRT_TRITON_ONE_BARRIER=0 MPSRT_TRITON_NARROW=0 (session 14's code),
ob = MPSRT_TRITON_NARROW=0, def = the defaults, nopf = defaults + MPSRT_TRITON_PREFETCH=0."""
import argparse
import importlib.util
import json
import os
import pathlib
import statistics
import sys
import time

os.environ.setdefault("TRITON_DEFAULT_BACKEND", "wgpu")

import numpy as np  # noqa: E402

import mpsrt  # noqa: E402
import triton  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
VARIANTS = {
    "base": {"MPSRT_TRITON_ONE_BARRIER": "0", "MPSRT_TRITON_NARROW": "0"},
    "ob": {"MPSRT_TRITON_NARROW": "0"},
    "def": {},
    "nopf": {"MPSRT_TRITON_PREFETCH": "0"},
}
KNOBS = ("MPSRT_TRITON_ONE_BARRIER", "MPSRT_TRITON_NARROW", "MPSRT_TRITON_PREFETCH")


def emit(**kw):
    print(json.dumps(kw), flush=True)


def load_tutorials():
    path = ROOT / "python" / "tests" / "test_triton_backend.py"
    spec = importlib.util.spec_from_file_location("triton_tutorials", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def host(kernel):
    """The tutorial's host code (test_triton_backend.softmax) around one JITFunction."""
    def softmax(x):
        n_rows, n_cols = x.shape
        y = mpsrt.empty_like(x)
        softmax.last = kernel[(min(n_rows, 1024), 1, 1)](
            y, x, x.stride(0), y.stride(0), n_rows, n_cols, triton.next_power_of_2(n_cols), 2,
            num_warps=8)
        return y
    return softmax


def compiled(kernel, x, env):
    """Compiles `kernel` for `x` under `env` (restored afterwards); returns the host function
    and the launched workgroup size."""
    saved = {k: os.environ.get(k) for k in KNOBS}
    for k in KNOBS:
        os.environ.pop(k, None)
    os.environ.update(env)
    try:
        fn = host(kernel)
        fn(x)
        mpsrt.mps.synchronize()
        wg = fn.last.metadata.mpsrt_workgroup_size
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return fn, wg


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--cols", default="256,1024")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--variants", default="base,ob,def")
    p.add_argument("--warm-s", type=float, default=1.0)
    args = p.parse_args()
    T = load_tutorials()
    from triton.runtime import driver

    from mpsrt.triton_backend.driver import WgpuDriver, device_time
    driver.set_active(WgpuDriver())
    emit(device=mpsrt.mps.get_device_name(), triton=triton.__version__,
         compiler=mpsrt._C.triton_compiler_version())
    rng = np.random.default_rng(0)
    names = args.variants.split(",")
    builtin = mpsrt.nn.functional.softmax
    for cols in (int(c) for c in args.cols.split(",")):
        a = rng.standard_normal((args.rows, cols)).astype(np.float32)
        x = mpsrt.to_tensor(a, place="mps")
        want = T.np_softmax(a)
        fns = {}
        for v in names:
            kernel = triton.jit(T.softmax_kernel.fn)  # a fresh in-memory cache per variant
            fn, wg = compiled(kernel, x, VARIANTS[v])
            np.testing.assert_allclose(fn(x).numpy(), want, rtol=1e-4, atol=1e-6)
            emit(cols=cols, variant=v, workgroup_size=wg, env=VARIANTS[v])
            fns[v] = lambda fn=fn: fn(x)
        fns["builtin"] = lambda: builtin(x, axis=-1)
        t_end = time.perf_counter() + args.warm_s
        while time.perf_counter() < t_end:
            for f in fns.values():
                for _ in range(20):
                    f()
            mpsrt.mps.synchronize()
        samples = {k: [] for k in fns}
        order = list(fns)
        for r in range(args.rounds):
            for k in order[r % len(order):] + order[:r % len(order)]:
                s = device_time(fns[k], reps=3)
                samples[k] += s
                emit(cols=cols, round=r, impl=k, device_us=[round(t * 1e3, 2) for t in s])
        ref = statistics.median(samples["builtin"])
        for k, s in samples.items():
            med = statistics.median(s)
            emit(cols=cols, impl=k, median_us=round(med * 1e3, 2),
                 min_us=round(min(s) * 1e3, 2), triton_over_builtin=round(ref / med, 3))


if __name__ == "__main__":
    main()
