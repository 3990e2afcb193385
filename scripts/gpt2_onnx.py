"""GPT-2 decoder with past key/values as an ONNX graph, built with `onnx.helper` (issue 23).

The graph follows Hugging Face's `GPT2LMHeadModel` (pre-LayerNorm blocks, fused QKV projection,
`gelu_new`, tied LM head) with its ONNX export's interface:

  inputs   input_ids [batch, seq] int64, attention_mask [batch, total_seq] int64,
           position_ids [batch, seq] int64,
           past_key_values.{i}.key / .value [batch, heads, past_seq, head_dim] float32
  outputs  logits [batch, seq, vocab],
           present.{i}.key / .value [batch, heads, total_seq, head_dim]  (past ++ new)

Padding positions (attention_mask 0) and future positions get -1e4 added before the softmax
(GPT-2's own masked bias), which underflows to exactly 0 after it. Weights are either random
(`random_weights`) or taken from a `transformers` state dict (`bench/gpt2_generate.py`).

`python scripts/gpt2_onnx.py` writes the tiny test model (2 layers, hidden 64, 4 heads, vocab
1000, 128 positions, seeded random weights) to crates/mpsrt-engine/tests/data/tiny_gpt2.onnx
and onnxruntime's greedy tokens for a fixed prompt (CPU, no padding, the past growing by one
each step) to tiny_gpt2_ref.json beside it; `mpsrt generate` must reproduce them.
Needs numpy, onnx and onnxruntime only (no torch)."""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NEG = -1.0e4
OPSET = 17


def random_weights(layers=2, hidden=64, vocab=1000, positions=128, seed=0):
    """GPT-2-shaped weights (HF layout: Conv1D weights are [in, out]). Embeddings are wider than
    GPT-2's 0.02 init so random logits have clear maxima (greedy ties would make the test flaky)."""
    rng = np.random.default_rng(seed)
    n = lambda *s, std=0.02: (rng.standard_normal(s) * std).astype(np.float32)  # noqa: E731
    w = {"wte": n(vocab, hidden, std=0.3), "wpe": n(positions, hidden, std=0.3),
         "ln_f.g": (1 + n(hidden, std=0.1)), "ln_f.b": n(hidden, std=0.1)}
    for i in range(layers):
        p = f"h.{i}."
        w[p + "ln_1.g"] = 1 + n(hidden, std=0.1)
        w[p + "ln_1.b"] = n(hidden, std=0.1)
        w[p + "attn.c_attn.w"] = n(hidden, 3 * hidden, std=0.1)
        w[p + "attn.c_attn.b"] = n(3 * hidden, std=0.1)
        w[p + "attn.c_proj.w"] = n(hidden, hidden, std=0.1)
        w[p + "attn.c_proj.b"] = n(hidden, std=0.1)
        w[p + "ln_2.g"] = 1 + n(hidden, std=0.1)
        w[p + "ln_2.b"] = n(hidden, std=0.1)
        w[p + "mlp.c_fc.w"] = n(hidden, 4 * hidden, std=0.1)
        w[p + "mlp.c_fc.b"] = n(4 * hidden, std=0.1)
        w[p + "mlp.c_proj.w"] = n(4 * hidden, hidden, std=0.1)
        w[p + "mlp.c_proj.b"] = n(hidden, std=0.1)
    return w


def weights_from_hf(state_dict):
    """Our weight names from a `GPT2LMHeadModel.state_dict()` (tensors or arrays)."""
    a = lambda t: np.ascontiguousarray(  # noqa: E731
        t.detach().cpu().float().numpy() if hasattr(t, "detach") else t, dtype=np.float32)
    sd = {k.removeprefix("transformer."): v for k, v in state_dict.items()}
    w = {"wte": a(sd["wte.weight"]), "wpe": a(sd["wpe.weight"]),
         "ln_f.g": a(sd["ln_f.weight"]), "ln_f.b": a(sd["ln_f.bias"])}
    i = 0
    while f"h.{i}.ln_1.weight" in sd:
        p = f"h.{i}."
        for ours, theirs in [("ln_1.g", "ln_1.weight"), ("ln_1.b", "ln_1.bias"),
                             ("ln_2.g", "ln_2.weight"), ("ln_2.b", "ln_2.bias"),
                             ("attn.c_attn.w", "attn.c_attn.weight"),
                             ("attn.c_attn.b", "attn.c_attn.bias"),
                             ("attn.c_proj.w", "attn.c_proj.weight"),
                             ("attn.c_proj.b", "attn.c_proj.bias"),
                             ("mlp.c_fc.w", "mlp.c_fc.weight"), ("mlp.c_fc.b", "mlp.c_fc.bias"),
                             ("mlp.c_proj.w", "mlp.c_proj.weight"),
                             ("mlp.c_proj.b", "mlp.c_proj.bias")]:
            w[p + ours] = a(sd[p + theirs])
        i += 1
    return w


def build(w, heads):
    """The decoder graph for weights `w` (from `random_weights` / `weights_from_hf`)."""
    vocab, hidden = w["wte"].shape
    layers = sum(1 for k in w if k.endswith(".ln_1.g"))
    hd = hidden // heads
    nodes, inits = [], []

    def init(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(op, ins, outs=None, **attrs):
        outs = outs or [f"{op.lower()}_{len(nodes)}"]
        nodes.append(helper.make_node(op, ins, outs, name=f"{op}_{len(nodes)}", **attrs))
        return outs[0] if len(outs) == 1 else outs

    for k, v in w.items():
        init(k, v)
    init("wte_t", w["wte"].T.copy())
    one, neg, zero_f = init("one_f", np.float32(1)), init("neg_f", np.float32(NEG)), \
        init("zero_f", np.float32(0))
    i0, i1 = init("i0", np.array([0], np.int64)), init("i1", np.array([1], np.int64))
    s0, s1 = init("s0", np.int64(0)), init("s1", np.int64(1))
    init("ax12", np.array([1, 2], np.int64))
    init("scale", np.float32(1.0 / np.sqrt(hd)))
    init("three", np.float32(3.0))
    init("c_gelu", np.float32(0.044715))
    init("k_gelu", np.float32(np.sqrt(2.0 / np.pi)))
    init("half", np.float32(0.5))
    init("split3", np.array([hidden] * 3, np.int64))
    init("bthd", np.array([0, 0, heads, hd], np.int64))
    init("btc", np.array([0, 0, hidden], np.int64))

    # Additive attention bias [batch, 1, seq, total_seq]: padding and future keys get NEG.
    mask_f = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    pad = node("Mul", [node("Sub", [one, mask_f]), neg])
    pad = node("Unsqueeze", [pad, "ax12"])  # [b, 1, 1, S]
    total = node("Squeeze", [node("Slice", [node("Shape", ["attention_mask"]), i1,
                                            init("i2", np.array([2], np.int64)), i0])])
    seq = node("Squeeze", [node("Slice", [node("Shape", ["input_ids"]), i1,
                                          init("i2b", np.array([2], np.int64)), i0])])
    past = node("Sub", [total, seq])
    q_pos = node("Range", [past, total, s1])
    k_pos = node("Range", [s0, total, s1])
    allowed = node("LessOrEqual", [node("Unsqueeze", [k_pos, i0]), node("Unsqueeze", [q_pos, i1])])
    causal = node("Where", [allowed, zero_f, neg])  # [T, S]
    bias = node("Add", [pad, causal])

    h = node("Add", [node("Gather", ["wte", "input_ids"], axis=0),
                     node("Gather", ["wpe", "position_ids"], axis=0)])
    for i in range(layers):
        p = f"h.{i}."
        x = node("LayerNormalization", [h, p + "ln_1.g", p + "ln_1.b"], axis=-1, epsilon=1e-5)
        qkv = node("Add", [node("MatMul", [x, p + "attn.c_attn.w"]), p + "attn.c_attn.b"])
        q, k, v = node("Split", [qkv, "split3"], [f"q{i}", f"k{i}", f"v{i}"], axis=-1)
        heads_of = lambda t: node("Transpose", [node("Reshape", [t, "bthd"])],  # noqa: E731
                                  perm=[0, 2, 1, 3])
        q, k, v = heads_of(q), heads_of(k), heads_of(v)
        pk = node("Concat", [f"past_key_values.{i}.key", k], [f"present.{i}.key"], axis=2)
        pv = node("Concat", [f"past_key_values.{i}.value", v], [f"present.{i}.value"], axis=2)
        att = node("MatMul", [q, node("Transpose", [pk], perm=[0, 1, 3, 2])])
        att = node("Add", [node("Mul", [att, "scale"]), bias])
        att = node("Softmax", [att], axis=-1)
        y = node("MatMul", [att, pv])
        y = node("Reshape", [node("Transpose", [y], perm=[0, 2, 1, 3]), "btc"])
        y = node("Add", [node("MatMul", [y, p + "attn.c_proj.w"]), p + "attn.c_proj.b"])
        h = node("Add", [h, y])
        x = node("LayerNormalization", [h, p + "ln_2.g", p + "ln_2.b"], axis=-1, epsilon=1e-5)
        m = node("Add", [node("MatMul", [x, p + "mlp.c_fc.w"]), p + "mlp.c_fc.b"])
        # gelu_new: 0.5 m (1 + tanh(sqrt(2/pi) (m + 0.044715 m^3)))
        inner = node("Mul", [node("Add", [m, node("Mul", [node("Pow", [m, "three"]), "c_gelu"])]),
                             "k_gelu"])
        g = node("Mul", [node("Mul", [m, "half"]), node("Add", [node("Tanh", [inner]), one])])
        y = node("Add", [node("MatMul", [g, p + "mlp.c_proj.w"]), p + "mlp.c_proj.b"])
        h = node("Add", [h, y])
    x = node("LayerNormalization", [h, "ln_f.g", "ln_f.b"], axis=-1, epsilon=1e-5)
    node("MatMul", [x, "wte_t"], ["logits"])

    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    kv = lambda name, s: helper.make_tensor_value_info(name, f, ["batch", heads, s, hd])  # noqa
    inputs = [helper.make_tensor_value_info("input_ids", i64, ["batch", "seq"]),
              helper.make_tensor_value_info("attention_mask", i64, ["batch", "total_seq"]),
              helper.make_tensor_value_info("position_ids", i64, ["batch", "seq"])]
    outputs = [helper.make_tensor_value_info("logits", f, ["batch", "seq", vocab])]
    for i in range(layers):
        inputs += [kv(f"past_key_values.{i}.key", "past_seq"),
                   kv(f"past_key_values.{i}.value", "past_seq")]
        outputs += [kv(f"present.{i}.key", "total_seq"), kv(f"present.{i}.value", "total_seq")]
    graph = helper.make_graph(nodes, "gpt2_decoder", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="mpsrt scripts/gpt2_onnx.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def ort_greedy(model_bytes, prompt, n_new):
    """onnxruntime CPU greedy decoding without padding: the past grows by one each step.
    Returns (tokens, smallest gap between the best and second-best logit over the steps)."""
    import onnxruntime as ort
    s = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    kv_in = [i for i in s.get_inputs() if i.name.startswith("past_key_values.")]
    heads, hd = kv_in[0].shape[1], kv_in[0].shape[3]
    past = {i.name: np.zeros((1, heads, 0, hd), np.float32) for i in kv_in}
    ids = np.array([prompt], np.int64)
    n_past, tokens, gap = 0, [], np.inf
    for _ in range(n_new):
        t = ids.shape[1]
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, n_past + t), np.int64),
                 "position_ids": np.arange(n_past, n_past + t, dtype=np.int64)[None], **past}
        outs = dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))
        last = outs["logits"][0, -1]
        top2 = np.sort(last)[-2:]
        gap = min(gap, float(top2[1] - top2[0]))
        tok = int(last.argmax())
        tokens.append(tok)
        past = {k: outs[k.replace("past_key_values.", "present.")] for k in past}
        n_past += t
        ids = np.array([[tok]], np.int64)
    return tokens, gap


TINY_PROMPT = [11, 250, 7, 999, 42]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, "..", "crates", "mpsrt-engine", "tests", "data")
    os.makedirs(out, exist_ok=True)
    model = build(random_weights(), heads=4)
    path = os.path.join(out, "tiny_gpt2.onnx")
    onnx.save(model, path)
    tokens, gap = ort_greedy(model.SerializeToString(), TINY_PROMPT, 32)
    ref = {"prompt": TINY_PROMPT, "tokens": tokens, "min_top2_gap": gap,
           "produced_by": "onnxruntime CPU, scripts/gpt2_onnx.py"}
    with open(os.path.join(out, "tiny_gpt2_ref.json"), "w") as fh:
        json.dump(ref, fh, indent=1)
        fh.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes); tokens {tokens}; min gap {gap:.4f}")


if __name__ == "__main__":
    sys.exit(main())
