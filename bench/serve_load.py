#!/usr/bin/env python3
"""HTTP load generator for `mpsrt serve` (KServe v2 JSON), standard library only.

  python3 bench/serve_load.py HOST:PORT MODEL CONCURRENCY REQUESTS_PER_CLIENT

Model `simple` (INT32 [1,16] x2, JSON) is built in and every response is checked
(sum/difference). Any other model is driven from its metadata (`GET /v2/models/MODEL`): one
random FP32 input per model input (dynamic dims as 1), sent and returned as binary tensor data
(Triton's binary extension); every response must be 200 and equal to the first one (same input,
so batching must not mix requests up): byte-identical, or, where a dynamic batch of another size
ran other kernels, within 1e-3 of the first response's largest magnitude (counted apart as
"bit_differences"; beyond that tolerance it is an error).
Prints one JSON line: throughput (req/s) and p50/p99 latency (ms).
"""
import http.client
import json
import random
import struct
import sys
import threading
import time

host, model, conc, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lat, errors, bit_diffs = [], [], []
lock = threading.Lock()


def simple_client(cid):
    h, p = host.split(":")
    conn = http.client.HTTPConnection(h, int(p))
    mine = []
    for r in range(per):
        a = [cid * 100 + r + i for i in range(16)]
        b = [i - 8 for i in range(16)]
        body = json.dumps({"inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": a},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": b}]})
        t0 = time.perf_counter()
        conn.request("POST", f"/v2/models/{model}/infer", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = json.loads(resp.read())
        mine.append((time.perf_counter() - t0) * 1e3)
        outs = {o["name"]: o["data"] for o in data.get("outputs", [])}
        if resp.status != 200 or outs.get("OUTPUT0") != [x + y for x, y in zip(a, b)]:
            with lock:
                errors.append((resp.status, data))
    with lock:
        lat.extend(mine)


def binary_request():
    """One binary-data request body (header JSON + raw FP32 inputs) built from the metadata."""
    h, p = host.split(":")
    conn = http.client.HTTPConnection(h, int(p))
    conn.request("GET", f"/v2/models/{model}")
    meta = json.loads(conn.getresponse().read())
    rng = random.Random(0)
    inputs, blobs = [], []
    for i in meta["inputs"]:
        if i["datatype"] != "FP32":
            sys.exit(f"serve_load: input {i['name']} is {i['datatype']}; only FP32 is generated")
        shape = [d if d > 0 else 1 for d in i["shape"]]
        n = 1
        for d in shape:
            n *= d
        blob = struct.pack(f"<{n}f", *(rng.random() for _ in range(n)))
        inputs.append({"name": i["name"], "shape": shape, "datatype": "FP32",
                       "parameters": {"binary_data_size": len(blob)}})
        blobs.append(blob)
    outputs = [{"name": o["name"], "parameters": {"binary_data": True}} for o in meta["outputs"]]
    header = json.dumps({"inputs": inputs, "outputs": outputs}).encode()
    return header + b"".join(blobs), len(header)


def close(data, ref, hl, ref_hl):
    """Same JSON header and binary FP32 outputs within 1e-3 of the reference's largest |value|."""
    a, b = data[hl:], ref[ref_hl:]
    if len(a) != len(b) or len(a) % 4 or data[:hl] != ref[:ref_hl]:
        return False
    x = struct.unpack(f"<{len(a) // 4}f", a)
    y = struct.unpack(f"<{len(b) // 4}f", b)
    tol = 1e-3 * max((abs(v) for v in y), default=0.0) + 1e-6
    return all(abs(u - v) <= tol for u, v in zip(x, y))


def binary_client(cid, body, header_len, reference):
    h, p = host.split(":")
    conn = http.client.HTTPConnection(h, int(p))
    mine = []
    hdrs = {"Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(header_len)}
    for _ in range(per):
        t0 = time.perf_counter()
        conn.request("POST", f"/v2/models/{model}/infer", body, hdrs)
        resp = conn.getresponse()
        data = resp.read()
        mine.append((time.perf_counter() - t0) * 1e3)
        if resp.status != 200:
            with lock:
                errors.append((resp.status, data[:200]))
        elif data != reference:
            hl = int(resp.getheader("Inference-Header-Content-Length") or 0)
            with lock:
                (bit_diffs if close(data, reference, hl, ref_header_len) else errors).append(
                    (resp.status, data[:200]))
    with lock:
        lat.extend(mine)


if model.startswith("simple"):
    client = simple_client
else:
    body, header_len = binary_request()
    h, p = host.split(":")
    c0 = http.client.HTTPConnection(h, int(p))
    c0.request("POST", f"/v2/models/{model}/infer", body,
               {"Content-Type": "application/octet-stream",
                "Inference-Header-Content-Length": str(header_len)})
    r0 = c0.getresponse()
    reference = r0.read()
    ref_header_len = int(r0.getheader("Inference-Header-Content-Length") or 0)
    if r0.status != 200:
        sys.exit(f"serve_load: warm-up request failed: {r0.status} {reference[:300]!r}")

    def client(cid):
        binary_client(cid, body, header_len, reference)


threads = [threading.Thread(target=client, args=(c,)) for c in range(conc)]
t0 = time.perf_counter()
for t in threads:
    t.start()
for t in threads:
    t.join()
wall = time.perf_counter() - t0
lat.sort()
print(json.dumps({"model": model, "concurrency": conc, "requests": len(lat), "errors": len(errors),
                  "bit_differences": len(bit_diffs),
                  "throughput_rps": len(lat) / wall, "p50_ms": lat[len(lat) // 2],
                  "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))]}))
