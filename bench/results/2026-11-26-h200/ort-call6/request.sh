# ort request 2 — needs the working tree at/after commit eac76f1 (MPSRT_ORT_DUMP_DIR, plan/replay
# lines in MPSRT_ORT_VERBOSE, bench/ort_ep_ab.py --opt). Request 1 showed BERT b1 EP/session
# 1.19-1.22 interleaved with or without host mirrors, one group of 588 nodes, no CPU node: so the
# gap is inside the engine run of the EP's graph. ~70 s:
#  1. one process: BERT b1 through the EP, verbose (plan + replay state after runs 1 and 4), the
#     claimed group dumped to /tmp/ort_dump
#  2. `mpsrt bench` on the original file vs the dumped group (exactly what the EP runs), b1,
#     alternated twice
#  3. bench/ort_ep_ab.py BERT b1 interleaved EP/session with the EP session's ORT optimization
#     level all vs disabled, alternated twice; then b8 once each
O="$OUT/ort"; mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$O/smi_before.txt" 2>&1
rm -rf /tmp/ort_dump
MPSRT_ORT_VERBOSE=1 MPSRT_ORT_DUMP_DIR=/tmp/ort_dump timeout 40 python3 - > "$O/placement.txt" 2>&1 <<'PY'
import numpy as np, onnxruntime as ort, mpsrt.ort as mo
mo.register()
s = ort.InferenceSession("/tmp/models/bert_base.onnx", providers=[mo.get_ep_name(), "CPUExecutionProvider"])
x = {"input_ids": np.random.default_rng(0).integers(0, 30000, (1, 128)).astype(np.int64),
     "attention_mask": np.ones((1, 128), np.int64)}
for _ in range(5):
    s.run(None, x)
PY
G=$(ls /tmp/ort_dump/group_*.onnx | head -1); ls -la /tmp/ort_dump >> "$O/placement.txt"
for round in 1 2; do
  for m in /tmp/models/bert_base.onnx "$G"; do
    echo "== round $round $m" >> "$O/bench.txt"
    timeout 30 ./target/release/mpsrt bench "$m" --device gpu --batch 1 --iterations 40 --warmup 3 >> "$O/bench.txt" 2>&1
  done
  for opt in all disabled; do
    timeout 25 python3 bench/ort_ep_ab.py /tmp/models/bert_base.onnx 40 gpu --batch 1 --opt $opt 2>>"$O/err.txt" >> "$O/ab.jsonl"
  done
done
for opt in all disabled; do
  timeout 25 python3 bench/ort_ep_ab.py /tmp/models/bert_base.onnx 20 gpu --batch 8 --opt $opt 2>>"$O/err.txt" >> "$O/ab.jsonl"
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$O/smi_after.txt" 2>&1
tail -c 8000 "$O/err.txt" > "$O/err_tail.txt" 2>/dev/null; rm -f "$O/err.txt"
grep -E "GetCapability|run [14] of|dumped|compiled" "$O/placement.txt"
grep -E "==|plan:|latency|host time" "$O/bench.txt"
cat "$O/ab.jsonl"
