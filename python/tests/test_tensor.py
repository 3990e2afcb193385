"""Creation, conversion, views, indexing, repr and DLPack, on both places."""
import numpy as np
import pytest

import mpsrt
from conftest import assert_close


def test_to_tensor_lists_scalars_numpy(place):
    x = mpsrt.to_tensor([1.0, 2.0, 3.0], place=place)
    assert x.dtype == "float32" and x.shape == [3] and x.place.startswith(place)
    assert_close(x, [1, 2, 3])
    assert mpsrt.to_tensor([1, 2], place=place).dtype == "int32"
    assert mpsrt.to_tensor([True, False], place=place).dtype == "bool"
    s = mpsrt.to_tensor(2.5, place=place)
    assert s.shape == [] and s.item() == 2.5
    a = np.arange(12, dtype=np.float16).reshape(3, 4)
    t = mpsrt.to_tensor(a, place=place)
    assert t.dtype == "float16"
    np.testing.assert_array_equal(t.numpy(), a)
    assert mpsrt.to_tensor([1, 2], dtype="float16", place=place).dtype == "float16"
    assert mpsrt.to_tensor(np.zeros(3), place=place).dtype == ("float64" if place == "cpu" else "float32")


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "bool"])
def test_roundtrip_dtypes(place, dtype):
    a = (np.arange(-5, 7).reshape(3, 4) % 3).astype(dtype)
    t = mpsrt.to_tensor(a, place=place)
    assert t.dtype == dtype
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(np.asarray(t), a)


def test_creation(place):
    assert_close(mpsrt.zeros([2, 3], place=place), np.zeros((2, 3)))
    assert_close(mpsrt.ones([2], dtype="int32", place=place), np.ones(2, np.int32))
    assert_close(mpsrt.full([2, 2], 7, place=place), np.full((2, 2), 7))
    assert mpsrt.full([2], 1.5, place=place).dtype == "float32"
    assert_close(mpsrt.arange(5, place=place), np.arange(5))
    assert_close(mpsrt.arange(0.0, 1.0, 0.25, place=place), np.arange(0, 1, 0.25))
    mpsrt.mps.manual_seed(3)
    r1 = mpsrt.rand([4, 5], place=place).numpy()
    mpsrt.mps.manual_seed(3)
    r2 = mpsrt.rand([4, 5], place=place).numpy()
    np.testing.assert_array_equal(r1, r2)
    assert (r1 >= 0).all() and (r1 < 1).all()
    n = mpsrt.randn([1000], place=place).numpy()
    assert abs(n.mean()) < 0.2 and 0.8 < n.std() < 1.2
    z = mpsrt.zeros([0, 3], place=place)
    assert z.shape == [0, 3] and z.size == 0 and z.numpy().shape == (0, 3)
    assert_close(mpsrt.zeros_like(mpsrt.ones([2], place=place)), np.zeros(2))


def test_attributes_and_move(place):
    x = mpsrt.to_tensor(np.arange(6, dtype=np.float32).reshape(2, 3), place=place)
    assert x.ndim == 2 and x.size == 6 and x.shape == [2, 3]
    c = x.cpu()
    assert c.place == "cpu"
    assert_close(c, x.numpy())
    if place == "mps":
        back = c.to("mps")
        assert back.place == "mps:0"
        assert_close(back, x.numpy())
    assert x.astype("int32").dtype == "int32"
    assert x.astype(np.float16).dtype == "float16"


def test_repr_shows_values_place_dtype(place):
    r = repr(mpsrt.to_tensor([1.5, 2.0], place=place))
    assert "1.5" in r and "float32" in r and ("cpu" in r if place == "cpu" else "mps:0" in r)


def test_views_and_indexing(place):
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    x = mpsrt.to_tensor(a, place=place)
    cases = [
        (lambda t: t[1], None), (lambda t: t[-1, 2], None), (lambda t: t[:, 1:3], None),
        (lambda t: t[::2, ::-1], None), (lambda t: t[..., 1], None), (lambda t: t[None, 0], None),
        (lambda t: t[1, ..., None], None), (lambda t: t[:, -3:-1, ::3], None),
        (lambda t: t[2:1], None), (lambda t: t[0, 0, 0], None),
    ]
    for f, _ in cases:
        np.testing.assert_array_equal(f(x).numpy(), f(a))
    assert_close(x.reshape([4, 15]), a.reshape(4, 15))
    assert_close(x.reshape(-1), a.reshape(-1))
    assert_close(x.transpose(0, 2), a.transpose(2, 1, 0))
    assert_close(x.transpose([1, 0, 2]), a.transpose(1, 0, 2))
    assert_close(mpsrt.transpose(x, [2, 0, 1]), a.transpose(2, 0, 1))
    assert_close(x.T, a.T)
    assert_close(x.unsqueeze(0), a[None])
    assert_close(x[:, :1].squeeze(1), a[:, 0])
    assert_close(x.flatten(), a.reshape(-1))
    assert_close(mpsrt.to_tensor([1.0, 2.0], place=place).expand([3, 2]), np.ones((3, 1)) * [1, 2])
    # non-contiguous views feed ops and reshape correctly
    v = x[:, ::2, 1:]
    assert not v.is_contiguous()
    assert_close(v * 2, a[:, ::2, 1:] * 2)
    assert_close(v.reshape([-1]), a[:, ::2, 1:].reshape(-1))
    with pytest.raises(IndexError):
        x[3]
    with pytest.raises(IndexError):
        x[0, 0, 0, 0]


def test_dlpack_and_array_protocol():
    x = mpsrt.to_tensor(np.arange(6, dtype=np.float32).reshape(2, 3), place="cpu")
    assert x.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(x)
    np.testing.assert_array_equal(a, np.arange(6).reshape(2, 3))
    y = mpsrt.from_dlpack(np.arange(4, dtype=np.int32))
    assert y.dtype == "int32" and y.place == "cpu"
    np.testing.assert_array_equal(np.asarray(y), np.arange(4))


def test_dlpack_refuses_gpu(gpu):
    x = mpsrt.ones([2], place=gpu)
    with pytest.raises(BufferError):
        x.__dlpack__()


def test_default_place(place):
    old = mpsrt.get_device()
    try:
        mpsrt.set_device(place)
        assert mpsrt.get_device().startswith(place)
        assert mpsrt.ones([1]).place.startswith(place)
    finally:
        mpsrt.set_device(old)
    assert mpsrt.get_device() == old
