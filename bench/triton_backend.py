"""Issue 24's performance table: Triton's tutorials through real Triton (`import triton`, the
mpsrt `wgpu` backend: Triton's TTIR → mpsrt-jit WGSL) beside mpsrt's built-in ops.

  vector add (f32)  GB/s vs `x + y`                          target >= 90 %
  fused softmax     GB/s vs `mpsrt.nn.functional.softmax`   target >= 70 %
  matmul (f16)      TFLOP/s vs `mpsrt.matmul` (our GEMM)    target >= 50 %

The kernels are the verbatim tutorial kernels of python/tests/test_triton_backend.py (matmul gets
GPU-sized autotune configs here). Prints one JSON object per line, then one `ratio` line per
benchmark and size. Two timings, the same for both sides:
  ms         back-to-back launches between device synchronizations (host launch cost included:
             at small sizes this measures Python/launcher time, not the kernel)
  device_ms  the driver's benchmarker (`mpsrt.triton_backend.driver.device_time`, median of
             7 samples, Triton's and the built-in's interleaved in rotated order): GPU timestamps around 48 launches recorded into one batch where the adapter
             has timestamp queries, else only the submission that runs them timed, as the
             slope between 48 and 12 launches — the kernel, not submit latency
`ratio` lines give `triton_over_builtin` from device_ms and `host_ratio` from ms. The subgroup
reductions (MPSRT_JIT_SUBGROUPS=0 turns them off) and cooperative-matrix accumulators are what
changed since session 10; A/B them in separate processes (Triton caches kernels in memory):
MPSRT_JIT_SUBGROUPS=0 (workgroup-memory reduction trees), MPSRT_TRITON_WIDEN_TO=4 (elements per
invocation the workgroup widens to, default 16 above a 256-invocation floor; 4 was session 11's),
MPSRT_COOP_MATMUL=0 (tl.dot off the matrix units), MPSRT_TRITON_DOT_STAGE=0 (session 11's
register-staged cooperative tl.dot instead of operands staged straight into padded slabs),
MPSRT_TRITON_VEC4_SLAB=0 (f16 slabs instead of session 13's vec4<f16> ones),
MPSRT_TRITON_CHECKED=1 (wgpu's runtime checks instead of the compiler's own index clamps),
MPSRT_TRITON_JOINT_STAGE=0 / MPSRT_TRITON_PREFETCH=0 (session 13's per-operand staged copies /
no prefetch of the next K step), MPSRT_TRITON_F16_STORE=1 (array<f16> output bindings),
MPSRT_TRITON_ONE_BARRIER=0 (two barriers per multi-subgroup reduction, session 14's),
MPSRT_TRITON_NARROW=0 (reduction kernels of small blocks keep num_warps' workgroup instead of
narrowing to 8 elements per invocation, at least one subgroup; 1..16 sets the share).
bench/triton_kloop_probe.py times tutorial 03 at fixed configs with its WGSL rewritten.
Usage: python3 bench/triton_backend.py [--iters N] [--quick] [--only add,softmax,matmul]
       [--softmax-cols 4096] [--matmul-sizes 2048,4096] [--matmul-mnk 4096x4096x8192] [--sweep]
"""
import argparse
import importlib.util
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("TRITON_DEFAULT_BACKEND", "wgpu")

import numpy as np  # noqa: E402

import mpsrt  # noqa: E402
import triton  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
GPU = "mps"
FULL = {"add": (1 << 20, 1 << 24, 1 << 26), "rows": 4096, "softmax": (256, 1024, 4096),
        "matmul": (512, 1024, 2048, 4096)}
QUICK = {"add": (1 << 12,), "rows": 64, "softmax": (100,), "matmul": (64,)}


def load_tutorials():
    path = ROOT / "python" / "tests" / "test_triton_backend.py"
    spec = importlib.util.spec_from_file_location("triton_tutorials", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def timed(fn, iters, warmup=3, warm_s=0.3):
    sync = mpsrt.mps.synchronize
    t_end = time.perf_counter() + warm_s
    for _ in range(warmup):
        fn()
    sync()
    while time.perf_counter() < t_end:
        fn()
        sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters


def device_ms(fn):
    from mpsrt.triton_backend.driver import device_time
    t = sorted(device_time(fn, reps=7))
    return t[len(t) // 2]


def paired_device_ms(fns, rounds=7):
    """Median device ms of each of `fns` (name -> callable), their samples interleaved in
    rotated order: the GPU's speed drifts within a process (session 15 on an H100: the same
    built-in softmax read 5.9 to 18 us), which timing one side after the other turns into a
    bias of the ratio."""
    from mpsrt.triton_backend.driver import device_time
    names, out = list(fns), {k: [] for k in fns}
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            out[k] += device_time(fns[k], reps=1)
    return {k: sorted(v)[len(v) // 2] for k, v in out.items()}


def measure(pairs, iters):
    """Host seconds (`timed`) and paired device seconds of each (name, callable)."""
    host = {k: timed(fn, iters) for k, fn in pairs}
    dev = paired_device_ms(dict(pairs))
    return {k: (host[k], dev[k] / 1e3) for k, _ in pairs}


def emit(**kw):
    print(json.dumps(kw), flush=True)


def gpu_configs():
    cfg = triton.Config
    return [
        cfg({'BLOCK_SIZE_M': 64, 'BLOCK_SIZE_N': 64, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_warps=4),
        cfg({'BLOCK_SIZE_M': 64, 'BLOCK_SIZE_N': 64, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_warps=8),
        cfg({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 64, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_warps=8),
        cfg({'BLOCK_SIZE_M': 64, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_warps=8),
        cfg({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_warps=8),
        cfg({'BLOCK_SIZE_M': 32, 'BLOCK_SIZE_N': 32, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_warps=4),
        # The built-in generation-3 GEMM's shape: 128x128 on 4 subgroups of 4x4 tiles each.
        cfg({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_warps=4),
        cfg({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 64, 'BLOCK_SIZE_K': 64, 'GROUP_SIZE_M': 8}, num_warps=4),
    ]


def ratio(bench, key, val, results):
    tri, ref = results.get("triton"), results.get("builtin")
    if tri and ref:
        emit(ratio=bench, **{key: val}, triton_over_builtin=round(ref[1] / tri[1], 3),
             host_ratio=round(ref[0] / tri[0], 3))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke run on lavapipe)")
    p.add_argument("--only", default="add,softmax,matmul")
    p.add_argument("--softmax-cols", default="", help="comma-separated column counts (default: all)")
    p.add_argument("--matmul-sizes", default="", help="comma-separated sizes (default: all)")
    p.add_argument("--matmul-mnk", default="",
                   help="comma-separated MxNxK problems, timed after --matmul-sizes")
    p.add_argument("--sweep", action="store_true",
                   help="time every matmul config on its own (matmul_f16_cfg lines) instead of "
                        "autotuning: which shape wins, and by how much")
    args = p.parse_args()
    only = set(args.only.split(","))
    sizes = dict(QUICK if args.quick else FULL)
    if args.softmax_cols:
        sizes["softmax"] = tuple(int(c) for c in args.softmax_cols.split(","))
    if args.matmul_sizes:
        sizes["matmul"] = tuple(int(c) for c in args.matmul_sizes.split(","))
    T = load_tutorials()
    from triton.runtime import driver

    from mpsrt.triton_backend.driver import WgpuDriver
    # Triton releases before 3.9 ignore TRITON_DEFAULT_BACKEND when CUDA's driver is active too
    # (both report active): select ours explicitly, through Triton's own API.
    driver.set_active(WgpuDriver())
    knobs = ("MPSRT_JIT_SUBGROUPS", "MPSRT_TRITON_WIDEN_TO", "MPSRT_COOP_MATMUL",
             "MPSRT_TRITON_DOT_STAGE", "MPSRT_TRITON_VEC4_SLAB", "MPSRT_TRITON_VEC2_SLAB",
             "MPSRT_TRITON_CHECKED", "MPSRT_TRITON_UNCHECKED", "MPSRT_TRITON_JOINT_STAGE",
             "MPSRT_TRITON_PREFETCH", "MPSRT_TRITON_F16_STORE", "MPSRT_TRITON_ONE_BARRIER",
             "MPSRT_TRITON_NARROW")
    emit(device=mpsrt.mps.get_device_name(), triton=triton.__version__,
         driver=type(driver.active).__name__, compiler=mpsrt._C.triton_compiler_version(),
         env={k: os.environ[k] for k in knobs if k in os.environ})
    rng = np.random.default_rng(0)
    if "add" in only:
        for n in sizes["add"]:
            x, y = mpsrt.rand([n], "float32", GPU), mpsrt.rand([n], "float32", GPU)
            np.testing.assert_array_equal(T.add(x, y).numpy()[:4096], (x + y).numpy()[:4096])
            res = measure((("triton", lambda: T.add(x, y)), ("builtin", lambda: x + y)), args.iters)
            for impl, (s, d) in res.items():
                emit(bench="vector_add", impl=impl, n=n, ms=s * 1e3, gbps=12.0 * n / s / 1e9,
                     device_ms=d * 1e3, device_gbps=12.0 * n / d / 1e9)
            ratio("vector_add", "n", n, res)
    if "softmax" in only:
        rows = sizes["rows"]
        for cols in sizes["softmax"]:
            a = rng.standard_normal((rows, cols)).astype(np.float32)
            x = mpsrt.to_tensor(a, place=GPU)
            np.testing.assert_allclose(T.softmax(x).numpy(), T.np_softmax(a), rtol=1e-4, atol=1e-6)
            builtin = mpsrt.nn.functional.softmax
            res = measure((("triton", lambda: T.softmax(x)), ("builtin", lambda: builtin(x, axis=-1))),
                          args.iters)
            for impl, (s, d) in res.items():
                emit(bench="softmax", impl=impl, rows=rows, cols=cols, ms=s * 1e3,
                     gbps=8.0 * rows * cols / s / 1e9, device_ms=d * 1e3,
                     device_gbps=8.0 * rows * cols / d / 1e9)
            ratio("softmax", "cols", cols, res)
    if "matmul" in only:
        # The verbatim tutorial kernel under GPU-sized configs (the tests' configs are small).
        T.matmul_kernel = triton.autotune(configs=gpu_configs(), key=['M', 'N', 'K'])(T.matmul_kernel.fn)
        tuned = T.matmul_kernel
        problems = [(n, n, n) for n in sizes["matmul"]]
        problems += [tuple(int(x) for x in p.split("x")) for p in args.matmul_mnk.split(",") if p]
        for (M, N, K) in problems:
            size = M if M == N == K else f"{M}x{N}x{K}"
            flop = 2.0 * M * N * K
            a = rng.standard_normal((M, K)).astype(np.float16)
            b = rng.standard_normal((K, N)).astype(np.float16)
            ta, tb = mpsrt.to_tensor(a, place=GPU), mpsrt.to_tensor(b, place=GPU)
            want = a.astype(np.float32) @ b.astype(np.float32)

            def check(label):
                got = T.matmul(ta, tb).numpy().astype(np.float32)
                err = float(np.abs(got - want).max() / (np.abs(want).max() + 1e-6))
                # tl.dot may run on cooperative matrices here (never on lavapipe): fail loudly.
                assert err < 1e-2, f"matmul {size} {label}: relative error {err}"
                return err

            if args.sweep:
                # One fresh single-config autotuner per config: no benchmarking inside Triton.
                for cfg in gpu_configs():
                    T.matmul_kernel = triton.autotune(configs=[cfg], key=['M', 'N', 'K'])(tuned.fn)
                    try:
                        err = check(str(cfg))
                    except Exception as e:  # noqa: BLE001 (out of resources: reported, skipped)
                        emit(bench="matmul_f16_cfg", size=size, config=str(cfg), error=str(e)[:200])
                        continue
                    fn = lambda: T.matmul(ta, tb)  # noqa: E731
                    timed(fn, 3)
                    d = device_ms(fn) / 1e3
                    emit(bench="matmul_f16_cfg", size=size, config=str(cfg), device_ms=d * 1e3,
                         device_tflops=flop / d / 1e12, rel_err=err)
                T.matmul_kernel = tuned
            err = check("autotuned")
            res = measure((("triton", lambda: T.matmul(ta, tb)), ("builtin", lambda: mpsrt.matmul(ta, tb))),
                          max(3, args.iters // 4))
            for impl, (s, d) in res.items():
                emit(bench="matmul_f16", impl=impl, size=size, ms=s * 1e3,
                     tflops=flop / s / 1e12, device_ms=d * 1e3,
                     device_tflops=flop / d / 1e12, rel_err=err,
                     config=str(T.matmul_kernel.best_config) if impl == "triton" else None)
            ratio("matmul_f16", "size", size, res)


if __name__ == "__main__":
    main()
