"""Half precision on whole models (issue 23), against onnxruntime's float32 CPU results:

- f16 ONNX models (every float tensor converted by `f16_models.convert_to_f16`) run in f16 end
  to end on the GPU (lavapipe in CI) — light CNNs with random weights and the tiny GPT-2;
- `InferenceSession(..., precision='f16')` on the same float32 models (heavy ops in f16,
  softmax/norms/reductions in f32, f32 inputs and outputs), and its option errors.

Tolerances are stated per check: the max abs error relative to the largest |reference| value,
and top-1 agreement. `python python/tests/test_f16.py` prints the accuracy table of the README
("Half precision") on every available place.
(CPU f16 convs run the reference loops — tens of seconds per CNN — so the CNN checks are on the
GPU only; the CPU is checked on the transformer.)"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import mpsrt  # noqa: E402
import mpsrt.onnx  # noqa: E402
from conftest import need_gpu  # noqa: E402
from f16_models import compare, convert_to_f16, input_of, randomize_light  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
GPT2 = os.path.join(ROOT, "crates", "mpsrt-engine", "tests", "data", "tiny_gpt2.onnx")
# shufflenet and resnet50 are left out: with random weights their residual sums reach 1.1e7 and
# 7.6e4 in f32, past float16's largest value (65504), so any f16 run overflows (to inf, then NaN).
# inception_v1 takes ~50 s per f16 run on lavapipe: it is in the printed table (`main`), not CI.
CNNS = ["squeezenet"]
TABLE_CNNS = ["squeezenet", "inception_v1"]
# max |err| / max |ref| allowed, and the least top-1 agreement (one image: must agree).
CNN_REL, GPT2_REL = 2e-2, 2e-2


def _providers(place):
    return ["CPUExecutionProvider"] if place == "cpu" else ["MpsrtExecutionProvider"]


def _gpt2_feeds(seq=7, past=5, seed=3):
    rng = np.random.default_rng(seed)
    feeds = {"input_ids": rng.integers(0, 1000, (1, seq)).astype(np.int64),
             "attention_mask": np.ones((1, past + seq), np.int64),
             "position_ids": np.arange(past, past + seq, dtype=np.int64)[None]}
    for i in range(2):
        for kv in ("key", "value"):
            feeds[f"past_key_values.{i}.{kv}"] = rng.standard_normal((1, 4, past, 16)).astype(
                np.float32)
    return feeds


def _models(cnns=CNNS):
    """(name, f32 model bytes, feeds) for the accuracy checks."""
    out = []
    for name in cnns:
        m = randomize_light(name)
        k, x = input_of(m)
        out.append((name, m.SerializeToString(), {k: x}))
    out.append(("tiny_gpt2", open(GPT2, "rb").read(), _gpt2_feeds()))
    return out


def _ort(model_bytes, feeds):
    s = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)[0]


def _f16_model_run(model_bytes, feeds, place):
    m16 = convert_to_f16(onnx.load_from_string(model_bytes)).SerializeToString()
    s = mpsrt.onnx.InferenceSession(m16, providers=_providers(place))
    f16 = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds.items()}
    y = s.run(None, f16)[0]
    assert y.dtype == np.float16
    return y


def _precision_run(model_bytes, feeds, place):
    s = mpsrt.onnx.InferenceSession(model_bytes, providers=_providers(place), precision="f16")
    y = s.run(None, feeds)[0]
    assert y.dtype == np.float32
    return y


@pytest.fixture(scope="module")
def models():
    return {name: (b, f, _ort(b, f)) for name, b, f in _models()}


@pytest.mark.parametrize("name", CNNS + ["tiny_gpt2"])
@pytest.mark.parametrize("how", ["f16_model", "precision_f16"])
def test_f16_on_gpu_matches_f32_reference(models, name, how):
    need_gpu()
    b, feeds, ref = models[name]
    run = _f16_model_run if how == "f16_model" else _precision_run
    got = run(b, feeds, "mps")
    abs_err, rel, top1 = compare(got, ref)
    tol = GPT2_REL if name == "tiny_gpt2" else CNN_REL
    assert rel <= tol, f"{name} {how}: max abs err {abs_err:.3g} = {rel:.3g} of max |ref|"
    assert top1 >= (0.85 if name == "tiny_gpt2" else 1.0), f"{name} {how}: top-1 {top1}"


@pytest.mark.parametrize("how", ["f16_model", "precision_f16"])
def test_f16_transformer_on_cpu(models, how):
    b, feeds, ref = models["tiny_gpt2"]
    run = _f16_model_run if how == "f16_model" else _precision_run
    abs_err, rel, top1 = compare(run(b, feeds, "cpu"), ref)
    assert rel <= GPT2_REL and top1 >= 0.85, (abs_err, rel, top1)


def test_precision_option_errors_name_the_option():
    b = open(GPT2, "rb").read()
    with pytest.raises(ValueError, match="precision.*bf16"):
        mpsrt.onnx.InferenceSession(b, providers=["CPUExecutionProvider"], precision="bf16")
    # f32 is the model as declared: same results as without the option.
    feeds = _gpt2_feeds()
    a = mpsrt.onnx.InferenceSession(b, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    c = mpsrt.onnx.InferenceSession(b, providers=["CPUExecutionProvider"],
                                    precision="f32").run(None, feeds)[0]
    np.testing.assert_array_equal(a, c)


def main():
    places = ["cpu"] + (["mps"] if mpsrt.mps.is_available() else [])
    print("| model | place | how | max abs err | max abs err / max abs ref | top-1 agreement |")
    print("|---|---|---|---|---|---|")
    for name, b, feeds in _models(TABLE_CNNS):
        ref = _ort(b, feeds)
        for place in places:
            if place == "cpu" and name != "tiny_gpt2":
                continue  # f16 convs on the CPU run the reference loops (slow)
            for how, run in [("f16 model", _f16_model_run), ("precision=f16", _precision_run)]:
                a, r, t = compare(run(b, feeds, place), ref)
                print(f"| {name} | {place} | {how} | {a:.3g} | {r:.3g} | {t:.3f} |")


if __name__ == "__main__":
    main()
