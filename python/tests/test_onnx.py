"""`mpsrt.onnx`: InferenceSession checked against onnxruntime on small `onnx.helper` models (those
tests skip without onnxruntime; the others compare with ONNX's reference evaluator and with the
shapes onnxruntime reports, written out), its onnxruntime-shaped constructor and error mapping,
and the ONNX backend driven by ONNX's own conformance runner (`BackendTest`), whose expected
outputs come from ONNX's reference implementation."""
import atexit
import os
import re
import shutil
import tempfile
import threading
import types
import unittest
import warnings

import numpy as np
import pytest

import mpsrt
from conftest import need_gpu

onnx = pytest.importorskip("onnx")
try:
    import onnxruntime as ort
except ImportError:  # optional: only the tests that compare with it need it
    ort = None
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
import onnx.backend.test  # noqa: E402

from mpsrt.onnx import backend as mpsrt_backend  # noqa: E402

OPSET = 17


def _model(nodes, inputs, outputs, inits=(), opset=OPSET, check=True):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8  # what the installed onnxruntime accepts for opset 17
    if check:  # the checker wants a shape on every graph output; onnxruntime does not
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
    if ort is None:
        pytest.skip("onnxruntime is not installed")
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


# ---------------------------------------------------------------- onnxruntime's constructor

def _unnamed(vi, *axes):
    """Clears the dim_param of `axes`: dims with neither dim_param nor dim_value."""
    for a in axes:
        vi.type.tensor_type.shape.dim[a].ClearField("dim_param")
    return vi


def test_providers_pick_the_place():
    model = mlp_model()
    sess = mpsrt.onnx.InferenceSession(model, providers=["CPUExecutionProvider"])
    assert (sess.place, sess.get_providers()) == ("cpu", ["CPUExecutionProvider"])
    # Unknown names fail loudly, naming the provider and the known ones.
    with pytest.raises(ValueError, match=r"'FooExecutionProvider'.*CPUExecutionProvider.*"
                                         r"CUDAExecutionProvider"):
        mpsrt.onnx.InferenceSession(model, providers=["FooExecutionProvider",
                                                      "CPUExecutionProvider"])
    # onnxruntime providers without an mpsrt counterpart are skipped, as a build without them.
    with pytest.warns(UserWarning, match="OpenVINOExecutionProvider"):
        sess = mpsrt.onnx.InferenceSession(model, providers=["OpenVINOExecutionProvider",
                                                             "CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    # Argument shapes onnxruntime rejects.
    with pytest.raises(ValueError, match="same length"):
        mpsrt.onnx.InferenceSession(model, providers=["CPUExecutionProvider"],
                                    provider_options=[{}, {}])
    with pytest.raises(ValueError, match="sequence"):
        mpsrt.onnx.InferenceSession(model, providers="CPUExecutionProvider")
    with pytest.raises(ValueError, match="device_id"):
        mpsrt.onnx.InferenceSession(model, providers=[("CUDAExecutionProvider",
                                                       {"device_id": "x"})])
    # onnxruntime's other keywords are accepted; anything else is a TypeError.
    mpsrt.onnx.InferenceSession(model, providers=["CPUExecutionProvider"], enable_fallback=0,
                                disabled_optimizers=[])
    with pytest.raises(TypeError, match="providerz"):
        mpsrt.onnx.InferenceSession(model, providerz=["CPUExecutionProvider"])


def test_gpu_providers_fall_back_without_a_gpu(monkeypatch):
    monkeypatch.setattr(mpsrt.mps, "is_available", lambda: False)
    monkeypatch.setattr(mpsrt.mps, "device_count", lambda: 0)
    model = mlp_model()
    with pytest.warns(UserWarning, match="'CUDAExecutionProvider' is not available"):
        sess = mpsrt.onnx.InferenceSession(model, providers=["CUDAExecutionProvider",
                                                             "CPUExecutionProvider"])
    assert (sess.place, sess.get_providers()) == ("cpu", ["CPUExecutionProvider"])
    # Nothing usable left: the CPU, as onnxruntime.
    with pytest.warns(UserWarning) as record:
        sess = mpsrt.onnx.InferenceSession(model, providers=["CoreMLExecutionProvider"])
    assert [str(w.message).split(";")[0] for w in record] == [
        "[onnx] provider 'CoreMLExecutionProvider' is not available (no GPU adapter is available)",
        "[onnx] no requested provider is available"]
    assert sess.get_providers() == ["CPUExecutionProvider"]
    # No providers: the GPU when there is one, here the CPU.
    assert mpsrt.onnx.InferenceSession(model).place == "cpu"
    assert mpsrt.onnx.get_available_providers() == ["CPUExecutionProvider"]


def test_gpu_providers(gpu):
    model = mlp_model()
    x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    for name in mpsrt.onnx.GPU_PROVIDERS:
        sess = mpsrt.onnx.InferenceSession(model, providers=[name, "CPUExecutionProvider"])
        assert sess.place.startswith("mps:") and sess.get_providers() == [name]
    # device_id, as a tuple or through provider_options; options come back as strings.
    n = mpsrt.mps.device_count()
    for kw in ({"providers": [("CUDAExecutionProvider", {"device_id": n - 1})]},
               {"providers": ["CUDAExecutionProvider"], "provider_options": [{"device_id": n - 1}]}):
        sess = mpsrt.onnx.InferenceSession(model, **kw)
        assert sess.place == f"mps:{n - 1}"
        assert sess.get_provider_options() == {"CUDAExecutionProvider": {"device_id": str(n - 1)}}
        for g, w in zip(sess.run(None, {"x": x}), want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    with pytest.warns(UserWarning, match="device_id 99 is out of range"):
        sess = mpsrt.onnx.InferenceSession(model, providers=[("CUDAExecutionProvider",
                                                              {"device_id": 99}),
                                                             "CPUExecutionProvider"])
    assert sess.place == "cpu"
    # place= wins over providers; a bare string in sess_options' position is the old place.
    sess = mpsrt.onnx.InferenceSession(model, providers=["CPUExecutionProvider"], place="mps")
    assert sess.place.startswith("mps:") and sess.get_providers() == ["MPSExecutionProvider"]
    assert mpsrt.onnx.InferenceSession(model, "cpu").place == "cpu"
    assert mpsrt.onnx.InferenceSession(model).place.startswith("mps:")
    assert mpsrt.onnx.get_available_providers() == ["MpsrtExecutionProvider",
                                                    "CPUExecutionProvider"]


def test_session_options(place):
    """Duck-typed onnxruntime.SessionOptions: ORT_DISABLE_ALL compiles without fusion, and the
    results match ONNX's reference evaluator either way."""
    model = mlp_model()
    x = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    level = types.SimpleNamespace(name="ORT_DISABLE_ALL")  # an enum member, as pybind11's
    cases = [(None, (True, True)),
             (types.SimpleNamespace(graph_optimization_level=level), (False, True)),
             (types.SimpleNamespace(graph_optimization_level=0), (False, True)),
             (types.SimpleNamespace(graph_optimization_level="ORT_ENABLE_BASIC"), (True, True)),
             (types.SimpleNamespace(graph_optimization_level=99, enable_mem_reuse=False),
              (True, False))]
    if ort is not None:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        cases.append((so, (False, True)))
    for so, flags in cases:
        sess = mpsrt.onnx.InferenceSession(model, so, place=place)
        assert sess._sess.options == flags
        for g, w in zip(sess.run(None, {"x": x}), want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="graph_optimization_level"):
        mpsrt.onnx.InferenceSession(model, types.SimpleNamespace(graph_optimization_level="max"))


def test_run_signature(place):
    model = mlp_model()
    sess = mpsrt.onnx.InferenceSession(model, place=place)
    x = np.ones((2, 4), np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    run_options = ort.RunOptions() if ort is not None else types.SimpleNamespace(log_severity_level=2)
    for names, idx in ((None, [0, 1]), ([], [0, 1]), (("p",), [1])):
        got = sess.run(names, {"x": x}, run_options)
        assert len(got) == len(idx)
        for g, i in zip(got, idx):
            np.testing.assert_allclose(g, want[i], rtol=1e-5, atol=1e-6)
    got = sess.run(output_names=["y"], input_feed={"x": x}, run_options=None)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- shapes as onnxruntime shows them

def dims_model():
    """x: ['N', <unnamed>, 4] and a runtime reshape target; outputs whose shapes come from
    inference only, from the declaration only, from both, or from neither."""
    x = _unnamed(helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "", 4]), 1)
    r2 = _unnamed(helper.make_tensor_value_info("r2", TensorProto.FLOAT, ["a", ""]), 1)
    return _model(
        [helper.make_node("Relu", ["x"], ["y"]),
         helper.make_node("Reshape", ["x", "s"], ["r"]),
         helper.make_node("Reshape", ["x", "s"], ["r2"]),
         helper.make_node("Concat", ["x", "x"], ["c"], axis=0),
         helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
         helper.make_node("ReduceSum", ["x", "axes"], ["part"], keepdims=0),
         helper.make_node("ReduceSum", ["x", "axes"], ["part2"], keepdims=0),
         helper.make_node("MatMul", ["x", "w"], ["m"]),
         helper.make_node("MatMul", ["x", "w"], ["m2"])],
        [x, helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
         helper.make_tensor_value_info("axes", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, "M"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, None),
         r2,
         helper.make_tensor_value_info("c", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("total", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("part", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("part2", TensorProto.FLOAT, ["N", 4]),
         _unnamed(helper.make_tensor_value_info("m", TensorProto.FLOAT, ["", "", "b"]), 0, 1),
         _unnamed(helper.make_tensor_value_info("m2", TensorProto.FLOAT, ["", ""]), 0, 1)],
        check=False)


# What onnxruntime 1.32 reports for `dims_model` (checked against it when it is installed).
DIMS_INPUTS = [["N", None, 4], [2], [1], [4, "M"]]
DIMS_OUTPUTS = {
    "y": ["N", None, 4],    # inferred: dim_param names survive, unnamed dims are None
    "r": [None, None],      # rank from the shape input's length, values only at run time
    "r2": ["a", None],      # declared names win over what inference cannot tell
    "c": [None, None, 4],   # N + N has no name
    "total": [],            # a scalar
    "part": [],             # rank unknown until the axes are known
    "part2": ["N", 4],      # ... unless declared
    "m": ["N", None, "b"],  # inference fills what the declaration leaves out
    "m2": [],               # declared rank 2, inferred 3: onnxruntime's lenient merge
}


def test_symbolic_and_unknown_dims(place, tmp_path):
    model = dims_model()
    path = tmp_path / "dims.onnx"
    onnx.save(model, str(path))
    for src in (model, str(path)):  # declarations are read from bytes and from files alike
        sess = mpsrt.onnx.InferenceSession(src, place=place)
        assert [i.shape for i in sess.get_inputs()] == DIMS_INPUTS
        assert {o.name: o.shape for o in sess.get_outputs()} == DIMS_OUTPUTS
    if ort is not None:
        ref = _ort(model)
        assert [i.shape for i in ref.get_inputs()] == DIMS_INPUTS
        assert {o.name: o.shape for o in ref.get_outputs()} == DIMS_OUTPUTS
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((2, 3, 4)).astype(np.float32),
             "s": np.array([3, 8], np.int64), "axes": np.array([1], np.int64),
             "w": rng.standard_normal((4, 5)).astype(np.float32)}
    got = sess.run(None, feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- input dtypes

# Every ONNX element type mpsrt holds (int16/uint16 as int32, uint32/uint64 as int64).
DTYPES = [("BOOL", np.bool_), ("UINT8", np.uint8), ("INT8", np.int8), ("UINT16", np.uint16),
          ("INT16", np.int16), ("INT32", np.int32), ("UINT32", np.uint32), ("INT64", np.int64),
          ("UINT64", np.uint64), ("FLOAT16", np.float16), ("FLOAT", np.float32),
          ("DOUBLE", np.float64)]


def _dtype_model(elem):
    t = getattr(TensorProto, elem)
    op = "Or" if elem == "BOOL" else "Add"
    return _model([helper.make_node(op, ["x", "x"], ["s"]), helper.make_node("Identity", ["x"], ["y"])],
                  [helper.make_tensor_value_info("x", t, ["N"])],
                  [helper.make_tensor_value_info("s", t, ["N"]),
                   helper.make_tensor_value_info("y", t, ["N"])])


@pytest.mark.parametrize("elem,np_dtype", DTYPES, ids=[d[0].lower() for d in DTYPES])
def test_input_dtypes(place, elem, np_dtype):
    """Feeds of each declared dtype are accepted, results come back in it, and the values match
    ONNX's reference evaluator; NodeArg types are onnxruntime's."""
    model = _dtype_model(elem)
    sess = mpsrt.onnx.InferenceSession(model, place=place)
    dt = np.dtype(np_dtype)
    assert [(a.type, a.dtype) for a in sess.get_inputs() + sess.get_outputs()] == \
        [(mpsrt.onnx.onnx_type(dt.name), dt.name)] * 3
    if ort is not None:
        assert [a.type for a in _ort(model).get_inputs()] == [sess.get_inputs()[0].type]
    if dt.kind == "b":
        x = np.array([True, False, True, False])
    else:
        # Values past the int32 range where the dtype has them (x + x still fits). The GPU
        # computes 64-bit integers (so uint32 too) in int32, so only the CPU gets those.
        big = np.iinfo(dt).max // 2 if dt.kind in "iu" else 1000.5
        if place != "cpu" and dt.name in ("int64", "uint64", "uint32"):
            big = 2**29
        x = np.array([0, 1, 7, big], dtype=dt)
    got = sess.run(None, {"x": x})
    want = ReferenceEvaluator(model).run(None, {"x": x})
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype == dt
        np.testing.assert_array_equal(g, w)
    # Lists are converted to the declared dtype, as onnxruntime does.
    np.testing.assert_array_equal(sess.run(["y"], {"x": x.tolist()})[0], x)


def test_input_dtype_errors(place):
    sess = mpsrt.onnx.InferenceSession(_dtype_model("UINT16"), place=place)
    # A wrong dtype names the input, the expected and the given type (onnxruntime: InvalidArgument).
    with pytest.raises(TypeError, match=r"input 'x': expected dtype uint16 \(tensor\(uint16\)\), "
                                        r"given int32 \(tensor\(int32\)\)"):
        sess.run(None, {"x": np.ones(2, np.int32)})
    # A dtype mpsrt cannot hold at all also lists what it can.
    with pytest.raises(TypeError, match=r"input 'x': expected dtype uint16.*given complex64, "
                                        r"which mpsrt cannot hold; supported .*int16.*float64"):
        sess.run(None, {"x": np.ones(2, np.complex64)})
    u64 = mpsrt.onnx.InferenceSession(_dtype_model("UINT64"), place="cpu")
    with pytest.raises(TypeError, match=r"input 'x': uint64 value 9223372036854775808 does not fit"):
        u64.run(None, {"x": np.array([2**63], np.uint64)})
    edge = np.array([2**63 - 1], np.uint64)
    np.testing.assert_array_equal(u64.run(["y"], {"x": edge})[0], edge)


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
