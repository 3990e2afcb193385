"""MpsrtExecutionProvider's device memory: the allocator and data transfer it registers with
onnxruntime, IO binding of values in mpsrt device memory, two sessions chained on the device
(no host round trip between them, counted by the provider's own traffic counters), fp16 models
and com.microsoft contrib ops, each checked against ORT's CPU EP."""
import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import mpsrt.ort as mo  # noqa: E402

from conftest import need_gpu  # noqa: E402

EP = "MpsrtExecutionProvider"
PROVIDERS = [EP, "CPUExecutionProvider"]

if not hasattr(ort, "register_execution_provider_library"):
    pytest.skip("onnxruntime without plugin EPs", allow_module_level=True)


@pytest.fixture(scope="module", autouse=True)
def registered():
    need_gpu()
    mo.register()
    yield


def model(nodes, inputs, outputs, inits=(), opsets=()):
    g = h.make_graph(nodes, "m", inputs, outputs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), *opsets])
    m.ir_version = 10
    return m.SerializeToString()


def dense(name, k, n, seed, act="Relu", dtype=np.float32):
    """y = act(x @ W + b) over [N, k] inputs."""
    rng = np.random.default_rng(seed)
    w = nh.from_array((rng.standard_normal((k, n)) * 0.3).astype(dtype), f"{name}_w")
    b = nh.from_array(rng.standard_normal(n).astype(dtype), f"{name}_b")
    et = T.FLOAT16 if dtype == np.float16 else T.FLOAT
    nodes = [h.make_node("MatMul", ["x", f"{name}_w"], ["p"]),
             h.make_node("Add", ["p", f"{name}_b"], ["q"]), h.make_node(act, ["q"], ["y"])]
    return model(nodes, [h.make_tensor_value_info("x", et, ["N", k])],
                 [h.make_tensor_value_info("y", et, ["N", n])], [w, b])


def cpu(m, feeds):
    return ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_device_memory_is_registered_and_round_trips():
    info = mo.device_memory_info()
    assert info.device_vendor_id == mo.MEMORY_VENDOR_ID
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    v = mo.ortvalue_from_numpy(x)
    assert v.shape() == [3, 5]
    np.testing.assert_array_equal(v.numpy(), x)
    # An odd number of bytes (bool) keeps its neighbours (ragged edge words merged).
    b = np.array([True, False, True], dtype=np.bool_)
    np.testing.assert_array_equal(mo.ortvalue_from_numpy(b).numpy(), b)


def test_chained_sessions_keep_data_on_the_device():
    a, bm = dense("a", 16, 32, 1), dense("b", 32, 8, 2, act="Tanh")
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    (want_y,) = cpu(a, {"x": x})
    (want_z,) = cpu(bm, {"x": want_y})
    sa = ort.InferenceSession(a, providers=PROVIDERS)
    sb = ort.InferenceSession(bm, providers=PROVIDERS)
    xd = mo.ortvalue_from_numpy(x)
    yd = mo.ortvalue_empty((4, 32), np.float32)
    zd = mo.ortvalue_empty((4, 8), np.float32)
    ia, ib = sa.io_binding(), sb.io_binding()
    ia.bind_ortvalue_input("x", xd)
    ia.bind_ortvalue_output("y", yd)
    ib.bind_ortvalue_input("x", yd)
    ib.bind_ortvalue_output("y", zd)
    for _ in range(2):  # the second round runs the plans already cached
        before = mo.transfer_stats()
        sa.run_with_iobinding(ia)
        sb.run_with_iobinding(ib)
        after = mo.transfer_stats()
        d = {k: after[k] - before[k] for k in after}
        assert d["host_to_device_bytes"] == 0 and d["device_to_host_bytes"] == 0, d
        assert d["inputs_in_place"] == 2 and d["inputs_copied"] == 0, d
        assert d["outputs_to_host"] == 0, d
    np.testing.assert_allclose(yd.numpy(), want_y, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(zd.numpy(), want_z, rtol=1e-4, atol=1e-5)


def test_host_inputs_go_through_the_data_transfer():
    m = dense("c", 8, 8, 4)
    x = np.random.default_rng(5).standard_normal((2, 8)).astype(np.float32)
    s = ort.InferenceSession(m, providers=PROVIDERS)
    before = mo.transfer_stats()
    (got,) = s.run(None, {"x": x})
    d = {k: v - before[k] for k, v in mo.transfer_stats().items()}
    np.testing.assert_allclose(got, cpu(m, {"x": x})[0], rtol=1e-4, atol=1e-5)
    # ORT copies the input to the provider's memory and the output back, once each.
    assert d["host_to_device_bytes"] == x.nbytes and d["device_to_host_bytes"] == got.nbytes, d
    assert d["inputs_in_place"] == 1 and d["outputs_on_device"] == 1, d
    # ORT allocates the graph output while Compute asks for it: the engine's result buffer is
    # registered as that allocation (no device copy).
    assert d["outputs_adopted"] == 1 and d["device_to_device_bytes"] == 0, d


def test_fp16_model_runs_on_the_provider():
    m = dense("h", 16, 8, 6, dtype=np.float16)
    x = np.random.default_rng(7).standard_normal((3, 16)).astype(np.float16)
    s = ort.InferenceSession(m, providers=PROVIDERS)
    before = mo.transfer_stats()["inputs_in_place"]
    (got,) = s.run(None, {"x": x})
    assert got.dtype == np.float16
    assert mo.transfer_stats()["inputs_in_place"] == before + 1  # ran on the provider
    np.testing.assert_allclose(got.astype(np.float32), cpu(m, {"x": x})[0].astype(np.float32),
                               rtol=2e-2, atol=2e-2)


def test_precision_fp16_option_runs_a_float32_model_in_float16():
    """precision=fp16: the engine's f16 pass (matmuls in float16, float32 inputs and outputs);
    close to the CPU EP at float16 tolerance, and not bit-equal to the fp32 provider run."""
    m = dense("p", 64, 32, 9, act="Tanh")
    x = np.random.default_rng(10).standard_normal((8, 64)).astype(np.float32)
    (want,) = cpu(m, {"x": x})
    runs = {}
    for precision in ("fp32", "fp16"):
        s = ort.InferenceSession(m, providers=[(EP, {"precision": precision}),
                                               "CPUExecutionProvider"])
        (runs[precision],) = s.run(None, {"x": x})
    assert runs["fp16"].dtype == np.float32
    np.testing.assert_allclose(runs["fp32"], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(runs["fp16"], want, rtol=2e-2, atol=2e-2)
    assert np.abs(runs["fp16"] - runs["fp32"]).max() > 0
