"""Tensors and sessions on every GPU (`'mps:N'`), and copies between two GPUs (issue 25).

Copies between GPUs go through the host (wgpu has no peer-to-peer copies): `t.to('mps:1')` of a
tensor on `mps:0` reads it back and uploads it. CI has one adapter, so the two-GPU cases skip
there (with the reason); on a machine with several GPUs they run, also as a plain script
(`python3 python/tests/test_multi_gpu.py`) where pytest is not installed. The one-GPU checks
(an index past the last GPU is refused with a clear error) run everywhere a GPU exists.
"""
import sys

import numpy as np

import mpsrt

try:
    import pytest
except ImportError:  # plain-script mode on the GPU machine
    pytest = None

N = mpsrt.mps.device_count()


_SCRIPT = False  # set when run as a plain script: skips are reported, not raised through pytest


def _skip(reason):
    if pytest is not None and not _SCRIPT:
        pytest.skip(reason)
    raise _Skipped(reason)


class _Skipped(Exception):
    pass


def _need(n):
    if N < n:
        _skip(f"needs {n} GPU adapter(s), this machine has {N}")


def _onnx_mlp():
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
         helper.make_node("Relu", ["a"], ["y"])],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
         helper.make_tensor("b", TensorProto.FLOAT, b.shape, b.ravel())])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString(), w, b


def test_index_past_last_gpu_is_refused():
    _need(1)
    x = mpsrt.to_tensor(np.ones(4, np.float32))
    try:
        x.to(f"mps:{N}")
    except (ValueError, RuntimeError) as e:
        assert str(N) in str(e), e
    else:
        raise AssertionError(f"mps:{N} accepted on a machine with {N} GPU(s)")


def test_tensor_on_every_gpu_and_ops_there():
    _need(2)
    a = np.arange(1000, dtype=np.float32).reshape(10, 100) / 7
    for i in range(N):
        t = mpsrt.to_tensor(a, place=f"mps:{i}")
        assert t.place == f"mps:{i}"
        y = (t * 2 + 1).sum(axis=1)
        assert y.place == f"mps:{i}"
        np.testing.assert_allclose(y.numpy(), (a * 2 + 1).sum(axis=1), rtol=1e-5)


def test_copies_between_gpus_go_through_the_host():
    _need(2)
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float16, np.int32):
        a = (rng.standard_normal((33, 65)) * 10).astype(dtype)
        t0 = mpsrt.to_tensor(a, place="mps:0")
        for j in range(1, N):
            tj = t0.to(f"mps:{j}")
            assert tj.place == f"mps:{j}"
            np.testing.assert_array_equal(tj.numpy(), a)
            back = tj.to("mps:0")
            np.testing.assert_array_equal(back.numpy(), a)
        # A view (a non-contiguous slice) crosses as its own values.
        v = t0[:, 1::2]
        np.testing.assert_array_equal(v.to(f"mps:{N - 1}").numpy(), a[:, 1::2])


def test_sessions_on_every_gpu_agree():
    _need(2)
    model, w, b = _onnx_mlp()
    x = np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32)
    want = np.maximum(x @ w + b, 0)
    outs = []
    for i in range(N):
        s = mpsrt.onnx.InferenceSession(model, place=f"mps:{i}")
        assert s.place == f"mps:{i}"
        (y,) = s.run(None, {"x": x})
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
        outs.append(y)
    for y in outs[1:]:  # same kernels on the same kind of GPU: the same bits
        np.testing.assert_array_equal(y, outs[0])


if __name__ == "__main__":
    _SCRIPT = True
    failed = 0
    for name, fn in sorted(globals().items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                print(f"PASS {name}")
            except _Skipped as e:
                print(f"SKIP {name}: {e}")
            except Exception as e:  # noqa: BLE001 - report every failure, then exit non-zero
                failed += 1
                print(f"FAIL {name}: {type(e).__name__}: {e}")
    print(f"{N} GPU(s); {failed} failed")
    sys.exit(1 if failed else 0)
