#!/usr/bin/env python3
"""ONNX models for `mpsrt bench` and the same networks in PyTorch (eager, CUDA, TF32 off).

  python3 bench/engine_torch.py export DIR      # torchvision resnet50 / densenet121 -> DIR/*.onnx
  python3 bench/engine_torch.py torch [--iters N]  # torch latency, one JSON line per case
  python3 bench/engine_torch.py ort DIR [--iters N] # onnxruntime CPU on DIR/*.onnx, batch 1 and 32

Weights are random (no download): latency does not depend on them.
"""
import json
import os
import sys
import time

import torch
import torchvision

MODELS = {"resnet50": torchvision.models.resnet50, "densenet121": torchvision.models.densenet121}


def export(out):
    os.makedirs(out, exist_ok=True)
    for name, ctor in MODELS.items():
        m = ctor(weights=None).eval()
        x = torch.randn(1, 3, 224, 224)
        path = os.path.join(out, f"{name}.onnx")
        try:  # the TorchScript exporter: plain opset-17 graphs
            torch.onnx.export(m, (x,), path, input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                              opset_version=17, dynamo=False)
        except Exception as e:  # newer torch: only the dynamo exporter
            print(json.dumps({"torchscript_export_failed": str(e)[:200]}))
            torch.onnx.export(m, (x,), path, input_names=["x"], output_names=["y"],
                              dynamic_shapes={"x": {0: torch.export.Dim("batch", max=64)}},
                              dynamo=True, external_data=False)
        print(json.dumps({"exported": path, "bytes": os.path.getsize(path)}))


def bench_torch(iters):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    for name, ctor in MODELS.items():
        m = ctor(weights=None).eval().to(dev)
        for batch in (1, 8, 32):
            x = torch.randn(batch, 3, 224, 224, device=dev)
            with torch.inference_mode():
                for _ in range(5):
                    m(x)
                torch.cuda.synchronize()
                lat = []
                for _ in range(iters):
                    t0 = time.perf_counter()
                    m(x)
                    torch.cuda.synchronize()
                    lat.append((time.perf_counter() - t0) * 1e3)
            lat.sort()
            print(json.dumps({"torch": name, "batch": batch, "p50_ms": lat[len(lat) // 2],
                              "p90_ms": lat[int(len(lat) * 0.9)], "mean_ms": sum(lat) / len(lat),
                              "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                              "model": name}))


def bench_ort(models, iters):
    import numpy as np
    import onnxruntime as ort

    for name in MODELS:
        sess = ort.InferenceSession(os.path.join(models, f"{name}.onnx"),
                                    providers=["CPUExecutionProvider"])
        for batch in (1, 32):
            x = np.random.rand(batch, 3, 224, 224).astype(np.float32)
            sess.run(None, {"x": x})
            lat = []
            for _ in range(iters):
                t0 = time.perf_counter()
                sess.run(None, {"x": x})
                lat.append((time.perf_counter() - t0) * 1e3)
            lat.sort()
            print(json.dumps({"onnxruntime": ort.__version__, "provider": "CPUExecutionProvider",
                              "threads": os.cpu_count(), "model": name, "batch": batch,
                              "p50_ms": lat[len(lat) // 2], "iterations": iters}), flush=True)


if __name__ == "__main__":
    n = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 50
    if sys.argv[1] == "export":
        export(sys.argv[2])
    elif sys.argv[1] == "ort":
        bench_ort(sys.argv[2], n)
    else:
        bench_torch(n)
