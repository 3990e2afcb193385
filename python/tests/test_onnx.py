"""`mpsrt.onnx`: InferenceSession checked against onnxruntime on small `onnx.helper` models, its
error mapping, and the ONNX backend driven by ONNX's own conformance runner (`BackendTest`),
whose expected outputs come from ONNX's reference implementation."""
import atexit
import os
import re
import shutil
import tempfile
import threading
import unittest
import warnings

import numpy as np
import pytest

import mpsrt
from conftest import need_gpu

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
import onnx.backend.test  # noqa: E402

from mpsrt.onnx import backend as mpsrt_backend  # noqa: E402

OPSET = 17


def _model(nodes, inputs, outputs, inits=(), opset=OPSET):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8  # what the installed onnxruntime accepts for opset 17
    onnx.checker.check_model(m)
    return m


def mlp_model():
    """y = relu(x @ W + b), p = softmax(y); `batch` is a named dynamic dim."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    return _model(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]),
         helper.make_node("Add", ["xw", "b"], ["xwb"]),
         helper.make_node("Relu", ["xwb"], ["y"]),
         helper.make_node("Softmax", ["y"], ["p"], axis=-1)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("p", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])


def reshape_model():
    """z = reshape(x, shape) * 2 with an int64 shape input; x has an unnamed dynamic dim."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 6])
    x.type.tensor_type.shape.dim[0].ClearField("dim_param")
    return _model(
        [helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("Mul", ["r", "two"], ["z"])],
        [x, helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, None])],
        [numpy_helper.from_array(np.array(2.0, np.float32), "two")])


def _ort(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------- InferenceSession vs onnxruntime

def test_io_info_matches_onnxruntime(place):
    for model in (mlp_model(), reshape_model()):
        ours, ref = mpsrt.onnx.InferenceSession(model.SerializeToString(), place=place), _ort(model)
        for a, b in zip(ours.get_inputs(), ref.get_inputs(), strict=True):
            assert (a.name, a.type, a.shape) == (b.name, b.type, b.shape)
        got = [(o.name, o.type) for o in ours.get_outputs()]
        assert got == [(o.name, o.type) for o in ref.get_outputs()]
    assert mpsrt.onnx.InferenceSession(mlp_model(), place).get_outputs()[0].shape == ["batch", 3]


@pytest.mark.parametrize("batch", [1, 5])
def test_mlp_matches_onnxruntime(place, batch):
    model = mlp_model()
    sess = mpsrt.onnx.InferenceSession(model.SerializeToString(), place=place)
    x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
    got = sess.run(None, {"x": x})
    want = _ort(model).run(None, {"x": x})
    assert len(got) == 2
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    # Selected outputs come back in the order asked.
    p, y = sess.run(["p", "y"], {"x": x})
    np.testing.assert_allclose(p, want[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, want[0], rtol=1e-5, atol=1e-6)


def test_int64_shape_input_matches_onnxruntime(place):
    model = reshape_model()
    sess = mpsrt.onnx.InferenceSession(model.SerializeToString(), place=place)
    ref = _ort(model)
    x = np.arange(18, dtype=np.float32).reshape(3, 6)
    for shape in ([9, 2], [2, -1], [1, 18]):
        feeds = {"x": x, "shape": np.array(shape, np.int64)}
        (got,), (want,) = sess.run(None, feeds), ref.run(None, feeds)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_model_sources(place, tmp_path):
    model = mlp_model()
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    x = np.ones((2, 4), np.float32)
    want = _ort(model).run(["y"], {"x": x})[0]
    for src in (str(path), path, model.SerializeToString(), model):
        sess = mpsrt.onnx.InferenceSession(src, place=place)
        np.testing.assert_allclose(sess.run(["y"], {"x": x})[0], want, rtol=1e-5, atol=1e-6)


def test_places_are_canonical(place):
    sess = mpsrt.onnx.InferenceSession(mlp_model(), place=place)
    assert sess.place == ("cpu" if place == "cpu" else f"mps:{mpsrt.mps.current_device()}")
    if place != "cpu":
        for alias in ("gpu", "gpu:0", "mps:0"):
            assert mpsrt.onnx.InferenceSession(mlp_model(), place=alias).place == "mps:0"


def test_concurrent_runs(place):
    """`run` releases the GIL; concurrent runs from threads must each get their own answer."""
    model = mlp_model()
    sess, ref = mpsrt.onnx.InferenceSession(model, place=place), _ort(model)
    xs = [np.full((3, 4), i, np.float32) for i in range(4)]
    results = [None] * len(xs)

    def work(i):
        results[i] = sess.run(["y"], {"x": xs[i]})[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, got in zip(xs, results):
        np.testing.assert_allclose(got, ref.run(["y"], {"x": x})[0], rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- errors

def test_load_errors(tmp_path):
    with pytest.raises(OSError, match="cannot read"):
        mpsrt.onnx.InferenceSession(str(tmp_path / "missing.onnx"), place="cpu")
    with pytest.raises(ValueError, match="not a valid ONNX model"):
        mpsrt.onnx.InferenceSession(b"\xff\x00 definitely not protobuf", place="cpu")
    with pytest.raises(TypeError):
        mpsrt.onnx.InferenceSession(12345, place="cpu")
    with pytest.raises(ValueError, match=r"\[place\]"):
        mpsrt.onnx.InferenceSession(mlp_model(), place="cuda")


def test_unsupported_op_is_not_implemented(place):
    assert "Det" not in mpsrt.onnx.supported_ops()
    model = _model([helper.make_node("Det", ["x"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    with pytest.raises(NotImplementedError, match="Det"):
        mpsrt.onnx.InferenceSession(model, place=place)


def test_run_errors(place):
    sess = mpsrt.onnx.InferenceSession(mlp_model(), place=place)
    x = np.ones((2, 4), np.float32)
    with pytest.raises(ValueError, match="unknown input"):
        sess.run(None, {"x": x, "nope": x})
    with pytest.raises(ValueError, match="missing input"):
        sess.run(None, {})
    with pytest.raises(ValueError, match="expected shape"):
        sess.run(None, {"x": np.ones((2, 5), np.float32)})
    with pytest.raises(ValueError, match="expected shape"):
        sess.run(None, {"x": np.ones(4, np.float32)})
    with pytest.raises(TypeError, match="expected dtype float32"):
        sess.run(None, {"x": x.astype(np.float64)})
    with pytest.raises(TypeError):
        sess.run(None, {"x": x.astype(np.complex64)})
    with pytest.raises(ValueError, match="unknown output"):
        sess.run(["q"], {"x": x})
    # A failed run leaves the session usable.
    assert sess.run(["y"], {"x": x})[0].shape == (2, 3)


# ---------------------------------------------------------------- ONNX backend API

def test_backend_api(place):
    device = "CPU" if place == "cpu" else "MPS"
    assert mpsrt_backend.supports_device(device)
    assert mpsrt_backend.supports_device("CUDA") == mpsrt.mps.is_available()
    assert not mpsrt_backend.supports_device("TPU")
    model = mlp_model()
    x = np.random.default_rng(7).standard_normal((3, 4)).astype(np.float32)
    want = _ort(model).run(None, {"x": x})
    rep = mpsrt_backend.prepare(model, device)
    for outs in (rep.run([x]), rep.run({"x": x}), mpsrt_backend.run_model(model, [x], device)):
        assert len(outs) == 2
        np.testing.assert_allclose(outs[0], want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(outs["p"], want[1], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="takes 1 input"):
        rep.run([x, x])


def test_backend_gpu_is_tested():
    """The conformance cases below skip their `_cuda` half without a GPU: make that loud."""
    need_gpu()
    assert mpsrt_backend.supports_device("CUDA")


# ONNX's conformance runner: node cases (expected outputs from ONNX's reference implementation)
# on CPU and GPU (the runner calls the GPU "CUDA"), plus one light model. The patterns are the
# op families the engine implements and passes; they are anchored so that e.g. `test_add` does
# not pull in `test_add_uint16`-style variants whose dtypes mpsrt tensors do not have.
_D = r"_(cpu|cuda)$"
_CONFORMANCE = [
    r"^test_relu" + _D,
    r"^test_(add|mul)(_bcast)?" + _D,
    r"^test_matmul_[234]d(_1d)?" + _D,
    r"^test_softmax_(axis_[012]|default_axis|example|large_number|negative_axis)" + _D,
    r"^test_conv_with_strides_(and_asymmetric_padding|no_padding|padding)" + _D,
    r"^test_basic_conv_with(out)?_padding" + _D,
    r"^test_gemm_(default_\w+_bias|all_attributes|alpha|beta|transposeA|transposeB)" + _D,
    r"^test_reduce_(sum|mean|max)_(default_axes_keepdims|keepdims|do_not_keepdims)_example" + _D,
    r"^test_(maxpool|averagepool)_2d_default" + _D,
    r"^test_globalaveragepool" + _D,
    r"^test_batchnorm_example" + _D,
    r"^test_concat_2d_axis_[01]" + _D,
    r"^test_sigmoid" + _D,
    r"^test_transpose_default" + _D,
    r"^test_reshape_reordered_all_dims" + _D,
    r"^test_squeezenet" + _D,
]

# The light model suite writes its generated inputs under $ONNX_HOME: keep that out of ~.
if "ONNX_HOME" not in os.environ:
    os.environ["ONNX_HOME"] = tempfile.mkdtemp(prefix="mpsrt-onnx-home-")
    atexit.register(shutil.rmtree, os.environ["ONNX_HOME"], ignore_errors=True)

with warnings.catch_warnings():
    # Building ONNX's node cases computes their expected outputs, with numpy warnings on purpose.
    warnings.simplefilter("ignore")
    _backend_test = onnx.backend.test.BackendTest(mpsrt_backend, __name__)
def _selected_cases(runner):
    """The runner's test classes reduced to the selected tests. (`include` alone would keep the
    other ~4000 as skipped tests: noise in the report and a useless emptiness check.)"""
    cases = {}
    for cname, case in runner.test_cases.items():
        tests = {n: f for n, f in vars(case).items()
                 if n.startswith("test_") and any(re.search(p, n) for p in _CONFORMANCE)}
        if tests:
            cases[cname] = type(cname, (unittest.TestCase,), {"__module__": __name__, **tests})
    return cases


for _pattern in _CONFORMANCE:
    _backend_test.include(_pattern)
_CONFORMANCE_CASES = _selected_cases(_backend_test)
globals().update(_CONFORMANCE_CASES)


def test_conformance_selection_is_not_empty():
    """Every pattern must select a test: one that matches nothing would silently test nothing."""
    names = [n for case in _CONFORMANCE_CASES.values() for n in vars(case) if n.startswith("test_")]
    for pattern in _CONFORMANCE:
        assert any(re.search(pattern, n) for n in names), pattern
    assert any(n.endswith("_cuda") for n in names) and any(n.endswith("_cpu") for n in names)
