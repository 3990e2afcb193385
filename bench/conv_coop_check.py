#!/usr/bin/env python3
"""Issue 23: the cooperative-matrix f16 conv (`conv_coop.rs`) on the GPU machine.

  python3 bench/conv_coop_check.py shapes [--time]   # every ResNet-50 conv shape, batch 1 and 32
  python3 bench/conv_coop_check.py model MODELS_DIR  # ResNet-50 f16 end to end vs onnxruntime f32
  python3 bench/conv_coop_check.py sweep [TILES]     # batch 32: each tile x load form per shape

`shapes`: f16 input / weights / bias (random, f16-exact) through `mpsrt`'s GPU conv with
`MPSRT_COOP_CONV=1` (the matrix units, forced so batch 1 runs there too) and `=0` (the f16
fallback: widened to f32), against torch's f32 conv of the same values (CUDA, TF32 off);
prints the max absolute error over max |reference| for both (one JSON line per shape and
batch) and, with `--time`, each route's time per call at batch 32 beside torch f16 (cuDNN).
`sweep`: at batch 32, a few representative shapes through every tile (`MPSRT_COOP_CONV_TILE`,
default 4x4,2x4,4x2,2x2) and both load forms (`MPSRT_COOP_CONV_CLAMP`), each checked against
torch f32 before it is timed (ms per call, TFLOP/s).
`model`: ResNet-50 (random weights) with `precision='f16'` in two sessions (coop off, on; the
route is read per conv) against onnxruntime CPU f32 on the same input.
"""
import json
import os
import sys
import time

import numpy as np

# (C, HW, OC, k, stride, pad): torchvision ResNet-50 (v1.5: the stride on the 3×3), 224².
SHAPES = [
    (3, 224, 64, 7, 2, 3),
    (64, 56, 64, 1, 1, 0), (64, 56, 64, 3, 1, 1), (64, 56, 256, 1, 1, 0), (256, 56, 64, 1, 1, 0),
    (256, 56, 128, 1, 1, 0), (128, 56, 128, 3, 2, 1), (128, 28, 512, 1, 1, 0),
    (256, 56, 512, 1, 2, 0), (512, 28, 128, 1, 1, 0), (128, 28, 128, 3, 1, 1),
    (512, 28, 256, 1, 1, 0), (256, 28, 256, 3, 2, 1), (256, 14, 1024, 1, 1, 0),
    (512, 28, 1024, 1, 2, 0), (1024, 14, 256, 1, 1, 0), (256, 14, 256, 3, 1, 1),
    (1024, 14, 512, 1, 1, 0), (512, 14, 512, 3, 2, 1), (512, 7, 2048, 1, 1, 0),
    (1024, 14, 2048, 1, 2, 0), (2048, 7, 512, 1, 1, 0), (512, 7, 512, 3, 1, 1),
]


def shapes(timing):
    import torch
    from mpsrt import _C

    torch.backends.cudnn.allow_tf32 = False
    rng = np.random.default_rng(0)

    def gpu(a):
        return _C.from_bytes(a.tobytes(), "float16", list(a.shape), "gpu")

    def host(t):
        return np.frombuffer(t.to("cpu").to_bytes(), dtype=np.float16).reshape(t.shape)

    def run(route, x, w, b, s, p):
        os.environ["MPSRT_COOP_CONV"] = route
        return _C.conv2d(x, w, b, [s, s], [p, p, p, p], False, [1, 1], 1)

    def per_call(fn, sync, iters=10):
        fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        return (time.perf_counter() - t0) / iters * 1e3

    worst = 0.0
    for (c, hw, oc, k, s, p) in SHAPES:
        for n in (1, 32):
            x = rng.standard_normal((n, c, hw, hw), dtype=np.float32).astype(np.float16)
            w = (rng.standard_normal((oc, c, k, k), dtype=np.float32) *
                 np.sqrt(2.0 / (c * k * k))).astype(np.float16)
            b = (rng.standard_normal(oc, dtype=np.float32) * 0.1).astype(np.float16)
            ref = torch.nn.functional.conv2d(
                torch.from_numpy(x).cuda().float(), torch.from_numpy(w).cuda().float(),
                torch.from_numpy(b).cuda().float(), stride=s, padding=p).cpu().numpy()
            xg, wg, bg = gpu(x), gpu(w), gpu(b)
            scale = float(np.abs(ref).max())
            row = {"shape": [n, c, hw, hw], "oc": oc, "k": k, "stride": s}
            for route in ("1", "0"):
                y = host(run(route, xg, wg, bg, s, p)).astype(np.float32)
                if y.shape != ref.shape:
                    row[f"coop{route}"] = f"shape {y.shape} vs {ref.shape}"
                    worst = float("inf")
                    continue
                err = float(np.abs(y - ref).max()) / scale
                row[f"err_coop{route}"] = round(err, 6)
                if route == "1":
                    worst = max(worst, err)
            if timing and n == 32:
                xt, wt, bt = (torch.from_numpy(a).cuda() for a in (x, w, b))
                for route in ("1", "0"):
                    row[f"ms_coop{route}"] = round(per_call(
                        lambda: run(route, xg, wg, bg, s, p), _C.synchronize), 4)
                row["ms_torch_f16"] = round(per_call(
                    lambda: torch.nn.functional.conv2d(xt, wt, bt, stride=s, padding=p),
                    torch.cuda.synchronize), 4)
                flop = 2.0 * n * oc * c * k * k * ((hw + 2 * p - k) // s + 1) ** 2
                row["tflops_coop"] = round(flop / row["ms_coop1"] / 1e9, 1)
            print(json.dumps(row), flush=True)
    print(json.dumps({"worst_err_coop": worst, "ok": worst < 5e-3}), flush=True)


SWEEP = [(3, 224, 64, 7, 2, 3), (64, 56, 256, 1, 1, 0), (64, 56, 64, 3, 1, 1),
         (128, 56, 128, 3, 2, 1), (512, 28, 128, 1, 1, 0), (256, 14, 256, 3, 1, 1),
         (2048, 7, 512, 1, 1, 0), (512, 7, 512, 3, 1, 1)]


def sweep(tiles):
    import torch
    from mpsrt import _C

    torch.backends.cudnn.allow_tf32 = False
    rng = np.random.default_rng(2)
    os.environ["MPSRT_COOP_CONV"] = "1"
    n = 32
    for (c, hw, oc, k, s, p) in SWEEP:
        x = rng.standard_normal((n, c, hw, hw), dtype=np.float32).astype(np.float16)
        w = (rng.standard_normal((oc, c, k, k), dtype=np.float32) *
             np.sqrt(2.0 / (c * k * k))).astype(np.float16)
        ref = torch.nn.functional.conv2d(torch.from_numpy(x).cuda().float(),
                                         torch.from_numpy(w).cuda().float(), stride=s,
                                         padding=p).cpu().numpy()
        scale = float(np.abs(ref).max())
        xg = _C.from_bytes(x.tobytes(), "float16", list(x.shape), "gpu")
        wg = _C.from_bytes(w.tobytes(), "float16", list(w.shape), "gpu")
        flop = 2.0 * n * oc * c * k * k * ((hw + 2 * p - k) // s + 1) ** 2
        for tile in tiles:
            for clamp in ("0", "1"):
                os.environ["MPSRT_COOP_CONV_TILE"] = tile
                os.environ["MPSRT_COOP_CONV_CLAMP"] = clamp

                def run():
                    return _C.conv2d(xg, wg, None, [s, s], [p, p, p, p], False, [1, 1], 1)

                y = np.frombuffer(run().to("cpu").to_bytes(), dtype=np.float16)
                err = float(np.abs(y.reshape(ref.shape).astype(np.float32) - ref).max()) / scale
                _C.synchronize()
                t0 = time.perf_counter()
                for _ in range(10):
                    run()
                _C.synchronize()
                ms = (time.perf_counter() - t0) / 10 * 1e3
                print(json.dumps({"shape": [n, c, hw, hw], "oc": oc, "k": k, "stride": s,
                                  "tile": tile, "clamp": clamp, "err": round(err, 6),
                                  "ms": round(ms, 4), "tflops": round(flop / ms / 1e9, 1)}),
                      flush=True)
    for v in ("MPSRT_COOP_CONV_TILE", "MPSRT_COOP_CONV_CLAMP"):
        os.environ.pop(v, None)


def model(models):
    import onnxruntime as ort
    import mpsrt.onnx

    path = os.path.join(models, "resnet50.onnx")
    x = np.random.default_rng(1).standard_normal((32, 3, 224, 224), dtype=np.float32)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    scale = float(np.abs(ref).max())
    for route in ("0", "1"):
        os.environ["MPSRT_COOP_CONV"] = route
        sess = mpsrt.onnx.InferenceSession(path, place="gpu", precision="f16")
        y = sess.run(None, {"x": x})[0].astype(np.float32)
        top1 = float((y.argmax(1) == ref.argmax(1)).mean())
        print(json.dumps({"model": "resnet50", "batch": 32, "precision": "f16", "coop": route,
                          "max_err_over_max_ref": float(np.abs(y - ref).max()) / scale,
                          "ref_max": scale, "top1_agree": top1}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "shapes":
        shapes("--time" in sys.argv)
    elif sys.argv[1] == "sweep":
        sweep((sys.argv[2] if len(sys.argv) > 2 else "4x4,2x4,4x2,2x2").split(","))
    else:
        model(sys.argv[2])
