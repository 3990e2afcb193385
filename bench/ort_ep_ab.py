#!/usr/bin/env python3
"""Interleaved A/B: MpsrtExecutionProvider vs mpsrt.onnx.InferenceSession on the same model and
input (alternating runs, so machine load hits both alike); p50 of each and their ratio: what the
plugin boundary costs (the issue's target: the EP within 10% of the session).

  python3 bench/ort_ep_ab.py squeezenet,shufflenet,resnet50,densenet121 ITERS [cpu|gpu]

Models are the ONNX light models shipped in the onnx wheel. `cpu`: both on mpsrt's CPU backend
(EP provider option device_id=cpu); `gpu`: both on mpsrt's first GPU."""
import json
import os
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort

import mpsrt
import mpsrt.onnx
import mpsrt.ort

mpsrt.ort.register()
d = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
iters = int(sys.argv[2])
place = sys.argv[3] if len(sys.argv) > 3 else "gpu"
for name in sys.argv[1].split(","):
    path = os.path.join(d, f"light_{name}.onnx")
    cpu = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (i,) = cpu.get_inputs()
    x = {i.name: np.random.default_rng(0).standard_normal(i.shape).astype(np.float32)}
    opts = {"device_id": "cpu"} if place == "cpu" else {}
    ep = ort.InferenceSession(path, providers=[("MpsrtExecutionProvider", opts),
                                               "CPUExecutionProvider"])
    ses = mpsrt.onnx.InferenceSession(path, place="cpu" if place == "cpu" else "mps")
    runs = {"ep": lambda: ep.run(None, x), "session": lambda: ses.run(None, x)}
    for f in runs.values():
        f()
        f()
    lat = {k: [] for k in runs}
    for _ in range(iters):
        for k, f in runs.items():
            t0 = time.perf_counter()
            f()
            lat[k].append((time.perf_counter() - t0) * 1e3)
    p50 = {k: sorted(v)[len(v) // 2] for k, v in lat.items()}
    print(json.dumps({"model": name, "place": place, "device": mpsrt.mps.get_device_name(),
                      "iters": iters, "ep_p50_ms": round(p50["ep"], 2),
                      "session_p50_ms": round(p50["session"], 2),
                      "ep_over_session": round(p50["ep"] / p50["session"], 3)}), flush=True)
