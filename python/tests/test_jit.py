"""Triton-language kernels: the tutorial fixtures (Triton's tutorials 01-03 with imports changed)
run on the GPU vs NumPy on odd sizes, feature kernels, raw WGSL, and compile errors."""
import importlib.util
import pathlib
import sys
import types

import numpy as np
import pytest

import mpsrt
import mpsrt.language as tl

KERNELS = pathlib.Path(__file__).resolve().parents[2] / "crates" / "mpsrt-jit" / "tests" / "kernels"


def _torch_shim():
    """The fixtures `import torch` only for `empty_like`/`empty`/`float16`/type hints."""
    t = types.ModuleType("torch")
    t.Tensor = mpsrt.Tensor
    t.float16, t.float32 = "float16", "float32"
    t.empty_like = mpsrt.empty_like
    t.empty = lambda shape, device=None, dtype=None: mpsrt.empty(list(shape), dtype, device)
    return t


def load(name):
    sys.modules.setdefault("torch", _torch_shim())
    spec = importlib.util.spec_from_file_location(f"fixture_{name}", KERNELS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


rng = np.random.default_rng(1)


@pytest.mark.parametrize("n", [1, 1000, 98432, 4097])
def test_tutorial_01_vector_add(gpu, n):
    mod = load("01_vector_add")
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    x, y = mpsrt.to_tensor(a, place=gpu), mpsrt.to_tensor(b, place=gpu)
    out = mod.add(x, y)
    np.testing.assert_allclose(out.numpy(), a + b, rtol=1e-6)
    # the kernel's output is queued with later eager ops (no explicit sync needed)
    np.testing.assert_allclose((out * 2).numpy(), (a + b) * 2, rtol=1e-6)


@pytest.mark.parametrize("shape", [(7, 33), (1823, 781), (3, 1)])
def test_tutorial_02_fused_softmax(gpu, shape):
    mod = load("02_fused_softmax")
    a = rng.standard_normal(shape).astype(np.float32)
    y = mod.softmax(mpsrt.to_tensor(a, place=gpu))
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y.numpy(), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("activation", ["", "leaky_relu"])
@pytest.mark.parametrize("mnk", [(37, 45, 51), (64, 32, 96)])
def test_tutorial_03_matmul(gpu, activation, mnk):
    mod = load("03_matmul")
    m, n, k = mnk
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = mod.matmul(mpsrt.to_tensor(a, place=gpu), mpsrt.to_tensor(b, place=gpu), activation)
    want = a.astype(np.float32) @ b.astype(np.float32)
    if activation:
        want = np.where(want >= 0, want, 0.01 * want)
    assert c.dtype == "float16"
    np.testing.assert_allclose(c.numpy().astype(np.float32), want, rtol=2e-2, atol=2e-2)


@mpsrt.jit
def _scale_rows(x_ptr, out_ptr, n_cols, scale, BLOCK: tl.constexpr, DO_EXP: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    if DO_EXP:
        v = tl.where(mask, tl.exp(v), 0.0)
    total = tl.sum(v, axis=0)
    tl.store(out_ptr + row * n_cols + cols, v * scale / total, mask=mask)


@pytest.mark.parametrize("do_exp", [False, True])
def test_feature_kernel_constexpr_reduction_scalar(gpu, do_exp):
    a = rng.random((5, 19), dtype=np.float32) + 0.5
    x = mpsrt.to_tensor(a, place=gpu)
    out = mpsrt.empty_like(x)
    _scale_rows[(5,)](x, out, 19, 2.0, BLOCK=mpsrt.next_power_of_2(19), DO_EXP=do_exp)
    v = np.exp(a) if do_exp else a
    np.testing.assert_allclose(out.numpy(), 2 * v / v.sum(axis=1, keepdims=True), rtol=1e-5)


@mpsrt.jit
def _cast_where(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x_ptr + offs, mask=mask)
    r = tl.where(v > 0, v, -v) + tl.maximum(v, 1.0)
    tl.store(out_ptr + offs, r.to(tl.int32), mask=mask)


def test_feature_kernel_where_cast_and_view_offset(gpu):
    a = (rng.standard_normal(300) * 10).astype(np.float32)
    x = mpsrt.to_tensor(a, place=gpu)
    view = x[100:]  # a view with a non-zero offset into its buffer
    out = mpsrt.empty([200], dtype="int32", place=gpu)
    _cast_where[(mpsrt.cdiv(200, 64),)](view, out, 200, BLOCK=64, num_warps=2)
    b = a[100:]
    np.testing.assert_array_equal(out.numpy(), (np.abs(b) + np.maximum(b, 1)).astype(np.int32))


def test_huge_grid_uses_2d_fallback(gpu):
    n = 70000 * 32
    x = mpsrt.ones([n], place=gpu)
    out = mpsrt.empty_like(x)
    _cast_where  # noqa: B018
    mod = load("01_vector_add")
    mod.add_kernel[(70000,)](x, x, out, n, BLOCK_SIZE=32)
    got = out.numpy()
    assert got.min() == 2 and got.max() == 2


def test_kernel_on_cpu_tensor_is_an_error():
    x = mpsrt.ones([4], place="cpu")
    mod = load("01_vector_add")
    with pytest.raises(ValueError, match=r"\[jit\]"):
        mod.add_kernel[(1,)](x, x, x, 4, BLOCK_SIZE=4)


def test_compile_error_is_located(gpu):
    ns = {}
    src = (
        "import mpsrt\nimport mpsrt.language as tl\n\n@mpsrt.jit\n"
        "def bad(x_ptr, BLOCK: tl.constexpr):\n"
        "    offs = tl.arange(0, BLOCK)\n"
        "    v = [i for i in range(3)]\n"
        "    tl.store(x_ptr + offs, offs)\n"
    )
    path = pathlib.Path(__file__).parent / "_bad_kernel_src.py"
    code = compile(src, str(path), "exec")
    exec(code, ns)
    k = ns["bad"]
    k._source = src
    with pytest.raises((ValueError, NotImplementedError)) as e:
        k[(1,)](mpsrt.zeros([4], place=gpu), BLOCK=4)
    assert "7" in str(e.value), str(e.value)  # the line of the list comprehension


def test_autotune_config_and_helpers():
    assert mpsrt.cdiv(10, 4) == 3 and tl.cdiv(8, 4) == 2
    assert [mpsrt.next_power_of_2(v) for v in (1, 3, 4, 5, 1000)] == [1, 4, 4, 8, 1024]
    cfg = mpsrt.Config({"B": 32}, num_warps=4, num_stages=2)
    assert cfg.kwargs == {"B": 32} and cfg.num_warps == 4
    with pytest.raises(RuntimeError):
        tl.load(None)


WGSL = """
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
struct Meta { n: u32, scale: f32, pad0: u32, pad1: u32 }
@group(0) @binding(2) var<uniform> params: Meta;
@compute @workgroup_size(64)
fn scale(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < params.n) { y[gid.x] = x[gid.x] * params.scale; }
}
"""


def test_raw_wgsl_kernel(gpu):
    a = rng.random(1000, dtype=np.float32)
    x = mpsrt.to_tensor(a, place=gpu)
    y = mpsrt.empty_like(x)
    k = mpsrt.compile_kernel(WGSL, "scale")
    k(x, y, grid=(mpsrt.cdiv(1000, 64),), uniforms=[1000, 3.0])
    np.testing.assert_allclose((y + 1).numpy(), a * 3 + 1, rtol=1e-6)
    with pytest.raises(ValueError):
        mpsrt.compile_kernel("fn broken(", "scale")(x, y, grid=(1,))
