"""Shared fixtures: every test body runs on `cpu` and `mps`. Without a GPU, `mps` cases skip,
unless MPSRT_REQUIRE_GPU=1, where they fail instead."""
import os

import numpy as np
import pytest

import mpsrt

REQUIRE_GPU = os.environ.get("MPSRT_REQUIRE_GPU", "") == "1"


def need_gpu():
    if not mpsrt.mps.is_available():
        if REQUIRE_GPU:
            pytest.fail("MPSRT_REQUIRE_GPU=1 but no GPU adapter is available")
        pytest.skip("no GPU adapter")


@pytest.fixture(params=["cpu", "mps"])
def place(request):
    if request.param == "mps":
        need_gpu()
    return request.param


@pytest.fixture
def gpu():
    need_gpu()
    return "mps"


def assert_close(t, expected, rtol=1e-5, atol=1e-6):
    got = t.numpy() if hasattr(t, "numpy") else np.asarray(t)
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if expected.dtype == np.bool_ or got.dtype == np.bool_:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol, equal_nan=True)
