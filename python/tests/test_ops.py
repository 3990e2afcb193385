"""Every exposed function vs NumPy on both places: broadcasting, dtypes, scalars (reflected too),
non-contiguous inputs and zero-size tensors."""
import math

import numpy as np
import pytest

import mpsrt
import mpsrt.nn.functional as F
from conftest import assert_close

rng = np.random.default_rng(0)


def _erf(a):
    return np.vectorize(math.erf)(a.astype(np.float64))


def _sigmoid(a):
    return 1 / (1 + np.exp(-a.astype(np.float64)))


UNARY = {
    "exp": np.exp, "log": lambda a: np.log(np.abs(a) + 0.5), "sqrt": lambda a: np.sqrt(np.abs(a)),
    "sigmoid": _sigmoid, "tanh": np.tanh, "erf": _erf, "sin": np.sin, "cos": np.cos,
    "reciprocal": lambda a: 1 / a, "neg": np.negative, "abs": np.abs, "sign": np.sign,
    "floor": np.floor, "ceil": np.ceil, "round": np.round, "isnan": np.isnan,
    "silu": lambda a: a * _sigmoid(a),
    "hardswish": lambda a: a * np.clip(a / 6 + 0.5, 0, 1),
}
PRE = {"log": lambda t: mpsrt.abs(t) + 0.5, "sqrt": mpsrt.abs}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(place, name):
    a = rng.standard_normal((3, 7)).astype(np.float32) * 2 + 0.1
    x = mpsrt.to_tensor(a, place=place)
    x = PRE.get(name, lambda t: t)(x)
    got = getattr(mpsrt, name)(x)
    assert_close(got, UNARY[name](a), rtol=2e-5, atol=2e-5)
    # non-contiguous input and the method form
    assert_close(getattr(x.T, name)(), UNARY[name](a).T, rtol=2e-5, atol=2e-5)


BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "equal": np.equal, "not_equal": np.not_equal,
    "less": np.less, "less_equal": np.less_equal, "greater": np.greater,
    "greater_equal": np.greater_equal,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcast(place, name):
    a = rng.integers(-4, 5, (4, 1, 5)).astype(np.float32)
    b = rng.integers(1, 5, (3, 1)).astype(np.float32)
    got = getattr(mpsrt, name)(mpsrt.to_tensor(a, place=place), mpsrt.to_tensor(b, place=place))
    assert_close(got, BINARY[name](a, b))


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_operators_dtypes(place, dtype):
    a = rng.integers(1, 9, (2, 3)).astype(dtype)
    b = rng.integers(1, 9, (3,)).astype(dtype)
    x, y = mpsrt.to_tensor(a, place=place), mpsrt.to_tensor(b, place=place)
    tol = dict(rtol=1e-3, atol=1e-3) if dtype == "float16" else {}
    assert (x + y).dtype == dtype
    assert_close(x + y, a + b)
    assert_close(x - y, a - b)
    assert_close(x * y, a * b)
    assert_close(x / y, (a / b).astype(np.float32 if dtype == "int32" else dtype), **tol)
    assert (x / y).dtype == ("float32" if dtype == "int32" else dtype)
    assert_close(x ** 2, a.astype(np.float64) ** 2, **tol)
    assert_close(-x, -a)
    assert_close(x < y, a < b)
    assert_close(x == y, a == b)
    assert_close(x != 3, a != 3)


def test_scalars_and_reflected(place):
    a = np.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]], np.float32)
    x = mpsrt.to_tensor(a, place=place)
    assert_close(x + 1, a + 1)
    assert_close(1 + x, 1 + a)
    assert_close(x - 1.5, a - 1.5)
    assert_close(10 - x, 10 - a)
    assert_close(2 * x, 2 * a)
    assert_close(x / 4, a / 4)
    assert_close(1 / x, 1 / a)
    assert_close(2 ** x, 2.0 ** a, rtol=1e-5)
    assert_close(x ** 2, a ** 2)
    assert_close(x > 0, a > 0)
    assert_close(0 < x, 0 < a)
    assert_close(3 >= x, 3 >= a)
    assert_close(x == 3.0, a == 3)
    assert_close(x + np.float32(2), a + 2)
    assert_close(x + [1.0, 2.0, 3.0], a + [1, 2, 3])
    i = mpsrt.to_tensor([1, 2, 3], place=place)
    assert (i + 1).dtype == "int32" and (i + 1.5).dtype == "float32"
    assert_close(i * 2.5, np.array([1, 2, 3]) * 2.5)
    assert_close(mpsrt.add(2.0, x), a + 2)
    assert_close(mpsrt.subtract(2.0, x), 2 - a)


def test_bool_ops(place):
    a = np.array([True, False, True, False])
    b = np.array([True, True, False, False])
    x, y = mpsrt.to_tensor(a, place=place), mpsrt.to_tensor(b, place=place)
    assert_close(x & y, a & b)
    assert_close(x | y, a | b)
    assert_close(~x, ~a)
    assert_close(mpsrt.logical_and(x, y), a & b)
    assert_close(mpsrt.logical_not(x), ~a)
    assert_close(x + y, a | b)
    assert_close(mpsrt.where(x, 1.0, 0.0), np.where(a, 1.0, 0.0))
    f = mpsrt.to_tensor([1.0, 2.0, 3.0, 4.0], place=place)
    assert_close(mpsrt.where(x, f, -f), np.where(a, [1, 2, 3, 4], [-1, -2, -3, -4]))
    assert_close(mpsrt.where(x, f, 0.0), np.where(a, [1, 2, 3, 4], 0))


def test_clip_pow_min_max(place):
    a = np.linspace(-3, 3, 13).astype(np.float32)
    x = mpsrt.to_tensor(a, place=place)
    assert_close(mpsrt.clip(x, -1, 2), np.clip(a, -1, 2))
    assert_close(mpsrt.clip(x, min=0), np.clip(a, 0, None))
    assert_close(mpsrt.pow(mpsrt.abs(x), x), np.abs(a) ** a, rtol=1e-5)
    assert_close(mpsrt.maximum(x, 0.5), np.maximum(a, 0.5))
    assert_close(mpsrt.square(x), a * a)
    assert_close(mpsrt.rsqrt(mpsrt.abs(x) + 1), 1 / np.sqrt(np.abs(a) + 1), rtol=1e-5)


def test_activations(place):
    a = np.linspace(-4, 4, 33).astype(np.float32)
    x = mpsrt.to_tensor(a, place=place)
    tol = dict(rtol=1e-5, atol=1e-5)
    assert_close(F.relu(x), np.maximum(a, 0))
    assert_close(F.relu6(x * 2), np.clip(a * 2, 0, 6))
    assert_close(F.sigmoid(x), _sigmoid(a), **tol)
    assert_close(F.tanh(x), np.tanh(a), **tol)
    assert_close(F.silu(x), a * _sigmoid(a), **tol)
    assert_close(F.gelu(x), 0.5 * a * (1 + _erf(a / np.sqrt(2))), **tol)
    g = 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3)))
    assert_close(F.gelu(x, approximate=True), g, **tol)
    assert_close(F.leaky_relu(x, 0.1), np.where(a >= 0, a, 0.1 * a), **tol)
    assert_close(F.elu(x, 0.5), np.where(a > 0, a, 0.5 * (np.exp(a) - 1)), **tol)
    assert_close(F.hardsigmoid(x), np.clip(a / 6 + 0.5, 0, 1), **tol)
    assert_close(F.hardswish(x), a * np.clip(a / 6 + 0.5, 0, 1), **tol)
    assert_close(F.softplus(x), np.log1p(np.exp(a)), **tol)
    assert_close(F.hardtanh(x), np.clip(a, -1, 1))


def test_zero_size(place):
    x = mpsrt.zeros([0, 4], place=place)
    y = mpsrt.ones([4], place=place)
    assert (x + y).shape == [0, 4]
    assert mpsrt.exp(x).numpy().shape == (0, 4)
    assert (x * 2).size == 0


def test_nan_semantics(place):
    a = np.array([np.nan, 1.0, -np.inf], np.float32)
    x = mpsrt.to_tensor(a, place=place)
    assert_close(mpsrt.isnan(x), np.isnan(a))
    assert_close(x != x, a != a)
    assert_close(mpsrt.maximum(x, 0.0), np.maximum(a, 0))
