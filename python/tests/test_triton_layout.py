"""Layout choice and barrier-light reductions of the Triton backend (`mpsrt_jit`'s
`CompileOptions::narrow_to` / `one_barrier`, crate modules `subgroup` and `ttir::uniform`):
kernels whose work is reductions of small blocks run on one subgroup instead of Triton's
`num_warps * 32` invocations, other multi-subgroup reductions take one barrier, and a reduction
whose result steers control flow keeps the uniform (`workgroupUniformLoad`) path. On lavapipe
(8-lane subgroups) a 64-element block is one subgroup and a 256-element one keeps 256
invocations (one barrier per reduction), so both new paths run here.
Results are compared with NumPy; the launched workgroup size is read from the kernel metadata."""
import os
import sys

import numpy as np
import pytest

os.environ.setdefault("TRITON_DEFAULT_BACKEND", "wgpu")

if isinstance(sys.modules.get("torch"), type(sys)) and not hasattr(sys.modules["torch"], "cuda"):
    del sys.modules["torch"]  # test_jit.py's tiny torch shim; Triton probes real torch

try:
    import triton
    import triton.language as tl
except ImportError as e:  # no wheel for this platform (e.g. macOS) or not installed
    print(f"test_triton_layout: skipped, triton is not importable: {e}", file=sys.stderr)
    pytest.skip(f"triton is not importable ({e}); pip install triton==3.9.0 (Linux only)",
                allow_module_level=True)

import mpsrt  # noqa: E402
from mpsrt.triton_backend.driver import WgpuDriver  # noqa: E402
from triton.runtime import driver as _triton_driver  # noqa: E402

if WgpuDriver.is_active():
    _triton_driver.set_active(WgpuDriver())

rng = np.random.default_rng(24)


@pytest.fixture(autouse=True)
def _gpu(gpu):
    return gpu


def dev(a):
    return mpsrt.to_tensor(np.ascontiguousarray(a), place="mps")


def props():
    return mpsrt._C.device_properties(mpsrt._C.current_device())


# Row statistics with a row loop (tutorial 02's shape): max, min and sum of each row, plus the
# row normalized by its sum of squares. Four reductions per row, so parity halves alternate
# across rows and within one row.
@triton.jit
def row_stats_kernel(x_ptr, out_ptr, stats_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for r in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x = tl.load(x_ptr + r * n_cols + cols, mask=mask, other=0.0)
        mx = tl.max(tl.where(mask, x, -float("inf")), axis=0)
        mn = tl.min(tl.where(mask, x, float("inf")), axis=0)
        s = tl.sum(x, axis=0)
        q = tl.sum(x * x, axis=0)
        tl.store(out_ptr + r * n_cols + cols, x / tl.sqrt(q + 1e-6), mask=mask)
        tl.store(stats_ptr + r * 3 + 0, mx)
        tl.store(stats_ptr + r * 3 + 1, mn)
        tl.store(stats_ptr + r * 3 + 2, s)


@pytest.mark.parametrize("rows,cols,programs", [(9, 50, 4), (3, 256, 8), (5, 200, 2), (4, 7, 16)])
def test_row_reductions_on_narrowed_layouts(rows, cols, programs):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = mpsrt.empty([rows, cols], dtype="float32", place="mps")
    stats = mpsrt.empty([rows, 3], dtype="float32", place="mps")
    block = triton.next_power_of_2(cols)
    k = row_stats_kernel[(programs, )](dev(x), out, stats, rows, cols, BLOCK=block, num_warps=8)
    want = np.stack([x.max(axis=1), x.min(axis=1), x.sum(axis=1)], axis=1)
    np.testing.assert_allclose(stats.numpy(), want, rtol=1e-5, atol=1e-5)
    norm = x / np.sqrt((x * x).sum(axis=1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(out.numpy(), norm, rtol=1e-5, atol=1e-6)
    p = props()
    if p["subgroups"] and p["subgroup_min_size"] == p["subgroup_max_size"]:
        # num_warps=8 asks for 256 invocations; a row that fits one subgroup at 8 elements
        # per lane runs on one subgroup (no barrier), a longer one keeps the 256 (one barrier
        # per reduction).
        sg = p["subgroup_min_size"]
        one = block <= 8 * sg
        want = min(block, sg) if one else min(block, 256)
        assert k.metadata.mpsrt_workgroup_size == want, k.metadata
        wgsl = k.asm["wgsl"].decode()
        assert "workgroupUniformLoad" not in wgsl
        assert ("workgroupBarrier" in wgsl) == (not one), wgsl


# A reduction that decides a branch and a loop bound: those results must be uniform values,
# so the kernel keeps num_warps' workgroup and the workgroupUniformLoad reductions.
@triton.jit
def steer_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    s = tl.sum(x, axis=0)
    if s > 0:
        x = x - tl.max(tl.where(mask, x, -float("inf")), axis=0)
    k = tl.sum(tl.where(mask & (x > 0), 1, 0), axis=0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, k):
        acc += x * 0.5
    tl.store(out_ptr + offs, acc + x, mask=mask)


@pytest.mark.parametrize("n,sign", [(50, 1.0), (50, -1.0), (200, -1.0)])
def test_reduction_steering_control_flow_stays_uniform(n, sign):
    x = (rng.standard_normal(n).astype(np.float32) + sign * 2).astype(np.float32)
    out = mpsrt.empty([n], dtype="float32", place="mps")
    block = triton.next_power_of_2(n)
    k = steer_kernel[(1, )](dev(x), out, n, BLOCK=block, num_warps=2)
    y = x - x.max() if x.sum() > 0 else x
    want = y * 0.5 * int((y > 0).sum()) + y
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    assert k.metadata.mpsrt_workgroup_size == min(64, block), k.metadata
    if props()["subgroups"]:
        assert "workgroupUniformLoad" in k.asm["wgsl"].decode()


def test_switches_are_in_the_cache_key():
    """`MPSRT_TRITON_NARROW` / `MPSRT_TRITON_ONE_BARRIER` change the WGSL, so Triton's cache
    key (the compiler version string) names them."""
    import subprocess
    code = "import mpsrt; print(mpsrt._C.triton_compiler_version())"
    env = dict(os.environ, MPSRT_TRITON_NARROW="0", MPSRT_TRITON_ONE_BARRIER="0")
    off = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    on = mpsrt._C.triton_compiler_version()
    if "MPSRT_TRITON_NARROW" not in os.environ and "MPSRT_TRITON_ONE_BARRIER" not in os.environ:
        assert on.endswith("-n8") and "-noob" not in on, on
    assert off.endswith("-n0") and "-noob" in off, off
