#!/usr/bin/env python3
"""Interleaved A/B: MpsrtExecutionProvider vs mpsrt.onnx.InferenceSession on the same model and
input (alternating runs, so machine load hits both alike); p50 of each and their ratio: what the
plugin boundary costs (the issue's target: the EP within 10% of the session).

  python3 bench/ort_ep_ab.py squeezenet,shufflenet,resnet50,densenet121 ITERS [cpu|gpu] [--batch B]
      [--opt disabled|basic|extended|all]   # the EP session's graph_optimization_level (all)

Models are the ONNX light models shipped in the onnx wheel, or paths to .onnx files (e.g.
`bench/engine_torch.py export`'s bert_base.onnx): their inputs are made from the declared types,
symbolic dims as batch B (default 1) and then 128; int64 inputs named like `*mask*` are ones,
other int64 inputs random ids below 1000. `cpu`: both on mpsrt's CPU backend (EP provider
option device_id=cpu); `gpu`: both on mpsrt's first GPU. Set MPSRT_ORT_HOST_MIRROR=0 to measure
the EP without the host copies of int64 inputs (each then read back from the device)."""
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
args = sys.argv[1:]
batch = 1
if "--batch" in args:
    batch = int(args.pop(args.index("--batch") + 1))
    args.remove("--batch")
opt = "all"
if "--opt" in args:
    opt = args.pop(args.index("--opt") + 1)
    args.remove("--opt")
LEVELS = {"disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
          "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
          "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
iters = int(args[1])
place = args[2] if len(args) > 2 else "gpu"


def make_feeds(sess):
    rng = np.random.default_rng(0)
    x = {}
    for i in sess.get_inputs():
        dims = [v if isinstance(v, int) else None for v in i.shape]
        shape = [v if v is not None else (batch if k == 0 else 128) for k, v in enumerate(dims)]
        if i.type == "tensor(int64)":
            x[i.name] = (np.ones(shape, np.int64) if "mask" in i.name
                         else rng.integers(0, 1000, size=shape).astype(np.int64))
        else:
            x[i.name] = rng.standard_normal(shape).astype(np.float32)
    return x


for name in args[0].split(","):
    path = name if name.endswith(".onnx") else os.path.join(d, f"light_{name}.onnx")
    cpu = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = make_feeds(cpu)
    opts = {"device_id": "cpu"} if place == "cpu" else {}
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[opt]
    ep = ort.InferenceSession(path, so, providers=[("MpsrtExecutionProvider", opts),
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
    mirror = os.environ.get("MPSRT_ORT_HOST_MIRROR", "1") != "0"
    print(json.dumps({"model": os.path.basename(name), "batch": batch, "place": place,
                      "ort_opt": opt,
                      "host_mirror": mirror, "device": mpsrt.mps.get_device_name(),
                      "iters": iters, "ep_p50_ms": round(p50["ep"], 2),
                      "session_p50_ms": round(p50["session"], 2),
                      "ep_over_session": round(p50["ep"] / p50["session"], 3)}), flush=True)
