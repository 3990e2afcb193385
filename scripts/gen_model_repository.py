#!/usr/bin/env python3
"""Generate the example Triton model repository served by `mpsrt serve`.

Writes, under examples/model_repository/ (or the directory given as argv[1]):
  simple/config.pbtxt, simple/1/model.onnx
      Triton's classic "simple" model: INT32 INPUT0, INPUT1 [16] ->
      OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1; max_batch_size 8, dynamic batching.
  relu_fp32/1/model.onnx  (no config.pbtxt on purpose)
      FP32 INPUT0 [batch, 8] -> OUTPUT0 = Relu(INPUT0). The server auto-completes its config
      from the graph: inputs/outputs, and max_batch_size 4 + dynamic_batching because the
      leading dim is dynamic, as Triton does for ONNX models.
  mps_model/config.pbtxt, mps_model/1/model.mps
      The fourth seed's example config exactly as its README writes it (backend "metal_mps",
      KIND_GPU on gpus [0]) over the onnx package's light SqueezeNet 1.0
      (onnx/backend/test/data/light/light_squeezenet.onnx, 15 KB: its weights are ConstantOfShape
      nodes), with the graph input renamed "input", the batch dim made dynamic, and a Flatten
      giving "output" [batch, 1000]. ".mps" files are ONNX, as the seed says.

Requires the `onnx` package (pip install onnx). Output is deterministic, so re-running it
leaves the committed files unchanged.
"""
import os
import sys

import onnx
from onnx import TensorProto, helper

OPSET = 13
IR_VERSION = 8  # widely readable; the ops used exist since opset 7

SIMPLE_CONFIG = """\
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_INT32
    dims: [ 16 ]
  },
  {
    name: "OUTPUT1"
    data_type: TYPE_INT32
    dims: [ 16 ]
  }
]
dynamic_batching { }
instance_group [
  {
    count: 1
    kind: KIND_AUTO
  }
]
"""


# The seed's README example, verbatim (triton-inference-server-mps-backend, "Model Configuration").
MPS_MODEL_CONFIG = """\
name: "mps_model"
backend: "metal_mps"
max_batch_size: 8

input [
  {
    name: "input"
    data_type: TYPE_FP32
    dims: [ 3, 224, 224 ]
  }
]

output [
  {
    name: "output"
    data_type: TYPE_FP32
    dims: [ 1000 ]
  }
]

instance_group [
  {
    count: 1
    kind: KIND_GPU
    gpus: [ 0 ]
  }
]
"""


def save(model, path):
    onnx.checker.check_model(model)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def make(graph):
    model = helper.make_model(
        graph,
        producer_name="mpsrt scripts/gen_model_repository.py",
        opset_imports=[helper.make_opsetid("", OPSET)],
    )
    model.ir_version = IR_VERSION
    return model


def simple_model():
    def vi(name):
        return helper.make_tensor_value_info(name, TensorProto.INT32, ["batch", 16])

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
        ],
        "simple",
        [vi("INPUT0"), vi("INPUT1")],
        [vi("OUTPUT0"), vi("OUTPUT1")],
    )
    return make(graph)


def relu_model():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["INPUT0"], ["OUTPUT0"], name="relu")],
        "relu_fp32",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", 8])],
    )
    return make(graph)


def mps_model():
    """light_squeezenet with the seed config's tensor names and a dynamic batch dim."""
    src = os.path.join(
        os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx"
    )
    light = onnx.load(src)
    g = light.graph
    nodes = []
    for n in g.node:
        n = onnx.NodeProto.FromString(n.SerializeToString())
        n.input[:] = ["input" if i == "data_0" else i for i in n.input]
        nodes.append(n)
    # Softmax (opset 9) leaves [batch, 1000, 1, 1]; the seed's config declares [1000] per item.
    nodes.append(helper.make_node("Flatten", ["softmaxout_1"], ["output"], name="flatten", axis=1))
    graph = helper.make_graph(
        nodes,
        "mps_model",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 1000])],
        initializer=list(g.initializer),
    )
    # Opset 9 as in the light model: Softmax's axis semantics changed in opset 13.
    model = helper.make_model(
        graph,
        producer_name="mpsrt scripts/gen_model_repository.py (from onnx light_squeezenet)",
        opset_imports=[helper.make_opsetid("", 9)],
    )
    model.ir_version = IR_VERSION
    return model


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "examples", "model_repository")
    save(simple_model(), os.path.join(out, "simple", "1", "model.onnx"))
    with open(os.path.join(out, "simple", "config.pbtxt"), "w") as f:
        f.write(SIMPLE_CONFIG)
    save(relu_model(), os.path.join(out, "relu_fp32", "1", "model.onnx"))
    save(mps_model(), os.path.join(out, "mps_model", "1", "model.mps"))
    with open(os.path.join(out, "mps_model", "config.pbtxt"), "w") as f:
        f.write(MPS_MODEL_CONFIG)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
