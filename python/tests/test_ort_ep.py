"""mpsrt as an onnxruntime plugin execution provider (`mpsrt.ort`), checked against ORT's own
CPU EP on the same models: the ONNX light models, a sample of ONNX node tests, a transformer
encoder with int64 ids, a model whose middle op the engine lacks (partial claim, placement read
from ORT's profile), com.microsoft contrib ops, the cost model, every
`graph_optimization_level`, error paths, unregister/re-register and
two sessions on two threads. Placement comes from ORT's profiler (each kernel event names its
provider), so a test fails if the EP silently claims nothing."""
import glob
import json
import os
import threading

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
DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")

if not hasattr(ort, "register_execution_provider_library"):
    pytest.skip("onnxruntime without plugin EPs", allow_module_level=True)


@pytest.fixture(scope="module", autouse=True)
def registered():
    need_gpu()
    mo.register()
    yield


def make_model(graph, *opsets):
    """A model onnxruntime 1.31 accepts (IR <= 13; onnx 1.23 writes IR 14 by default)."""
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), *opsets])
    m.ir_version = 10
    return m


def _options(level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL, profile=None):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = str(profile)
    return so


def placement(sess):
    """`{provider: number of kernel runs}` from ORT's profile of the runs so far."""
    path = sess.end_profiling()
    try:
        with open(path) as f:
            events = json.load(f)
    finally:
        os.remove(path)
    counts = {}
    ops = {}
    for e in events:
        args = e.get("args", {})
        if e.get("cat") == "Node" and "provider" in args and e["name"].endswith("_kernel_time"):
            counts[args["provider"]] = counts.get(args["provider"], 0) + 1
            ops.setdefault(args["provider"], set()).add(args.get("op_name", "?"))
    return counts, ops


def run_both(model, feeds, tmp_path, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
             provider_options=None):
    """Outputs of the CPU EP and of our EP, and our run's placement."""
    data = model if isinstance(model, bytes) else model.SerializeToString()
    ref = ort.InferenceSession(data, _options(level), providers=["CPUExecutionProvider"])
    want = ref.run(None, feeds)
    providers = [(EP, provider_options or {}), "CPUExecutionProvider"]
    sess = ort.InferenceSession(data, _options(level, tmp_path / "p"), providers=providers)
    assert sess.get_providers()[0] == EP
    got = sess.run(None, feeds)
    return want, got, placement(sess)


def assert_outputs_close(want, got, rtol=1e-3, atol=1e-4):
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert w.shape == g.shape and w.dtype == g.dtype, (w.shape, g.shape, w.dtype, g.dtype)
        scale = float(np.abs(w).max()) if w.size and w.dtype.kind == "f" else 1.0
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * max(scale, 1.0))


def test_library_and_devices():
    assert mo.get_ep_name() == EP
    assert os.path.exists(mo.get_library_path())
    mo.register()  # idempotent
    mo.register()
    devs = mo.get_ep_devices()
    assert len(devs) >= 1
    assert all(d.ep_vendor == "mpsrt" for d in devs)
    assert "mpsrt.device" in dict(devs[0].ep_metadata)
    assert EP in ort.get_available_providers() or devs


LIGHT = sorted(os.path.basename(p)[len("light_"):-len(".onnx")]
               for p in glob.glob(os.path.join(DATA, "light", "light_*.onnx")))


# lavapipe (CI's CPU-emulated Vulkan) needs seconds per run of the larger ones: those go through
# the EP onto mpsrt's CPU backend (`device_id=cpu`: same plugin path, conversion and engine);
# the three smallest run on the GPU. Real GPUs run all of them in bench/ort_ep.py.
ON_GPU = {"squeezenet", "shufflenet", "inception_v1"}


@pytest.mark.parametrize("name", LIGHT)
def test_light_models_match_cpu_ep(name, tmp_path):
    opts = {} if name in ON_GPU else {"device_id": "cpu"}
    with open(os.path.join(DATA, "light", f"light_{name}.onnx"), "rb") as f:
        model = f.read()
    # IR 3 models list their initializers among the inputs: ORT's session knows the real one.
    (inp,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).get_inputs()
    x = np.random.default_rng(0).standard_normal(inp.shape).astype(np.float32)
    want, got, (counts, _) = run_both(model, {inp.name: x}, tmp_path, provider_options=opts)
    assert counts.get(EP, 0) >= 1, counts
    assert_outputs_close(want, got)


NODE_TESTS = [
    "test_add_bcast", "test_relu", "test_sigmoid", "test_tanh", "test_softmax_axis_1",
    "test_matmul_3d", "test_gemm_default_matrix_bias", "test_conv_with_strides_padding",
    "test_maxpool_2d_pads", "test_averagepool_2d_strides", "test_batchnorm_epsilon",
    "test_layer_normalization_4d_axis1", "test_reduce_mean_keepdims_example",
    "test_transpose_all_permutations_3", "test_gelu_tanh_1", "test_leakyrelu",
    "test_instancenorm_example", "test_globalaveragepool", "test_erf", "test_pow_bcast_array",
]


def _load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return nh.to_array(t)


# ONNX's node tests are generated, not stored, in the wheel; `make conformance` (run by `make
# test` before pytest) dumps them here.
NODE_DIR = os.path.join(os.environ.get("MPSRT_CONFORMANCE_DIR") or os.path.join(
    os.path.dirname(__file__), "..", "..", "target", "onnx-conformance"), "node")


@pytest.mark.parametrize("name", NODE_TESTS)
def test_node_tests_match_cpu_ep(name, tmp_path):
    d = os.path.join(NODE_DIR, name)
    if not os.path.isdir(d):
        pytest.skip(f"{d} is missing: run `make conformance` (scripts/conformance.sh) first")
    model = onnx.load(os.path.join(d, "model.onnx"))
    inputs = [i.name for i in model.graph.input]
    feeds = {n: _load_pb(os.path.join(d, "test_data_set_0", f"input_{k}.pb"))
             for k, n in enumerate(inputs)}
    # min_elements=0: these tensors are tiny; the cost model would leave them to ORT.
    want, got, (counts, _) = run_both(model, feeds, tmp_path,
                                      ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                      provider_options={"min_elements": "0"})
    assert counts.get(EP, 0) == 1, counts
    assert_outputs_close(want, got)


def encoder(vocab=50, d=16, heads=2, ff=32):
    """One post-norm transformer encoder layer over int64 token ids, dynamic batch and seq."""
    rng = np.random.default_rng(1)
    w = lambda name, *s: nh.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), name)  # noqa: E731
    i64 = lambda name, v: nh.from_array(np.array(v, np.int64), name)  # noqa: E731
    hd = d // heads
    inits = [w("emb", vocab, d), w("pos", 64, d), w("wq", d, d), w("wk", d, d), w("wv", d, d),
             w("wo", d, d), w("w1", d, ff), w("w2", ff, d), w("g1", d), w("b1", d), w("g2", d),
             w("b2", d), i64("split_shape", [0, 0, heads, hd]), i64("merge_shape", [0, 0, d]),
             i64("zero", [0]), i64("one", [1]), i64("ax0", [0]),
             nh.from_array(np.array(1.0 / np.sqrt(hd), np.float32), "scale")]
    n = h.make_node
    nodes = [
        n("Gather", ["emb", "ids"], ["tok"]),
        n("Shape", ["ids"], ["ids_shape"]),
        n("Slice", ["ids_shape", "one", "split_shape_2", "ax0"], ["seq_len"]),
        n("Slice", ["pos", "zero", "seq_len", "ax0"], ["pos_s"]),
        n("Add", ["tok", "pos_s"], ["x0"]),
    ]
    inits.append(i64("split_shape_2", [2]))
    for nm in ("q", "k", "v"):
        nodes += [n("MatMul", ["x0", f"w{nm}"], [f"{nm}_"]),
                  n("Reshape", [f"{nm}_", "split_shape"], [f"{nm}_r"]),
                  n("Transpose", [f"{nm}_r"], [f"{nm}_t"],
                    perm=[0, 2, 3, 1] if nm == "k" else [0, 2, 1, 3])]
    nodes += [
        n("MatMul", ["q_t", "k_t"], ["qk"]), n("Mul", ["qk", "scale"], ["qk_s"]),
        n("Softmax", ["qk_s"], ["att"], axis=-1), n("MatMul", ["att", "v_t"], ["ctx"]),
        n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx_t", "merge_shape"], ["ctx_m"]), n("MatMul", ["ctx_m", "wo"], ["o"]),
        n("Add", ["o", "x0"], ["r1"]),
        n("LayerNormalization", ["r1", "g1", "b1"], ["n1"], axis=-1, epsilon=1e-5),
        n("MatMul", ["n1", "w1"], ["f1"]), n("Relu", ["f1"], ["f1r"]),
        n("MatMul", ["f1r", "w2"], ["f2"]), n("Add", ["f2", "n1"], ["r2"]),
        n("LayerNormalization", ["r2", "g2", "b2"], ["y"], axis=-1, epsilon=1e-5),
    ]
    g = h.make_graph(nodes, "encoder", [h.make_tensor_value_info("ids", T.INT64, ["B", "S"])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["B", "S", d])], inits)
    m = make_model(g)
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("level", [ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                   ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                   ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                                   ort.GraphOptimizationLevel.ORT_ENABLE_ALL],
                         ids=["disabled", "basic", "extended", "all"])
def test_transformer_encoder_int64_ids_at_every_optimization_level(level, tmp_path):
    m = encoder()
    rng = np.random.default_rng(2)
    data = m.SerializeToString()
    ref = ort.InferenceSession(data, _options(level), providers=["CPUExecutionProvider"])
    sess = ort.InferenceSession(data, _options(level, tmp_path / "p"), providers=PROVIDERS)
    for shape in [(2, 7), (1, 12), (2, 7)]:  # two shapes: two plans from the cache, then a hit
        ids = rng.integers(0, 50, size=shape).astype(np.int64)
        assert_outputs_close(ref.run(None, {"ids": ids}), sess.run(None, {"ids": ids}))
    counts, ops = placement(sess)
    assert counts.get(EP, 0) >= 3, counts


def test_partial_claim_around_an_op_the_engine_lacks(tmp_path):
    c = nh.from_array(np.array(2.0, np.float32), "c")
    nodes = [h.make_node("Relu", ["x"], ["a"]), h.make_node("Mul", ["a", "c"], ["b"]),
             h.make_node("Det", ["b"], ["d"]),  # not in mpsrt's importer: stays on the CPU EP
             h.make_node("Sigmoid", ["d"], ["e"]), h.make_node("Mul", ["e", "c"], ["y"])]
    g = h.make_graph(nodes, "partial", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["N"])], [c])
    m = make_model(g)
    x = np.random.default_rng(3).standard_normal((4, 3, 3)).astype(np.float32)
    want, got, (counts, ops) = run_both(m, {"x": x}, tmp_path,
                                        ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert_outputs_close(want, got)
    assert counts.get(EP) == 2, counts  # Relu+Mul fused, Sigmoid+Mul fused
    # Det's input and output cross between mpsrt device memory and the host: ORT's Memcpy nodes
    # (run through the provider's data transfer) sit on either side of it.
    assert ops["CPUExecutionProvider"] == {"Det", "MemcpyToHost", "MemcpyFromHost"}, ops


MS = "com.microsoft"


def _contrib_case(name):
    """(nodes, inputs, outputs, initializers, feeds) of one contrib op between Relu and Tanh."""
    rng = np.random.default_rng(4)
    f = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    vi = h.make_tensor_value_info
    n = h.make_node
    x3 = vi("x", T.FLOAT, ["N", "S", 16])
    feeds = {"x": f(2, 5, 16)}
    inits, outs, extra_out = [], [vi("y", T.FLOAT, None)], []
    mask = np.ones((2, 5), np.int32)
    mask[1, 3:] = 0
    if name in ("Gelu", "QuickGelu"):
        op = n(name, ["a"], ["b"], domain=MS, **({"alpha": 1.5} if name == "QuickGelu" else {}))
    elif name in ("FastGelu", "BiasGelu"):
        inits.append(nh.from_array(f(16), "bias"))
        op = n(name, ["a", "bias"], ["b"], domain=MS)
    elif name == "FusedMatMul":
        inits.append(nh.from_array(f(16, 16), "w"))
        op = n("FusedMatMul", ["a", "w"], ["b"], domain=MS, transB=1, alpha=0.5)
    elif name == "SkipLayerNormalization":
        inits += [nh.from_array(f(2, 5, 16), "skip"), nh.from_array(f(16), "g"),
                  nh.from_array(f(16), "beta"), nh.from_array(f(16), "bias")]
        op = n(name, ["a", "skip", "g", "beta", "bias"], ["b", "", "", "sum"], domain=MS,
               epsilon=1e-5)
        extra_out = [vi("sum", T.FLOAT, None)]
    elif name == "SkipSimplifiedLayerNormalization":
        inits += [nh.from_array(f(2, 5, 16), "skip"), nh.from_array(f(16), "g")]
        op = n(name, ["a", "skip", "g"], ["b"], domain=MS, epsilon=1e-5)
    elif name == "SimplifiedLayerNormalization":
        inits.append(nh.from_array(f(16), "g"))
        op = n(name, ["a", "g"], ["b"], axis=-1, epsilon=1e-5)
    elif name.startswith("Attention"):
        inits += [nh.from_array(f(16, 48), "wqkv"), nh.from_array(f(48), "bqkv"),
                  nh.from_array(mask, "mask")]
        causal = {"unidirectional": 1} if name.endswith("causal") else {}
        op = n("Attention", ["a", "wqkv", "bqkv", "mask"], ["b"], domain=MS, num_heads=2,
               **causal)
    elif name == "MultiHeadAttention":
        inits += [nh.from_array(f(48), "bqkv"), nh.from_array(mask, "mask")]
        op = n(name, ["a", "a", "a", "bqkv", "mask"], ["b"], domain=MS, num_heads=2)
    else:
        raise AssertionError(name)
    nodes = [n("Relu", ["x"], ["a"]), op, n("Tanh", ["b"], ["y"])]
    return nodes, [x3], outs + extra_out, inits, feeds


CONTRIB = ["Gelu", "FastGelu", "BiasGelu", "QuickGelu", "FusedMatMul",
           "SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
           "SimplifiedLayerNormalization", "Attention", "Attention_causal", "MultiHeadAttention"]


@pytest.mark.parametrize("contrib", CONTRIB)
def test_contrib_ops_are_claimed_and_match_the_cpu_ep(contrib, tmp_path):
    """com.microsoft ops (as ORT's transformer optimizer saves them) are rewritten into ONNX
    nodes and run on the provider, fused with their neighbours into one node."""
    nodes, ins, outs, inits, feeds = _contrib_case(contrib)
    m = make_model(h.make_graph(nodes, "contrib", ins, outs, inits), h.make_opsetid(MS, 1))
    want, got, (counts, ops) = run_both(m, feeds, tmp_path,
                                        ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert_outputs_close(want, got)
    assert counts.get(EP) == 1 and "CPUExecutionProvider" not in counts, (counts, ops)


def test_contrib_variants_without_a_rewrite_are_left_to_ort(tmp_path):
    """FusedMatMul with transBatchA has no rewrite: the trial import fails, ORT's CPU EP keeps
    that node (more refused variants in test_ort_contrib.py)."""
    nodes, ins, outs, inits, feeds = _contrib_case("FusedMatMul")
    nodes[1].attribute.append(h.make_attribute("transBatchA", 1))
    inits[0] = nh.from_array(nh.to_array(inits[0])[None], "w")  # rank 3, as transBatchA needs
    m = make_model(h.make_graph(nodes, "contrib", ins, outs, inits), h.make_opsetid(MS, 1))
    want, got, (counts, ops) = run_both(m, feeds, tmp_path,
                                        ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert_outputs_close(want, got)
    assert ops["CPUExecutionProvider"] - {"MemcpyToHost", "MemcpyFromHost"} == {"FusedMatMul"}, ops
    assert counts.get(EP) == 2, counts


def test_cost_model_leaves_a_tiny_static_node_to_the_cpu_ep(tmp_path):
    """One Relu on 12 elements costs less on ORT's CPU EP than a GPU round trip: not claimed,
    unless min_elements=0; a MatMul of the same size is claimed (a heavy op)."""
    small = make_model(h.make_graph([h.make_node("Relu", ["x"], ["y"])], "tiny",
                                    [h.make_tensor_value_info("x", T.FLOAT, [3, 4])],
                                    [h.make_tensor_value_info("y", T.FLOAT, [3, 4])]))
    x = np.random.default_rng(8).standard_normal((3, 4)).astype(np.float32)
    want, got, (counts, _) = run_both(small, {"x": x}, tmp_path,
                                      ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert_outputs_close(want, got)
    assert EP not in counts, counts
    _, _, (counts, _) = run_both(small, {"x": x}, tmp_path,
                                 ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                 provider_options={"min_elements": "0"})
    assert counts.get(EP) == 1, counts
    w = nh.from_array(np.ones((4, 4), np.float32), "w")
    mm = make_model(h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                                 [h.make_tensor_value_info("x", T.FLOAT, [3, 4])],
                                 [h.make_tensor_value_info("y", T.FLOAT, [3, 4])], [w]))
    _, _, (counts, _) = run_both(mm, {"x": x}, tmp_path,
                                 ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert counts.get(EP) == 1, counts


def test_add_provider_for_devices_and_fusion_option(tmp_path):
    m = encoder()
    ids = np.arange(10, dtype=np.int64).reshape(2, 5)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    so = _options(ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.add_provider_for_devices(mo.get_ep_devices(), {"fusion": "0"})
    sess = ort.InferenceSession(m.SerializeToString(), sess_options=so)
    assert sess.get_providers()[0] == EP
    assert_outputs_close(ref.run(None, {"ids": ids}), sess.run(None, {"ids": ids}))


def _adder():
    g = h.make_graph([h.make_node("Add", ["x", "y"], ["z"]), h.make_node("Tanh", ["z"], ["w"])],
                     "adder", [h.make_tensor_value_info("x", T.FLOAT, ["N", 4]),
                               h.make_tensor_value_info("y", T.FLOAT, ["M", 4])],
                     [h.make_tensor_value_info("w", T.FLOAT, None)])
    return make_model(g).SerializeToString()


def test_compute_error_comes_back_as_an_exception_and_the_next_run_works():
    sess = ort.InferenceSession(_adder(), providers=PROVIDERS)
    sess.disable_fallback()  # else onnxruntime's Python layer retries on the CPU EP alone
    x = np.ones((2, 4), np.float32)
    with pytest.raises(Exception) as e:
        sess.run(None, {"x": x, "y": np.ones((3, 4), np.float32)})
    msg = str(e.value)
    assert "MpsrtExecutionProvider" in msg and "add" in msg.lower(), msg
    (w,) = sess.run(None, {"x": x, "y": np.ones((1, 4), np.float32)})
    np.testing.assert_allclose(w, np.tanh(2 * x), rtol=1e-5)


@pytest.mark.parametrize("opts,word", [({"precision": "int8"}, "precision"),
                                       ({"device_id": "banana"}, "device_id"),
                                       ({"device_id": "99"}, "out of range"),
                                       ({"fusion": "maybe"}, "fusion"),
                                       ({"min_elements": "lots"}, "min_elements")])
def test_bad_provider_options_are_refused_by_name(opts, word, capfd):
    so = ort.SessionOptions()
    so.add_provider_for_devices(mo.get_ep_devices(), opts)
    try:
        sess = ort.InferenceSession(_adder(), sess_options=so)
    except Exception as e:  # noqa: BLE001 - the error itself is what is checked
        text = str(e)
    else:
        # onnxruntime's Python layer printed the EP's error and fell back to the CPU EP alone.
        assert EP not in sess.get_providers()
        out, err = capfd.readouterr()
        text = out + err
    assert "MpsrtExecutionProvider" in text and word in text, text


def test_unregister_and_register_again():
    x = np.ones((2, 4), np.float32)
    s1 = ort.InferenceSession(_adder(), providers=PROVIDERS)
    mo.unregister()
    assert not [d for d in ort.get_ep_devices() if d.ep_name == EP]
    mo.register()
    s2 = ort.InferenceSession(_adder(), providers=PROVIDERS)
    assert s2.get_providers()[0] == EP
    for s in (s1, s2):
        np.testing.assert_allclose(s.run(None, {"x": x, "y": x})[0], np.tanh(2 * x), rtol=1e-5)


def test_two_sessions_on_two_threads():
    m = encoder().SerializeToString()
    ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"])
    sessions = [ort.InferenceSession(m, providers=PROVIDERS) for _ in range(2)]
    errors = []

    def work(k):
        try:
            rng = np.random.default_rng(10 + k)
            for _ in range(5):
                ids = rng.integers(0, 50, size=(k + 1, 6)).astype(np.int64)
                assert_outputs_close(ref.run(None, {"ids": ids}),
                                     sessions[k].run(None, {"ids": ids}))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
