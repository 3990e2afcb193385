"""Reductions and softmax vs NumPy on both places."""
import numpy as np
import pytest

import mpsrt
import mpsrt.nn.functional as F
from conftest import assert_close

rng = np.random.default_rng(2)
A = rng.standard_normal((3, 5, 7)).astype(np.float32)


@pytest.mark.parametrize("name,ref", [("sum", np.sum), ("mean", np.mean), ("prod", np.prod),
                                      ("max", np.max), ("min", np.min)])
@pytest.mark.parametrize("axis", [None, 0, -1, [0, 2]])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions(place, name, ref, axis, keepdim):
    x = mpsrt.to_tensor(A, place=place)
    ax = tuple(axis) if isinstance(axis, list) else axis
    got = getattr(mpsrt, name)(x, axis=axis, keepdim=keepdim)
    assert_close(got, ref(A, axis=ax, keepdims=keepdim), rtol=1e-4, atol=1e-5)


def test_reduction_methods_and_torch_names(place):
    x = mpsrt.to_tensor(A, place=place)
    assert_close(x.sum(dim=1), A.sum(1), rtol=1e-5, atol=1e-5)
    assert_close(x[:, ::2].mean(axis=2), A[:, ::2].mean(2), rtol=1e-5, atol=1e-6)
    assert_close(mpsrt.argmax(x, axis=1), A.argmax(1))
    assert_close(mpsrt.argmin(x), np.array(A.argmin()))
    assert_close(mpsrt.var(x, axis=2), A.var(2, ddof=1), rtol=1e-4, atol=1e-5)
    assert_close(mpsrt.std(x, axis=2, unbiased=False), A.std(2), rtol=1e-4, atol=1e-5)
    m = A.max(axis=-1, keepdims=True)
    assert_close(mpsrt.logsumexp(x, axis=-1),
                 (m + np.log(np.exp(A - m).sum(-1, keepdims=True)))[..., 0], rtol=1e-5)
    i = mpsrt.to_tensor([[1, 2], [3, 4]], place=place)
    assert mpsrt.sum(i).dtype == "int32" and mpsrt.sum(i).item() == 10


def test_softmax(place):
    x = mpsrt.to_tensor(A, place=place)
    e = np.exp(A - A.max(axis=1, keepdims=True))
    sm = e / e.sum(axis=1, keepdims=True)
    assert_close(F.softmax(x, axis=1), sm, rtol=1e-5, atol=1e-6)
    assert_close(mpsrt.softmax(x, dim=1), sm, rtol=1e-5, atol=1e-6)
    assert_close(F.log_softmax(x, axis=1), np.log(sm), rtol=1e-4, atol=1e-5)


def test_reduction_errors(place):
    x = mpsrt.to_tensor(A, place=place)
    with pytest.raises(ValueError):
        mpsrt.sum(x, axis=5)
    with pytest.raises(ValueError):
        mpsrt.max(mpsrt.zeros([0], place=place))


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (4, 2)), ((4,), (4, 3)),
                                   ((3, 4), (4,)), ((4,), (4,)), ((2, 1, 3, 4), (5, 4, 2))])
def test_matmul(place, sa, sb):
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    x, y = mpsrt.to_tensor(a, place=place), mpsrt.to_tensor(b, place=place)
    assert_close(x @ y, a @ b, rtol=1e-4, atol=1e-5)
    assert_close(mpsrt.matmul(x, y), a @ b, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError):
        x @ mpsrt.ones([7, 2], place=place)
