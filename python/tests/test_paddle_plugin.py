"""Real PaddlePaddle on mpsrt: the CustomDevice plugin (crates/mpsrt-paddle, exported by mpsrt._C).

Every test runs with FLAGS_enable_api_kernel_fallback=0, so an op whose kernel did not run on
'mps' raises instead of silently running on the CPU; results are compared with Paddle's own CPU
kernels, and the plugin's launch counters prove which kernel ran. Paddle loads plugins once, at
import, so error paths and the no-GPU import run in subprocesses.
"""

import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

REQUIRE = os.environ.get("MPSRT_REQUIRE_GPU") == "1"


def _plugin_root():
    """A directory for CUSTOM_DEVICE_ROOT holding the plugin (mpsrt._C itself), unless the
    caller set one."""
    if os.environ.get("CUSTOM_DEVICE_ROOT"):
        return os.environ["CUSTOM_DEVICE_ROOT"]
    import mpsrt._C as C

    d = tempfile.mkdtemp(prefix="mpsrt_paddle_")
    os.symlink(os.path.realpath(C.__file__), os.path.join(d, "mpsrt_paddle.so"))
    return d


ENV = {
    "CUSTOM_DEVICE_ROOT": _plugin_root(),
    "FLAGS_enable_api_kernel_fallback": "0",
    "GLOG_minloglevel": "2",
}
os.environ.update(ENV)

try:
    import paddle
except ImportError:  # pragma: no cover - CI installs the pinned wheel
    if REQUIRE:
        raise
    pytest.skip("paddlepaddle is not installed", allow_module_level=True)

import mpsrt.paddle as mp  # noqa: E402

HAVE_MPS = "mps" in paddle.device.get_all_custom_device_type() and mp.device_count() > 0
if not HAVE_MPS and not REQUIRE:
    pytest.skip("no mps device (no GPU adapter)", allow_module_level=True)

CPU = paddle.CPUPlace()
MPS = paddle.CustomPlace("mps", 0)
rng = np.random.default_rng(0)


def rand(shape, dtype="float32", lo=-2.0, hi=2.0):
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype == "int32":
        return rng.integers(-5, 6, shape).astype("int32")
    return rng.uniform(lo, hi, shape).astype(dtype)


def ran(op, dtype):
    return mp.stats()["kernels"].get(f"{op}/{dtype}", 0)


def check(op, fn, arrays, dtype, *, view=None, tol=None, kernel=None):
    """fn on CPU tensors vs on mps tensors (optionally viewed with `view` first). Paddle's CPU
    wheel has few float16 kernels: the float16 reference runs in float32 and is rounded."""
    half = [a.astype("float32") if a.dtype == np.float16 else a for a in arrays]
    cpu = [paddle.to_tensor(a, place=CPU) for a in half]
    dev = [paddle.to_tensor(a, place=MPS) for a in arrays]
    if view is not None:
        cpu, dev = [view(t) for t in cpu], [view(t) for t in dev]
    before = ran(kernel or op, dtype)
    want = fn(*cpu)
    got = fn(*dev)
    if dtype == "float16" and want.dtype == paddle.float32 and got.dtype == paddle.float16:
        want = want.astype("float16")
    assert "mps" in str(got.place), got.place
    assert ran(kernel or op, dtype) > before, f"{op}/{dtype} did not run on mps"
    want, got = want.numpy(), got.numpy()
    assert got.shape == want.shape and got.dtype == want.dtype
    if tol is None:
        tol = 2e-3 if dtype == "float16" else 1e-5
    np.testing.assert_allclose(got.astype("float64"), want.astype("float64"), rtol=tol, atol=tol)


F = paddle.nn.functional
BINARY = {
    "add": paddle.add,
    "subtract": paddle.subtract,
    "multiply": paddle.multiply,
    "divide": paddle.divide,
    "maximum": paddle.maximum,
    "minimum": paddle.minimum,
}
COMPARE = {
    "equal": paddle.equal,
    "not_equal": paddle.not_equal,
    "less_than": paddle.less_than,
    "less_equal": paddle.less_equal,
    "greater_than": paddle.greater_than,
    "greater_equal": paddle.greater_equal,
}
UNARY = {
    "abs": paddle.abs,
    "exp": paddle.exp,
    "log": paddle.log,
    "sqrt": paddle.sqrt,
    "relu": F.relu,
    "sigmoid": F.sigmoid,
    "tanh": paddle.tanh,
    "silu": F.silu,
    "hardswish": F.hardswish,
    "floor": paddle.floor,
    "ceil": paddle.ceil,
    "gelu": F.gelu,
}
SHAPES = [((2, 3), (2, 3)), ((4, 3), (3,)), ((2, 1, 3), (4, 1)), ((), ()), ((0, 3), (3,))]


def test_plugin_registered():
    assert paddle.device.get_all_custom_device_type() == ["mps"]
    assert paddle.is_compiled_with_mps()
    reg = mp.stats()["registered"]
    for k in ["contiguous", "add", "matmul", "softmax", "full", "cast", "sum", "concat"]:
        assert k in reg


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary(op, shapes, dtype):
    if op == "divide" and dtype == "int32":
        pytest.skip("integer divide is not registered (falls back to Paddle's CPU kernel)")
    a, b = rand(shapes[0], dtype), rand(shapes[1], dtype)
    check(op, BINARY[op], [a, b], dtype)


@pytest.mark.parametrize("op", sorted(COMPARE))
def test_compare(op):
    a, b = rand((3, 4)), rand((4,))
    b[1] = a[0, 1]
    check(op, COMPARE[op], [a, b], "float32")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op, dtype):
    lo = 0.1 if op in ("log", "sqrt") else -3.0
    check(op, UNARY[op], [rand((5, 7), dtype, lo, 3.0)], dtype, tol=3e-3 if dtype == "float16" else 1e-5)


def test_unary_zero_d_and_empty():
    check("exp", paddle.exp, [np.array(0.5, "float32")], "float32")
    check("relu", F.relu, [np.zeros((0, 4), "float32")], "float32")


@pytest.mark.parametrize(
    "name,view",
    [("transpose", lambda t: t.T), ("slice", lambda t: t[1:, ::2]), ("column", lambda t: t[:, 1])],
)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "bool", "int64"])
def test_contiguous_views(name, view, dtype):
    a = rand((4, 6), dtype) if dtype != "int64" else rng.integers(-9, 9, (4, 6))
    check("contiguous", lambda t: t.contiguous(), [a], str(np.dtype(a.dtype)), view=view)


def test_strided_input_through_kernel():
    a = rand((5, 4))
    check("add", lambda x: x + x, [a], "float32", view=lambda t: t.T)


@pytest.mark.parametrize("tx,ty", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul(tx, ty):
    a = rand((3, 4) if not tx else (4, 3))
    b = rand((4, 5) if not ty else (5, 4))
    check("matmul", lambda x, y: paddle.matmul(x, y, transpose_x=tx, transpose_y=ty), [a, b], "float32", tol=1e-4)


def test_matmul_batched_f16():
    check("matmul", paddle.matmul, [rand((2, 3, 8), "float16"), rand((8, 5), "float16")], "float16", tol=1e-2)


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax(axis):
    check("softmax", lambda x: F.softmax(x, axis=axis), [rand((3, 5))], "float32")
    check("log_softmax", lambda x: F.log_softmax(x, axis=axis), [rand((3, 5))], "float32")


@pytest.mark.parametrize(
    "op,fn",
    [
        ("sum", lambda x: x.sum()),
        ("sum", lambda x: x.sum(axis=1, keepdim=True)),
        ("mean", lambda x: x.mean(axis=[0, 2])),
        ("max", lambda x: x.max(axis=-1)),
        ("min", lambda x: x.min()),
    ],
)
def test_reductions(op, fn):
    check(op, fn, [rand((2, 3, 4))], "float32", tol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "bool"])
def test_full_and_likes(dtype):
    before = ran("full", dtype)
    t = paddle.full([2, 3], 1 if dtype != "float32" else 2.5, dtype=dtype)
    assert ran("full", dtype) > before and "mps" in str(t.place)
    np.testing.assert_array_equal(t.numpy(), np.full((2, 3), 1 if dtype != "float32" else 2.5, dtype))
    x = paddle.to_tensor(rand((3, 2), dtype), place=MPS)
    np.testing.assert_array_equal(paddle.zeros_like(x).numpy(), np.zeros((3, 2), dtype))
    np.testing.assert_array_equal(paddle.ones_like(x).numpy(), np.ones((3, 2), dtype))


def test_scale_clip_where_concat_transpose():
    a = rand((3, 4))
    check("scale", lambda x: paddle.scale(x, 3.0, 1.0), [a], "float32")
    check("scale", lambda x: paddle.scale(x, 3.0, 1.0, bias_after_scale=False), [a], "float32")
    check("clip", lambda x: paddle.clip(x, -0.5, 0.5), [a], "float32")
    check("where", lambda c, x, y: paddle.where(c, x, y), [a > 0, a, -a], "bool")  # counted by its first input
    check("concat", lambda x, y: paddle.concat([x, y], axis=1), [a, rand((3, 2))], "float32")


@pytest.mark.parametrize(
    "op,fn,shapes,dtype",
    [
        ("stack", lambda x, y: paddle.stack([x, y], axis=1), [(3, 4), (3, 4)], "float32"),
        ("stack", lambda x, y: paddle.stack([x, y]), [(2, 3), (2, 3)], "int32"),
        ("argmax", lambda x: paddle.argmax(x, axis=1), [(4, 5)], "float32"),
        ("argmax", lambda x: paddle.argmax(x, axis=-1, keepdim=True, dtype="int32"), [(2, 3, 5)], "float16"),
        ("argmax", lambda x: paddle.argmax(x), [(3, 5)], "float32"),
        ("prod", lambda x: paddle.prod(x, axis=1), [(3, 4)], "float32"),
        ("prod", lambda x: paddle.prod(x, axis=[0, 2], keepdim=True), [(2, 3, 4)], "float32"),
        ("prod", lambda x: paddle.prod(x), [(2, 3)], "float32"),
        ("dropout", lambda x: F.dropout(x, 0.3, training=False), [(3, 4)], "float32"),
        ("dropout", lambda x: F.dropout(x, 0.3, training=False, mode="downscale_in_infer"), [(3, 4)], "float32"),
        ("conv2d_transpose", lambda x, w: F.conv2d_transpose(x, w, stride=2, padding=1), [(2, 3, 5, 5), (3, 4, 3, 3)], "float32"),
        ("conv2d_transpose", lambda x, w: F.conv2d_transpose(x, w, stride=2, padding=1, output_padding=1, groups=3, dilation=1), [(1, 3, 4, 4), (3, 2, 3, 3)], "float32"),
        ("conv2d_transpose", lambda x, w: F.conv2d_transpose(x, w, padding=[1, 0], dilation=2), [(1, 2, 5, 4), (2, 3, 2, 3)], "float32"),
        ("max_pool2d_with_index", lambda x: F.max_pool2d(x, 2, stride=2, return_mask=True), [(2, 3, 6, 6)], "float32"),
        ("max_pool2d_with_index", lambda x: F.max_pool2d(x, 3, stride=2, padding=1, return_mask=True), [(1, 2, 7, 7)], "float32"),
        ("max_pool2d_with_index", lambda x: F.adaptive_max_pool2d(x, 3, return_mask=True), [(1, 2, 7, 8)], "float32"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_more_kernels(op, fn, shapes, dtype):
    arrays = [rand(s, dtype) for s in shapes]
    tol = 5e-3 if op == "conv2d_transpose" and dtype == "float16" else 1e-4
    pick = lambda f: (lambda *t: (lambda r: r if isinstance(r, paddle.Tensor) else paddle.concat([r[0].astype("float32").flatten(), r[1].astype("float32").flatten()]))(f(*t)))
    check(op, pick(fn), arrays, dtype, tol=tol)


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_split(dtype):
    a = rand((4, 6), dtype)
    for op, fn in [("split", lambda x: paddle.split(x, [2, -1, 1], axis=1)), ("split_with_num", lambda x: paddle.split(x, 2, axis=0))]:
        before = ran(op, dtype)
        want = [t.numpy() for t in fn(paddle.to_tensor(a, place=CPU))]
        got = fn(paddle.to_tensor(a, place=MPS))
        assert ran(op, dtype) > before and all("mps" in str(t.place) for t in got)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w)


@pytest.mark.parametrize("ids_dtype", ["int64", "int32"])
def test_embedding(ids_dtype):
    w = rand((7, 5))
    ids = np.array([[0, 3, 6], [2, 2, 1]], ids_dtype)
    check("embedding", lambda i, t: F.embedding(i, t), [ids, w], ids_dtype, kernel="embedding")
    check("embedding", lambda i, t: F.embedding(i, t, padding_idx=2), [ids, w], ids_dtype, kernel="embedding")
    with pytest.raises(Exception, match="outside"):
        F.embedding(paddle.to_tensor(np.array([9], ids_dtype), place=MPS), paddle.to_tensor(w, place=MPS)).numpy()


@pytest.mark.parametrize("pad", [None, 2])
def test_embedding_grad(pad):
    """embedding_grad (a scatter-add of repeated ids) against Paddle's CPU kernel."""
    w = rand((7, 5))
    ids = np.array([[0, 3, 6], [2, 2, 1]], "int64")
    scale = np.arange(30, dtype="float32").reshape(2, 3, 5)
    grads = []
    before = ran("embedding_grad", "int64")  # counted by the ids
    for place in (CPU, MPS):
        wt = paddle.to_tensor(w, place=place, stop_gradient=False)
        y = F.embedding(paddle.to_tensor(ids, place=place), wt, padding_idx=pad)
        (y * paddle.to_tensor(scale, place=place)).sum().backward()
        grads.append(wt.grad.numpy())
    assert ran("embedding_grad", "int64") > before
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-6, atol=1e-6)


def test_dropout_training_and_grad():
    """Training dropout: kept elements are x / (1 - p), the rest 0, about p of them dropped; the
    gradient flows through the same mask (dropout_grad on the device)."""
    x = paddle.to_tensor(np.ones((64, 64), "float32") * 2, place=MPS, stop_gradient=False)
    before = (ran("dropout", "float32"), ran("dropout_grad", "uint8"))  # counted by the mask
    y = F.dropout(x, 0.25, training=True)
    y.sum().backward()
    after = (ran("dropout", "float32"), ran("dropout_grad", "uint8"))
    assert all(a > b for a, b in zip(after, before)), (before, after)
    v, g = y.numpy(), x.grad.numpy()
    kept = v != 0
    np.testing.assert_allclose(v[kept], 2 / 0.75, rtol=1e-6)
    np.testing.assert_allclose(g, kept / 0.75, rtol=1e-6)
    assert 0.18 < 1 - kept.mean() < 0.32


@pytest.mark.parametrize("src,dst", [("float32", "float16"), ("float16", "float32"), ("float32", "int32"), ("int32", "float32"), ("bool", "float32"), ("float32", "int64")])
def test_cast(src, dst):
    a = rand((3, 5), src)
    if src == "float32":
        a = a * 3
    check("cast", lambda x: x.astype(dst), [a], src)


def test_copies_odd_sizes_and_offsets():
    for dtype, n in [("bool", 7), ("float16", 5), ("int8", 3), ("uint8", 9)]:
        a = rand((n,), dtype if dtype in ("bool", "float16") else "int32").astype(dtype)
        t = paddle.to_tensor(a, place=MPS)
        np.testing.assert_array_equal(t.numpy(), a)
        np.testing.assert_array_equal(t[1:].numpy(), a[1:])  # view at an odd byte offset
        np.testing.assert_array_equal(t.clone().numpy(), a)  # device-to-device


def test_static_graph():
    paddle.enable_static()
    try:
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            a = paddle.static.data("a", [2, 3], "float32")
            b = paddle.static.data("b", [3, 4], "float32")
            d = paddle.static.data("d", [4], "float32")
            # `* 2.0` and paddle.scale: PIR passes their scalars as tensor references.
            c = paddle.transpose(paddle.exp(F.relu(paddle.matmul(a, b) + d)), [1, 0])
            c = paddle.scale(c, 0.5, 1.0) * 2.0
        exe = paddle.static.Executor(MPS)
        exe.run(startup)
        x, y, z = rand((2, 3)), rand((3, 4)), rand((4,))
        ops = ("matmul", "add", "relu", "exp", "transpose", "scale")
        before = [ran(k, "float32") for k in ops]
        (out,) = exe.run(main, feed={"a": x, "b": y, "d": z}, fetch_list=[c])
        after = [ran(k, "float32") for k in ops]
        assert all(b < a for b, a in zip(before, after)), (before, after)
        want = (np.exp(np.maximum(x @ y + z, 0)).T * 0.5 + 1.0) * 2.0
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    finally:
        paddle.disable_static()


@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_randint(dtype):
    before = ran("randint", dtype)
    paddle.set_device("mps")
    try:
        t = paddle.randint(-3, 5, [2000], dtype=dtype)
    finally:
        paddle.set_device("cpu")
    assert ran("randint", dtype) > before and "mps" in str(t.place)
    v = t.numpy()
    assert v.dtype == np.dtype(dtype) and v.min() == -3 and v.max() == 4, (v.min(), v.max())


def test_mps_api():
    paddle.set_device("mps")
    assert paddle.mps.is_available() and paddle.mps.device_count() >= 1
    paddle.mps.set_device(0)
    assert paddle.mps.current_device() == 0
    props = paddle.mps.get_device_properties()
    assert props.name == paddle.mps.get_device_name() and props.total_memory > 0
    x = paddle.randn([256, 256], place="mps")
    u = paddle.rand([1000], place="mps").numpy()
    assert 0 <= u.min() and u.max() < 1 and 0.4 < u.mean() < 0.6
    g = (paddle.randn([4000], place="mps") * 2 + 1).numpy()
    assert 0.8 < g.mean() < 1.2 and 1.8 < g.std() < 2.2
    y = paddle.to_tensor(np.ones(3, "float32"), place="mps")
    assert "mps" in str(x.place) and "mps" in str(y.place)
    paddle.mps.synchronize()
    assert paddle.mps.memory_allocated() >= 256 * 256 * 4
    assert paddle.mps.max_memory_allocated() >= paddle.mps.memory_allocated()
    assert paddle.mps.memory_reserved() >= 256 * 256 * 4
    paddle.mps.reset_max_memory_allocated()
    del x
    paddle.mps.empty_cache()
    paddle.set_device("cpu")


def test_long_eager_chain_is_exact_after_a_read():
    """1,100 dependent tiny adds: the runtime keeps batches of small work open past 64
    dispatches, up to 512 (crates/mpsrt-runtime, `batch_full_locked`); the batches submitted at
    512 and the open rest, submitted by the read, give the exact sum, and every add ran here."""
    b = paddle.to_tensor(np.full(16, 0.5, "float32"), place=MPS)
    c = paddle.to_tensor(np.zeros(16, "float32"), place=MPS)
    before = ran("add", "float32")
    for _ in range(1100):
        c = c + b
    assert ran("add", "float32") - before == 1100
    np.testing.assert_array_equal(c.numpy(), np.full(16, 550.0, "float32"))


def test_eager_fast_path_replays_only_its_own_key():
    """Repeated tiny ops take the eager fast path (crates/mpsrt-paddle/src/kernels/fast.rs):
    the first call of a (kernel, dtypes, size, offsets) key is planned by the general path and
    its one dispatch kept; later calls replay it over their own buffers. Each result is checked
    against NumPy, across keys that must not share a launch: other dtypes and sizes, inputs at
    other offsets of their allocation, aliased (`x + x`), in-place and broadcast operands."""
    fast = lambda: mp.stats()["fast"]  # noqa: E731
    a16, b16 = np.arange(16, dtype="float32"), np.full(16, 0.25, "float32")
    a, b = paddle.to_tensor(a16, place=MPS), paddle.to_tensor(b16, place=MPS)
    before = fast()
    for _ in range(4):
        c = a + b
    assert fast() - before >= 3
    np.testing.assert_array_equal(c.numpy(), a16 + b16)
    for dtype in ["int32", "float16"]:
        x, y = rand((5, 7), dtype), rand((5, 7), dtype)
        tx, ty = paddle.to_tensor(x, place=MPS), paddle.to_tensor(y, place=MPS)
        for _ in range(3):
            got = (tx * ty).numpy()
        np.testing.assert_allclose(got.astype("float64"), (x * y).astype("float64"), rtol=2e-3)
    big = rand((1000,))
    tb = paddle.to_tensor(big, place=MPS)
    for _ in range(3):  # alternating sizes: 16 and 1000 elements
        np.testing.assert_array_equal((a - b).numpy(), a16 - b16)
        np.testing.assert_allclose(paddle.exp(tb).numpy(), np.exp(big), rtol=1e-5)
    np.testing.assert_array_equal((a + a).numpy(), a16 + a16)  # aliased: general path
    np.testing.assert_array_equal((a + a).numpy(), a16 + a16)
    row = paddle.to_tensor(np.arange(64, dtype="float32"), place=MPS)
    for lo in [16, 16, 32, 32, 0]:  # views at element offsets 16, 32, 0 of one allocation
        np.testing.assert_array_equal((row[lo : lo + 16] + b).numpy(), np.arange(lo, lo + 16) + 0.25)
    acc = paddle.to_tensor(np.zeros(16, "float32"), place=MPS)
    for _ in range(3):
        acc.add_(b)  # in place: the output is an input's memory
    np.testing.assert_array_equal(acc.numpy(), np.full(16, 0.75, "float32"))
    m, v = rand((4, 3)), rand((3,))
    tm, tv = paddle.to_tensor(m, place=MPS), paddle.to_tensor(v, place=MPS)
    for _ in range(3):
        np.testing.assert_allclose((tm * tv).numpy(), m * v, rtol=1e-6)  # broadcast


def test_eager_fast_path_error_then_working_ops():
    """A failing op (MPSRT_PADDLE_FAIL_OP, which also keeps that kernel off the fast path)
    between fast-path ops raises in Python, and the fast path keeps replaying afterwards."""
    r = _run(
        """
        import numpy as np, paddle, mpsrt.paddle as mp
        paddle.set_device("mps")
        x = paddle.to_tensor(np.arange(16, dtype="float32"))
        z = paddle.to_tensor(np.arange(16, dtype="float32"))
        for _ in range(3):
            y = x * z
        try:
            paddle.exp(x).numpy()
        except Exception as e:
            print("RAISED", type(e).__name__)
        for _ in range(3):
            y = x * z
        assert y.numpy()[3] == 9.0 and mp.stats()["fast"] >= 4, mp.stats()["fast"]
        print("OK")
        """,
        MPSRT_PADDLE_FAIL_OP="exp",
    )
    assert r.returncode == 0 and "RAISED OSError" in r.stdout and "OK" in r.stdout, r.stdout + r.stderr


def test_recorder_thread_keeps_order_and_reports_deferred_errors():
    """MPSRT_PADDLE_RECORDER=1: fast-path dispatches are recorded by a second thread
    (kernels/recorder.rs). A dependent chain of fast ops interleaved with general-path ops
    (broadcast), host writes and reads gives NumPy's results (everything else drains the queue
    first); a deferred launch that fails (MPSRT_PADDLE_FAIL_DEFERRED) raises at the next
    synchronize, read or op, and later ops work."""
    r = _run(
        """
        import numpy as np, paddle, mpsrt.paddle as mp
        paddle.set_device("mps")
        b = paddle.to_tensor(np.full(16, 0.5, "float32"))
        v = paddle.to_tensor(np.full((4, 16), 2.0, "float32"))
        c = paddle.to_tensor(np.zeros(16, "float32"))
        want = np.zeros(16, "float32")
        for i in range(300):
            c = c + b
            want = want + np.float32(0.5)
            if i % 50 == 49:
                c = (c * v)[1] * 0.5  # broadcast multiply, slice, scale: the general path
                c = c + paddle.to_tensor(np.full(16, 1.0, "float32"))  # a host write
                want = want + np.float32(1.0)
                assert np.array_equal(c.numpy(), want), (i, c.numpy()[:3], want[:3])
        np.testing.assert_array_equal(c.numpy(), want)
        assert mp.stats()["fast"] >= 250, mp.stats()["fast"]
        x = paddle.to_tensor(np.arange(16, dtype="float32"))
        z = paddle.to_tensor(np.arange(16, dtype="float32"))
        try:
            for _ in range(3):
                y = x * z  # first: general path; then deferred, failing in the recorder
            paddle.device.synchronize()  # raised here, or by the third multiply if it failed first
        except Exception as e:
            print("RAISED", type(e).__name__, str(e).splitlines()[0][:200])
        np.testing.assert_array_equal((x + z).numpy(), np.arange(16) * 2.0)
        y = x * z  # deferred, fails in the recorder: raised by the next op or its read
        try:
            (x + z).numpy()
        except Exception as e:
            print("RAISED-NEXT", type(e).__name__)
        np.testing.assert_array_equal((x - z).numpy(), np.zeros(16))
        print("OK")
        """,
        MPSRT_PADDLE_RECORDER="1",
        MPSRT_PADDLE_FAIL_DEFERRED="multiply",
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "OK" in r.stdout, out
    assert "RAISED" in r.stdout and "MPSRT_PADDLE_FAIL_DEFERRED" in out, out
    assert "RAISED-NEXT" in r.stdout, out


def _run(code, **env):
    e = dict(os.environ, **ENV, **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, capture_output=True, text=True, timeout=240)


def test_errors_then_a_working_op():
    r = _run(
        """
        import numpy as np, paddle
        paddle.set_device("mps")
        x = paddle.to_tensor(np.arange(6, dtype="float32").reshape(2, 3))
        def expect(f, kind):
            try:
                f()
            except Exception as e:
                print(kind, type(e).__name__, str(e).splitlines()[0][:600])
                assert (x + 1).numpy()[1, 2] == 6.0  # the next op works
            else:
                raise AssertionError(kind + ": no exception")
        expect(lambda: paddle.exp(x).numpy(), "FAIL")           # MPSRT_PADDLE_FAIL_OP=exp
        expect(lambda: paddle.zeros([80, 1024, 1024]).numpy(), "OOM")   # over MPSRT_MEMORY_LIMIT
        expect(lambda: paddle.exp(paddle.to_tensor(np.ones(3, "int32"))).numpy(), "DTYPE")
        expect(lambda: (x + paddle.to_tensor(np.ones((4,), "float32"))).numpy(), "SHAPE")
        # MPSRT_PADDLE_NOOP_OP=tanh (bench/paddle_plugin.py's measurement hook): the output is
        # allocated with Paddle's shape, nothing runs or is counted, later ops still work.
        import mpsrt.paddle as mp
        t = paddle.tanh(x)
        assert t.shape == [2, 3] and "tanh/float32" not in mp.stats()["kernels"], mp.stats()
        assert (x + 1).numpy()[1, 2] == 6.0
        print("OK")
        """,
        MPSRT_PADDLE_FAIL_OP="exp",
        MPSRT_PADDLE_NOOP_OP="tanh",
        MPSRT_MEMORY_LIMIT=str(64 << 20),
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "OK" in r.stdout, out
    assert "FAIL OSError" in r.stdout and "mpsrt: [exp] failing on purpose" in r.stdout, out
    assert "OOM MemoryError" in r.stdout and "MPSRT_MEMORY_LIMIT" in out, out
    assert "DTYPE" in r.stdout and "SHAPE ValueError" in r.stdout, out


def test_discovery_without_environment_variable(tmp_path):
    """The loader that `pip install` puts in <site-packages>/paddle_custom_device/ (staged by
    crates/mpsrt-paddle/build.rs in python/paddle_custom_device/): in a fresh venv whose
    site-packages holds paddle (a link), the loader and mpsrt/_C, `import paddle` with no
    CUSTOM_DEVICE_ROOT lists 'mps' and runs an op on it."""
    import site
    import venv

    import mpsrt._C as C

    loader = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "paddle_custom_device", "mpsrt_paddle_loader.so")
    if not os.path.exists(loader):
        pytest.skip("the loader is not staged (cargo build -p mpsrt-paddle stages it)")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    sp = subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True, text=True, check=True).stdout.strip()
    # A link farm, not one link: Paddle finds paddle_custom_device/ as paddle/libs/../.., which
    # the OS resolves physically, so paddle/ and paddle/libs/ must be real directories here.
    real = paddle.__path__[0]
    os.makedirs(os.path.join(sp, "paddle", "libs"))
    for name in os.listdir(real):
        if name != "libs":
            os.symlink(os.path.join(real, name), os.path.join(sp, "paddle", name))
    for name in os.listdir(os.path.join(real, "libs")):
        os.symlink(os.path.join(real, "libs", name), os.path.join(sp, "paddle", "libs", name))
    os.makedirs(os.path.join(sp, "paddle_custom_device"))
    os.symlink(loader, os.path.join(sp, "paddle_custom_device", "mpsrt_paddle_loader.so"))
    os.makedirs(os.path.join(sp, "mpsrt"))
    os.symlink(os.path.realpath(C.__file__), os.path.join(sp, "mpsrt", os.path.basename(C.__file__)))
    # Paddle's own dependencies (numpy, ...) from this interpreter's site-packages, after the venv's.
    with open(os.path.join(sp, "zz_deps.pth"), "w") as f:
        f.write("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "CUSTOM_DEVICE_ROOT"}
    env["GLOG_minloglevel"] = "2"
    code = "import paddle; print(paddle.device.get_all_custom_device_type()); paddle.set_device('mps'); print((paddle.ones([3]) * 2).numpy().tolist())"
    r = subprocess.run([str(py), "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "['mps']" in r.stdout and "[2.0, 2.0, 2.0]" in r.stdout, r.stdout + r.stderr


def test_import_without_gpu():
    r = _run(
        """
        import time; t = time.time()
        import paddle, numpy as np
        assert paddle.device.get_all_custom_device_type() == ["mps"]
        assert paddle.device.get_available_custom_device() == [], paddle.device.get_available_custom_device()
        assert (paddle.to_tensor([1.0, 2.0]) * 2).numpy().tolist() == [2.0, 4.0]
        try:
            paddle.set_device("mps")
        except Exception as e:
            print("set_device:", type(e).__name__)
        print("import_s", time.time() - t)
        """,
        MPSRT_DEVICE="cpu",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "set_device: ValueError" in r.stdout or "set_device: RuntimeError" in r.stdout, r.stdout
