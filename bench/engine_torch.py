#!/usr/bin/env python3
"""ONNX models for `mpsrt bench` and the same networks in PyTorch (CUDA, TF32 off): eager and
replayed as CUDA graphs (the graph-mode peer of mpsrt's planned engine).

  python3 bench/engine_torch.py export DIR [--only NAME]  # the models below -> DIR/<name>.onnx (batch dim symbolic)
  python3 bench/engine_torch.py torch [--iters N]  # torch latency, eager and CUDA graphs, one JSON line per case
  python3 bench/engine_torch.py ort DIR [--iters N] # onnxruntime CPU on DIR/*.onnx, batch 1 and 32
  python3 bench/engine_torch.py torch --f16        # also issue 23's f16 peers (ResNet-50 b32, BERT b8)
  python3 bench/engine_torch.py torch --f16-only [--repeat R]  # only those, R times each, plus the
                                                   # same with cudnn.benchmark on (for reference)
  python3 bench/engine_torch.py torch --only bert_base --repeat R  # one model; every row R times

Models: torchvision resnet50 / densenet121 / mobilenet_v3_small / efficientnet_b0 (batch 1 and
32) and BERT-base from `transformers` (sequence 128, batch 1 and 8; inputs input_ids and
attention_mask, int64). Weights are random (no download): latency does not depend on them.
"""
import json
import os
import sys
import time

import torch
import torchvision

MODELS = {
    "resnet50": torchvision.models.resnet50,
    "densenet121": torchvision.models.densenet121,
    "mobilenet_v3_small": torchvision.models.mobilenet_v3_small,
    "efficientnet_b0": torchvision.models.efficientnet_b0,
}
BATCHES = {"bert_base": (1, 8)}  # every other model: (1, 32)
SEQ = 128


def bert():
    """BERT-base (12 layers, hidden 768) with random weights, returning the last hidden state."""
    from transformers import BertConfig, BertModel

    class Bert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = BertModel(BertConfig(), add_pooling_layer=False)

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return Bert().eval()


def inputs(name, batch, dev="cpu"):
    if name == "bert_base":
        return (torch.randint(0, 30522, (batch, SEQ), device=dev),
                torch.ones(batch, SEQ, dtype=torch.int64, device=dev))
    return (torch.randn(batch, 3, 224, 224, device=dev),)


def all_models():
    out = {name: ctor for name, ctor in MODELS.items()}
    try:
        import transformers  # noqa: F401
        out["bert_base"] = bert
    except ImportError:
        print(json.dumps({"skipped": "bert_base", "reason": "transformers is not installed"}))
    return out


def export(out):
    os.makedirs(out, exist_ok=True)
    for name, ctor in all_models().items():
        if ONLY and name != ONLY:
            continue
        m = ctor() if name == "bert_base" else ctor(weights=None).eval()
        x = inputs(name, 1)
        names = ["input_ids", "attention_mask"] if name == "bert_base" else ["x"]
        path = os.path.join(out, f"{name}.onnx")
        try:  # the TorchScript exporter: plain opset-17 graphs
            axes = {n: {0: "batch"} for n in names + ["y"]}
            torch.onnx.export(m, x, path, input_names=names, output_names=["y"],
                              dynamic_axes=axes, opset_version=17, dynamo=False)
        except Exception as e:  # newer torch: only the dynamo exporter
            print(json.dumps({"torchscript_export_failed": str(e)[:200]}))
            batch = torch.export.Dim("batch", max=64)
            torch.onnx.export(m, x, path, input_names=names, output_names=["y"],
                              dynamic_shapes={n: {0: batch} for n in names},
                              dynamo=True, external_data=False)
        print(json.dumps({"exported": path, "bytes": os.path.getsize(path)}))


def timed(fn, iters, warm_s=0.5):
    # Warm for at least `warm_s` seconds, not just a few calls: the GPU lowers its clock while
    # the host builds a model (345-585 MHz read on the H200 right after loading), and a handful of
    # calls is not enough to bring it back, which made torch's f16 rows move +-40% between calls.
    t_end = time.perf_counter() + warm_s
    n = 0
    while n < 5 or time.perf_counter() < t_end:
        fn()
        n += 1
        if n % 5 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    lat = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        lat.append((time.perf_counter() - t0) * 1e3)
    lat.sort()
    return lat


def cuda_graph(m, x):
    """Captures one forward pass as a CUDA graph (warm-up on a side stream, as PyTorch's docs
    prescribe); returns the replay function."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            m(*x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        m(*x)
    return g.replay


F16 = "--f16" in sys.argv or "--f16-only" in sys.argv
F16_ONLY = "--f16-only" in sys.argv
REPEAT = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 1
ONLY = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None


def bench_torch(iters):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    for name, ctor in all_models().items():
        if ONLY is not None and name != ONLY:
            continue
        m = (ctor() if name == "bert_base" else ctor(weights=None)).eval().to(dev)
        for batch in () if F16_ONLY else BATCHES.get(name, (1, 32)):
            x = inputs(name, batch, dev)
            with torch.inference_mode():
                # torch eager f32 BERT b8 read 6.90-7.90 ms between processes of one call:
                # --repeat times each row several times in the process.
                for mode, rep in [(mo, r) for mo in ("eager", "cuda_graph") for r in range(REPEAT)]:
                    fn = (lambda: m(*x)) if mode == "eager" else cuda_graph(m, x)
                    lat = timed(fn, iters)
                    print(json.dumps({"torch": name, "mode": mode, "batch": batch, "repeat": rep,
                                      "p50_ms": lat[len(lat) // 2], "p90_ms": lat[int(len(lat) * 0.9)],
                                      "mean_ms": sum(lat) / len(lat),
                                      "device": torch.cuda.get_device_name(0),
                                      "torch_version": torch.__version__, "model": name}), flush=True)
        # Issue 23's f16 peers: ResNet-50 at batch 32 and BERT-base at batch 8, eager, in f16.
        if F16 and (name, max(BATCHES.get(name, (1, 32)))) in (("resnet50", 32), ("bert_base", 8)):
            batch = max(BATCHES.get(name, (1, 32)))
            x = [t.half() if t.is_floating_point() else t for t in inputs(name, batch, dev)]
            mh = m.half()
            # torch eager f16 moved by up to +-40% between calls (cause not known): --repeat
            # measures it several times; the cudnn.benchmark rows (torch's algorithm autotuner,
            # an opt-in most users do not set) are printed for reference.
            for bench_mode in (False, True) if F16_ONLY else (False,):
                torch.backends.cudnn.benchmark = bench_mode
                mode = "eager_f16_cudnn_benchmark" if bench_mode else "eager_f16"
                for rep in range(REPEAT):
                    with torch.inference_mode():
                        lat = timed(lambda: mh(*x), iters)
                    print(json.dumps({"torch": name, "mode": mode, "batch": batch, "repeat": rep,
                                      "p50_ms": lat[len(lat) // 2], "mean_ms": sum(lat) / len(lat),
                                      "device": torch.cuda.get_device_name(0), "model": name}),
                          flush=True)
            torch.backends.cudnn.benchmark = False


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
