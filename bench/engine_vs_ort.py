#!/usr/bin/env python3
"""`mpsrt bench` beside onnxruntime (CPUExecutionProvider) on the ONNX light models shipped in the
`onnx` wheel. Usage: python bench/engine_vs_ort.py [--iters N] [--devices cpu,gpu] [--batch B] MODEL...
(MODEL = light model name, e.g. resnet50). Prints one JSON line per (model, runtime). With --batch B > 1
the model's inputs and outputs get a symbolic leading dim (a copy under /tmp) and both runtimes are fed
B images. With --rounds R (default 1) onnxruntime and mpsrt alternate R times per model (each round
`iters` runs of each, p50 per round) and a summary line gives each round's mpsrt/onnxruntime ratio and
their median: on a shared 2-core VM single runs swing by 30%, paired rounds show the ratio itself."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort

args = sys.argv[1:]
iters, devices, batch, rounds = 10, ["cpu"], 1, 1
if "--rounds" in args:
    i = args.index("--rounds"); rounds = int(args[i + 1]); del args[i:i + 2]
if "--iters" in args:
    i = args.index("--iters"); iters = int(args[i + 1]); del args[i:i + 2]
if "--batch" in args:
    i = args.index("--batch"); batch = int(args[i + 1]); del args[i:i + 2]
if "--devices" in args:
    i = args.index("--devices"); devices = args[i + 1].split(","); del args[i:i + 2]
light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
for name in args:
    path = os.path.join(light, f"light_{name}.onnx")
    if batch > 1:
        m = onnx.load(path)
        inits = {t.name for t in m.graph.initializer}
        for v in [v for v in m.graph.input if v.name not in inits] + list(m.graph.output):
            v.type.tensor_type.shape.dim[0].dim_param = "N"
        # Reshapes to a constant shape with a leading 1 (resnet50's flatten) keep the batch.
        for node in m.graph.node:
            if node.op_type == "Reshape":
                for t in m.graph.initializer:
                    if t.name == node.input[1]:
                        shape = onnx.numpy_helper.to_array(t).copy()
                        if shape.size and shape[0] == 1:
                            shape[0] = -1
                            t.CopyFrom(onnx.numpy_helper.from_array(shape, t.name))
        del m.graph.value_info[:]
        path = f"/tmp/light_{name}_batchN.onnx"
        onnx.save(m, path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {i.name: np.random.rand(*[d if isinstance(d, int) else batch for d in i.shape]).astype(np.float32)
            for i in sess.get_inputs()}
    sess.run(None, feed)
    ratios = {dev: [] for dev in devices}
    for rnd in range(rounds):
        lat = []
        for _ in range(iters):
            t0 = time.perf_counter(); sess.run(None, feed); lat.append((time.perf_counter() - t0) * 1e3)
        lat.sort()
        ort_p50 = lat[len(lat) // 2]
        print(json.dumps({"model": name, "runtime": f"onnxruntime {ort.__version__} cpu",
                          "p50_ms": ort_p50, "iterations": iters, "batch": batch, "round": rnd}), flush=True)
        for dev in devices:
            out = subprocess.run(["./target/release/mpsrt", "bench", path, "--device", dev, "--json",
                                  "--iterations", str(iters), "--warmup", "1", "--batch", str(batch)],
                                 capture_output=True, text=True, check=True).stdout
            r = json.loads(out)
            ratios[dev].append(r["p50_ms"] / ort_p50)
            print(json.dumps({"model": name, "runtime": f"mpsrt {r['place']}", "p50_ms": r["p50_ms"],
                              "iterations": iters, "batch": batch, "round": rnd, "plan": r["plan"]}),
                  flush=True)
    if rounds > 1:
        for dev, rs in ratios.items():
            print(json.dumps({"model": name, "batch": batch, "device": dev,
                              "ratio_mpsrt_over_ort": [round(x, 3) for x in rs],
                              "median_ratio": round(sorted(rs)[len(rs) // 2], 3)}), flush=True)
