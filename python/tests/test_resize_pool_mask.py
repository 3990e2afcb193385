"""Issue 18's small Paddle-API ops against independent references, on both places:
`interpolate(mode='bicubic')` (vs a direct 4×4-tap NumPy loop with Keys' a = -0.75),
`embedding(max_norm=...)` (vs torch's renormalization rule written in NumPy) and max pooling
with `return_mask=True` (vs a NumPy window scan); Paddle's own CPU kernels too when
`paddle` is installed."""
import numpy as np
import pytest

import mpsrt
import mpsrt.nn.functional as F
from conftest import assert_close

A = -0.75


def _cubic_w(t):
    """Keys' weights for taps floor(src) - 1 .. + 2 at fraction t."""
    def near(x):
        return ((A + 2) * x - (A + 3)) * x * x + 1

    def far(x):
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _src(i, n_in, n_out, align):
    if align:
        return i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return (i + 0.5) * n_in / n_out - 0.5


def bicubic_ref(x, oh, ow, align):
    n, c, h, w = x.shape
    y = np.zeros((n, c, oh, ow))
    for i in range(oh):
        sy = _src(i, h, oh, align)
        fy = int(np.floor(sy))
        wy = _cubic_w(sy - fy)
        for j in range(ow):
            sx = _src(j, w, ow, align)
            fx = int(np.floor(sx))
            wx = _cubic_w(sx - fx)
            acc = np.zeros((n, c))
            for a in range(4):
                r = min(max(fy - 1 + a, 0), h - 1)
                for b in range(4):
                    col = min(max(fx - 1 + b, 0), w - 1)
                    acc += wy[a] * wx[b] * x[:, :, r, col]
            y[:, :, i, j] = acc
    return y


def pool_mask_ref(x, k, s, p):
    """Max pool (floor mode) with the flat h*W + w index of each window's first maximum."""
    n, c, h, w = x.shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    vals = np.zeros((n, c, oh, ow), x.dtype)
    idx = np.zeros((n, c, oh, ow), np.int32)
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * s - p, j * s - p
            rs = [r for r in range(r0, r0 + k) if 0 <= r < h]
            cs = [q for q in range(c0, c0 + k) if 0 <= q < w]
            flat = np.array([[r * w + q for q in cs] for r in rs]).ravel()
            win = x[:, :, rs][:, :, :, cs].reshape(n, c, -1)
            best = np.argmax(win, axis=-1)  # first maximum
            vals[:, :, i, j] = np.take_along_axis(win, best[..., None], -1)[..., 0]
            idx[:, :, i, j] = flat[best]
    return vals, idx


@pytest.mark.parametrize("align", [False, True])
def test_bicubic_vs_numpy(place, align):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    t = mpsrt.to_tensor(x, place=place)
    for size in [(9, 4), (5, 7), (1, 3)]:
        if align and 1 in size:
            continue
        y = F.interpolate(t, size=list(size), mode="bicubic", align_corners=align)
        assert_close(y, bicubic_ref(x.astype(np.float64), *size, align), rtol=1e-4, atol=1e-5)
    y = F.interpolate(t, scale_factor=2, mode="bicubic", align_corners=align)
    assert_close(y, bicubic_ref(x.astype(np.float64), 10, 14, align), rtol=1e-4, atol=1e-5)


def test_embedding_max_norm_vs_numpy(place):
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((10, 6)) * 2).astype(np.float32)
    ids = np.array([[0, 3, 3], [9, 1, 0]], np.int64)
    for max_norm, p in [(1.5, 2.0), (3.0, 1.0), (100.0, 2.0)]:
        rows = w[ids].astype(np.float64)
        norm = np.sum(np.abs(rows) ** p, axis=-1, keepdims=True) ** (1 / p)
        want = np.where(norm > max_norm, rows * (max_norm / (norm + 1e-7)), rows)
        y = F.embedding(mpsrt.to_tensor(ids, place=place), mpsrt.to_tensor(w, place=place),
                        max_norm=max_norm, norm_type=p)
        assert_close(y, want, rtol=1e-5, atol=1e-6)
    y = F.embedding(mpsrt.to_tensor(ids, place=place), mpsrt.to_tensor(w, place=place),
                    padding_idx=3, max_norm=1.0)
    assert not y.numpy()[0, 1].any(), "padding rows stay zero"
    with pytest.raises(ValueError, match="embedding"):
        F.embedding(mpsrt.to_tensor(ids, place=place), mpsrt.to_tensor(w, place=place),
                    max_norm=-1.0)


def test_max_pool_return_mask_vs_numpy(place):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    x[0, 0, :3, :3] = 1.0  # ties: the first maximum wins
    t = mpsrt.to_tensor(x, place=place)
    for k, s, p in [(2, 2, 0), (3, 2, 1), (3, 1, 1)]:
        y, m = F.max_pool2d(t, k, stride=s, padding=p, return_mask=True)
        vals, idx = pool_mask_ref(x, k, s, p)
        assert m.numpy().dtype == np.int32
        assert_close(y, vals, rtol=0, atol=0)
        np.testing.assert_array_equal(m.numpy(), idx)
    # 1-D: indices along L.
    x1 = x[:, :, 0, :]
    y, m = F.max_pool1d(mpsrt.to_tensor(x1, place=place), 3, stride=2, padding=1,
                        return_mask=True)
    ref_v, ref_i = [], []
    for j in range(0, 8 + 2 - 3 + 1, 2):
        cols = [q for q in range(j - 1, j + 2) if 0 <= q < 8]
        win = x1[:, :, cols]
        b = np.argmax(win, axis=-1)
        ref_v.append(np.take_along_axis(win, b[..., None], -1)[..., 0])
        ref_i.append(np.array(cols)[b])
    assert_close(y, np.stack(ref_v, -1), rtol=0, atol=0)
    np.testing.assert_array_equal(m.numpy(), np.stack(ref_i, -1))
    # Adaptive: window i spans floor(i*H/OH) .. ceil((i+1)*H/OH).
    y, m = F.adaptive_max_pool2d(t, [2, 3], return_mask=True)
    for i in range(2):
        for j in range(3):
            r = range(i * 9 // 2, -(-(i + 1) * 9 // 2))
            c = range(j * 8 // 3, -(-(j + 1) * 8 // 3))
            win = x[:, :, r.start:r.stop, c.start:c.stop].reshape(2, 3, -1)
            b = np.argmax(win, -1)
            np.testing.assert_array_equal(y.numpy()[:, :, i, j], win.max(-1))
            flat = np.array([[rr * 8 + cc for cc in c] for rr in r]).ravel()
            np.testing.assert_array_equal(m.numpy()[:, :, i, j], flat[b])


def test_vs_paddle_cpu(place):
    """The same three ops against Paddle's own CPU kernels (skipped without paddle)."""
    paddle = pytest.importorskip("paddle")
    paddle.set_device("cpu")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2, 6, 5)).astype(np.float32)
    t = mpsrt.to_tensor(x, place=place)
    for align in (False, True):
        want = paddle.nn.functional.interpolate(paddle.to_tensor(x), size=[8, 11],
                                                mode="bicubic", align_corners=align).numpy()
        got = F.interpolate(t, size=[8, 11], mode="bicubic", align_corners=align)
        assert_close(got, want, rtol=1e-4, atol=1e-5)
    y, m = F.max_pool2d(t, 3, stride=2, padding=1, return_mask=True)
    py, pm = paddle.nn.functional.max_pool2d(paddle.to_tensor(x), 3, stride=2, padding=1,
                                             return_mask=True)
    assert_close(y, py.numpy(), rtol=0, atol=0)
    np.testing.assert_array_equal(m.numpy(), pm.numpy())
    w = (rng.standard_normal((7, 4)) * 2).astype(np.float32)
    ids = np.array([1, 5, 1, 0], np.int64)
    want = paddle.nn.functional.embedding(paddle.to_tensor(ids), paddle.to_tensor(w),
                                          max_norm=1.0).numpy()
    got = F.embedding(mpsrt.to_tensor(ids, place=place), mpsrt.to_tensor(w, place=place),
                      max_norm=1.0)
    assert_close(got, want, rtol=1e-5, atol=1e-6)
