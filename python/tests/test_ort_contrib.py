"""ONNX Runtime contrib ops (`com.microsoft`) that ORT's transformer optimizer and LLM exporters
save — EmbedLayerNormalization, Attention with every CPU mask form / causal / past state,
MultiHeadAttention with past, GroupQueryAttention, MatMulNBits, FusedConv — checked against
onnxruntime's CPU EP on small graphs built with onnx.helper, through two paths that share one
rewrite (`mpsrt_onnx::contrib`): mpsrt's own importer (`mpsrt.onnx.InferenceSession`, CPU
place) and the plugin EP (the node must run on it, placement read from ORT's profile). Variants
without a rewrite stay on ORT's CPU EP with correct results."""
import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import mpsrt  # noqa: E402
import mpsrt.ort as mo  # noqa: E402

from test_ort_ep import EP, assert_outputs_close, placement, _options  # noqa: E402

MS = "com.microsoft"
DIS = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
vi = h.make_tensor_value_info
rng = np.random.default_rng(21)


def f(*s, scale=0.5):
    return (rng.standard_normal(s) * scale).astype(np.float32)


def model(nodes, inputs, outputs, inits, opset=17):
    g = h.make_graph(nodes, "contrib", inputs, outputs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset), h.make_opsetid(MS, 1)])
    m.ir_version = 10
    return m.SerializeToString()


def reference(m, feeds):
    return ort.InferenceSession(m, _options(DIS), providers=["CPUExecutionProvider"]).run(None, feeds)


def ours_importer(m, feeds):
    return mpsrt.onnx.InferenceSession(m, place="cpu").run(None, feeds)


def ours_ep(m, feeds, tmp_path):
    so = _options(DIS, tmp_path / "p")
    sess = ort.InferenceSession(m, so, providers=[(EP, {"min_elements": "0"}), "CPUExecutionProvider"])
    got = sess.run(None, feeds)
    return got, placement(sess)


def check(m, feeds, tmp_path, op, *, ep=True, importer=True, rtol=1e-3, atol=1e-4):
    want = reference(m, feeds)
    if importer:
        assert_outputs_close(want, ours_importer(m, feeds), rtol, atol)
    if ep:
        mo.register()
        got, (counts, ops) = ours_ep(m, feeds, tmp_path)
        assert_outputs_close(want, got, rtol, atol)
        assert op not in ops.get("CPUExecutionProvider", set()), ops
        assert counts.get(EP), counts


# ---- EmbedLayerNormalization -------------------------------------------------------------

def embed_case(segment=True, mask=True, position_ids=False):
    B, S, H = 2, 5, 8
    inits = [nh.from_array(f(30, H), "word"), nh.from_array(f(16, H), "pos"),
             nh.from_array(f(H), "gamma"), nh.from_array(f(H), "beta")]
    ins = ["ids", "", "word", "pos", "", "gamma", "beta", "", ""]
    inputs = [vi("ids", T.INT32, ["B", "S"])]
    feeds = {"ids": rng.integers(0, 30, (B, S)).astype(np.int32)}
    if segment:
        inits.append(nh.from_array(f(2, H), "segtab"))
        ins[1], ins[4] = "seg", "segtab"
        inputs.append(vi("seg", T.INT32, ["B", "S"]))
        feeds["seg"] = rng.integers(0, 2, (B, S)).astype(np.int32)
    if mask:
        ins[7] = "mask"
        inputs.append(vi("mask", T.INT32, ["B", "S"]))
        m = np.ones((B, S), np.int32)
        m[1, 3:] = 0
        feeds["mask"] = m
    if position_ids:
        ins[8] = "pids"
        inputs.append(vi("pids", T.INT32, ["B", "S"]))
        feeds["pids"] = rng.integers(0, 16, (B, S)).astype(np.int32)
    while ins[-1] == "":
        ins.pop()
    node = h.make_node("EmbedLayerNormalization", ins, ["y", "mask_index", "emb_sum"], domain=MS,
                       epsilon=1e-5)
    outs = [vi("y", T.FLOAT, None), vi("mask_index", T.INT32, None), vi("emb_sum", T.FLOAT, None)]
    return model([node], inputs, outs, inits), feeds


@pytest.mark.parametrize("variant", [dict(), dict(segment=False, mask=False),
                                     dict(position_ids=True)])
def test_embed_layer_normalization(variant, tmp_path):
    m, feeds = embed_case(**variant)
    check(m, feeds, tmp_path, "EmbedLayerNormalization")


# ---- Attention ----------------------------------------------------------------------------

def attention_case(mask_kind=None, causal=False, past=False, bias=False, present=False):
    B, S, P, N, D = 2, 4, 3, 2, 4
    H = N * D
    inits = [nh.from_array(f(H, 3 * H), "wqkv"), nh.from_array(f(3 * H), "bqkv")]
    ins = ["x", "wqkv", "bqkv", "", "", ""]
    inputs = [vi("x", T.FLOAT, ["B", "S", H])]
    feeds = {"x": f(B, S, H, scale=1.0)}
    T_ = S + (P if past else 0)
    if mask_kind is not None:
        ins[3] = "mask"
        if mask_kind == "lengths":
            mv = np.array([T_, T_ - 2], np.int32)
        elif mask_kind == "end_start":
            mv = np.array([T_, T_ - 1, 0, 2], np.int32)
        elif mask_kind == "raw":
            mv = np.ones((B, T_), np.int32)
            mv[1, -2:] = 0
        elif mask_kind == "3d":
            mv = (rng.random((B, S, T_)) > 0.3).astype(np.int32)
            mv[:, :, 0] = 1
        inputs.append(vi("mask", T.INT32, list(mv.shape)))
        feeds["mask"] = mv
    if past:
        ins[4] = "past"
        inputs.append(vi("past", T.FLOAT, [2, "B", N, "P", D]))
        feeds["past"] = f(2, B, N, P, D, scale=1.0)
    if bias:
        ins[5] = "abias"
        inputs.append(vi("abias", T.FLOAT, [1, N, S, T_]))
        feeds["abias"] = f(1, N, S, T_)
    while ins[-1] == "":
        ins.pop()
    outs = ["y"] + (["present"] if present else [])
    node = h.make_node("Attention", ins, outs, domain=MS, num_heads=N,
                       unidirectional=int(causal))
    ovis = [vi(o, T.FLOAT, None) for o in outs]
    return model([node], inputs, ovis, inits), feeds


@pytest.mark.parametrize("kw", [
    dict(mask_kind="lengths"), dict(mask_kind="end_start"), dict(mask_kind="raw"),
    dict(mask_kind="3d"), dict(causal=True), dict(mask_kind="lengths", causal=True, bias=True),
    dict(past=True, present=True, causal=True), dict(past=True, present=True, mask_kind="raw"),
], ids=lambda kw: "-".join(k if v is True else str(v) for k, v in kw.items()))
def test_attention_masks_causal_and_past(kw, tmp_path):
    m, feeds = attention_case(**kw)
    check(m, feeds, tmp_path, "Attention")


def test_multi_head_attention_with_past_and_key_lengths(tmp_path):
    B, S, P, N, D = 2, 3, 2, 2, 4
    H = N * D
    inputs = [vi("q", T.FLOAT, ["B", "S", H]), vi("k", T.FLOAT, ["B", "S", H]),
              vi("v", T.FLOAT, ["B", "S", H]), vi("lens", T.INT32, ["B"]),
              vi("pk", T.FLOAT, ["B", N, "P", D]), vi("pv", T.FLOAT, ["B", N, "P", D])]
    feeds = {"q": f(B, S, H, scale=1.0), "k": f(B, S, H, scale=1.0), "v": f(B, S, H),
             "lens": np.array([P + S, P + 1], np.int32), "pk": f(B, N, P, D), "pv": f(B, N, P, D)}
    node = h.make_node("MultiHeadAttention", ["q", "k", "v", "", "lens", "", "pk", "pv"],
                       ["y", "present_k", "present_v"], domain=MS, num_heads=N)
    outs = [vi(o, T.FLOAT, None) for o in ("y", "present_k", "present_v")]
    check(model([node], inputs, outs, []), feeds, tmp_path, "MultiHeadAttention")


# ---- GroupQueryAttention ------------------------------------------------------------------

def gqa_case(S=3, P=4, packed=False, rotary=False, interleaved=False, window=-1, softcap=0.0,
             seqlens=None, dtype=np.float32):
    # ORT's CPU kernel takes batch 1 for a multi-token step with a past, head sizes % 16 == 0
    # with rotary.
    B, N, KV, D = (1 if P and S > 1 else 2), 4, 2, 16
    et = T.FLOAT16 if dtype == np.float16 else T.FLOAT
    g = lambda *s: f(*s, scale=1.0).astype(dtype)  # noqa: E731
    ins, inputs, feeds, inits = [], [], {}, []
    if packed:
        ins += ["qkv", "", ""]
        inputs.append(vi("qkv", et, ["B", "S", (N + 2 * KV) * D]))
        feeds["qkv"] = g(B, S, (N + 2 * KV) * D)
    else:
        ins += ["q", "k", "v"]
        inputs += [vi("q", et, ["B", "S", N * D]), vi("k", et, ["B", "S", KV * D]),
                   vi("v", et, ["B", "S", KV * D])]
        feeds.update(q=g(B, S, N * D), k=g(B, S, KV * D), v=g(B, S, KV * D))
    if P:
        ins += ["pk", "pv"]
        inputs += [vi("pk", et, ["B", KV, "P", D]), vi("pv", et, ["B", KV, "P", D])]
        feeds.update(pk=g(B, KV, P, D), pv=g(B, KV, P, D))
    else:
        ins += ["", ""]
    ins += ["seqlens", "total"]
    inputs += [vi("seqlens", T.INT32, ["B"]), vi("total", T.INT32, [])]
    lens = np.full(B, P + S - 1, np.int32) if seqlens is None else np.array(seqlens, np.int32)
    feeds.update(seqlens=lens, total=np.array(P + S, np.int32))
    attrs = dict(num_heads=N, kv_num_heads=KV)
    if rotary:
        half = D // 2
        pos = np.arange(32)[:, None] * (1.0 / 10000 ** (np.arange(half) / half))[None]
        inits += [nh.from_array(np.cos(pos).astype(dtype), "cos"),
                  nh.from_array(np.sin(pos).astype(dtype), "sin")]
        ins += ["cos", "sin"]
        attrs.update(do_rotary=1, rotary_interleaved=int(interleaved))
    if window > 0:
        attrs["local_window_size"] = window
    if softcap:
        attrs["softcap"] = softcap
    node = h.make_node("GroupQueryAttention", ins, ["y", "present_k", "present_v"], domain=MS,
                       **attrs)
    outs = [vi(o, et, None) for o in ("y", "present_k", "present_v")]
    return model([node], inputs, outs, inits), feeds


@pytest.mark.parametrize("kw", [
    dict(P=0), dict(), dict(S=1, P=5), dict(packed=True), dict(P=0, seqlens=[2, 1]),
    dict(S=1, P=5, seqlens=[5, 3], rotary=True),
    dict(rotary=True), dict(rotary=True, interleaved=True, S=1, P=5), dict(window=2),
    dict(softcap=2.0), dict(dtype=np.float16),
], ids=lambda kw: "-".join(f"{k}={v}" if not isinstance(v, type) else v.__name__
                           for k, v in kw.items()) or "default")
def test_group_query_attention(kw, tmp_path):
    m, feeds = gqa_case(**kw)
    f16 = kw.get("dtype") == np.float16
    tol = dict(rtol=1e-2, atol=1e-2) if f16 else dict(rtol=1e-3, atol=1e-4)
    if not kw.get("seqlens"):
        check(m, feeds, tmp_path, "GroupQueryAttention", **tol)
        return
    # Padded prompt: ORT's CPU kernel leaves the output rows past a batch row's length
    # undefined (it reads scores it never computed); compare the rows inside each length.
    # Padded decode (a row's past shorter than past_key): the output matches, the present
    # state does not (ORT writes the new entry after the row's past, ours appends it).
    want = reference(m, feeds)
    mo.register()
    for got in (ours_importer(m, feeds), ours_ep(m, feeds, tmp_path)[0]):
        for i, n in enumerate(kw["seqlens"]):
            rows = slice(None) if kw.get("P", 4) else slice(0, n + 1)
            np.testing.assert_allclose(got[0][i, rows], want[0][i, rows], **tol)
        if not kw.get("P", 4):
            assert_outputs_close(want[1:], got[1:])


def test_group_query_attention_smooth_softmax_stays_on_ort(tmp_path):
    """A variant without a rewrite: the importer names it, the EP leaves the node to ORT."""
    m, feeds = gqa_case()
    mp = onnx.load_from_string(m)
    mp.graph.node[0].attribute.append(h.make_attribute("smooth_softmax", 1))
    m = mp.SerializeToString()
    with pytest.raises(Exception, match="smooth_softmax"):
        ours_importer(m, feeds)
    mo.register()
    want = reference(m, feeds)
    got, (counts, ops) = ours_ep(m, feeds, tmp_path)
    assert_outputs_close(want, got)
    assert "GroupQueryAttention" in ops["CPUExecutionProvider"], ops


# ---- MatMulNBits --------------------------------------------------------------------------

def pack_nbits(q, bits):
    """[N, K] integers → [N, k_blocks, blob] uint8, low bits first (ORT's layout)."""
    per = 8 // bits
    n, k = q.shape
    out = np.zeros((n, k // per), np.uint8)
    for i in range(per):
        out |= (q[:, i::per].astype(np.uint8) << (i * bits))
    return out


def nbits_case(bits=4, zp="packed", bias=False, K=48, dtype=np.float32):
    M, N, blk = 3, 6, 16
    kb = -(-K // blk)
    et = T.FLOAT16 if dtype == np.float16 else T.FLOAT
    q = rng.integers(0, 2 ** bits, (N, kb * blk))
    b = pack_nbits(q, bits).reshape(N, kb, blk * bits // 8)
    scales = (rng.random((N, kb)) * 0.1 + 0.01).astype(dtype)
    inits = [nh.from_array(b, "B"), nh.from_array(scales.reshape(-1), "scales")]
    ins = ["a", "B", "scales"]
    if zp == "packed":
        z = rng.integers(0, 2 ** bits, (N, kb))
        per = 8 // bits
        zpad = np.zeros((N, -(-kb // per) * per), np.int64)
        zpad[:, :kb] = z
        inits.append(nh.from_array(pack_nbits(zpad, bits).reshape(-1), "zp"))
        ins.append("zp")
    elif zp == "float":
        inits.append(nh.from_array((rng.random((N, kb)) * 2 ** bits).astype(dtype).reshape(-1), "zp"))
        ins.append("zp")
    if bias:
        inits.append(nh.from_array(f(N).astype(dtype), "bias"))
        ins += [""] * (5 - len(ins)) + ["bias"]  # zero_points, g_idx absent
    # accuracy_level 4 would make ORT quantize A to int8; ours computes in A's dtype, as
    # accuracy_level 0/1 do.
    node = h.make_node("MatMulNBits", ins, ["y"], domain=MS, K=K, N=N, bits=bits, block_size=blk)
    m = model([node], [vi("a", et, ["M", K])], [vi("y", et, None)], inits)
    return m, {"a": f(M, K, scale=1.0).astype(dtype)}


@pytest.mark.parametrize("kw", [dict(), dict(zp=None), dict(zp="float"), dict(bias=True),
                                dict(K=40), dict(bits=8), dict(dtype=np.float16)],
                         ids=lambda kw: "-".join(f"{k}={getattr(v, '__name__', v)}"
                                                 for k, v in kw.items()) or "default")
def test_matmul_nbits(kw, tmp_path):
    m, feeds = nbits_case(**kw)
    f16 = kw.get("dtype") == np.float16
    check(m, feeds, tmp_path, "MatMulNBits", rtol=1e-2 if f16 else 1e-3,
          atol=1e-2 if f16 else 1e-4)


# ---- FusedConv ----------------------------------------------------------------------------

@pytest.mark.parametrize("act,params,z", [("Relu", [], False), ("LeakyRelu", [0.1], True),
                                         ("Clip", [-0.5, 0.5], False), ("Sigmoid", [], False),
                                         ("HardSigmoid", [0.2, 0.5], False), ("", [], True)])
def test_fused_conv(act, params, z, tmp_path):
    inits = [nh.from_array(f(4, 3, 3, 3), "w"), nh.from_array(f(4), "b")]
    ins = ["x", "w", "b"]
    inputs = [vi("x", T.FLOAT, ["N", 3, 6, 6])]
    feeds = {"x": f(2, 3, 6, 6, scale=1.0)}
    if z:
        ins.append("z")
        inputs.append(vi("z", T.FLOAT, ["N", 4, 6, 6]))
        feeds["z"] = f(2, 4, 6, 6)
    attrs = dict(pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    if act:
        attrs["activation"] = act
    if params:
        attrs["activation_params"] = params
    node = h.make_node("FusedConv", ins, ["y"], domain=MS, **attrs)
    check(model([node], inputs, [vi("y", T.FLOAT, None)], inits), feeds, tmp_path, "FusedConv")


# ---- a BERT layer in ORT's optimized form -------------------------------------------------

def test_bert_in_the_transformer_optimizers_form(tmp_path):
    """What `onnxruntime.transformers.optimizer` writes for BERT: EmbedLayerNormalization whose
    mask_index (key lengths) feeds Attention, SkipLayerNormalization, BiasGelu; with int32 ids
    and a right-padded batch. The EP claims the whole graph as one node."""
    B, S, H, N, V = 2, 6, 16, 2, 40
    inits = [nh.from_array(f(V, H), "word"), nh.from_array(f(S, H), "pos"),
             nh.from_array(f(2, H), "segtab"), nh.from_array(1 + f(H), "g0"),
             nh.from_array(f(H), "b0"), nh.from_array(f(H, 3 * H), "wqkv"),
             nh.from_array(f(3 * H), "bqkv"), nh.from_array(f(H, H), "wo"),
             nh.from_array(f(H), "bo"), nh.from_array(1 + f(H), "g1"), nh.from_array(f(H), "b1"),
             nh.from_array(f(H, 4 * H), "w1"), nh.from_array(f(4 * H), "bias1"),
             nh.from_array(f(4 * H, H), "w2"), nh.from_array(f(H), "bias2"),
             nh.from_array(1 + f(H), "g2"), nh.from_array(f(H), "b2")]
    n = h.make_node
    nodes = [
        n("EmbedLayerNormalization", ["ids", "seg", "word", "pos", "segtab", "g0", "b0", "mask"],
          ["emb", "mask_index"], domain=MS, epsilon=1e-12),
        n("Attention", ["emb", "wqkv", "bqkv", "mask_index"], ["att"], domain=MS, num_heads=N),
        n("MatMul", ["att", "wo"], ["proj"]),
        n("SkipLayerNormalization", ["proj", "emb", "g1", "b1", "bo"], ["ln1"], domain=MS,
          epsilon=1e-12),
        n("MatMul", ["ln1", "w1"], ["ff1"]),
        n("BiasGelu", ["ff1", "bias1"], ["act"], domain=MS),
        n("MatMul", ["act", "w2"], ["ff2"]),
        n("SkipLayerNormalization", ["ff2", "ln1", "g2", "b2", "bias2"], ["y"], domain=MS,
          epsilon=1e-12),
    ]
    inputs = [vi(x, T.INT32, ["B", "S"]) for x in ("ids", "seg", "mask")]
    mask = np.ones((B, S), np.int32)
    mask[1, 4:] = 0
    feeds = {"ids": rng.integers(0, V, (B, S)).astype(np.int32),
             "seg": rng.integers(0, 2, (B, S)).astype(np.int32), "mask": mask}
    m = model(nodes, inputs, [vi("y", T.FLOAT, None)], inits)
    want = reference(m, feeds)
    assert_outputs_close(want, ours_importer(m, feeds))
    mo.register()
    got, (counts, ops) = ours_ep(m, feeds, tmp_path)
    assert_outputs_close(want, got)
    assert counts == {EP: 1}, (counts, ops)


# ---- RotaryEmbedding ----------------------------------------------------------------------

@pytest.mark.parametrize("kw", [dict(), dict(interleaved=1), dict(offset=True),
                                dict(four_d=True), dict(partial=True)],
                         ids=lambda kw: "-".join(kw) or "default")
def test_rotary_embedding(kw, tmp_path):
    B, S, N, D = 2, 3, 2, 16
    half = D // 4 if kw.get("partial") else D // 2
    pos = np.arange(32)[:, None] * (1.0 / 10000 ** (np.arange(half) / half))[None]
    inits = [nh.from_array(np.cos(pos).astype(np.float32), "cos"),
             nh.from_array(np.sin(pos).astype(np.float32), "sin")]
    shape = [B, N, S, D] if kw.get("four_d") else [B, S, N * D]
    feeds = {"x": f(*shape, scale=1.0)}
    if kw.get("offset"):
        feeds["pids"] = np.array([5], np.int64)
    else:
        feeds["pids"] = rng.integers(0, 32, (B, S)).astype(np.int64)
    attrs = dict(interleaved=kw.get("interleaved", 0))
    if kw.get("partial"):
        attrs.update(num_heads=N, rotary_embedding_dim=2 * half)
    node = h.make_node("RotaryEmbedding", ["x", "pids", "cos", "sin"], ["y"], domain=MS, **attrs)
    inputs = [vi("x", T.FLOAT, shape), vi("pids", T.INT64, list(feeds["pids"].shape))]
    check(model([node], inputs, [vi("y", T.FLOAT, None)], inits), feeds, tmp_path,
          "RotaryEmbedding")
