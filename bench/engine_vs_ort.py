#!/usr/bin/env python3
"""`mpsrt bench` beside onnxruntime (CPUExecutionProvider) on the ONNX light models shipped in the
`onnx` wheel, batch 1. Usage: python bench/engine_vs_ort.py [--iters N] [--devices cpu,gpu] MODEL...
(MODEL = light model name, e.g. resnet50). Prints one JSON line per (model, runtime)."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort

args = sys.argv[1:]
iters, devices = 10, ["cpu"]
if "--iters" in args:
    i = args.index("--iters"); iters = int(args[i + 1]); del args[i:i + 2]
if "--devices" in args:
    i = args.index("--devices"); devices = args[i + 1].split(","); del args[i:i + 2]
light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
for name in args:
    path = os.path.join(light, f"light_{name}.onnx")
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {i.name: np.random.rand(*[d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
            for i in sess.get_inputs()}
    sess.run(None, feed)
    lat = []
    for _ in range(iters):
        t0 = time.perf_counter(); sess.run(None, feed); lat.append((time.perf_counter() - t0) * 1e3)
    lat.sort()
    print(json.dumps({"model": name, "runtime": f"onnxruntime {ort.__version__} cpu",
                      "p50_ms": lat[len(lat) // 2], "iterations": iters}), flush=True)
    for dev in devices:
        out = subprocess.run(["./target/release/mpsrt", "bench", path, "--device", dev, "--json",
                              "--iterations", str(iters), "--warmup", "1"],
                             capture_output=True, text=True, check=True).stdout
        r = json.loads(out)
        print(json.dumps({"model": name, "runtime": f"mpsrt {r['place']}", "p50_ms": r["p50_ms"],
                          "iterations": iters, "plan": r["plan"]}), flush=True)
