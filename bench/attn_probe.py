"""BERT-base's self-attention alone, as exported (issue 23): a probe for the fused attention kernels.

Writes `attn_f16.onnx` and `attn_f32.onnx` to the directory given (default /tmp/models): input
`x [batch, 128, 2304]` (the merged Q/K/V projection's output), `mask [batch, 1, 1, 128]`
(additive); Q/K/V as Slice → Reshape → Transpose views, `MatMul(q, kᵀ) / 8 + mask → Softmax →
MatMul(·, v)`, then Transpose + Reshape to `[batch, 128, 768]` — the chain the graph pass turns
into one `Attention` node. Time it with

    mpsrt bench /tmp/models/attn_f16.onnx --device gpu --batch 8 --profile --json

(per-step GPU times: the `Attention` step alone), with the kernel switches
(`MPSRT_ATTENTION_COOP=0`, `MPSRT_ATTENTION_COOP_SGS`, `MPSRT_ATTENTION_COOP_CHUNK`,
`MPSRT_ATTENTION_TILED=0`) or `--no-fusion` for the composition.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

S, H, D = 128, 12, 64


def build(dt):
    ty = TensorProto.FLOAT16 if dt == np.float16 else TensorProto.FLOAT
    x = helper.make_tensor_value_info("x", ty, ["batch", S, 3 * H * D])
    m = helper.make_tensor_value_info("mask", ty, ["batch", 1, 1, S])
    y = helper.make_tensor_value_info("y", ty, ["batch", S, H * D])
    inits = [
        numpy_helper.from_array(np.array([0, S, H, D], np.int64), "shape4"),
        numpy_helper.from_array(np.array([0, S, H * D], np.int64), "shape3"),
        numpy_helper.from_array(np.array(8.0, dt), "sqrt_d"),
        numpy_helper.from_array(np.array([2], np.int64), "axis2"),
    ]
    nodes = []
    for i, name in enumerate("qkv"):
        inits.append(numpy_helper.from_array(np.array([i * H * D], np.int64), f"{name}_start"))
        inits.append(numpy_helper.from_array(np.array([(i + 1) * H * D], np.int64), f"{name}_end"))
        nodes.append(helper.make_node("Slice", ["x", f"{name}_start", f"{name}_end", "axis2"],
                                      [f"{name}_flat"]))
        nodes.append(helper.make_node("Reshape", [f"{name}_flat", "shape4"], [f"{name}_4d"]))
    nodes += [
        helper.make_node("Transpose", ["q_4d"], ["q"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k_4d"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v_4d"], ["v"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Div", ["scores", "sqrt_d"], ["scaled"]),
        helper.make_node("Add", ["scaled", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["ctx"]),
        helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx_t", "shape3"], ["y"]),
    ]
    g = helper.make_graph(nodes, "bert_attention", [x, m], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/models"
    os.makedirs(out, exist_ok=True)
    for dt, tag in ((np.float16, "f16"), (np.float32, "f32")):
        model = build(dt)
        onnx.checker.check_model(model)
        onnx.save(model, os.path.join(out, f"attn_{tag}.onnx"))
        print(os.path.join(out, f"attn_{tag}.onnx"))


if __name__ == "__main__":
    main()
