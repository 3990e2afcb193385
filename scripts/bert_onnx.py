"""A BERT encoder as an ONNX graph, built with `onnx.helper` in the form torch's TorchScript
exporter (opset 17) writes Hugging Face's `BertModel` (issue 23; `bench/engine_torch.py` exports
the real BERT-base this way on the GPU machine, where torch is installed).

What the exporter writes and this graph copies:
  - embeddings: `Gather(word_embeddings, input_ids)`, token types from a buffered zero row
    sliced to the sequence and `Expand`ed to `[batch, seq]` through `Shape`/`Gather`/`Concat`,
    positions from a buffered `arange` row sliced by `Shape`, two `Add`s, `LayerNormalization`;
  - the padding mask, in one of two forms (`--mask`):
      `index`:  transformers' masking_utils under tracing: `attention_mask` cast to bool,
                indexed as `mask[arange(batch)[:,None,None,None], arange(seq)[None,None,None,:]]`
                (aten::index → Transpose/Flatten/Mul/Add/Gather/Reshape), `Expand`ed to
                `[batch, 1, seq, seq]` and turned into 0 / -inf by SDPA's `Where`;
      `legacy`: `(1 - mask[:, None, None, :].float()) * finfo.min`;
  - each layer: Q/K/V `MatMul` + bias `Add`, head split by `Reshape` (target from
    `Shape`/`Slice`/`Concat`) and `Transpose`, SDPA's export (`Sqrt` of a scale computed from
    `Shape(q)` multiplied into q and kᵀ, `MatMul`, `Add` mask, `Softmax`, `MatMul`), head merge,
    output `MatMul` + `Add`, residual `Add`, `LayerNormalization`; the FFN `MatMul` + `Add`,
    erf GELU (`Div √2`, `Erf`, `Add 1`, `Mul x`, `Mul 0.5`), `MatMul` + `Add`, residual,
    `LayerNormalization`.
  - `--decomposed-ln`: LayerNorm as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add (older
    exporters and opset < 17); `--tanh-gelu`: GELU's tanh form (Mul/Pow/Add/Tanh...).

`python scripts/bert_onnx.py OUT.onnx [--mask index|legacy] [--decomposed-ln] [--tanh-gelu]
[--layers N] [--hidden H] [--heads A] [--seq S] [--vocab V]` (batch symbolic, sequence fixed, random
weights, seed 0). Needs numpy and onnx only."""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class B:
    def __init__(self, seed):
        self.nodes, self.inits, self.k = [], [], 0
        self.rng = np.random.default_rng(seed)

    def name(self, p):
        self.k += 1
        return f"{p}_{self.k}"

    def const(self, arr, p="c"):
        n = self.name(p)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def w(self, *shape, std=0.1, base=0.0):
        return self.const((base + self.rng.standard_normal(shape) * std).astype(np.float32), "w")

    def op(self, op, ins, n_out=1, **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, ins, outs, name=self.name(op), **attrs))
        return outs[0] if n_out == 1 else outs

    def i64(self, *v):
        return self.const(np.array(v, dtype=np.int64), "i")

    def scalar(self, v):
        return self.const(np.array(v, dtype=np.int64), "s")

    def f32(self, v):
        return self.const(np.array(v, dtype=np.float32), "f")


def layer_norm(b, x, h, decomposed):
    g, beta = b.w(h, base=1.0), b.w(h)
    if not decomposed:
        return b.op("LayerNormalization", [x, g, beta], axis=-1, epsilon=1e-12)
    mean = b.op("ReduceMean", [x], axes=[-1], keepdims=1)
    d = b.op("Sub", [x, mean])
    var = b.op("ReduceMean", [b.op("Pow", [d, b.f32(2.0)])], axes=[-1], keepdims=1)
    std = b.op("Sqrt", [b.op("Add", [var, b.f32(1e-12)])])
    return b.op("Add", [b.op("Mul", [b.op("Div", [d, std]), g]), beta])


def gelu(b, x, tanh):
    if not tanh:
        e = b.op("Erf", [b.op("Div", [x, b.f32(1.4142135381698608)])])
        return b.op("Mul", [b.op("Mul", [x, b.op("Add", [e, b.f32(1.0)])]), b.f32(0.5)])
    # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
    x3 = b.op("Pow", [x, b.f32(3.0)])
    inner = b.op("Add", [x, b.op("Mul", [x3, b.f32(0.044715)])])
    t = b.op("Tanh", [b.op("Mul", [inner, b.f32(0.7978845608028654)])])
    return b.op("Mul", [b.op("Mul", [x, b.f32(0.5)]), b.op("Add", [t, b.f32(1.0)])])


def linear(b, x, n_in, n_out):
    return b.op("Add", [b.w(n_out), b.op("MatMul", [x, b.w(n_in, n_out)])])


def bert(layers=2, hidden=64, heads=4, seq=16, vocab=100, positions=64, mask="index",
         decomposed_ln=False, tanh_gelu=False, seed=0):
    b = B(seed)
    hd = hidden // heads
    ids, am = "input_ids", "attention_mask"
    shape_ids = b.op("Shape", [ids])
    batch = b.op("Gather", [shape_ids, b.scalar(0)], axis=0)
    slen = b.op("Gather", [shape_ids, b.scalar(1)], axis=0)
    # Embeddings.
    words = b.op("Gather", [b.w(vocab, hidden, std=0.5), ids], axis=0)
    tt_row = b.const(np.zeros((1, positions), dtype=np.int64), "token_type_ids")
    tt = b.op("Slice", [tt_row, b.i64(0), b.op("Unsqueeze", [slen, b.i64(0)]), b.i64(1)])
    tt_shape = b.op("Concat", [b.op("Unsqueeze", [batch, b.i64(0)]),
                               b.op("Unsqueeze", [slen, b.i64(0)])], axis=0)
    tt = b.op("Expand", [tt, tt_shape])
    types = b.op("Gather", [b.w(2, hidden, std=0.5), tt], axis=0)
    pos_row = b.const(np.arange(positions, dtype=np.int64)[None, :], "position_ids")
    pos = b.op("Slice", [pos_row, b.i64(0), b.op("Unsqueeze", [slen, b.i64(0)]), b.i64(1)])
    poss = b.op("Gather", [b.w(positions, hidden, std=0.5), pos], axis=0)
    x = layer_norm(b, b.op("Add", [b.op("Add", [words, types]), poss]), hidden, decomposed_ln)
    # The additive mask, [batch, 1, 1 or seq, seq].
    if mask == "legacy":
        m = b.op("Unsqueeze", [b.op("Unsqueeze", [am, b.i64(1)]), b.i64(2)])
        m = b.op("Cast", [m], to=TensorProto.FLOAT)
        m = b.op("Mul", [b.op("Sub", [b.f32(1.0), m]), b.f32(np.finfo(np.float32).min)])
    else:
        mb = b.op("Cast", [am], to=TensorProto.BOOL)
        one = b.scalar(1)
        bi = b.op("Range", [b.scalar(0), batch, one])
        ki = b.op("Range", [b.scalar(0), slen, one])
        bi = b.op("Unsqueeze", [bi, b.i64(1, 2, 3)])
        ki = b.op("Unsqueeze", [ki, b.i64(0, 1, 2)])
        ms = b.op("Shape", [mb])
        d1 = b.op("Gather", [ms, b.scalar(1)], axis=0)
        flat = b.op("Flatten", [b.op("Transpose", [mb], perm=[0, 1])], axis=2)
        cum = b.op("Add", [ki, b.op("Mul", [bi, d1])])
        g = b.op("Gather", [flat, cum], axis=0)
        g = b.op("Reshape", [g, b.op("Shape", [cum])])
        g = b.op("And", [b.const(np.array(True), "true"), g])
        full = b.op("Concat", [b.op("Unsqueeze", [batch, b.i64(0)]), b.i64(1),
                               b.op("Unsqueeze", [slen, b.i64(0)]),
                               b.op("Unsqueeze", [slen, b.i64(0)])], axis=0)
        g = b.op("Expand", [g, full])
        m = b.op("Where", [g, b.const(np.array([0.0], np.float32)),
                           b.const(np.array([-np.inf], np.float32))])
    for _ in range(layers):
        xs = b.op("Shape", [x])
        head_shape = b.op("Concat", [b.op("Slice", [xs, b.i64(0), b.i64(-1)]), b.i64(-1, hd)],
                          axis=0)

        def heads_of(t):
            return b.op("Transpose", [b.op("Reshape", [t, head_shape])], perm=[0, 2, 1, 3])

        q = heads_of(linear(b, x, hidden, hidden))
        k = heads_of(linear(b, x, hidden, hidden))
        v = heads_of(linear(b, x, hidden, hidden))
        qs = b.op("Shape", [q])
        d = b.op("Cast", [b.op("Slice", [qs, b.i64(-1), b.i64(2**62)])], to=TensorProto.FLOAT)
        scale = b.op("Div", [b.f32([1.0]), b.op("Sqrt", [d])])
        rs = b.op("Sqrt", [b.op("Cast", [scale], to=TensorProto.FLOAT)])
        kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
        s = b.op("MatMul", [b.op("Mul", [q, rs]), b.op("Mul", [kt, rs])])
        p = b.op("Softmax", [b.op("Add", [s, m])], axis=-1)
        o = b.op("Transpose", [b.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
        merged = b.op("Concat", [b.op("Slice", [b.op("Shape", [o]), b.i64(0), b.i64(2)]),
                                 b.i64(-1)], axis=0)
        o = b.op("Reshape", [o, merged])
        x = layer_norm(b, b.op("Add", [linear(b, o, hidden, hidden), x]), hidden, decomposed_ln)
        f = gelu(b, linear(b, x, hidden, 4 * hidden), tanh_gelu)
        x = layer_norm(b, b.op("Add", [linear(b, f, 4 * hidden, hidden), x]), hidden,
                       decomposed_ln)
    b.nodes.append(helper.make_node("Identity", [x], ["y"], name="out"))
    graph = helper.make_graph(
        b.nodes, "bert",
        [helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", seq]),
         helper.make_tensor_value_info(am, TensorProto.INT64, ["batch", seq])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", seq, hidden])],
        b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--mask", choices=["index", "legacy"], default="index")
    ap.add_argument("--decomposed-ln", action="store_true")
    ap.add_argument("--tanh-gelu", action="store_true")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=100)
    a = ap.parse_args()
    m = bert(a.layers, a.hidden, a.heads, a.seq, a.vocab, max(2 * a.seq, 64), mask=a.mask, decomposed_ln=a.decomposed_ln,
             tanh_gelu=a.tanh_gelu)
    onnx.save(m, a.out)


if __name__ == "__main__":
    main()
