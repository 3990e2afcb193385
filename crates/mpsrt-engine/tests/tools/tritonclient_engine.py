#!/usr/bin/env python3
"""Real-tritonclient (HTTP + gRPC) check of `mpsrt serve` with the ONNX engine, run by
tests/serve_engine.rs against examples/model_repository (simple, relu_fp32).

Usage: tritonclient_engine.py HTTP_HOST:PORT GRPC_HOST:PORT. Needs tritonclient[http,grpc], numpy.
Every answer is compared with numpy.
"""
import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

http_url, grpc_url = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)

h = httpclient.InferenceServerClient(http_url)
assert h.is_server_live() and h.is_server_ready()
assert h.get_model_config("simple")["max_batch_size"] == 8
meta = h.get_model_metadata("relu_fp32")
assert meta["inputs"][0]["name"] == "INPUT0", meta
for batch in (1, 3, 8):
    a = rng.integers(-1000, 1000, (batch, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, (batch, 16), dtype=np.int32)
    for binary in (False, True):
        ins = [httpclient.InferInput("INPUT0", [batch, 16], "INT32"),
               httpclient.InferInput("INPUT1", [batch, 16], "INT32")]
        ins[0].set_data_from_numpy(a, binary_data=binary)
        ins[1].set_data_from_numpy(b, binary_data=binary)
        r = h.infer("simple", ins)
        assert (r.as_numpy("OUTPUT0") == a + b).all() and (r.as_numpy("OUTPUT1") == a - b).all()
x = rng.standard_normal((4, 8)).astype(np.float32)
ri = [httpclient.InferInput("INPUT0", [4, 8], "FP32")]
ri[0].set_data_from_numpy(x, binary_data=True)
r = h.infer("relu_fp32", ri)
assert np.array_equal(r.as_numpy("OUTPUT0"), np.maximum(x, 0))
try:
    h.infer("simple", ri)
    raise SystemExit("expected an error for a wrong input")
except InferenceServerException as e:
    print("http error ok:", e.status(), e.message())

g = grpcclient.InferenceServerClient(grpc_url)
assert g.is_server_live() and g.is_model_ready("simple") and g.is_model_ready("relu_fp32")
a = rng.integers(-50, 50, (2, 16), dtype=np.int32)
b = rng.integers(-50, 50, (2, 16), dtype=np.int32)
gi = [grpcclient.InferInput("INPUT0", [2, 16], "INT32"), grpcclient.InferInput("INPUT1", [2, 16], "INT32")]
gi[0].set_data_from_numpy(a)
gi[1].set_data_from_numpy(b)
r = g.infer("simple", gi)
assert (r.as_numpy("OUTPUT0") == a + b).all() and (r.as_numpy("OUTPUT1") == a - b).all()
q = queue.Queue()
g.start_stream(callback=lambda result, error: q.put((result, error)))
for i in range(10):
    g.async_stream_infer("simple", gi, request_id=str(i))
got = [q.get(timeout=30) for _ in range(10)]
g.stop_stream()
assert all(e is None for _, e in got), got
assert sorted(int(res.get_response().id) for res, _ in got) == list(range(10))
for res, _ in got:
    assert (res.as_numpy("OUTPUT0") == a + b).all()
print("ALL OK")
