#!/usr/bin/env python3
"""Dump ONNX's backend node tests (generated in memory by the pinned `onnx` wheel) to a folder
so the Rust test `node_tests_import_and_infer` (ignored by default) can check import coverage and
shape inference against them without Python at test time.

Usage: python dump_node_tests.py OUT_DIR
Writes OUT_DIR/<case>/model.onnx and OUT_DIR/<case>/shapes.txt, one line per tensor:
  in <name> <dtype> <d0> <d1> ...
  out <name> <dtype> <d0> <d1> ...
  val <name> <v0> <v1> ...   (flattened values of numeric inputs with at most 64 elements)
(only the first data set; scalars have no dims).
"""
import os
import sys
import warnings

import numpy as np
import onnx
from onnx.backend.test import loader


def main(out):
    warnings.simplefilter("ignore")
    cases = loader.load_model_tests(kind="node")
    os.makedirs(out, exist_ok=True)
    n = 0
    for c in cases:
        if c.model is None or not c.data_sets:
            continue
        d = os.path.join(out, c.name)
        os.makedirs(d, exist_ok=True)
        onnx.save(c.model, os.path.join(d, "model.onnx"))
        inputs, outputs = c.data_sets[0]
        g = c.model.graph
        init = {t.name for t in g.initializer}
        in_names = [i.name for i in g.input if i.name not in init]
        lines = []
        for kind, names, vals in (("in", in_names, inputs), ("out", [o.name for o in g.output], outputs)):
            for name, v in zip(names, vals):
                a = np.asarray(v) if not isinstance(v, list) else None
                if a is None or a.dtype == object:
                    lines.append(f"{kind} {name} nontensor")
                    continue
                lines.append(" ".join([kind, name, str(a.dtype)] + [str(s) for s in a.shape]))
                # Small numeric inputs may decide shapes (Reshape targets, Slice bounds...).
                if kind == "in" and a.size <= 64 and a.dtype.kind in "iuf":
                    lines.append(" ".join(["val", name] + [repr(x) for x in a.reshape(-1).tolist()]))
        with open(os.path.join(d, "shapes.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        n += 1
    print(f"dumped {n} node test cases to {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "onnx-node-tests")
