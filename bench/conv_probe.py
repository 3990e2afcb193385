"""Why is a ResNet conv slower inside the engine than in the op benchmark? Times one
512->512 3x3 conv on a 7x7 map (ResNet-50 layer4) with weights made on the GPU vs uploaded from
the host, with and without bias, plus the same product as a plain matmul. Usage:
python3 bench/conv_probe.py (GPU machine, mpsrt wheel on PYTHONPATH)."""
import json
import time

import numpy as np

import mpsrt
import mpsrt.nn.functional as F


def timed(fn, n=20):
    fn()
    mpsrt.mps.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    mpsrt.mps.synchronize()
    return (time.perf_counter() - t0) / n * 1e3


rng = np.random.default_rng(0)
g = "gpu"
for n, c, h in ((1, 512, 7), (1, 256, 14), (8, 512, 7)):
    x_gen = mpsrt.randn([n, c, h, h], "float32", g)
    x_up = mpsrt.to_tensor(rng.standard_normal((n, c, h, h)).astype(np.float32), place=g)
    w_np = (rng.standard_normal((c, c, 3, 3)) * 0.02).astype(np.float32)
    w_gen = mpsrt.randn([c, c, 3, 3], "float32", g)
    w_up = mpsrt.to_tensor(w_np, place=g)
    b_up = mpsrt.to_tensor(np.zeros(c, np.float32), place=g)
    cases = {
        "x_gen w_gen": lambda: F.conv2d(x_gen, w_gen, padding=1),
        "x_gen w_up": lambda: F.conv2d(x_gen, w_up, padding=1),
        "x_up w_up": lambda: F.conv2d(x_up, w_up, padding=1),
        "x_up w_up bias": lambda: F.conv2d(x_up, w_up, b_up, padding=1),
        "x_gen w_gen*0.02": (lambda w2: (lambda: F.conv2d(x_gen, w2, padding=1)))(w_gen * 0.02),
    }
    for name, fn in cases.items():
        print(json.dumps({"n": n, "c": c, "h": h, "case": name, "ms": timed(fn)}), flush=True)
    a = mpsrt.randn([c, c * 9], "float32", g)
    b = mpsrt.randn([c * 9, n * h * h], "float32", g)
    print(json.dumps({"n": n, "c": c, "h": h, "case": "matmul same MNK", "ms": timed(lambda: mpsrt.matmul(a, b))}))
