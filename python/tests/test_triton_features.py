"""Real Triton on mpsrt, beyond the tutorials: multi-operand reductions (`tl.argmax` /
`tl.argmin`), atomics, 64-bit index arithmetic, and the types that are refused with a clear error
(fp8, bf16). Kernels are ordinary `@triton.jit` functions run through the `wgpu` backend on
mpsrt tensors and compared with NumPy.

`crates/mpsrt-jit/tests/ttir/generate.py` writes TTIR fixtures of some of these kernels for the
Rust tests (naga validation, MSL translation)."""
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
    print(f"test_triton_features: skipped, triton is not importable: {e}", file=sys.stderr)
    pytest.skip(f"triton is not importable ({e}); pip install triton==3.9.0 (Linux only)",
                allow_module_level=True)

import mpsrt  # noqa: E402
from mpsrt.triton_backend.driver import WgpuDriver  # noqa: E402
from triton.runtime import driver as _triton_driver  # noqa: E402

if WgpuDriver.is_active():
    # Triton releases before 3.9 refuse two active drivers (CUDA's and this one) even under
    # TRITON_DEFAULT_BACKEND=wgpu: select ours explicitly, as bench/triton_backend.py does.
    _triton_driver.set_active(WgpuDriver())

rng = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def _gpu(gpu):
    return gpu


def dev(a):
    return mpsrt.to_tensor(np.ascontiguousarray(a), place="mps")


# --------------------------------------------------------------------------------------------
# tt.reduce with two operands: argmax / argmin along either axis of a 2-D block.
@triton.jit
def argmax_rows_kernel(x_ptr, imax_ptr, imin_ptr, vmax_ptr, M, N, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr):
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=float("-inf"))
    tl.store(imax_ptr + rows, tl.argmax(x, axis=1), mask=rows < M)
    y = tl.where(mask, x, float("inf"))
    tl.store(imin_ptr + cols, tl.argmin(y, axis=0), mask=cols < N)
    v, i = tl.max(x, axis=1, return_indices=True)
    tl.store(vmax_ptr + rows, v + i.to(tl.float32) * 0.0, mask=rows < M)


@triton.jit
def argmax_flat_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=float("-inf"))
    tl.store(out_ptr, tl.argmax(x, axis=0))


@pytest.mark.parametrize("M,N", [(5, 7), (16, 33)])
def test_argmax_argmin_two_operand_reduce(M, N):
    a = rng.standard_normal((M, N)).astype(np.float32)
    a[0, 3] = a[0, 1] = a[0].max() + 1  # a tie: the first index wins, as in NumPy
    x = dev(a)
    imax, imin = mpsrt.empty([M], "int32", "mps"), mpsrt.empty([N], "int32", "mps")
    vmax = mpsrt.empty([M], "float32", "mps")
    bm, bn = triton.next_power_of_2(M), triton.next_power_of_2(N)
    argmax_rows_kernel[(1,)](x, imax, imin, vmax, M, N, BLOCK_M=bm, BLOCK_N=bn)
    np.testing.assert_array_equal(imax.numpy(), a.argmax(axis=1))
    np.testing.assert_array_equal(imin.numpy(), a.argmin(axis=0))
    np.testing.assert_array_equal(vmax.numpy(), a.max(axis=1))


def test_argmax_whole_block():
    for n in (1, 300, 1024):
        a = rng.standard_normal(n).astype(np.float32)
        out = mpsrt.empty([1], "int32", "mps")
        argmax_flat_kernel[(1,)](dev(a), out, n, BLOCK=triton.next_power_of_2(max(n, 2)))
        assert int(out.numpy()[0]) == int(a.argmax()), n


# --------------------------------------------------------------------------------------------
# Atomics: tt.atomic_rmw (add, max, min, xchg on i32 and f32) and tt.atomic_cas. WGSL has atomic
# i32/u32 only: f32 add and the float max/min Triton lowers to signed max + unsigned min on the
# bit patterns run as compare-exchange loops where no native op exists.
@triton.jit
def atomics_kernel(x_ptr, xi_ptr, hist_ptr, fsum_ptr, imax_ptr, fmax_ptr, fmin_ptr, n,
                   BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    xi = tl.load(xi_ptr + offs, mask=m, other=0)
    tl.atomic_add(hist_ptr + (xi & 7), 1, mask=m)  # many lanes on few addresses
    tl.atomic_add(fsum_ptr, tl.sum(x, axis=0))  # one scalar f32 add per program
    tl.atomic_max(imax_ptr + (xi & 3), xi, mask=m)
    tl.atomic_max(fmax_ptr + (xi & 1), x, mask=m)
    tl.atomic_min(fmin_ptr + (xi & 1), x, mask=m)


@triton.jit
def xchg_cas_kernel(slots_ptr, old_ptr, flags_ptr, got_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    # Every program swaps its id into the same BLOCK slots; the old values come back.
    old = tl.atomic_xchg(slots_ptr + offs, pid + 1 + offs * 0)
    tl.store(old_ptr + pid * BLOCK + offs, old)
    # Compare-and-swap on the program's own flag: 0 -> pid + 1 succeeds (returns 0), then a
    # second CAS expecting 0 fails and returns pid + 1.
    a = tl.atomic_cas(flags_ptr + pid, 0, pid + 1)
    b = tl.atomic_cas(flags_ptr + pid, 0, 99)
    tl.store(got_ptr + 2 * pid, a)
    tl.store(got_ptr + 2 * pid + 1, b)


def test_atomics_vs_numpy():
    n, block = 1000, 128
    x = rng.standard_normal(n).astype(np.float32)
    xi = rng.integers(-50, 50, n).astype(np.int32)
    hist = dev(np.zeros(8, np.int32))
    fsum = dev(np.zeros(1, np.float32))
    imax = dev(np.full(4, -1000, np.int32))
    fmax = dev(np.full(2, -np.inf, np.float32))
    fmin = dev(np.full(2, np.inf, np.float32))
    atomics_kernel[(triton.cdiv(n, block),)](dev(x), dev(xi), hist, fsum, imax, fmax, fmin, n,
                                             BLOCK=block)
    np.testing.assert_array_equal(hist.numpy(), np.bincount(xi & 7, minlength=8))
    np.testing.assert_allclose(fsum.numpy()[0], x.sum(dtype=np.float64), rtol=1e-4)
    np.testing.assert_array_equal(imax.numpy(), [xi[(xi & 3) == k].max() for k in range(4)])
    np.testing.assert_array_equal(fmax.numpy(), [x[(xi & 1) == k].max() for k in range(2)])
    np.testing.assert_array_equal(fmin.numpy(), [x[(xi & 1) == k].min() for k in range(2)])


def test_atomic_xchg_and_cas():
    progs, block = 6, 8
    slots = dev(np.zeros(block, np.int32))
    old = mpsrt.empty([progs * block], "int32", "mps")
    flags = dev(np.zeros(progs, np.int32))
    got = mpsrt.empty([2 * progs], "int32", "mps")
    xchg_cas_kernel[(progs,)](slots, old, flags, got, BLOCK=block)
    s, o = slots.numpy(), old.numpy().reshape(progs, block)
    # Exchanges form one chain per slot: every value 0..progs appears once among the old values
    # and the final contents.
    for j in range(block):
        assert sorted(list(o[:, j]) + [s[j]]) == list(range(progs + 1)), (o[:, j], s[j])
    np.testing.assert_array_equal(got.numpy().reshape(progs, 2),
                                  [[0, p + 1] for p in range(progs)])
    np.testing.assert_array_equal(flags.numpy(), np.arange(1, progs + 1))


# --------------------------------------------------------------------------------------------
# int64 is computed in 32 bits: exact for signed values in the int32 range, which index arithmetic
# (`.to(tl.int64)` offsets, tensor descriptors) stays in for any bindable buffer; unsigned int64
# ops are refused by name.
@triton.jit
def i64_offsets_kernel(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    row = offs * stride  # int64 multiply, as large-tensor kernels write it
    m = offs < n  # int64 compare
    v = tl.load(x_ptr + row, mask=m, other=0.0) * 2.0 + (offs // 3 - offs % 5).to(tl.float32)
    tl.store(out_ptr + offs, v, mask=m)


@triton.jit
def u64_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    u = offs.to(tl.uint64)
    tl.store(x_ptr + offs, (u >> 1).to(tl.float32), mask=offs < n)


def test_int64_index_arithmetic_and_unsigned_refused():
    n, stride = 300, 3
    x = rng.standard_normal(n * stride).astype(np.float32)
    out = mpsrt.empty([n], "float32", "mps")
    i64_offsets_kernel[(triton.cdiv(n, 128),)](dev(x), out, n, stride, BLOCK=128)
    i = np.arange(n)
    np.testing.assert_allclose(out.numpy(), x[::stride] * 2 + (i // 3 - i % 5), rtol=1e-6)
    with pytest.raises(Exception, match=r"arith.shrui` on int64 values is not supported"):
        u64_kernel[(1,)](dev(np.zeros(8, np.float32)), 8, BLOCK=8)


# Tensor descriptors (Triton 3.9's replacement of block pointers, which its frontend removed):
# Triton's own rewrite pass turns them into pointers, int64 offsets and bounds masks.
@triton.jit
def descriptor_kernel(x_ptr, out_ptr, M, N, stride_m, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[stride_m, 1],
                                    block_shape=[BM, BN])
    dst = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    for j in range(0, tl.cdiv(N, BN)):
        x = src.load([pid * BM, j * BN])
        dst.store([pid * BM, j * BN], x * 2.0 + 1.0)


def test_tensor_descriptor_load_store_with_bounds():
    M, N, bm, bn = 37, 50, 16, 16
    a = rng.standard_normal((M, 64)).astype(np.float32)  # a strided view: rows of 64
    out = dev(np.full((M, N), -7.0, np.float32))
    descriptor_kernel[(triton.cdiv(M, bm),)](dev(a), out, M, N, 64, BM=bm, BN=bn)
    np.testing.assert_array_equal(out.numpy(), a[:, :N] * 2 + 1)


@triton.jit
def cast_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr, KIND: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    if KIND == 0:
        y = x.to(tl.bfloat16).to(tl.float32)
    else:
        y = x.to(tl.float8e5).to(tl.float32)
    tl.store(out_ptr + offs, y)


def test_bf16_and_fp8_are_refused_clearly():
    x = dev(np.ones(8, np.float32))
    with pytest.raises(Exception, match=r"test_triton_features.py:.*bfloat16 .*is not supported"):
        cast_kernel[(1,)](x, x, BLOCK=8, KIND=0)
    # Triton itself refuses fp8 here: the backend lists no supported fp8 dtypes.
    with pytest.raises(Exception, match=r"fp8e5 not supported"):
        cast_kernel[(1,)](x, x, BLOCK=8, KIND=1)


def test_native_launcher_calls_launch_hooks():
    # Triton's launch hooks (profilers use them) reach the native launcher.
    from triton import knobs
    seen = []
    knobs.runtime.launch_enter_hook = lambda meta: seen.append(("enter", meta.get()["name"]))
    knobs.runtime.launch_exit_hook = lambda meta: seen.append(("exit", meta.get()["name"]))
    try:
        a = rng.standard_normal(64).astype(np.float32)
        out = mpsrt.empty([1], "int32", "mps")
        argmax_flat_kernel[(1,)](dev(a), out, 64, BLOCK=64)
    finally:
        knobs.runtime.launch_enter_hook = None
        knobs.runtime.launch_exit_hook = None
    assert seen == [("enter", "argmax_flat_kernel"), ("exit", "argmax_flat_kernel")], seen
    assert int(out.numpy()[0]) == int(a.argmax())
