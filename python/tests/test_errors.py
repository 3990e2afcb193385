"""mpsrt errors become Python exceptions by kind, keeping the op-prefixed message."""
import numpy as np
import pytest

import mpsrt


def test_shape_error_is_value_error(place):
    a, b = mpsrt.ones([2, 3], place=place), mpsrt.ones([4], place=place)
    with pytest.raises(ValueError, match=r"^\[add\]"):
        a + b
    with pytest.raises(ValueError, match=r"\[reshape\]"):
        a.reshape([5])


def test_dtype_error_is_type_error(place):
    x = mpsrt.to_tensor([True, False], place=place)
    with pytest.raises(TypeError, match=r"\[subtract\]"):
        x - x
    with pytest.raises(TypeError):
        mpsrt.rand([2], dtype="int32", place=place)
    with pytest.raises(TypeError):
        mpsrt.zeros([2], dtype="complex64", place=place)
    with pytest.raises(TypeError):
        mpsrt.logical_and(mpsrt.ones([2], place=place), mpsrt.ones([2], place=place))


def test_bad_place_and_arguments():
    with pytest.raises(ValueError, match=r"\[place\]"):
        mpsrt.ones([2], place="cuda")
    # out of range with a GPU (ValueError); no GPU at all is a device error (RuntimeError)
    with pytest.raises(ValueError if mpsrt.mps.is_available() else RuntimeError):
        mpsrt.ones([2], place="mps:99")
    with pytest.raises(ValueError):
        mpsrt.arange(0, 5, 0)
    with pytest.raises(ValueError):
        mpsrt.clip(mpsrt.ones([2]), 3, 1)
    with pytest.raises(ValueError):
        mpsrt.ones([2]).transpose(0, 5)


def test_gpu_refuses_64_bit(gpu):
    x = mpsrt.to_tensor(np.zeros(3), place="cpu")
    assert x.dtype == "float64"
    with pytest.raises(TypeError, match=r"\[to\]"):
        x.to("mps")


def test_out_of_memory_is_memory_error(gpu):
    limit = mpsrt.mps.memory_stats()["limit"]
    n = min(limit // 2 + 1, 1 << 62)
    with pytest.raises(MemoryError):
        mpsrt.zeros([n, 4], dtype="float32", place=gpu)
