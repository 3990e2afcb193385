#!/usr/bin/env python3
"""The ONNX Runtime plugin EP (`mpsrt.ort`) beside mpsrt's own `mpsrt.onnx.InferenceSession` and
Microsoft's WebGPU plugin EP (`onnxruntime-ep-webgpu`, when importable), on the same ONNX files.

  python3 bench/ort_ep.py DIR [--iters N] [--rounds R] [--warm-s S] [--models a,b]
                             [--runtimes ep,ep_iobinding,mpsrt,webgpu]
  python3 bench/ort_ep.py light [--iters N] [--models squeezenet,...] [--runtimes ...]

DIR holds the files `bench/engine_torch.py export DIR` writes: torchvision resnet50 /
densenet121 / mobilenet_v3_small / efficientnet_b0 (input `x`, batch 1 and 32) and BERT-base
(`input_ids`, `attention_mask`, int64, sequence 128, batch 1 and 8). One JSON line per
(model, batch, runtime): p50/p90/mean ms of `run` over N runs taken in R alternated rounds
(default 30 in 5: every runtime warmed for S seconds, default 0.5, then each round times N/R runs
of each runtime in turn, so GPU clock changes fall on all of them alike; `round_p50_ms` per
round, `sm_mhz_before_after` where nvidia-smi exists) (host arrays in, host arrays out, as a
user's onnxruntime program does), the device, and for the EPs the share of ORT kernels that ran
on that EP (from ORT's profile of one run), plus max |ours - onnxruntime CPU| on that input as a
correctness check. `ep_iobinding` is the EP with the input bound in mpsrt device memory and the
output bound to device memory too (IOBinding: what the plugin boundary costs without host
copies). `light` runs the ONNX light models shipped with the `onnx` wheel
(`onnx/backend/test/data/light/light_*.onnx`, their own input shape) instead of DIR's files.
The WebGPU EP wheel: `pip download --no-deps onnxruntime-ep-webgpu==0.4.0`
(py3-none manylinux x86_64; it needs onnxruntime >= 1.24.4 and libvulkan.so.1).
"""
import json
import os
import sys
import time

import numpy as np
import onnxruntime as ort

import mpsrt
import mpsrt.onnx
import mpsrt.ort

BATCHES = {"bert_base": (1, 8)}  # the CNNs: (1, 32)
SEQ = 128


LIGHT_DIR = None


def light_models():
    import onnx
    d = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return d, sorted(f[len("light_"):-len(".onnx")] for f in os.listdir(d)
                     if f.startswith("light_") and f.endswith(".onnx"))


def feeds(name, batch, rng, sess=None):
    if sess is not None:  # a light model: its own input shape
        (i,) = sess.get_inputs()
        return {i.name: rng.standard_normal(i.shape).astype(np.float32)}
    if name == "bert_base":
        return {"input_ids": rng.integers(0, 30000, size=(batch, SEQ)).astype(np.int64),
                "attention_mask": np.ones((batch, SEQ), np.int64)}
    return {"x": rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}


def summary(lat):
    lat = sorted(lat)
    return {"p50_ms": lat[len(lat) // 2], "p90_ms": lat[int(len(lat) * 0.9)],
            "mean_ms": sum(lat) / len(lat), "iterations": len(lat)}


def interleaved(runs, iters, rounds, warm_s):
    """Times every runtime of `runs` (label -> callable) in `rounds` alternated rounds of
    `iters / rounds` runs each, after warming each up for `warm_s` seconds (at least 3 runs).
    Why: a GPU that idled while the sessions were built runs its first few hundred ms at low
    clocks; timing the runtimes one after another gave that cost to whichever ran first (the EP)
    and read as a 2-3x slower EP in whole processes. Alternating rounds give every runtime the
    same clocks; `round_p50_ms` shows a drift if one remains."""
    for run in runs.values():
        t_end = time.perf_counter() + warm_s
        n = 0
        while n < 3 or time.perf_counter() < t_end:
            run()
            n += 1
    per = max(iters // rounds, 1)
    lat = {k: [] for k in runs}
    rp50 = {k: [] for k in runs}
    for _ in range(rounds):
        for label, run in runs.items():
            one = []
            for _ in range(per):
                t0 = time.perf_counter()
                run()
                one.append((time.perf_counter() - t0) * 1e3)
            lat[label] += one
            rp50[label].append(round(sorted(one)[len(one) // 2], 3))
    return {k: dict(summary(v), round_p50_ms=rp50[k]) for k, v in lat.items()}


def sm_clock():
    """The GPU's SM clock in MHz from nvidia-smi (None where there is none), read outside the
    timings so a slow row can be told apart from a GPU that had not clocked up."""
    try:
        import subprocess
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        return int(out.split()[0])
    except Exception:  # noqa: BLE001 - no NVIDIA tool here: nothing to report
        return None


def share(path, ep, x):
    """Fraction of ORT kernel runs on `ep` in one profiled run."""
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = "/tmp/ort_ep_profile"
    devs = [d for d in ort.get_ep_devices() if d.ep_name == ep]
    if devs:
        so.add_provider_for_devices(devs, {})
        s = ort.InferenceSession(path, sess_options=so)
    else:
        s = ort.InferenceSession(path, so, providers=[ep, "CPUExecutionProvider"])
    s.run(None, x)
    prof = s.end_profiling()
    with open(prof) as f:
        events = json.load(f)
    os.remove(prof)
    prov = [e["args"]["provider"] for e in events
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    return sum(p == ep for p in prov) / max(len(prov), 1)


def iobound(sess, x, ref):
    """A run with the inputs and the first output bound in mpsrt device memory; returns the
    output read back (outside the timing, which calls the returned function)."""
    io = sess.io_binding()
    for k, v in x.items():
        io.bind_ortvalue_input(k, mpsrt.ort.ortvalue_from_numpy(v))
    out = mpsrt.ort.ortvalue_empty(ref.shape, ref.dtype)
    io.bind_ortvalue_output(sess.get_outputs()[0].name, out)
    for o in sess.get_outputs()[1:]:
        io.bind_output(o.name)

    def run():
        sess.run_with_iobinding(io)
        return out

    class Run:
        first = True

        def __call__(self):
            run()
            if Run.first:  # the correctness check reads the value once
                Run.first = False
                return out.numpy()
            return None
    return Run()


def main():
    args = sys.argv[1:]
    iters = int(args[args.index("--iters") + 1]) if "--iters" in args else 30
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 5
    warm_s = float(args[args.index("--warm-s") + 1]) if "--warm-s" in args else 0.5
    models = (args[args.index("--models") + 1].split(",") if "--models" in args else
              ["resnet50", "densenet121", "mobilenet_v3_small", "efficientnet_b0", "bert_base"])
    runtimes = (args[args.index("--runtimes") + 1].split(",") if "--runtimes" in args else
                ["ep", "mpsrt", "webgpu"])
    root = args[0]
    if root == "light":
        root, names = light_models()
        models = (args[args.index("--models") + 1].split(",") if "--models" in args else names)
    device = mpsrt.mps.get_device_name() if mpsrt.mps.is_available() else "cpu"
    mpsrt.ort.register()
    webgpu = None
    if "webgpu" in runtimes:
        try:
            import onnxruntime_ep_webgpu as webgpu
            ort.register_execution_provider_library("webgpu", webgpu.get_library_path())
            # What each registered EP found: a plugin EP with no device runs nothing, and ORT
            # then quietly puts every node on the CPU EP.
            print(json.dumps({"ep_devices": [
                {"ep": d.ep_name, "type": str(d.device.type), "vendor": d.device.vendor,
                 "device_id": d.device.device_id} for d in ort.get_ep_devices()]}), flush=True)
        except Exception as e:  # noqa: BLE001 - reported, the other runtimes still run
            print(json.dumps({"skipped": "webgpu", "reason": str(e)[:300]}), flush=True)
            webgpu = None
    rng = np.random.default_rng(0)
    for name in models:
        light = os.path.basename(root) == "light"
        path = os.path.join(root, f"light_{name}.onnx" if light else f"{name}.onnx")
        if not os.path.exists(path):
            print(json.dumps({"skipped": name, "reason": f"{path} is missing"}), flush=True)
            continue
        cpu = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        sessions = {}
        t0 = time.perf_counter()
        if "ep" in runtimes:
            sessions["mpsrt_ep"] = (ort.InferenceSession(
                path, providers=[mpsrt.ort.get_ep_name(), "CPUExecutionProvider"]),
                mpsrt.ort.get_ep_name(), time.perf_counter() - t0)
        if "ep_iobinding" in runtimes:
            sessions["mpsrt_ep_iobinding"] = (ort.InferenceSession(
                path, providers=[mpsrt.ort.get_ep_name(), "CPUExecutionProvider"]),
                mpsrt.ort.get_ep_name(), 0.0)
        if "mpsrt" in runtimes:
            t0 = time.perf_counter()
            sessions["mpsrt_session"] = (mpsrt.onnx.InferenceSession(
                path, providers=["CUDAExecutionProvider"]), None, time.perf_counter() - t0)
        if webgpu is not None:
            t0 = time.perf_counter()
            try:
                # Selected by device, as onnxruntime-ep-webgpu's README does; `providers=[name]`
                # alone left every node on the CPU EP in the 2026-11-25 H100 call.
                so = ort.SessionOptions()
                devs = [d for d in ort.get_ep_devices() if d.ep_name == webgpu.get_ep_name()]
                if not devs:
                    raise RuntimeError(f"{webgpu.get_ep_name()} reports no device")
                so.add_provider_for_devices(devs, {})
                sessions["webgpu_ep"] = (ort.InferenceSession(path, sess_options=so),
                                         webgpu.get_ep_name(), time.perf_counter() - t0)
            except Exception as e:  # noqa: BLE001
                print(json.dumps({"skipped": f"webgpu {name}", "reason": str(e)[:300]}), flush=True)
        for batch in ((None,) if light else BATCHES.get(name, (1, 32))):
            x = feeds(name, batch, rng, cpu if light else None)
            ref = cpu.run(None, x)[0]
            rows, runs = {}, {}
            for label, (sess, ep, load_s) in sessions.items():
                try:
                    run = (iobound(sess, x, ref) if label.endswith("iobinding")
                           else (lambda s=sess: s.run(None, x)[0]))
                    out = run()
                    rows[label] = {"runtime": label, "model": name, "batch": batch, "device": device,
                                   "load_s": round(load_s, 2),
                                   "max_abs_diff_vs_ort_cpu": float(np.abs(out - ref).max())}
                    runs[label] = run
                except Exception as e:  # noqa: BLE001 - one failing case must not hide the rest
                    print(json.dumps({"runtime": label, "model": name, "batch": batch,
                                      "error": str(e)[:400]}), flush=True)
            clock0 = sm_clock()
            try:
                times = interleaved(runs, iters, rounds, warm_s)
            except Exception as e:  # noqa: BLE001
                print(json.dumps({"model": name, "batch": batch, "error": str(e)[:400]}), flush=True)
                continue
            clock1 = sm_clock()
            for label, row in rows.items():
                row.update(times[label])
                row["rounds"] = rounds
                if clock0 is not None:
                    row["sm_mhz_before_after"] = [clock0, clock1]
                ep = sessions[label][1]
                if ep is not None:
                    row["ep_kernel_share"] = round(share(path, ep, x), 3)
                row["onnxruntime"] = ort.__version__
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
