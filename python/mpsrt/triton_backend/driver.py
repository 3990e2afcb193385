"""Triton driver for target `wgpu`: loads WGSL into mpsrt pipelines, launches them with mpsrt
tensors and Python scalars on the device's command stream, and reports the device.

Not a `GPUDriver` (that one imports torch): mpsrt is the tensor library here."""
from __future__ import annotations

import os
import time

from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase

from . import BACKEND_NAME, TARGET_ARCH, WARP_SIZE

_CONFIG: dict = {"num_warps": None, "num_stages": None, "max_threads": None,
                 "shared_memory": None}


def kernel_config() -> dict:
    """The defaults `WgpuDriver.set_kernel_config` set (None: Triton's own defaults)."""
    return dict(_CONFIG)


_NATIVE = None


def _C():
    global _NATIVE
    if _NATIVE is None:
        from .. import _C as c
        _NATIVE = c
    return _NATIVE


def _device_index(device=None) -> int:
    return _C().current_device() if device is None else int(device)


class WgpuUtils:
    """`driver.utils`: binary loading and device properties."""

    @staticmethod
    def get_device_properties(device=None):
        p = _C().device_properties(_device_index(device))
        shared = int(p.get("max_compute_workgroup_storage_size", 16384))
        if _CONFIG["shared_memory"]:
            shared = min(shared, int(_CONFIG["shared_memory"]))
        return {
            "max_shared_mem": shared,
            # wgpu does not report SM counts or clocks; these keep Triton's tutorials' host code
            # (occupancy estimates, roofline helpers) running with neutral values.
            "multiprocessor_count": int(p.get("multiprocessor_count", 1) or 1),
            "max_num_regs": 65536,
            "warpSize": WARP_SIZE,
            "max_threads_per_block": int(p.get("max_compute_invocations_per_workgroup", 256)),
            "mem_clock_rate": 0,
            "mem_bus_width": 0,
            "name": p.get("name", ""),
        }

    @staticmethod
    def load_binary(name, kernel, shared, device):
        """`kernel` is the WGSL the compiler's last stage produced. Returns
        (module, function, n_regs, n_spills, n_max_threads)."""
        wgsl = kernel.decode() if isinstance(kernel, (bytes, bytearray)) else str(kernel)
        pipeline = _C().triton_load(wgsl, _device_index(device))
        # num_warps is a hint here (the workgroup size is capped at the device limit when the
        # kernel is compiled), so any num_warps fits.
        return pipeline, pipeline, 0, 0, 1 << 30

    @staticmethod
    def unload_module(module):
        pass


def make_launcher(src, metadata):
    """`driver.launcher_cls(src, metadata)`: a `_C.TritonLauncher` that Triton calls per launch
    as (gridX, gridY, gridZ, stream, function, packed_metadata, launch_metadata, enter_hook,
    exit_hook, *args). It is native code end to end (no Python frame per launch): it drops the
    constexpr arguments by index (ints equal to 1 and None are specialized to constexprs too,
    exactly as in the TTIR), reads mpsrt tensors and `triton.reinterpret` wrappers, builds the
    uniform block on the stack and records the dispatch (bind groups are cached by the runtime)."""
    sig = list(src.signature.values()) if hasattr(src, "signature") else []
    for ty in sig:
        if isinstance(ty, tuple) or (isinstance(ty, str) and ty.startswith("tensordesc")):
            raise NotImplementedError(
                f"[mpsrt triton backend] {metadata.name}: tuple and tensor-descriptor "
                "arguments are not supported")
    keep = [i for i, ty in enumerate(sig) if ty != "constexpr"]
    return _C().TritonLauncher(keep, [tuple(u) for u in metadata.mpsrt_uniform],
                               list(metadata.mpsrt_bindings), int(metadata.mpsrt_uniform_size))


def _submits() -> int:
    return _C().triton_submits(None)


class _Event:
    """`Event(enable_timing=True)` for `triton.testing.do_bench`. mpsrt records launches into
    one batch and submits it at a synchronization, so `record()` notes the host clock just
    before and after its synchronize: when no batch went out between two records, the work in
    between ran entirely inside the second one's synchronize, and `elapsed_time` is that
    synchronize alone (submission, GPU execution, wake-up: host recording excluded); otherwise
    it is the wall time between the two. (The autotuner's `benchmark` reads GPU timestamps;
    two independent records cannot share a query set, so this stays host-clocked.)"""

    def __init__(self, enable_timing=True):
        self.pre = self.post = None
        self.submits = 0

    def record(self, stream=None):
        self.pre = time.perf_counter()
        _C().synchronize(None)
        self.post = time.perf_counter()
        self.submits = _submits()

    def elapsed_time(self, end) -> float:
        # The end record's own synchronize submitted exactly one batch: the launches.
        if end.submits - self.submits <= 1:
            return (end.post - end.pre) * 1e3
        return (end.post - self.post) * 1e3

    def synchronize(self):
        _C().synchronize(None)


class _DeviceInterface:
    Event = _Event

    @staticmethod
    def synchronize(device=None):
        _C().synchronize(None if device is None else int(device))

    @staticmethod
    def current_device():
        return _C().current_device()

    @staticmethod
    def device_count():
        return _C().device_count()


def _one_batch_ms(fn, n: int):
    """Milliseconds of one synchronize that submits `n` recorded calls of `fn`, or None when a
    batch limit (`MPSRT_MAX_OPS_PER_BATCH`, bytes per batch) submitted some of them early."""
    sync = _C().synchronize
    sync(None)
    s0 = _submits()
    for _ in range(n):
        fn()
    if _submits() != s0:
        return None
    t0 = time.perf_counter()
    sync(None)
    return (time.perf_counter() - t0) * 1e3


def _timestamp_ms(fn, n: int):
    """GPU milliseconds per call of `n` calls from the device's timestamp queries: None when the
    adapter has none, "split" when a batch limit submitted some calls early."""
    r = _C().triton_gpu_time(fn, n)
    if r is None:
        return None
    ms, split = r
    return "split" if split else ms


def device_time(fn, reps: int = 5, n_max: int = 48):
    """Per-call device milliseconds of `fn`, `reps` samples. Where the adapter has timestamp
    queries (`GpuDevice::gpu_timer`), each sample is GPU time between two timestamps around
    `n` calls recorded into one batch (`n` starts at `n_max` and halves while a batch limit
    splits them). Otherwise each sample is the slope between one
    submission of `n` calls and one of `n / 4` (so the fixed submit and wake-up cost cancels,
    and the host's Python/launcher time is never inside the timed window; wgpu's per-dispatch
    command encoding at submission is). `n` starts at `n_max` and halves while a batch limit
    splits the calls. Falls back to back-to-back wall time when even two calls split (launches
    of several hundred MB each, where the GPU time dominates anyway)."""
    n = n_max
    if os.environ.get("MPSRT_TRITON_BENCH") != "slope":
        first = _timestamp_ms(fn, n)
        while first == "split" and n >= 2:
            n //= 2
            first = _timestamp_ms(fn, n)
        if isinstance(first, float):
            out = [first]
            for _ in range(2 * reps):  # a rare later split is retried, not forever
                if len(out) >= reps:
                    break
                t = _timestamp_ms(fn, n)
                if isinstance(t, float):
                    out.append(t)
            return out
    while n >= 2 and _one_batch_ms(fn, n) is None:
        n //= 2
    if n < 2:
        sync = _C().synchronize
        out = []
        for _ in range(reps):
            sync(None)
            t0 = time.perf_counter()
            for _ in range(4):
                fn()
            sync(None)
            out.append((time.perf_counter() - t0) * 1e3 / 4)
        return out
    lo = max(1, n // 4)
    out = []
    for _ in range(reps):
        big, small = _one_batch_ms(fn, n), _one_batch_ms(fn, lo)
        if big is None or small is None:
            continue
        out.append(max((big - small) / (n - lo), 1e-6))
    return out or [float("nan")]


def benchmark(kernel_call, quantiles=None, warmup=25, rep=100, **kwargs):
    """The autotuner's benchmarker: per-call device milliseconds (see `device_time`; mean, or
    the requested quantiles over samples). `MPSRT_TRITON_BENCH=host` times batches of
    back-to-back launches between synchronizations instead (launch overhead included);
    `MPSRT_TRITON_BENCH=slope` skips the timestamps."""
    sync = _C().synchronize
    kernel_call()
    sync(None)
    t0 = time.perf_counter()
    for _ in range(3):
        kernel_call()
    sync(None)
    est = max((time.perf_counter() - t0) * 1e3 / 3, 1e-3)
    # At least 0.2 s of back-to-back calls: the autotuner compiles each config on the host
    # while the GPU idles, and NVIDIA's clocks drop meanwhile; Triton's default 25 ms did not
    # bring them back, which favoured whichever config came first (session 13: tutorial 03 at
    # 2048^3 picked 64x64 blocks at 72 TFLOP/s in some processes, 128x128 at 90 in others).
    for _ in range(max(1, int(max(warmup, 200) / est))):
        kernel_call()
    sync(None)
    if os.environ.get("MPSRT_TRITON_BENCH") == "host":
        per_batch = max(1, min(100, int(rep / est / 5)))
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(per_batch):
                kernel_call()
            sync(None)
            times.append((time.perf_counter() - t0) * 1e3 / per_batch)
    else:
        # Long calls need fewer of them for the fixed submission cost to vanish in the slope.
        n_max = 48 if est < 0.2 else 16 if est < 2 else 8
        # Enough samples to fill about `rep` ms, within 3..15.
        reps = max(3, min(15, int(rep / max(est * n_max * 1.25, 1e-3))))
        times = device_time(kernel_call, reps=reps, n_max=n_max)
    times.sort()
    if quantiles:
        return [times[min(len(times) - 1, int(q * len(times)))] for q in quantiles]
    return sum(times) / len(times)


class WgpuDriver(DriverBase):
    """The active Triton driver when an mpsrt GPU adapter exists (see the package docs)."""

    def __init__(self):
        super().__init__()
        self.utils = WgpuUtils()
        self.launcher_cls = make_launcher
        c = _C()
        # Called by Triton on every launch: the native functions themselves, no wrapper.
        self.get_current_device = c.current_device
        self.set_current_device = lambda device: c.set_current_device(int(device))
        # One in-order command stream per device: the stream handle is the device index.
        self.get_current_stream = lambda device=None: c.current_device() if device is None else device

    @staticmethod
    def is_active():
        if os.environ.get("MPSRT_TRITON_DISABLE") == "1":
            return False
        try:
            if _C().device_count() == 0:
                return False
        except Exception:
            return False
        if os.environ.get("TRITON_DEFAULT_BACKEND") == BACKEND_NAME:
            return True
        # Step aside for a native driver (CUDA, HIP) so installing mpsrt never breaks it;
        # TRITON_DEFAULT_BACKEND=wgpu selects this one next to it.
        from triton.backends import backends
        for name, b in backends.items():
            if name != BACKEND_NAME:
                try:
                    if b.driver.is_active():
                        return False
                except Exception:
                    continue
        return True

    def get_current_target(self):
        return GPUTarget(BACKEND_NAME, TARGET_ARCH, WARP_SIZE)

    def get_active_torch_device(self):
        raise RuntimeError("the mpsrt wgpu Triton backend works on mpsrt tensors, not torch")

    def get_device_interface(self):
        return _DeviceInterface

    def map_python_to_cpp_type(self, ty: str) -> str:
        return ty

    def get_benchmarker(self):
        return benchmark

    def get_empty_cache_for_benchmark(self):
        # No L2 flush between timed runs (mpsrt has no in-place fill to overwrite a buffer).
        return None

    def clear_cache(self, cache):
        pass

    # ---- the seed's MPSDriver API ----
    def set_kernel_config(self, num_warps=None, num_stages=None, max_threads=None,
                          shared_memory=None):
        """Defaults for kernels compiled from now on: `num_warps` / `num_stages` when a launch
        does not pass them, `max_threads` caps the workgroup size, `shared_memory` caps the
        workgroup memory a kernel may use (larger kernels fail with OutOfResources, which the
        autotuner skips)."""
        for k, v in (("num_warps", num_warps), ("num_stages", num_stages),
                     ("max_threads", max_threads), ("shared_memory", shared_memory)):
            if v is not None:
                if int(v) <= 0:
                    raise ValueError(f"[mpsrt triton backend] {k} must be positive, got {v}")
                _CONFIG[k] = int(v)

    def memory_pool(self, device=None):
        """Bytes held by live GPU tensors now and at peak (mpsrt's caching allocator)."""
        s = _C().memory_stats(None if device is None else int(device))
        return {"current_allocated": int(s["allocated"]), "max_allocated": int(s["peak_allocated"]),
                "reserved": int(s["reserved"])}
