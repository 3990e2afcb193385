"""Real Triton on mpsrt: `import triton` kernels compiled by Triton's own frontend to TTIR, then
to WGSL by `mpsrt-jit` (the `wgpu` backend in `mpsrt.triton_backend`), launched on mpsrt tensors
and compared with NumPy. The `@triton.jit` bodies of tutorials 01, 02, 03 and 05 are verbatim.

`crates/mpsrt-jit/tests/ttir/generate.py` writes the TTIR fixtures of the Rust tests from the
kernels in this file."""
import os
import sys

import numpy as np
import pytest

os.environ.setdefault("TRITON_DEFAULT_BACKEND", "wgpu")

if isinstance(sys.modules.get("torch"), type(sys)) and not hasattr(sys.modules["torch"], "cuda"):
    # test_jit.py installs a tiny `torch` shim for its fixtures; Triton probes real torch.
    del sys.modules["torch"]

try:
    import triton
    import triton.language as tl
except ImportError as e:  # no wheel for this platform (e.g. macOS) or not installed
    print(f"test_triton_backend: skipped, triton is not importable: {e}", file=sys.stderr)
    pytest.skip(f"triton is not importable ({e}); pip install triton==3.9.0 (Linux only)",
                allow_module_level=True)

import mpsrt  # noqa: E402
from mpsrt.triton_backend.driver import WgpuDriver  # noqa: E402
from triton.runtime import driver as _triton_driver  # noqa: E402

if WgpuDriver.is_active():
    # Triton releases before 3.9 refuse two active drivers (CUDA's and this one) even under
    # TRITON_DEFAULT_BACKEND=wgpu: select ours explicitly, as bench/triton_backend.py does.
    _triton_driver.set_active(WgpuDriver())

rng = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _gpu(gpu):
    return gpu


def dev(a):
    return mpsrt.to_tensor(np.ascontiguousarray(a), place="mps")


# --------------------------------------------------------------------------------------------
# Tutorial 01: vector addition (kernel verbatim)
@triton.jit
def add_kernel(x_ptr,  # *Pointer* to first input vector.
               y_ptr,  # *Pointer* to second input vector.
               output_ptr,  # *Pointer* to output vector.
               n_elements,  # Size of the vector.
               BLOCK_SIZE: tl.constexpr,  # Number of elements each program should process.
               # NOTE: `constexpr` so it can be used as a shape value.
               ):
    # There are multiple 'programs' processing different data. We identify which program
    # we are here:
    pid = tl.program_id(axis=0)  # We use a 1D launch grid so axis is 0.
    # This program will process inputs that are offset from the initial data.
    # For instance, if you had a vector of length 256 and block_size of 64, the programs
    # would each access the elements [0:64, 64:128, 128:192, 192:256].
    # Note that offsets is a list of pointers:
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    # Create a mask to guard memory operations against out-of-bounds accesses.
    mask = offsets < n_elements
    # Load x and y from DRAM, masking out any extra elements in case the input is not a
    # multiple of the block size.
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    output = x + y
    # Write x + y back to DRAM.
    tl.store(output_ptr + offsets, output, mask=mask)


def add(x, y):
    output = mpsrt.empty_like(x)
    n_elements = output.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta['BLOCK_SIZE']), )
    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=1024)
    return output


@pytest.mark.parametrize("n", [1, 1001, 98432])
def test_tutorial_01_vector_add(n):
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    np.testing.assert_allclose(add(dev(x), dev(y)).numpy(), x + y, rtol=0, atol=0)


def test_vector_add_f16_and_views():
    x = rng.standard_normal(3000).astype(np.float16)
    y = rng.standard_normal(3000).astype(np.float16)
    np.testing.assert_array_equal(add(dev(x), dev(y)).numpy(), x + y)
    # A view with an element offset: the launcher passes the view offset.
    big = dev(np.arange(40, dtype=np.float32))
    a, b = big[3:23], big[17:37]
    np.testing.assert_array_equal(add(a, b).numpy(), np.arange(3, 23) + np.arange(17, 37))


# --------------------------------------------------------------------------------------------
# Tutorial 02: fused softmax (kernel verbatim)
@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr,
                   num_stages: tl.constexpr):
    # starting row of the program
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        # The stride represents how much we need to increase the pointer to advance 1 row
        row_start_ptr = input_ptr + row_idx * input_row_stride
        # The block size is the next power of two greater than n_cols, so we can fit each
        # row in a single block
        col_offsets = tl.arange(0, BLOCK_SIZE)
        input_ptrs = row_start_ptr + col_offsets
        # Load the row into SRAM, using a mask since BLOCK_SIZE may be > than n_cols
        mask = col_offsets < n_cols
        row = tl.load(input_ptrs, mask=mask, other=-float('inf'))
        # Subtract maximum for numerical stability
        row_minus_max = row - tl.max(row, axis=0)
        # Note that exponentiation in Triton is fast but approximate (i.e., think __expf in CUDA)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        # Write back output to DRAM
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        output_ptrs = output_row_start_ptr + col_offsets
        tl.store(output_ptrs, softmax_output, mask=mask)


def softmax(x, num_programs=None):
    n_rows, n_cols = x.shape
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    y = mpsrt.empty_like(x)
    num_programs = num_programs or min(n_rows, 1024)
    softmax_kernel[(num_programs, 1, 1)](y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE,
                                         2, num_warps=8)
    return y


def np_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# (3, 256) with 8 programs: five programs run no row (their pipelined first load is speculative).
@pytest.mark.parametrize("shape,programs", [((37, 781), None), ((5, 1), None), ((9, 130), 4), ((3, 256), 8)])
def test_tutorial_02_fused_softmax(shape, programs):
    x = rng.standard_normal(shape).astype(np.float32) * 3
    np.testing.assert_allclose(softmax(dev(x), programs).numpy(), np_softmax(x), rtol=1e-5,
                               atol=1e-6)


def test_softmax_warmup_and_device_properties():
    """The tutorial's host code: properties, `warmup` and the compiled kernel's metadata."""
    from triton.runtime import driver
    props = driver.active.utils.get_device_properties(driver.active.get_current_device())
    assert props["max_shared_mem"] > 0 and props["warpSize"] == 32
    x = dev(np.zeros((4, 100), np.float32))
    y = mpsrt.empty_like(x)
    kernel = softmax_kernel.warmup(y, x, x.stride(0), y.stride(0), 4, 100, BLOCK_SIZE=128,
                                   num_stages=2, num_warps=8, grid=(1, ))
    kernel._init_handles()
    # The reductions' workgroup memory; none where the 128-element row runs on one subgroup
    # (the layout choice on 32-lane GPUs: every reduction is a subgroup operation).
    wgsl = kernel.asm["wgsl"].decode()
    assert (kernel.metadata.shared > 0) == ("var<workgroup>" in wgsl), kernel.metadata.shared
    assert "fn main" in kernel.asm["wgsl"].decode()
    assert "tt.reduce" in kernel.asm["ttir"]


# --------------------------------------------------------------------------------------------
# Tutorial 03: matrix multiplication with autotune (kernel verbatim; configs sized for wgpu)
def get_autotune_config():
    return [
        triton.Config({'BLOCK_SIZE_M': 32, 'BLOCK_SIZE_N': 32, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_stages=3,
                      num_warps=4),
        triton.Config({'BLOCK_SIZE_M': 64, 'BLOCK_SIZE_N': 32, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_stages=4,
                      num_warps=4),
        # Needs 64 KiB of workgroup memory: OutOfResources, which the autotuner skips.
        triton.Config({'BLOCK_SIZE_M': 128, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 64, 'GROUP_SIZE_M': 8},
                      num_stages=3, num_warps=8),
    ]


@triton.autotune(
    configs=get_autotune_config(),
    key=['M', 'N', 'K'],
)
@triton.jit
def matmul_kernel(
        # Pointers to matrices
        a_ptr, b_ptr, c_ptr,
        # Matrix dimensions
        M, N, K,
        # The stride variables represent how much to increase the ptr by when moving by 1
        # element in a particular dimension. E.g. `stride_am` is how much to increase `a_ptr`
        # by to get the element one row down (A has M rows).
        stride_am, stride_ak,  #
        stride_bk, stride_bn,  #
        stride_cm, stride_cn,
        # Meta-parameters
        BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,  #
        GROUP_SIZE_M: tl.constexpr,  #
        ACTIVATION: tl.constexpr  #
):
    """Kernel for computing the matmul C = A x B.
    A has shape (M, K), B has shape (K, N) and C has shape (M, N)
    """
    # -----------------------------------------------------------
    # Map program ids `pid` to the block of C it should compute.
    # This is done in a grouped ordering to promote L2 data reuse.
    # See above `L2 Cache Optimizations` section for details.
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # -----------------------------------------------------------
    # Add some integer bound assumptions.
    # This helps to guide integer analysis in the backend to optimize
    # load/store offset address calculation
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)
    tl.assume(stride_am > 0)
    tl.assume(stride_ak > 0)
    tl.assume(stride_bn > 0)
    tl.assume(stride_bk > 0)
    tl.assume(stride_cm > 0)
    tl.assume(stride_cn > 0)

    # ----------------------------------------------------------
    # Create pointers for the first blocks of A and B.
    # We will advance this pointer as we move in the K direction
    # and accumulate
    # `a_ptrs` is a block of [BLOCK_SIZE_M, BLOCK_SIZE_K] pointers
    # `b_ptrs` is a block of [BLOCK_SIZE_K, BLOCK_SIZE_N] pointers
    # See above `Pointer Arithmetic` section for details
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    # -----------------------------------------------------------
    # Iterate to compute a block of the C matrix.
    # We accumulate into a `[BLOCK_SIZE_M, BLOCK_SIZE_N]` block
    # of fp32 values for higher accuracy.
    # `accumulator` will be converted back to fp16 after the loop.
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        # Load the next block of A and B, generate a mask by checking the K dimension.
        # If it is out of bounds, set it to 0.
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        # We accumulate along the K dimension.
        accumulator = tl.dot(a, b, accumulator)
        # Advance the ptrs to the next K block.
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    # You can fuse arbitrary activation functions here
    # while the accumulator is still in FP32!
    if ACTIVATION == "leaky_relu":
        accumulator = leaky_relu(accumulator)
    c = accumulator.to(tl.float16)

    # -----------------------------------------------------------
    # Write back the block of the output matrix C with masks.
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


# We can fuse `leaky_relu` by providing it as an `ACTIVATION` meta-parameter in `matmul_kernel`.
@triton.jit
def leaky_relu(x):
    return tl.where(x >= 0, x, 0.01 * x)


def matmul(a, b, activation=""):
    M, K = a.shape
    K, N = b.shape
    c = mpsrt.empty([M, N], dtype="float16", place="mps")
    grid = lambda META: (triton.cdiv(M, META['BLOCK_SIZE_M']) * triton.cdiv(N, META['BLOCK_SIZE_N']), )
    matmul_kernel[grid](
        a, b, c,  #
        M, N, K,  #
        a.stride(0), a.stride(1),  #
        b.stride(0), b.stride(1),  #
        c.stride(0), c.stride(1),  #
        ACTIVATION=activation  #
    )
    return c


@pytest.mark.parametrize("mnk,activation", [((70, 45, 33), ""), ((64, 96, 40), "leaky_relu")])
def test_tutorial_03_matmul_autotune(mnk, activation):
    M, N, K = mnk
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    if activation:
        ref = np.where(ref >= 0, ref, 0.01 * ref)
    got = matmul(dev(a), dev(b), activation).numpy().astype(np.float32)
    np.testing.assert_allclose(got, ref, rtol=2e-2, atol=3e-2)
    best = matmul_kernel.best_config
    assert best is not None and best.kwargs["BLOCK_SIZE_M"] in (32, 64), best


@pytest.mark.parametrize("slab,checked", [("f16", "1"), ("vec2", "0"), ("vec4", "0")])
def test_tutorial_03_staged_dot_emulated(monkeypatch, slab, checked):
    """The staged cooperative tl.dot (operands straight into padded f16 slabs, pointers carried as
    offsets, branch-free full blocks) with f32 register products in place of the matrix units
    (MPSRT_TRITON_EMULATE_COOP=1), so adapters without them (lavapipe) check the staging: full
    and edge blocks, an odd K (unaligned rows: the per-pair path; B's last halves past its
    vector binding's length), f16 / vec2<f16> / vec4<f16> slabs (the default: operands read
    through a second, vec4<f16> binding), self-bounded modules without wgpu's checks (the
    default) and, for f16 slabs, with them. Where the adapter has matrix units the emulation
    variable is ignored and this checks the real staged path."""
    monkeypatch.setenv("MPSRT_TRITON_EMULATE_COOP", "1")
    monkeypatch.setenv("MPSRT_TRITON_VEC2_SLAB", "1" if slab == "vec2" else "0")
    monkeypatch.setenv("MPSRT_TRITON_VEC4_SLAB", "1" if slab == "vec4" else "0")
    monkeypatch.setenv("MPSRT_TRITON_CHECKED", checked)
    kern = triton.jit(matmul_kernel.fn.fn)  # a fresh JIT cache: compiled under these settings
    for (M, N, K), (bm, bn, nw) in [((64, 64, 64), (32, 32, 4)), ((70, 45, 33), (32, 32, 4)),
                                    ((130, 96, 64), (64, 32, 4))]:
        a = rng.standard_normal((M, K)).astype(np.float16)
        b = rng.standard_normal((K, N)).astype(np.float16)
        ta, tb = dev(a), dev(b)
        c = mpsrt.empty([M, N], dtype="float16", place="mps")
        args = (ta, tb, c, M, N, K, ta.stride(0), ta.stride(1), tb.stride(0), tb.stride(1),
                c.stride(0), c.stride(1))
        meta = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=32, GROUP_SIZE_M=8,
                    ACTIVATION="", num_warps=nw)
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn), )
        wgsl = kern.warmup(*args, grid=grid, **meta).asm["wgsl"].decode()
        if "enable f16" not in wgsl:
            pytest.skip("the adapter has neither matrix units nor shader-f16: no staged dot")
        # Emulated products, or (adapters with matrix units) the real staged path.
        assert "wd0(u32(g) >> 1u)" in wgsl
        assert ("vec4<f16>, " in wgsl) == (slab == "vec4"), wgsl
        assert ("self-bounded" in wgsl) == (checked == "0"), wgsl
        kern[grid](*args, **meta)
        ref = a.astype(np.float32) @ b.astype(np.float32)
        np.testing.assert_allclose(c.numpy().astype(np.float32), ref, rtol=2e-2, atol=3e-2,
                                   err_msg=f"{(M, N, K)} blocks {(bm, bn)} slabs {slab}")


# --------------------------------------------------------------------------------------------
# Tutorial 05: layer norm forward (kernel verbatim)
@triton.jit
def _layer_norm_fwd_fused(
    X,  # pointer to the input
    Y,  # pointer to the output
    W,  # pointer to the weights
    B,  # pointer to the biases
    Mean,  # pointer to the mean
    Rstd,  # pointer to the 1/std
    stride,  # how much to increase the pointer when moving by 1 row
    N,  # number of columns in X
    eps,  # epsilon to avoid division by zero
    BLOCK_SIZE: tl.constexpr,
):
    # Map the program id to the row of X and Y it should compute.
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    # Compute mean
    mean = 0
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    # Compute variance
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    # Write mean / rstd
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    # Normalize and apply linear transformation
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        # Write output
        tl.store(Y + cols, y, mask=mask)


@pytest.mark.parametrize("M,N,block", [(7, 300, 128), (3, 1000, 1024)])
def test_tutorial_05_layer_norm_forward(M, N, block):
    x = (rng.standard_normal((M, N)) * 0.5 - 2.3).astype(np.float32)
    w, b = rng.random(N, dtype=np.float32), rng.random(N, dtype=np.float32)
    eps = 1e-5
    xd = dev(x)
    y = mpsrt.empty_like(xd)
    mean = mpsrt.empty([M], dtype="float32", place="mps")
    rstd = mpsrt.empty([M], dtype="float32", place="mps")
    num_warps = min(max(block // 256, 1), 8)
    _layer_norm_fwd_fused[(M, )](xd, y, dev(w), dev(b), mean, rstd, xd.stride(0), N, eps,
                                 BLOCK_SIZE=block, num_warps=num_warps)
    mu = x.mean(axis=1)
    r = 1 / np.sqrt(x.var(axis=1) + eps)
    np.testing.assert_allclose(mean.numpy(), mu, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rstd.numpy(), r, rtol=1e-4)
    np.testing.assert_allclose(y.numpy(), (x - mu[:, None]) * r[:, None] * w + b, rtol=1e-4,
                               atol=1e-4)


# --------------------------------------------------------------------------------------------
# Beyond the tutorials: 2-D grids, tl.where, reductions over both axes, transposes, cumsum
@triton.jit
def tile_stats_kernel(x_ptr, rows_ptr, cols_ptr, out_ptr, M, N, stride,
                      BM: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * stride + rn[None, :], mask=mask, other=0.0)
    x = tl.where(x > 0, x, -2.0 * x)
    tl.store(rows_ptr + pid_n * M + rm, tl.sum(x, axis=1), mask=rm < M)
    tl.store(cols_ptr + pid_m * N + rn, tl.max(x, axis=0), mask=rn < N)
    xt = tl.trans(x)
    tl.store(out_ptr + rn[:, None] * M + rm[None, :], xt, mask=(rn[:, None] < N) & (rm[None, :] < M))


def test_2d_grid_where_and_reductions_over_both_axes():
    M, N, BM, BN = 37, 29, 16, 8
    x = rng.standard_normal((M, N)).astype(np.float32)
    gm, gn = triton.cdiv(M, BM), triton.cdiv(N, BN)
    rows = mpsrt.empty([gn, M], dtype="float32", place="mps")
    cols = mpsrt.empty([gm, N], dtype="float32", place="mps")
    out = mpsrt.empty([N, M], dtype="float32", place="mps")
    tile_stats_kernel[(gm, gn)](dev(x), rows, cols, out, M, N, N, BM=BM, BN=BN)
    y = np.where(x > 0, x, -2 * x)
    pad = np.zeros((gm * BM, gn * BN), np.float32)
    pad[:M, :N] = y
    want_rows = np.stack([pad[:M, j * BN:(j + 1) * BN].sum(axis=1) for j in range(gn)])
    want_cols = np.stack([pad[i * BM:(i + 1) * BM, :N].max(axis=0) for i in range(gm)])
    np.testing.assert_allclose(rows.numpy(), want_rows, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cols.numpy(), want_cols, rtol=1e-6)
    np.testing.assert_array_equal(out.numpy(), y.T)


@triton.jit
def cumsum_kernel(x_ptr, out_ptr, rows_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tl.cumsum(x, axis=0), mask=mask)
    flat = tl.load(x_ptr + rn, mask=rn < N, other=0)
    tl.store(rows_ptr + rn, tl.cumsum(flat, axis=0), mask=rn < N)


def test_cumsum_over_both_shapes():
    M, N = 13, 30
    x = rng.integers(-50, 50, (M, N)).astype(np.int32)
    out = mpsrt.empty([M, N], dtype="int32", place="mps")
    row = mpsrt.empty([N], dtype="int32", place="mps")
    cumsum_kernel[(1, )](dev(x), out, row, M, N, BM=16, BN=32)
    np.testing.assert_array_equal(out.numpy(), np.cumsum(x, axis=0))
    np.testing.assert_array_equal(row.numpy(), np.cumsum(x[0]))


@triton.jit
def unsupported_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    h = tl.histogram(tl.load(x_ptr + offs, mask=offs < n, other=0), BLOCK)
    tl.store(x_ptr + offs, h)


def test_64_bit_scalar_is_an_error_not_a_truncation():
    x = dev(np.zeros(8, np.float32))
    # Triton types the argument int64; the mask's int64 compare is refused at compile time
    # (the launcher would refuse the value too).
    with pytest.raises(Exception, match="does not fit in 32 bits|on int64 values is not supported"):
        add_kernel[(1, )](x, x, x, 1 << 33, BLOCK_SIZE=8)


def test_unsupported_op_names_op_and_line():
    x = dev(np.zeros(8, np.int32))
    with pytest.raises(Exception) as e:
        unsupported_kernel[(1, )](x, 8, BLOCK=8)
    msg = str(e.value)
    assert "tt.histogram" in msg and "test_triton_backend.py:" in msg, msg


# --------------------------------------------------------------------------------------------
# Driver API
def test_driver_api_autotune_do_bench_and_memory_pool():
    from triton.runtime import driver
    d = driver.active
    assert type(d).__name__ == "WgpuDriver"
    assert d.get_current_target().backend == "wgpu"
    assert d.get_current_stream(d.get_current_device()) == d.get_current_device()
    x = dev(np.ones(4096, np.float32))
    pool = d.memory_pool()
    assert pool["current_allocated"] >= 4096 * 4 and pool["max_allocated"] >= pool["current_allocated"]
    ms = triton.testing.do_bench(lambda: add(x, x), warmup=1, rep=5)
    assert ms > 0
    d.set_kernel_config(num_warps=2, max_threads=64)
    try:
        k = softmax_kernel.warmup(x, x, 0, 0, 1, 4096, BLOCK_SIZE=4096, num_stages=2,
                                  grid=(1, ))
        assert k.metadata.mpsrt_workgroup_size == 64
        assert k.metadata.num_warps == 2
    finally:
        from mpsrt.triton_backend import driver as drv
        drv._CONFIG.update(num_warps=None, max_threads=None)


def test_benchmarker_times_device_work_not_host_time(monkeypatch):
    """The autotuner's benchmarker (GPU timestamps where the adapter has them, else the
    submission slope) and do_bench's Event time device work: 5 ms of host work per call (a
    sleep) stays out of the measurement."""
    import time
    from mpsrt.triton_backend.driver import benchmark, device_time
    x = dev(np.ones(4096, np.float32))

    def call():
        time.sleep(0.005)
        add(x, x)

    stamped = mpsrt._C.triton_gpu_time(call, 2)
    assert stamped is None or (0 <= stamped[0] < 4 and stamped[1] == 0), stamped
    samples = device_time(call, reps=2, n_max=8)
    assert samples and min(samples) < 4, samples
    monkeypatch.setenv("MPSRT_TRITON_BENCH", "slope")
    samples = device_time(call, reps=2, n_max=8)
    assert samples and min(samples) < 4, samples
    monkeypatch.delenv("MPSRT_TRITON_BENCH")
    q = benchmark(call, quantiles=[0.5, 0.2], warmup=1, rep=1)
    assert len(q) == 2 and 0 < q[0] < 4, q
    ms = triton.testing.do_bench(call, warmup=1, rep=3, return_mode="median")
    assert 0 < ms < 4, ms
