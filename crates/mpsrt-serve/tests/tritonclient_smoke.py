#!/usr/bin/env python3
"""Real-tritonclient (HTTP + gRPC) check of mpsrt serve, run by tests/serve/tritonclient.rs.

Usage: tritonclient_smoke.py HTTP_HOST:PORT GRPC_HOST:PORT against a server whose repository has
the test models simple, echo (explicit mode, all loaded). Needs tritonclient[http,grpc] and numpy.
"""
import sys, queue, numpy as np
import tritonclient.http as httpclient
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

http_url, grpc_url = sys.argv[1], sys.argv[2]
h = httpclient.InferenceServerClient(http_url)
assert h.is_server_live() and h.is_server_ready()
print("server meta", h.get_server_metadata())
print("model meta", h.get_model_metadata("simple"))
cfg = h.get_model_config("simple"); assert cfg["max_batch_size"] == 8, cfg
a = np.arange(32, dtype=np.int32).reshape(2, 16); b = np.ones((2, 16), dtype=np.int32)
for binary in (False, True):
    ins = [httpclient.InferInput("INPUT0", [2, 16], "INT32"), httpclient.InferInput("INPUT1", [2, 16], "INT32")]
    ins[0].set_data_from_numpy(a, binary_data=binary); ins[1].set_data_from_numpy(b, binary_data=binary)
    outs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary), httpclient.InferRequestedOutput("OUTPUT1", binary_data=not binary)]
    r = h.infer("simple", ins, outputs=outs, request_id="x1")
    assert (r.as_numpy("OUTPUT0") == a + b).all() and (r.as_numpy("OUTPUT1") == a - b).all()
# compression
ins = [httpclient.InferInput("INPUT0", [2, 16], "INT32"), httpclient.InferInput("INPUT1", [2, 16], "INT32")]
ins[0].set_data_from_numpy(a); ins[1].set_data_from_numpy(b)
r = h.infer("simple", ins, request_compression_algorithm="gzip", response_compression_algorithm="gzip")
assert (r.as_numpy("OUTPUT0") == a + b).all()
r = h.infer("simple", ins, request_compression_algorithm="deflate")
assert (r.as_numpy("OUTPUT0") == a + b).all()
# BYTES
s = np.array([["hello", "wörld"]], dtype=np.object_)
f = np.array([[1.5, 2.5, 3.5]], dtype=np.float32)
for binary in (False, True):
    ins = [httpclient.InferInput("INPUT0", [1, 2], "BYTES"), httpclient.InferInput("INPUT1", [1, 3], "FP32")]
    ins[0].set_data_from_numpy(s, binary_data=binary); ins[1].set_data_from_numpy(f, binary_data=binary)
    r = h.infer("echo", ins, outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary), httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary)])
    got = r.as_numpy("OUTPUT0")
    assert [x.decode() if isinstance(x, bytes) else x for x in got.flatten()] == ["hello", "wörld"], got
    assert (r.as_numpy("OUTPUT1") == f).all()
st = h.get_inference_statistics("simple"); print("stats", st["model_stats"][0]["inference_count"])
print("index", h.get_model_repository_index())
h.unload_model("echo"); assert not h.is_model_ready("echo")
h.load_model("echo"); assert h.is_model_ready("echo")
h.load_model("simple", config='{"max_batch_size": 4, "platform": "test_platform", "input": [{"name":"INPUT0","data_type":"TYPE_INT32","dims":[16]},{"name":"INPUT1","data_type":"TYPE_INT32","dims":[16]}], "output": [{"name":"OUTPUT0","data_type":"TYPE_INT32","dims":[16]},{"name":"OUTPUT1","data_type":"TYPE_INT32","dims":[16]}]}')
assert h.get_model_config("simple")["max_batch_size"] == 4
try:
    h.infer("nope", ins)
    raise SystemExit("expected error")
except InferenceServerException as e:
    print("http error ok:", e.status(), e.message())
print("logging", h.get_log_settings())

g = grpcclient.InferenceServerClient(grpc_url)
assert g.is_server_live() and g.is_server_ready() and g.is_model_ready("simple")
print("grpc meta", g.get_model_metadata("simple", as_json=True))
print("grpc cfg mbs", g.get_model_config("simple", as_json=True)["config"]["max_batch_size"])
ins = [grpcclient.InferInput("INPUT0", [2, 16], "INT32"), grpcclient.InferInput("INPUT1", [2, 16], "INT32")]
ins[0].set_data_from_numpy(a); ins[1].set_data_from_numpy(b)
r = g.infer("simple", ins)
assert (r.as_numpy("OUTPUT0") == a + b).all() and (r.as_numpy("OUTPUT1") == a - b).all()
gi = [grpcclient.InferInput("INPUT0", [1, 2], "BYTES"), grpcclient.InferInput("INPUT1", [1, 3], "FP32")]
gi[0].set_data_from_numpy(s); gi[1].set_data_from_numpy(f)
r = g.infer("echo", gi)
assert [x.decode() for x in r.as_numpy("OUTPUT0").flatten()] == ["hello", "wörld"]
q = queue.Queue()
g.start_stream(callback=lambda result, error: q.put((result, error)))
for i in range(10):
    g.async_stream_infer("simple", ins, request_id=str(i))
got = [q.get(timeout=10) for _ in range(10)]
g.stop_stream()
assert all(e is None for _, e in got), got
assert sorted(int(r.get_response().id) for r, _ in got) == list(range(10))
print("grpc stats", g.get_inference_statistics("simple", as_json=True)["model_stats"][0]["inference_count"])
print("grpc index", g.get_model_repository_index(as_json=True))
g.unload_model("echo"); assert not g.is_model_ready("echo"); g.load_model("echo")
try:
    g.infer("nope", ins)
    raise SystemExit("expected error")
except InferenceServerException as e:
    print("grpc error ok:", e.status(), e.message())
g.update_log_settings({"log_verbose_level": 1})
assert g.get_log_settings(as_json=True)["settings"]["log_verbose_level"]["uint32_param"] == 1
h.update_log_settings({"log_verbose_level": 0})
assert h.get_log_settings()["log_verbose_level"] == 0
print("ALL OK")
