"""conv2d and pooling vs NumPy reference loops, on both places."""
import numpy as np
import pytest

import mpsrt
import mpsrt.nn.functional as F
from conftest import assert_close

rng = np.random.default_rng(3)


def conv_ref(x, w, b, stride, pad, dil=1):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh = (h - dil * (kh - 1) - 1) // stride + 1
    ow = (wd - dil * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = x[:, :, i * stride:i * stride + dil * (kh - 1) + 1:dil,
                      j * stride:j * stride + dil * (kw - 1) + 1:dil]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    return out + (0 if b is None else b[None, :, None, None])


@pytest.mark.parametrize("stride,pad,dil", [(1, 0, 1), (2, 1, 1), (1, 2, 2)])
def test_conv2d(place, stride, pad, dil):
    x = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    got = F.conv2d(mpsrt.to_tensor(x, place=place), mpsrt.to_tensor(w, place=place),
                   mpsrt.to_tensor(b, place=place), stride=stride, padding=pad, dilation=dil)
    assert_close(got, conv_ref(x, w, b, stride, pad, dil), rtol=1e-4, atol=1e-4)


def test_conv2d_same_and_errors(place):
    x = mpsrt.to_tensor(rng.standard_normal((1, 2, 7, 7)).astype(np.float32), place=place)
    w = mpsrt.to_tensor(rng.standard_normal((3, 2, 3, 3)).astype(np.float32), place=place)
    assert F.conv2d(x, w, padding="same").shape == [1, 3, 7, 7]
    with pytest.raises(ValueError):
        F.conv2d(x, mpsrt.ones([3, 5, 3, 3], place=place))


def pool_ref(x, k, s, fn):
    n, c, h, w = x.shape
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    out = np.zeros((n, c, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = fn(x[:, :, i * s:i * s + k, j * s:j * s + k], axis=(2, 3))
    return out


def test_pools(place):
    a = rng.standard_normal((2, 3, 8, 9)).astype(np.float32)
    x = mpsrt.to_tensor(a, place=place)
    assert_close(F.max_pool2d(x, 2), pool_ref(a, 2, 2, np.max))
    assert_close(F.avg_pool2d(x, 3, stride=2), pool_ref(a, 3, 2, np.mean), rtol=1e-5, atol=1e-6)
    assert_close(F.adaptive_avg_pool2d(x, 1), a.mean(axis=(2, 3), keepdims=True),
                 rtol=1e-5, atol=1e-6)
    assert_close(F.adaptive_max_pool2d(x, 1), a.max(axis=(2, 3), keepdims=True))
