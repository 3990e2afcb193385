#!/usr/bin/env python3
"""Dump ONNX's conformance cases (from the pinned `onnx` wheel) for the Rust conformance runner.

Usage: python dump_conformance.py OUT_DIR
Writes OUT_DIR/<suite>/<case>/model.onnx and test_data_set_N/{input,output}_i.pb for
suite `node` (generated in memory by onnx's loader, every data set) and `light` (the nine light
models: input built like onnx's runner does, `generate_dummy_data(random=False)`, reference
output copied from `light_<name>_output_0.pb`), and the wheel's stored suites `simple`,
`pytorch-operator` and `pytorch-converted` (already model.onnx + test_data_set_N, copied).
"""
import os
import shutil
import sys
import warnings

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test import loader
from onnx.backend.test.runner import Runner


def save(path, value):
    # Some cases (casts to exotic dtypes) already carry TensorProtos: write them as they are.
    if not isinstance(value, onnx.TensorProto):
        value = numpy_helper.from_array(np.asarray(value))
    with open(path, "wb") as f:
        f.write(value.SerializeToString())


def dump_node(out):
    n = 0
    for c in loader.load_model_tests(kind="node"):
        if c.model is None or not c.data_sets:
            continue
        d = os.path.join(out, "node", c.name)
        os.makedirs(d, exist_ok=True)
        onnx.save(c.model, os.path.join(d, "model.onnx"))
        ok = True
        for k, (inputs, outputs) in enumerate(c.data_sets):
            ds = os.path.join(d, f"test_data_set_{k}")
            os.makedirs(ds, exist_ok=True)
            try:
                for i, v in enumerate(inputs):
                    save(os.path.join(ds, f"input_{i}.pb"), v)
                for i, v in enumerate(outputs):
                    save(os.path.join(ds, f"output_{i}.pb"), v)
            except Exception as e:  # sequences/optionals have no TensorProto form
                ok = False
                with open(os.path.join(d, "UNSUPPORTED"), "w") as f:
                    f.write(f"data set is not plain tensors: {e}\n")
        n += ok
    return n


def dump_light(out):
    data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    n = 0
    for f in sorted(os.listdir(data)):
        if not f.endswith(".onnx"):
            continue
        name = f[: -len(".onnx")]
        d = os.path.join(out, "light", name)
        ds = os.path.join(d, "test_data_set_0")
        os.makedirs(ds, exist_ok=True)
        shutil.copy(os.path.join(data, f), os.path.join(d, "model.onnx"))
        m = onnx.load(os.path.join(data, f))
        inits = {i.name for i in m.graph.initializer}
        k = 0
        for x in m.graph.input:
            if x.name in inits:
                continue
            save(os.path.join(ds, f"input_{k}.pb"), Runner.generate_dummy_data(x, seed=0, name=name, random=False))
            k += 1
        for i in range(len(m.graph.output)):
            shutil.copy(os.path.join(data, f"{name}_output_{i}.pb"), os.path.join(ds, f"output_{i}.pb"))
        n += 1
    return n


STORED = ("simple", "pytorch-operator", "pytorch-converted")


def dump_stored(out, suite):
    data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", suite)
    n = 0
    for case in sorted(os.listdir(data)):
        src = os.path.join(data, case)
        if os.path.isfile(os.path.join(src, "model.onnx")):
            shutil.copytree(src, os.path.join(out, suite, case), dirs_exist_ok=True)
            n += 1
    return n


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    out = sys.argv[1]
    stored = ", ".join(f"{s}: {dump_stored(out, s)}" for s in STORED)
    print(f"node: {dump_node(out)} cases, light: {dump_light(out)} models, {stored} -> {out}")
