#!/usr/bin/env python3
"""HTTP load generator for `mpsrt serve` (KServe v2 JSON), standard library only.

  python3 bench/serve_load.py HOST:PORT MODEL CONCURRENCY REQUESTS_PER_CLIENT

Model `simple` (INT32 [1,16] x2) is built in; every response is checked (sum/difference).
Prints one JSON line: throughput (req/s) and p50/p99 latency (ms).
"""
import http.client
import json
import sys
import threading
import time

host, model, conc, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lat, errors = [], []
lock = threading.Lock()


def client(cid):
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


threads = [threading.Thread(target=client, args=(c,)) for c in range(conc)]
t0 = time.perf_counter()
for t in threads:
    t.start()
for t in threads:
    t.join()
wall = time.perf_counter() - t0
lat.sort()
print(json.dumps({"model": model, "concurrency": conc, "requests": len(lat), "errors": len(errors),
                  "throughput_rps": len(lat) / wall, "p50_ms": lat[len(lat) // 2],
                  "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))]}))
