"""Training real PaddlePaddle on 'mps' (the mpsrt CustomDevice plugin): backward kernels and
optimizer updates against Paddle's own CPU kernels.

FLAGS_enable_api_kernel_fallback=0 (set before Paddle is imported, as in
test_paddle_plugin.py): a kernel the plugin does not register raises instead of running on the
CPU, so every step below ran on the device. Each gradient case runs forward + backward on CPU
and on 'mps' from the same inputs and compares every gradient; the training cases run a small
CNN and an MLP for several steps from the same initial weights and compare the loss curves.
"""

import os
import tempfile

import numpy as np
import pytest

REQUIRE = os.environ.get("MPSRT_REQUIRE_GPU") == "1"

if not os.environ.get("CUSTOM_DEVICE_ROOT"):
    import mpsrt._C as _C

    _root = tempfile.mkdtemp(prefix="mpsrt_paddle_")
    os.symlink(os.path.realpath(_C.__file__), os.path.join(_root, "mpsrt_paddle.so"))
    os.environ["CUSTOM_DEVICE_ROOT"] = _root
os.environ.setdefault("FLAGS_enable_api_kernel_fallback", "0")
os.environ.setdefault("GLOG_minloglevel", "2")

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

F = paddle.nn.functional
nn = paddle.nn
CPU = paddle.CPUPlace()
MPS = paddle.CustomPlace("mps", 0)
rng = np.random.default_rng(1)


def launches(op):
    """Launches of `op` on the device, over all dtypes."""
    k = mp.stats()["kernels"]
    return sum(v for key, v in k.items() if key.split("/")[0] == op)


def grads_on(place, fn, arrays, grad_of):
    ts = [paddle.to_tensor(a, place=place) for a in arrays]
    for i in grad_of:
        ts[i].stop_gradient = False
    y = fn(*ts)
    # A non-uniform output gradient, so every element's gradient is distinct.
    w = paddle.to_tensor(np.linspace(-1.0, 1.5, int(np.prod(y.shape)) or 1)[: int(np.prod(y.shape))].reshape(y.shape).astype("float32"), place=place)
    loss = (y * w).sum()
    gs = paddle.grad(loss, [ts[i] for i in grad_of])
    return y.numpy(), [g.numpy() for g in gs]


def check_grad(fn, arrays, grad_of=(0,), kernels=(), tol=1e-4):
    before = {k: launches(k) for k in kernels}
    want_y, want_g = grads_on(CPU, fn, arrays, grad_of)
    got_y, got_g = grads_on(MPS, fn, arrays, grad_of)
    for k in kernels:
        assert launches(k) > before[k], f"{k} did not run on mps"
    np.testing.assert_allclose(got_y, want_y, rtol=tol, atol=tol)
    for i, (g, w) in enumerate(zip(got_g, want_g)):
        assert g.shape == w.shape, (i, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"gradient {i}")


def r(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype("float32")


GRAD_CASES = {
    "add_broadcast": (lambda x, y: x + y, [r(2, 3, 4), r(3, 1)], (0, 1), ["add_grad"]),
    "subtract": (lambda x, y: x - y, [r(3, 4), r(4)], (0, 1), ["subtract_grad"]),
    "multiply_broadcast": (lambda x, y: x * y, [r(2, 1, 4), r(3, 4)], (0, 1), ["multiply_grad"]),
    "divide": (lambda x, y: x / y, [r(3, 4), r(3, 4, lo=0.5)], (0, 1), ["divide_grad"]),
    "matmul": (paddle.matmul, [r(3, 4), r(4, 5)], (0, 1), ["matmul_grad"]),
    "matmul_t": (lambda x, y: paddle.matmul(x, y, transpose_x=True, transpose_y=True), [r(4, 3), r(5, 4)], (0, 1), ["matmul_grad"]),
    "matmul_batch_bcast": (paddle.matmul, [r(2, 3, 4), r(4, 5)], (0, 1), ["matmul_grad"]),
    "matmul_vec": (paddle.matmul, [r(4), r(4, 5)], (0, 1), ["matmul_grad"]),
    "relu": (F.relu, [r(4, 5)], (0,), ["relu_grad"]),
    "sigmoid": (F.sigmoid, [r(4, 5)], (0,), ["sigmoid_grad"]),
    "tanh": (paddle.tanh, [r(4, 5)], (0,), ["tanh_grad"]),
    "gelu": (F.gelu, [r(4, 5)], (0,), ["gelu_grad"]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate=True), [r(4, 5)], (0,), ["gelu_grad"]),
    "silu": (F.silu, [r(4, 5)], (0,), ["silu_grad"]),
    "square_exp_log_sqrt": (lambda x: paddle.sqrt(paddle.log(paddle.exp(paddle.square(x)) + 1.0)), [r(3, 4)], (0,), ["square_grad", "sqrt_grad", "log_grad", "exp_grad"]),
    "softmax": (lambda x: F.softmax(x, axis=-1), [r(3, 5)], (0,), ["softmax_grad"]),
    "log_softmax": (lambda x: F.log_softmax(x, axis=0), [r(3, 5)], (0,), ["log_softmax_grad"]),
    "sum_axis": (lambda x: x.sum(axis=1), [r(2, 3, 4)], (0,), ["sum_grad"]),
    "mean_axes_keep": (lambda x: x.mean(axis=[0, 2], keepdim=True), [r(2, 3, 4)], (0,), ["mean_grad"]),
    "mean": (lambda x: paddle.mean(x) * paddle.ones([2]), [r(3, 4)], (0,), ["mean_grad"]),
    "cross_entropy_mean": (lambda x, y: F.cross_entropy(x, y) * paddle.ones([1]), [r(5, 7), rng.integers(0, 7, (5,))], (0,), ["mean_all", "mean_all_grad"]),
    "cross_entropy": (lambda x, y: F.cross_entropy(x, y, reduction="none"), [r(5, 7), rng.integers(0, 7, (5, 1))], (0,), ["cross_entropy_with_softmax_grad"]),
    "cross_entropy_ignore": (lambda x, y: F.cross_entropy(x, y, ignore_index=2), [r(6, 4), np.array([[0], [2], [3], [2], [1], [0]])], (0,), ["cross_entropy_with_softmax_grad"]),
    "cross_entropy_soft": (lambda x, y: F.cross_entropy(x, F.softmax(y), soft_label=True), [r(4, 6), r(4, 6)], (0,), ["cross_entropy_with_softmax_grad"]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, [6], weight=w, bias=b), [r(2, 3, 6), r(6), r(6)], (0, 1, 2), ["layer_norm_grad"]),
    "conv2d": (lambda x, w: F.conv2d(x, w, padding=1), [r(2, 3, 6, 6), r(4, 3, 3, 3)], (0, 1), ["conv2d", "conv2d_grad"]),
    "conv2d_stride_dil": (lambda x, w: F.conv2d(x, w, stride=2, dilation=2, padding=[1, 2]), [r(2, 2, 9, 8), r(3, 2, 3, 2)], (0, 1), ["conv2d_grad"]),
    "conv2d_groups_same": (lambda x, w: F.conv2d(x, w, stride=2, padding="SAME", groups=2), [r(1, 4, 7, 7), r(6, 2, 3, 3)], (0, 1), ["conv2d_grad"]),
    "conv2d_nhwc": (lambda x, w: F.conv2d(x, w, padding=1, data_format="NHWC"), [r(2, 5, 5, 3), r(4, 3, 3, 3)], (0, 1), ["conv2d_grad"]),
    "max_pool": (lambda x: F.max_pool2d(x, 2, 2), [r(2, 3, 6, 6)], (0,), ["pool2d", "pool2d_grad"]),
    "max_pool_pad_ceil": (lambda x: F.max_pool2d(x, 3, 2, padding=1, ceil_mode=True), [r(1, 2, 8, 7)], (0,), ["pool2d_grad"]),
    # return_mask: max_pool2d_with_index_grad (regular windows scatter by the mask's offset in
    # its window; adaptive sizes that do not divide and global windows use a selection product).
    "max_pool_index": (lambda x: F.max_pool2d(x, 2, 2, return_mask=True)[0], [r(2, 3, 6, 6)], (0,), ["max_pool2d_with_index_grad"]),
    "max_pool_index_pad_ceil": (lambda x: F.max_pool2d(x, 3, 2, padding=1, ceil_mode=True, return_mask=True)[0], [r(1, 2, 13, 10)], (0,), ["max_pool2d_with_index_grad"]),
    "adaptive_max_index": (lambda x: F.adaptive_max_pool2d(x, 3, return_mask=True)[0], [r(1, 2, 7, 8)], (0,), ["max_pool2d_with_index_grad"]),
    "adaptive_max_index_div": (lambda x: F.adaptive_max_pool2d(x, 4, return_mask=True)[0], [r(2, 2, 8, 8)], (0,), ["max_pool2d_with_index_grad"]),
    "global_max_index": (lambda x: F.adaptive_max_pool2d(x, 1, return_mask=True)[0], [r(2, 3, 5, 5)], (0,), ["max_pool2d_with_index_grad"]),
    "avg_pool": (lambda x: F.avg_pool2d(x, 3, 2, padding=1), [r(2, 2, 7, 7)], (0,), ["pool2d_grad"]),
    "avg_pool_inclusive": (lambda x: F.avg_pool2d(x, 2, 2, padding=1, exclusive=False), [r(1, 2, 6, 6)], (0,), ["pool2d_grad"]),
    "adaptive_avg": (lambda x: F.adaptive_avg_pool2d(x, 3), [r(2, 2, 7, 8)], (0,), ["pool2d_grad"]),
    "global_avg": (lambda x: F.adaptive_avg_pool2d(x, 1), [r(2, 3, 5, 5)], (0,), ["pool2d_grad"]),
    "batch_norm_train": (lambda x, w, b: F.batch_norm(x, paddle.zeros([3]), paddle.ones([3]), w, b, training=True), [r(4, 3, 5, 5), r(3), r(3)], (0, 1, 2), ["batch_norm", "batch_norm_grad"]),
    "batch_norm_1d": (lambda x: F.batch_norm(x, paddle.zeros([6]), paddle.ones([6]), training=True), [r(8, 6)], (0,), ["batch_norm_grad"]),
}


@pytest.mark.parametrize("case", sorted(GRAD_CASES))
def test_grad(case):
    fn, arrays, grad_of, kernels = GRAD_CASES[case]
    check_grad(fn, arrays, grad_of, kernels)


@pytest.mark.parametrize("case", ["conv2d", "conv2d_stride_dil", "conv2d_groups_same", "conv2d_nhwc"])
def test_conv_filter_grad_unfold(case, monkeypatch):
    """The im2col route of conv2d_grad's filter gradient (MPSRT_PADDLE_WGRAD=unfold)."""
    monkeypatch.setenv("MPSRT_PADDLE_WGRAD", "unfold")
    fn, arrays, grad_of, kernels = GRAD_CASES[case]
    check_grad(fn, arrays, grad_of, kernels)


F16_CASES = ["add_broadcast", "multiply_broadcast", "matmul", "relu", "gelu", "softmax", "conv2d", "max_pool", "max_pool_index", "adaptive_max_index", "layer_norm", "batch_norm_train"]


@pytest.mark.parametrize("case", F16_CASES)
def test_grad_float16(case):
    """float16 on 'mps' against float32 on Paddle's CPU (whose float16 kernels are few)."""
    fn, arrays, grad_of, kernels = GRAD_CASES[case]
    half = [a.astype("float16").astype("float32") if a.dtype == np.float32 else a for a in arrays]
    want_y, want_g = grads_on(CPU, fn, half, grad_of)
    dev = [a.astype("float16") if a.dtype == np.float32 else a for a in arrays]
    before = {k: launches(k) for k in kernels}
    got_y, got_g = grads_on(MPS, lambda *t: fn(*t).astype("float32"), dev, grad_of)
    for k in kernels:
        assert mp.stats()["kernels"].get(f"{k}/float16", 0) > 0 and launches(k) > before[k], k
    np.testing.assert_allclose(got_y, want_y, rtol=2e-2, atol=2e-2)
    for g, w in zip(got_g, want_g):
        np.testing.assert_allclose(g.astype("float32"), w, rtol=3e-2, atol=3e-2)


def test_batch_norm_running_stats_and_eval():
    """Training mode updates the running statistics; eval mode normalizes with them."""
    x = r(4, 3, 5, 5)
    outs = []
    for dev in ("cpu", "mps"):
        paddle.set_device(dev)
        try:
            bn = nn.BatchNorm2D(3, momentum=0.8)
            xt = paddle.to_tensor(x)
            y1 = bn(xt).numpy()
            bn.eval()
            y2 = bn(xt).numpy()
            outs.append((y1, y2, bn._mean.numpy(), bn._variance.numpy()))
        finally:
            paddle.set_device("cpu")
    for u, v in zip(*outs):
        np.testing.assert_allclose(v, u, rtol=1e-4, atol=1e-4)


class CNN(nn.Layer):
    def __init__(self):
        super().__init__()
        # No bias before BatchNorm: its gradient is zero up to rounding, and Adam would turn
        # that noise into full-size steps that differ between any two implementations.
        self.conv1 = nn.Conv2D(3, 8, 3, padding=1, bias_attr=False)
        self.bn = nn.BatchNorm2D(8)
        self.pool = nn.MaxPool2D(2, 2)
        self.conv2 = nn.Conv2D(8, 8, 3, padding=1, groups=2)
        self.gap = nn.AdaptiveAvgPool2D(1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.conv1(x))))
        x = self.gap(F.relu(self.conv2(x)))
        return self.fc(paddle.flatten(x, 1))


def mlp():
    return nn.Sequential(nn.Linear(12, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))


def train(make, opt_fn, loss_fn, data, place, init, steps):
    paddle.set_device("cpu" if place is CPU else "mps")
    try:
        model = make()
        model.set_state_dict({k: paddle.to_tensor(v, place=place) for k, v in init.items()})
        opt = opt_fn(model.parameters())
        x, y = (paddle.to_tensor(d, place=place) for d in data)
        losses = []
        for _ in range(steps):
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.clear_grad()
            losses.append(float(loss))
        return np.array(losses), {k: v.numpy() for k, v in model.state_dict().items()}
    finally:
        paddle.set_device("cpu")


def compare_training(make, opt_fn, loss_fn, data, steps, tol, kernels):
    paddle.seed(0)
    paddle.set_device("cpu")
    init = {k: v.numpy() for k, v in make().state_dict().items()}
    want, want_p = train(make, opt_fn, loss_fn, data, CPU, init, steps)
    before = {k: launches(k) for k in kernels}
    got, got_p = train(make, opt_fn, loss_fn, data, MPS, init, steps)
    for k in kernels:
        assert launches(k) >= before[k] + steps, f"{k}: {launches(k) - before[k]} launches in {steps} steps"
    assert want[-1] < want[0], want  # it learns
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    for k in want_p:
        np.testing.assert_allclose(got_p[k], want_p[k], rtol=10 * tol, atol=10 * tol, err_msg=k)
    return got


def test_train_cnn_adam():
    x = rng.standard_normal((8, 3, 12, 12)).astype("float32")
    y = rng.integers(0, 5, (8,)).astype("int64")
    losses = compare_training(
        CNN,
        lambda p: paddle.optimizer.Adam(1e-2, parameters=p),
        F.cross_entropy,
        (x, y),
        steps=20,
        tol=2e-3,
        kernels=["conv2d_grad", "batch_norm_grad", "pool2d_grad", "cross_entropy_with_softmax_grad", "matmul_grad", "adam"],
    )
    print("cnn losses", losses[0], losses[-1])


@pytest.mark.parametrize(
    "opt",
    [
        ("sgd", lambda p: paddle.optimizer.SGD(0.1, parameters=p)),
        ("momentum", lambda p: paddle.optimizer.Momentum(0.05, momentum=0.9, parameters=p, use_nesterov=True)),
        ("adamw", lambda p: paddle.optimizer.AdamW(5e-3, parameters=p, weight_decay=0.05)),
    ],
    ids=lambda o: o[0],
)
def test_train_mlp(opt):
    x = rng.standard_normal((16, 12)).astype("float32")
    y = rng.standard_normal((16, 4)).astype("float32")
    compare_training(mlp, opt[1], F.mse_loss, (x, y), steps=10, tol=1e-3, kernels=[opt[0], "layer_norm_grad", "gelu_grad", "tanh_grad"])


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam"])
def test_multi_precision_master_weights(name):
    """float16 parameters with float32 master weights (`multi_precision=True`): the update runs
    on the master copy in float32 and the parameter is its float16 rounding (NumPy reference)."""
    p0 = rng.uniform(-1, 1, (4, 3)).astype("float16")
    w = rng.uniform(-1, 1, (4, 3)).astype("float32")
    lr, steps = 0.1, 3
    paddle.set_device("mps")
    try:
        p = paddle.create_parameter([4, 3], "float16", default_initializer=paddle.nn.initializer.Constant(0.0))
        p.set_value(p0)
        make = {
            "sgd": lambda: paddle.optimizer.SGD(lr, parameters=[p], multi_precision=True),
            "momentum": lambda: paddle.optimizer.Momentum(lr, momentum=0.9, parameters=[p], multi_precision=True),
            "adam": lambda: paddle.optimizer.Adam(lr, parameters=[p], multi_precision=True),
        }
        opt = make[name]()
        before = launches(name)
        wt = paddle.to_tensor(w)
        for _ in range(steps):
            (p.astype("float32") * wt).sum().backward()
            opt.step()
            opt.clear_grad()
        got = p.numpy()
    finally:
        paddle.set_device("cpu")
    assert launches(name) >= before + steps
    g = w.astype("float16").astype("float32")  # the parameter's gradient is float16
    m, v1, v2 = p0.astype("float32"), np.zeros_like(w), np.zeros_like(w)
    for t in range(1, steps + 1):
        if name == "sgd":
            m = m - lr * g
        elif name == "momentum":
            v1 = 0.9 * v1 + g
            m = m - lr * v1
        else:
            b1, b2, eps = 0.9, 0.999, 1e-8
            v1, v2 = b1 * v1 + (1 - b1) * g, b2 * v2 + (1 - b2) * g * g
            lr_t = lr * np.sqrt(1 - b2**t) / (1 - b1**t)
            m = m - lr_t * v1 / (np.sqrt(v2) + eps * np.sqrt(1 - b2**t))
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype("float32"), m.astype("float16").astype("float32"), rtol=2e-3, atol=2e-3)
