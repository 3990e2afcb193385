#!/usr/bin/env bash
# Issue 25's run: one ONNX model served by `mpsrt serve` with one instance per GPU, first on GPU 0
# alone (`gpus: [ 0 ]`), then on every GPU the machine has (`gpus: [ 0, 1, ... ]`); for each,
# `mpsrt perf --concurrency 1,8,32` (native client, binary tensors), a correctness pass
# (`bench/serve_load.py`: every response 200 and byte-identical to the first, so no request is
# lost, mixed up or computed differently on another GPU), the per-GPU metrics and the executions
# per instance. Prints JSON lines; the last one is the throughput ratio at the highest concurrency.
#
# Usage (repo root, release CLI built): bash bench/serve_multi_gpu.sh [MODEL.onnx] [INPUT_NAME]
#   MODEL defaults to /tmp/models/resnet50.onnx (bench/engine_torch.py export /tmp/models; batch
#   dim symbolic), INPUT_NAME to x. Environment: REQUESTS (timed requests per level, default 2000),
#   CONCURRENCY (default 1,8,32), MAX_BATCH (config max_batch_size, default 0 = one request per
#   execution; with N > 0 the config also gets dynamic_batching), DIMS (the input's dims after
#   the batch dim, default "3, 224, 224"), WARMUP=1 (with MAX_BATCH > 0: a `model_warmup` sample
#   per batch size 1..MAX_BATCH, so each size is planned while the model loads, not in a request).
set -euo pipefail
MODEL=${1:-/tmp/models/resnet50.onnx}
INPUT=${2:-x}
REQUESTS=${REQUESTS:-2000}
CONC=${CONCURRENCY:-1,8,32}
MAX_BATCH=${MAX_BATCH:-0}
WARMUP=${WARMUP:-0}
DIMS=${DIMS:-3, 224, 224}
M=./target/release/mpsrt
PY=${PY:-python3}
R=$(mktemp -d)
SP=
trap '[ -n "$SP" ] && kill -TERM "$SP" 2> /dev/null; rm -rf "$R"' EXIT

# GPUs as mpsrt numbers them (`mpsrt info` prints one "mps:N" line per adapter).
NGPU=$($M info 2> /dev/null | grep -c '^mps:[0-9]')
echo "{\"gpus_found\": $NGPU}"
[ "$NGPU" -ge 1 ] || { echo "no GPU adapter: nothing to measure" >&2; exit 1; }

serve_with() { # gpus list "0" or "0, 1"; label
  local gpus=$1 label=$2
  rm -rf "$R/repo"
  mkdir -p "$R/repo/model/1"
  cp "$MODEL" "$R/repo/model/1/model.onnx"
  if [ "$MAX_BATCH" -gt 0 ]; then
    dims="dims: [ $DIMS ]"; extra="dynamic_batching { }"
    if [ "$WARMUP" = 1 ]; then
      extra="$extra
model_warmup ["
      for b in $(seq 1 "$MAX_BATCH"); do
        [ "$b" -gt 1 ] && extra="$extra,"
        extra="$extra { name: \"b$b\" batch_size: $b inputs { key: \"$INPUT\" value: { data_type: TYPE_FP32 dims: [ $DIMS ] zero_data: true } } }"
      done
      extra="$extra ]"
    fi
  else
    dims="dims: [ 1, $DIMS ]"; extra=""
  fi
  printf 'name: "model"\nplatform: "onnxruntime_onnx"\nmax_batch_size: %s\ninput [ { name: "%s" data_type: TYPE_FP32 %s } ]\n%s\ninstance_group [ { count: 1 kind: KIND_GPU gpus: [ %s ] } ]\n' \
    "$MAX_BATCH" "$INPUT" "$dims" "$extra" "$gpus" > "$R/repo/model/config.pbtxt"
  $M serve --model-repository "$R/repo" --http-port 8010 --grpc-port 8011 --metrics-port 8012 \
    > "$R/serve_$label.log" 2>&1 &
  SP=$!
  for _ in $(seq 1 600); do curl -sf localhost:8010/v2/health/ready > /dev/null && break; sleep 0.5; done
  curl -sf localhost:8010/v2/models/model/ready > /dev/null || { cat "$R/serve_$label.log"; exit 1; }
  $M perf -m model -u 127.0.0.1:8010 --concurrency "$CONC" --requests "$REQUESTS" --warmup 100 \
    --json-output --metrics-url 127.0.0.1:8012 | sed "s/^{/{\"gpus\": \"$gpus\", /" | tee "$R/perf_$label.jsonl"
  # Correctness under concurrency: 16 clients x 8 requests, every response identical.
  "$PY" bench/serve_load.py 127.0.0.1:8010 model 16 8 | sed "s/^{/{\"check\": \"$label\", /"
  curl -s localhost:8012/metrics | grep -E '^nv_(gpu_|inference_(count|exec_count|request_failure))' \
    | sed "s/^/metrics[$label] /"
  kill -TERM $SP
  wait $SP || true
  SP=
}

serve_with 0 one
ALL=$(seq -s ', ' 0 $((NGPU - 1)))
if [ "$NGPU" -ge 2 ]; then
  serve_with "$ALL" all
  # Throughput at the highest concurrency level, all GPUs over one.
  "$PY" - "$R/perf_one.jsonl" "$R/perf_all.jsonl" "$NGPU" << 'EOF'
import json, sys
def last(p):
    rows = [json.loads(l) for l in open(p) if l.startswith("{")]
    rows = [r for r in rows if "concurrency" in r and "throughput" in str(r)]
    return max(rows, key=lambda r: r["concurrency"])
one, allg = last(sys.argv[1]), last(sys.argv[2])
key = next(k for k in one if "throughput" in k)
print(json.dumps({"concurrency": one["concurrency"], "gpus": int(sys.argv[3]), "metric": key,
                  "one_gpu": one[key], "all_gpus": allg[key], "ratio": allg[key] / one[key]}))
EOF
else
  echo "only one GPU: the all-GPU run needs a machine with two or more"
fi
