#!/usr/bin/env bash
# Issue 6's server table: throughput and p50/p99 at concurrency 1/8/32 for `simple` with and
# without dynamic batching and for light_resnet50 (from the onnx wheel's test data), served by
# `mpsrt serve` on one instance kind. Usage (repo root, release CLI built):
#   bash bench/serve_models.sh KIND_CPU|KIND_GPU [PYTHON]
# Prints one JSON line per (model, concurrency) and the server's inference/execution counts, then
# the native client's lines for `simple` (`mpsrt perf --json-output`: kind "load" per concurrency,
# "direct" = the engine in-process, "overhead" = client p50 - direct p50 at concurrency 1), which
# are free of the Python client's own ~0.2-0.3 ms per request.
set -euo pipefail
KIND=${1:-KIND_CPU}
PY=${2:-python3}
M=./target/release/mpsrt
R=$(mktemp -d)
trap 'rm -rf "$R"' EXIT
cfg() { # name, max_batch_size, extra
  printf 'name: "%s"\nplatform: "onnxruntime_onnx"\nmax_batch_size: %s\n%s\ninstance_group [ { count: 1 kind: %s } ]\n' \
    "$1" "$2" "$3" "$KIND"
}
io='input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]'
for m in simple simple_nobatch; do
  mkdir -p "$R/$m/1"
  cp examples/model_repository/simple/1/model.onnx "$R/$m/1/"
done
cfg simple 8 "$io
dynamic_batching { }" > "$R/simple/config.pbtxt"
cfg simple_nobatch 8 "$io" > "$R/simple_nobatch/config.pbtxt"
LIGHT=$("$PY" -c 'import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_resnet50.onnx"))')
mkdir -p "$R/light_resnet50/1"
cp "$LIGHT" "$R/light_resnet50/1/model.onnx"
cfg light_resnet50 0 "" > "$R/light_resnet50/config.pbtxt"
$M serve --model-repository "$R" --http-port 8010 --grpc-port 8011 --metrics-port 8012 > "$R/serve.log" 2>&1 &
SP=$!
for _ in $(seq 1 240); do curl -sf localhost:8010/v2/health/ready > /dev/null && break; sleep 0.5; done
for model in simple simple_nobatch light_resnet50; do
  for c in 1 8 32; do
    n=$((1600 / c)); [ "$model" = light_resnet50 ] && n=$(( (${LIGHT_REQUESTS:-64} + c - 1) / c ))
    "$PY" bench/serve_load.py 127.0.0.1:8010 "$model" "$c" "$n"
  done
done
# The same `simple` load from the native client, with the engine timed in-process on the same
# device for the server-overhead number.
DEV=cpu; [ "$KIND" = KIND_GPU ] && DEV=gpu
$M perf -m simple -u 127.0.0.1:8010 --concurrency 1,8,32 --requests "${PERF_REQUESTS:-2000}" \
  --direct examples/model_repository/simple/1/model.onnx --device "$DEV" --json-output \
  || echo "mpsrt perf failed (exit $?); the server is still stopped below" >&2
curl -s localhost:8012/metrics | grep -E '^nv_inference_(count|exec_count)'
kill -TERM $SP
wait $SP || true
