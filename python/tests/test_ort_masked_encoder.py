"""A BERT-like encoder through MpsrtExecutionProvider: int64 `input_ids` and `attention_mask`,
the mask built the way transformers 5 exports it (bool Cast, Range/Gather index arithmetic, an
`And` with a constant, Expand, Where to 0/-inf, added to every layer's scores). This is the
pattern where the WebGPU plugin EP's own CPU-fallback pass leaves `And` on the CPU; ours must
claim the whole model as one fused node, match ORT's CPU EP (padded rows included), take both
int64 inputs from the host copies its data transfer kept (no GPU read back per input per run)
and hand ORT its int64 output (an ArgMax) from the host copy too.
Tiny (d=16, two layers), seconds on lavapipe."""
import json
import os

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

if not hasattr(ort, "register_execution_provider_library"):
    pytest.skip("onnxruntime without plugin EPs", allow_module_level=True)


@pytest.fixture(scope="module", autouse=True)
def registered():
    need_gpu()
    mo.register()
    yield


def masked_encoder(vocab=40, d=16, heads=2, ff=32, layers=2, max_pos=64):
    """Token + position embeddings, LayerNorm, `layers` post-norm encoder layers whose attention
    scores get the additive mask; batch and sequence dynamic."""
    rng = np.random.default_rng(11)
    inits = []

    def w(name, *s):
        inits.append(nh.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), name))
        return name

    def c(name, v, dt=np.int64):
        inits.append(nh.from_array(np.array(v, dt), name))
        return name

    n, hd = h.make_node, d // heads
    nodes = [
        n("Shape", ["input_ids"], ["shp"]),
        n("Gather", ["shp", c("k0", 0)], ["B"], axis=0),
        n("Gather", ["shp", c("k1", 1)], ["S"], axis=0),
        n("Gather", [w("emb", vocab, d), "input_ids"], ["tok"]),
        n("Unsqueeze", ["S", c("ax0", [0])], ["S1"]),
        n("Slice", [w("pos", max_pos, d), c("z1", [0]), "S1", "ax0"], ["pos_s"]),
        n("Add", ["tok", "pos_s"], ["e0"]),
        n("LayerNormalization", ["e0", w("ge", d), w("be", d)], ["x0"], axis=-1, epsilon=1e-5),
        # The mask, as transformers 5's sdpa mask exports: mask[b, s] gathered by b * S + s.
        n("Cast", ["attention_mask"], ["mb"], to=T.BOOL),
        n("Range", [c("r0", 0), "B", c("r1", 1)], ["rb"]),
        n("Range", [c("r2", 0), "S", "r1"], ["rs"]),
        n("Unsqueeze", ["rb", c("u123", [1, 2, 3])], ["rb4"]),
        n("Unsqueeze", ["rs", c("u012", [0, 1, 2])], ["rs4"]),
        n("Shape", ["mb"], ["mshp"]),
        n("Gather", ["mshp", "k1"], ["mS"], axis=0),
        n("Transpose", ["mb"], ["mt"], perm=[0, 1]),
        n("Flatten", ["mt"], ["mf"], axis=2),
        n("Mul", ["rb4", "mS"], ["boff"]),
        n("Add", ["rs4", "boff"], ["idx"]),
        n("Gather", ["mf", "idx"], ["g"], axis=0),
        n("Shape", ["idx"], ["ishp"]),
        n("Reshape", ["g", "ishp"], ["keep"]),
        n("And", [c("true", True, np.bool_), "keep"], ["keep2"]),
        n("Unsqueeze", ["B", "ax0"], ["B1"]),
        n("Concat", ["B1", c("one", [1]), "S1", "S1"], ["mask_shape"], axis=0),
        n("Expand", ["keep2", "mask_shape"], ["keep4"]),
        n("Where", ["keep4", c("zero_f", [0.0], np.float32), c("ninf", [-np.inf], np.float32)],
          ["bias"]),
    ]
    inits.append(nh.from_array(np.array([0, 0, heads, hd], np.int64), "split"))
    inits.append(nh.from_array(np.array([0, 0, d], np.int64), "merge"))
    inits.append(nh.from_array(np.array(1.0 / np.sqrt(hd), np.float32), "scale"))
    x = "x0"
    for li in range(layers):
        p = f"l{li}_"
        for nm in ("q", "k", "v"):
            nodes += [n("MatMul", [x, w(p + "w" + nm, d, d)], [p + nm]),
                      n("Add", [p + nm, w(p + "b" + nm, d)], [p + nm + "b"]),
                      n("Reshape", [p + nm + "b", "split"], [p + nm + "r"]),
                      n("Transpose", [p + nm + "r"], [p + nm + "t"],
                        perm=[0, 2, 3, 1] if nm == "k" else [0, 2, 1, 3])]
        nodes += [
            n("MatMul", [p + "qt", p + "kt"], [p + "qk"]),
            n("Mul", [p + "qk", "scale"], [p + "qks"]),
            n("Add", [p + "qks", "bias"], [p + "qkm"]),
            n("Softmax", [p + "qkm"], [p + "att"], axis=-1),
            n("MatMul", [p + "att", p + "vt"], [p + "ctx"]),
            n("Transpose", [p + "ctx"], [p + "ctxt"], perm=[0, 2, 1, 3]),
            n("Reshape", [p + "ctxt", "merge"], [p + "ctxm"]),
            n("MatMul", [p + "ctxm", w(p + "wo", d, d)], [p + "o"]),
            n("Add", [p + "o", x], [p + "r1"]),
            n("LayerNormalization", [p + "r1", w(p + "g1", d), w(p + "b1", d)], [p + "n1"],
              axis=-1, epsilon=1e-5),
            n("MatMul", [p + "n1", w(p + "w1", d, ff)], [p + "f1"]),
            n("Relu", [p + "f1"], [p + "f1r"]),
            n("MatMul", [p + "f1r", w(p + "w2", ff, d)], [p + "f2"]),
            n("Add", [p + "f2", p + "n1"], [p + "r2"]),
            n("LayerNormalization", [p + "r2", w(p + "g2", d), w(p + "b2", d)],
              ["y" if li == layers - 1 else p + "out"], axis=-1, epsilon=1e-5),
        ]
        x = p + "out"
    # An int64 graph output (as a tagger's label ids): the engine returns it on the host.
    nodes.append(n("ArgMax", ["y"], ["label"], axis=-1, keepdims=0))
    g = h.make_graph(nodes, "masked_encoder",
                     [h.make_tensor_value_info("input_ids", T.INT64, ["batch", "seq"]),
                      h.make_tensor_value_info("attention_mask", T.INT64, ["batch", "seq"])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["batch", "seq", d]),
                      h.make_tensor_value_info("label", T.INT64, ["batch", "seq"])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m.SerializeToString()


def feeds(rng, b, s, vocab=40):
    mask = np.ones((b, s), np.int64)
    for i in range(b):  # row i keeps its first s - i tokens (padding at the end)
        mask[i, max(s - i, 1):] = 0
    return {"input_ids": rng.integers(0, vocab, size=(b, s)).astype(np.int64),
            "attention_mask": mask}


def kernel_runs(sess):
    path = sess.end_profiling()
    try:
        with open(path) as f:
            events = json.load(f)
    finally:
        os.remove(path)
    counts = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            p = e["args"]["provider"]
            counts[p] = counts.get(p, 0) + 1
    return counts


@pytest.mark.parametrize("level", [ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
                                   ort.GraphOptimizationLevel.ORT_ENABLE_ALL],
                         ids=["disabled", "all"])
def test_masked_encoder_is_one_fused_node_fed_from_host_mirrors(level, tmp_path):
    m = masked_encoder()
    rng = np.random.default_rng(12)
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    ref = ort.InferenceSession(m, so, providers=["CPUExecutionProvider"])
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "p")
    sess = ort.InferenceSession(m, so, providers=[EP, "CPUExecutionProvider"])
    shapes = [(1, 9), (3, 7), (1, 9)]  # batch 1 (the case measured), a padded batch, a repeat
    for b, s in shapes:
        x = feeds(rng, b, s)
        want, _ = ref.run(None, x)
        before = mo.transfer_stats()
        got, label = sess.run(None, x)
        d = {k: v - before[k] for k, v in mo.transfer_stats().items()}
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert label.dtype == np.int64
        np.testing.assert_array_equal(label, np.argmax(got, axis=-1))
        # Both int64 inputs went up once and came to Compute from the host copy; the int64
        # output's copy to the host came from its host copy too: the only read back is `y`.
        assert d["inputs_mirrored"] == 2 and d["inputs_copied"] == 0, d
        assert d["reads_mirrored"] == 1, d
        assert d["host_to_device_bytes"] == 2 * b * s * 8, d
        assert d["device_to_host_bytes"] == got.nbytes, d
    # One partition: a single fused node per run, nothing on ORT's CPU EP (no `And` fallback,
    # no Memcpy nodes).
    assert kernel_runs(sess) == {EP: len(shapes)}


def test_without_host_mirrors_int64_inputs_are_read_back(tmp_path):
    """The same model in a process with MPSRT_ORT_HOST_MIRROR=0: still correct, each int64
    input and the int64 output read back from the device (what the mirrors save)."""
    import subprocess
    import sys
    code = (
        "import numpy as np, onnxruntime as ort, mpsrt.ort as mo, sys\n"
        "sys.path.insert(0, %r)\n"
        "import test_ort_masked_encoder as t\n"
        "mo.register()\n"
        "m = t.masked_encoder()\n"
        "x = t.feeds(np.random.default_rng(0), 2, 5)\n"
        "want = ort.InferenceSession(m, providers=['CPUExecutionProvider']).run(None, x)[0]\n"
        "s = ort.InferenceSession(m, providers=[%r, 'CPUExecutionProvider'])\n"
        "b = mo.transfer_stats()\n"
        "got, label = s.run(None, x)\n"
        "d = {k: v - b[k] for k, v in mo.transfer_stats().items()}\n"
        "np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)\n"
        "assert d['inputs_copied'] == 2 and d['inputs_mirrored'] == 0, d\n"
        "assert d['reads_mirrored'] == 0, d\n"
        "assert d['device_to_host_bytes'] == got.nbytes + label.nbytes + 2 * x['input_ids'].nbytes, d\n"
        "print('ok')\n") % (os.path.dirname(__file__), EP)
    env = dict(os.environ, MPSRT_ORT_HOST_MIRROR="0")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_io_bound_int64_inputs_updated_in_place_are_seen():
    """ids bound in mpsrt device memory, rewritten with `update_inplace` between runs: each
    rewrite replaces the host copy, so every run sees the new ids (a stale copy would not)."""
    m = masked_encoder()
    rng = np.random.default_rng(13)
    ref = ort.InferenceSession(m, providers=["CPUExecutionProvider"])
    sess = ort.InferenceSession(m, providers=[EP, "CPUExecutionProvider"])
    x = feeds(rng, 2, 6)
    ids = mo.ortvalue_from_numpy(x["input_ids"])
    io = sess.io_binding()
    io.bind_ortvalue_input("input_ids", ids)
    io.bind_ortvalue_input("attention_mask", mo.ortvalue_from_numpy(x["attention_mask"]))
    io.bind_output("y")
    io.bind_output("label")
    for k in range(3):
        if k:
            x["input_ids"] = rng.integers(0, 40, size=(2, 6)).astype(np.int64)
            ids.update_inplace(x["input_ids"])
        before = mo.transfer_stats()
        sess.run_with_iobinding(io)
        d = {k: v - before[k] for k, v in mo.transfer_stats().items()}
        assert d["inputs_mirrored"] == 2 and d["inputs_copied"] == 0, d
        got = io.copy_outputs_to_cpu()[0]
        np.testing.assert_allclose(got, ref.run(None, x)[0], rtol=1e-4, atol=1e-4)
