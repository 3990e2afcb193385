"""Side-by-side reference numbers from PyTorch on CUDA, measured exactly like mpsrt's benchmarks.

Run on the GPU machine beside `mpsrt bench ...`; prints one JSON object per line. TF32 is off
(the issues compare against full-precision f32). Usage:
    python3 bench/torch_reference.py elementwise [--size N] [--iters N] [--tiny-ops N]
    python3 bench/torch_reference.py ops          # matmul / softmax / reductions / conv2d shapes
    python3 bench/torch_reference.py convs --sync-each [--warm-s 1.0] [--densenet]  # conv2d shapes only, synchronized per call
    python3 bench/torch_reference.py models       # torchvision eager CUDA + onnxruntime CPU latency
"""
import argparse
import json
import statistics
import time

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"


def timed(fn, iters, warmup=3, sync_each=False):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
        if sync_each:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters


def elementwise(args):
    # Same operands as `mpsrt bench elementwise`: c = a + b, 3 x 4 bytes moved per element.
    a = torch.full((args.size,), 1.0, device=dev)
    b = torch.full((args.size,), 2.0, device=dev)
    s = timed(lambda: a + b, args.iters)
    print(json.dumps({"bench": "add_f32", "elements": args.size, "ms": s * 1e3,
                      "gbps": 12.0 * args.size / s / 1e9, "device": torch.cuda.get_device_name()}))
    # Eager overhead: tiny ops back to back, then one synchronize; median of 5.
    t = torch.full((16,), 1.0, device=dev)
    per_op = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.tiny_ops):
            t + t
        torch.cuda.synchronize()
        per_op.append((time.perf_counter() - t0) * 1e6 / args.tiny_ops)
    print(json.dumps({"bench": "tiny_op_overhead", "ops": args.tiny_ops, "us_per_op": statistics.median(per_op)}))


def ops(_args):
    for n in [512, 1024, 2048, 4096, 8192]:
        a = torch.randn(n, n, device=dev)
        b = torch.randn(n, n, device=dev)
        s = timed(lambda: a @ b, 10 if n < 8192 else 3)
        print(json.dumps({"bench": "matmul_f32", "m": n, "n": n, "k": n, "ms": s * 1e3, "tflops": 2 * n**3 / s / 1e12}))
    x = torch.randn(1, 4096, device=dev)
    w = torch.randn(4096, 4096, device=dev)
    s = timed(lambda: x @ w, 50)
    print(json.dumps({"bench": "matmul_f32", "m": 1, "n": 4096, "k": 4096, "ms": s * 1e3, "tflops": 2 * 4096**2 / s / 1e12}))
    # Two operands, 3 warm-ups and 20 timed calls: as bench_ops_a times mpsrt's f16 matmul.
    a16 = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    b16 = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    s = timed(lambda: a16 @ b16, 20)
    print(json.dumps({"bench": "matmul_f16", "m": 4096, "n": 4096, "k": 4096, "ms": s * 1e3, "tflops": 2 * 4096**3 / s / 1e12}))
    big = torch.randn(8192, 8192, device=dev)
    for name, fn in [("softmax_lastdim", lambda: torch.softmax(big, -1)), ("sum_lastdim", lambda: big.sum(-1))]:
        s = timed(fn, 200)  # as many calls as bench_ops_a times
        moved = big.numel() * 4 * (2 if name.startswith("softmax") else 1)
        print(json.dumps({"bench": name, "shape": [8192, 8192], "ms": s * 1e3, "gbps": moved / s / 1e9}))
    convs(_args)


def convs(args):
    sync_each = bool(getattr(args, "sync_each", False))
    # Clocks up before the first shape, as bench_ops_b does (--warm-s seconds of 2048³ matmuls).
    a = torch.randn(2048, 2048, device=dev)
    t_end = time.perf_counter() + float(getattr(args, "warm_s", 1.0))
    while time.perf_counter() < t_end:
        for _ in range(8):
            a @ a
        torch.cuda.synchronize()
    # ResNet-50 conv layer shapes: (in_ch, out_ch, kernel, stride, input hw)
    shapes = [(3, 64, 7, 2, 224), (64, 64, 1, 1, 56), (64, 64, 3, 1, 56), (64, 256, 1, 1, 56), (256, 64, 1, 1, 56),
              (256, 128, 1, 1, 56), (128, 128, 3, 2, 56), (128, 512, 1, 1, 28), (512, 128, 1, 1, 28), (128, 128, 3, 1, 28),
              (512, 256, 1, 1, 28), (256, 256, 3, 2, 28), (256, 1024, 1, 1, 14), (1024, 256, 1, 1, 14), (256, 256, 3, 1, 14),
              (1024, 512, 1, 1, 14), (512, 512, 3, 2, 14), (512, 2048, 1, 1, 7), (2048, 512, 1, 1, 7), (512, 512, 3, 1, 7),
              (256, 512, 1, 2, 56), (512, 1024, 1, 2, 28), (1024, 2048, 1, 2, 14)]
    if getattr(args, "densenet", False):
        # DenseNet-121 shapes, as bench_ops_b --densenet.
        shapes += [(128, 32, 3, 1, 56), (128, 32, 3, 1, 28), (128, 32, 3, 1, 14), (128, 32, 3, 1, 7),
                   (256, 128, 1, 1, 56), (512, 128, 1, 1, 28), (1024, 128, 1, 1, 14), (992, 128, 1, 1, 7),
                   (512, 256, 1, 1, 28), (1024, 512, 1, 1, 14)]
    for batch in [1, 32]:
        for cin, cout, k, stride, hw in shapes:
            x = torch.randn(batch, cin, hw, hw, device=dev)
            conv = torch.nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False).to(dev)
            with torch.no_grad():
                s = timed(lambda: conv(x), 20, sync_each=sync_each)
                oh = (hw + 2 * (k // 2) - k) // stride + 1
            flops = 2 * batch * cout * oh * oh * cin * k * k
            print(json.dumps({"bench": "conv2d", "n": batch, "c": cin, "k": cout, "r": k, "stride": stride, "h": hw,
                              "sync_each": sync_each, "ms": s * 1e3, "tflops": flops / s / 1e12}))


def models(_args):
    """Latency of the ONNX light models' architectures: torch eager CUDA (torchvision, random
    weights: latency does not depend on them) and onnxruntime CPU on the light .onnx files."""
    import os

    import numpy as np
    import onnx
    import torchvision

    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    for name, ctor in [("resnet50", torchvision.models.resnet50), ("densenet121", torchvision.models.densenet121)]:
        net = ctor().eval().to(dev)
        for batch in [1, 32]:
            x = torch.randn(batch, 3, 224, 224, device=dev)
            with torch.no_grad():
                lat = [timed(lambda: net(x), 1, warmup=0) for _ in range(30)]
            print(json.dumps({"bench": "model", "model": name, "runtime": "torch-eager-cuda", "batch": batch,
                              "p50_ms": statistics.median(lat) * 1e3}))
        try:
            import onnxruntime as ort
        except ImportError:
            continue
        path = os.path.join(light, f"light_{name}.onnx")
        if not os.path.exists(path):
            continue
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        inp = sess.get_inputs()[0]
        for batch in [1, 8]:
            x = np.random.rand(batch, *[d if isinstance(d, int) else 1 for d in inp.shape[1:]]).astype(np.float32)
            try:
                sess.run(None, {inp.name: x})
            except Exception as e:  # light models may have a fixed batch of 1
                print(json.dumps({"bench": "model", "model": name, "runtime": "onnxruntime-cpu", "batch": batch, "error": str(e)[:200]}))
                continue
            lat = []
            for _ in range(10):
                t0 = time.perf_counter()
                sess.run(None, {inp.name: x})
                lat.append(time.perf_counter() - t0)
            print(json.dumps({"bench": "model", "model": name, "runtime": "onnxruntime-cpu", "batch": batch,
                              "p50_ms": statistics.median(lat) * 1e3}))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["elementwise", "ops", "convs", "models"])
    p.add_argument("--sync-each", action="store_true", help="convs: synchronize after every call")
    p.add_argument("--warm-s", type=float, default=1.0, help="convs: seconds of matmuls before timing")
    p.add_argument("--densenet", action="store_true", help="convs: DenseNet-121's shapes too")
    p.add_argument("--size", type=int, default=64 << 20)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--tiny-ops", type=int, default=1000)
    a = p.parse_args()
    {"elementwise": elementwise, "ops": ops, "convs": convs, "models": models}[a.what](a)
