"""Paddle on mpsrt ('mps' CustomDevice plugin) vs Paddle's CPU and torch CUDA, one JSON line per row.

Run on the GPU machine after `pip install ./python` and `pip install paddlepaddle==3.3.1` (plus
torch with CUDA and torchvision for the reference rows, when importable):

    CUSTOM_DEVICE_ROOT=<dir with a link to mpsrt/_C.abi3.so> python bench/paddle_plugin.py

If CUSTOM_DEVICE_ROOT is unset the script makes a temporary one linking the installed `mpsrt._C`.
Rows: whether ResNet-50 forward + backward + SGD runs with Paddle's CPU fallback off (the first
missing kernel, if any), ResNet-50 inference at batch 1 and 32, one training step at batch 32
(SGD), and the eager cost of 1,000 tiny adds. `kernels_on_mps` counts launches of the plugin's kernels during the
timed runs (ops without a plugin kernel run through Paddle's CPU fallback).

    python bench/paddle_plugin.py tiny [ROUNDS] [MODES]

runs only the tiny-op A/B (no GPU needed beyond lavapipe): ROUNDS (default 5) rounds of fresh
processes alternated mps, cpu, noop, each timing 1,000 independent `a + b` on 16-element tensors
(median of 9) as CPU time of the calling thread with no synchronize in the timed region (what
Paddle's dispatch plus the plugin cost the Python thread), as its wall time, and as the wall
time including one final synchronize (every add finished on the device). `noop` is 'mps' with
`MPSRT_PADDLE_NOOP_OP=add`: the plugin's `add` only allocates its output through Paddle's
allocator, so it times Paddle's own custom-device path, the floor under the plugin's cost (its
results are garbage; nothing reads them). MODES (comma-separated, default `mps,cpu,noop`) may
add `general`: 'mps' with `MPSRT_PADDLE_FAST=0` (every launch planned by the plugin's general
path) and `recorder`: 'mps' with `MPSRT_PADDLE_RECORDER=1` (the fast path's dispatches recorded
by a second thread). Then medians per mode and each mode's ratio to cpu (target <= 2 for mps).
On lavapipe the driver executes each dispatch on the CPU's other cores, which slows the calling
thread too: the ratio that counts is the GPU machine's.
"""

import json
import os
import sys
import tempfile
import time

if not os.environ.get("CUSTOM_DEVICE_ROOT"):
    import mpsrt._C as _C

    _d = tempfile.mkdtemp(prefix="mpsrt_paddle_")
    os.symlink(os.path.realpath(_C.__file__), os.path.join(_d, "mpsrt.so"))
    os.environ["CUSTOM_DEVICE_ROOT"] = _d
os.environ.setdefault("GLOG_minloglevel", "2")

import numpy as np  # noqa: E402
import paddle  # noqa: E402

import mpsrt.paddle as mp  # noqa: E402

REPEAT = int(os.environ.get("BENCH_REPEAT", "5"))


def emit(**row):
    print(json.dumps(row), flush=True)


def timeit(fn, sync, repeat=REPEAT):
    fn()
    sync()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def coverage_row():
    """ResNet-50 forward, backward and an SGD step on 'mps' with Paddle's CPU fallback turned off:
    `missing` names the first op without a plugin kernel (None: every op ran on the device)."""
    paddle.set_device("mps")
    paddle.set_flags({"FLAGS_enable_api_kernel_fallback": False})
    missing = None
    try:
        model = paddle.vision.models.resnet50()
        opt = paddle.optimizer.SGD(learning_rate=0.01, parameters=model.parameters())
        x = paddle.randn([2, 3, 64, 64])
        y = paddle.randint(0, 1000, [2])
        loss = paddle.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        model.eval()
        with paddle.no_grad():
            model(x)
        paddle.device.synchronize("mps")
    except Exception as e:  # the message names the kernel Paddle could not find
        missing = str(e).splitlines()[0][:300]
    finally:
        paddle.set_flags({"FLAGS_enable_api_kernel_fallback": True})
    emit(bench="resnet50_fallbacks", device="mps", missing=missing, kernels=sorted(mp.stats()["kernels"]))


def paddle_rows(device):
    paddle.set_device(device)
    sync = (lambda: paddle.device.synchronize(device)) if device.startswith("mps") else (lambda: None)
    paddle.seed(0)
    model = paddle.vision.models.resnet50()
    model.eval()
    for batch in (1, 32):
        x = paddle.randn([batch, 3, 224, 224])
        mp.reset_stats() if device.startswith("mps") else None
        with paddle.no_grad():
            ms = timeit(lambda: model(x), sync)
        k = sum(mp.stats()["kernels"].values()) if device.startswith("mps") else None
        emit(bench="resnet50_infer", framework="paddle", device=device, batch=batch, ms=ms, kernels_on_mps=k)
    model.train()
    opt = paddle.optimizer.SGD(learning_rate=0.01, parameters=model.parameters())
    x = paddle.randn([32, 3, 224, 224])
    y = paddle.randint(0, 1000, [32])

    def step():
        loss = paddle.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()

    if device.startswith("mps"):
        mp.reset_stats()
    ms = timeit(step, sync, repeat=max(2, REPEAT // 2))
    k = sum(mp.stats()["kernels"].values()) if device.startswith("mps") else None
    emit(bench="resnet50_train_step", framework="paddle", device=device, batch=32, ms=ms, kernels_on_mps=k)
    a = paddle.ones([16])
    b = paddle.ones([16])

    def adds():
        c = a
        for _ in range(1000):
            c = c + b
        return c

    emit(bench="tiny_add_x1000", framework="paddle", device=device, us_per_op=timeit(adds, sync) * 1e3 / 1000)
    tiny_rows(device)


def tiny_rows(device, n=1000, repeat=9, **extra):
    """Per-op cost of `n` tiny independent eager adds (16 elements), median of `repeat` runs:
    `thread_cpu_us_per_op`, the CPU time of the calling thread with no synchronize in the timed
    region (what Paddle's dispatch plus the plugin cost the Python thread); `us_per_op`, its wall
    time; `wall_sync_us_per_op`, the wall time of the loop including one final synchronize (the
    device has finished every add: nothing is left queued)."""
    paddle.set_device(device)
    sync = (lambda: paddle.device.synchronize(device)) if device.startswith("mps") else (lambda: None)
    a = paddle.ones([16])
    b = paddle.ones([16])
    c = a + b
    sync()
    wall, cpu, wall_sync = [], [], []
    for _ in range(repeat):
        t, u = time.perf_counter(), time.thread_time()
        for _ in range(n):
            c = a + b
        wall.append(time.perf_counter() - t)
        cpu.append(time.thread_time() - u)
        sync()
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(n):
            c = a + b
        sync()
        wall_sync.append(time.perf_counter() - t)
    del c
    emit(
        bench="tiny_add_nosync",
        framework="paddle",
        device=device,
        us_per_op=float(np.median(wall)) * 1e6 / n,
        thread_cpu_us_per_op=float(np.median(cpu)) * 1e6 / n,
        wall_sync_us_per_op=float(np.median(wall_sync)) * 1e6 / n,
        **extra,
    )


def tiny_ab(rounds, names=("mps", "cpu", "noop")):
    """`tiny_rows` in fresh processes, alternated mps, cpu, noop, mps, cpu, noop, ... for
    `rounds` rounds (each row tagged with its round; `noop` is 'mps' with MPSRT_PADDLE_NOOP_OP=add,
    Paddle's own custom-device path), then one summary row per mode with the medians over rounds,
    and each mode's ratio to cpu of thread CPU and of wall time with the final synchronize
    (medians of the per-round ratios: neighbours in time share the machine's state)."""
    import subprocess

    known = {
        "mps": {},
        "cpu": {},
        "noop": {"MPSRT_PADDLE_NOOP_OP": "add"},
        "general": {"MPSRT_PADDLE_FAST": "0"},  # 'mps' without the plugin's eager fast path
        "recorder": {"MPSRT_PADDLE_RECORDER": "1"},  # fast-path dispatches on a recorder thread
    }
    modes = {m: known[m] for m in names}
    rows = {m: [] for m in modes}
    for r in range(rounds):
        for mode, env in modes.items():
            out = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "tiny-one", mode],
                env=dict(os.environ, **env),
                capture_output=True,
                text=True,
            )
            got = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
            if out.returncode != 0 or not got:
                emit(bench="tiny_add_nosync", mode=mode, round=r, error=out.stderr.strip()[-300:])
                continue
            rows[mode].append(got[0])
            print(json.dumps(dict(got[0], mode=mode, round=r)), flush=True)
    med = lambda xs: float(np.median(xs)) if xs else None  # noqa: E731
    for mode, rs in rows.items():
        emit(
            bench="tiny_add_summary",
            mode=mode,
            rounds=len(rs),
            thread_cpu_us_per_op=med([x["thread_cpu_us_per_op"] for x in rs]),
            wall_sync_us_per_op=med([x["wall_sync_us_per_op"] for x in rs]),
        )
    for mode in [m for m in rows if m != "cpu"]:
        pairs = list(zip(rows[mode], rows.get("cpu", [])))
        emit(
            bench="tiny_add_ratio_over_cpu",
            mode=mode,
            rounds=len(pairs),
            thread_cpu=med([m["thread_cpu_us_per_op"] / c["thread_cpu_us_per_op"] for m, c in pairs]),
            wall_sync=med([m["wall_sync_us_per_op"] / c["wall_sync_us_per_op"] for m, c in pairs]),
            target=2.0,
        )


def torch_rows():
    try:
        import torch
        import torchvision
    except ImportError:
        emit(bench="torch", skipped="torch/torchvision not importable")
        return
    if not torch.cuda.is_available():
        emit(bench="torch", skipped="no CUDA")
        return
    dev = torch.device("cuda")
    sync = torch.cuda.synchronize
    model = torchvision.models.resnet50().to(dev).eval()
    for batch in (1, 32):
        x = torch.randn(batch, 3, 224, 224, device=dev)
        with torch.no_grad():
            emit(bench="resnet50_infer", framework="torch", device="cuda", batch=batch, ms=timeit(lambda: model(x), sync))
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (32,), device=dev)

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    emit(bench="resnet50_train_step", framework="torch", device="cuda", batch=32, ms=timeit(step, sync))
    a = torch.ones(16, device=dev)

    def adds():
        c = a
        for _ in range(1000):
            c = c + a
        return c

    emit(bench="tiny_add_x1000", framework="torch", device="cuda", us_per_op=timeit(adds, sync) * 1e3 / 1000)


if __name__ == "__main__":
    if sys.argv[1:2] == ["tiny"]:
        modes = sys.argv[3].split(",") if len(sys.argv) > 3 else ["mps", "cpu", "noop"]
        tiny_ab(int(sys.argv[2]) if len(sys.argv) > 2 else 5, modes)
        sys.exit(0)
    if sys.argv[1:2] == ["tiny-one"]:
        mode = sys.argv[2]
        tiny_rows("cpu" if mode == "cpu" else "mps", **({} if mode in ("mps", "cpu") else {"kernel": mode}))
        sys.exit(0)
    devices = sys.argv[1:] or ["mps", "cpu"]
    if "mps" in devices:
        emit(bench="device", name=mp.get_device_name() if mp.is_available() else None)
        coverage_row()
    for d in devices:
        paddle_rows(d)
    torch_rows()
