"""Helpers for the half-precision tests (issue 23): ONNX's light models with seeded random
weights (their own weights are one constant per tensor, which makes every class score equal and
top-1 agreement meaningless), and a small float32 → float16 ONNX converter (every float tensor,
attribute, Cast target and graph input/output becomes float16: the model runs in f16 end to end).
No onnxconverter-common: the conversion is a few proto rewrites and this keeps it dependency-free."""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light_path(name):
    return os.path.join(LIGHT, f"light_{name}.onnx")


def randomize_light(name, seed=0):
    """The light model with every ConstantOfShape weight replaced by a random initializer: 4-D
    and 2-D tensors He-normal over their fan-in; BatchNorm variances (its 5th input) in
    [0.5, 1.5], scales (2nd) in [0.8, 1.2], the rest (biases, means, shifts) in [-0.1, 0.1]."""
    m = onnx.load(light_path(name))
    rng = np.random.default_rng(seed)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    bn_role = {}
    for n in m.graph.node:
        if n.op_type == "BatchNormalization":
            bn_role.update({n.input[1]: "scale", n.input[4]: "var"})
    keep, new_inits = [], []
    for n in m.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            shape = tuple(int(d) for d in inits[n.input[0]])
            role = bn_role.get(n.output[0])
            if len(shape) >= 2:
                fan_in = int(np.prod(shape[1:]))
                w = rng.standard_normal(shape) * np.sqrt(2.0 / max(fan_in, 1))
            elif role == "var":
                w = rng.uniform(0.5, 1.5, shape)
            elif role == "scale":
                w = rng.uniform(0.8, 1.2, shape)
            else:
                w = rng.uniform(-0.1, 0.1, shape)
            new_inits.append(numpy_helper.from_array(w.astype(np.float32), n.output[0]))
        else:
            keep.append(n)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    used = {i for n in keep for i in n.input}
    kept_inits = [i for i in m.graph.initializer if i.name in used]
    del m.graph.initializer[:]
    m.graph.initializer.extend(kept_inits + new_inits)
    # Old-IR models list initializers as graph inputs too: keep only the real inputs.
    init_names = {i.name for i in m.graph.initializer} | set(inits)
    real = [i for i in m.graph.input if i.name not in init_names]
    del m.graph.input[:]
    m.graph.input.extend(real)
    return m


def _tensor_to_f16(t):
    if t.data_type != TensorProto.FLOAT:
        return t
    return numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name)


def _type_to_f16(tp):
    if tp.HasField("tensor_type") and tp.tensor_type.elem_type == TensorProto.FLOAT:
        tp.tensor_type.elem_type = TensorProto.FLOAT16


def convert_to_f16(model):
    """A copy of `model` computing in float16 throughout (inputs and outputs too)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for i, t in enumerate(list(g.initializer)):
        g.initializer[i].CopyFrom(_tensor_to_f16(t))
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                a.t.CopyFrom(_tensor_to_f16(a.t))
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
    for v in list(g.input) + list(g.output) + list(g.value_info):
        _type_to_f16(v.type)
    return m


def input_of(model, seed=1):
    """A random feed for the model's first input (symbolic dims as 1)."""
    rng = np.random.default_rng(seed)
    i = model.graph.input[0]
    dims = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
    return i.name, rng.standard_normal(dims).astype(np.float32)


def compare(got, ref):
    """(max abs err, max abs err / max |ref|, top-1 agreement): rows are the first axis (batch)
    for image classifiers ([N, 1000] or [N, 1000, 1, 1]), else every position of the last axis
    (a language model's [B, T, vocab])."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    abs_err = float(np.max(np.abs(got - ref)))
    rel = abs_err / max(float(np.max(np.abs(ref))), 1e-30)
    rows = ref.shape[0] if ref.ndim != 3 else ref.shape[0] * ref.shape[1]
    g2 = got.reshape(rows, -1)
    r2 = ref.reshape(rows, -1)
    top1 = float(np.mean(g2.argmax(-1) == r2.argmax(-1)))
    return abs_err, rel, top1
