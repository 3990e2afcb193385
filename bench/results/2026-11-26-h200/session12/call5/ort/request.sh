# ort request 1 — needs the working tree at/after commit 26b9803 (mpsrt-ort host mirrors of
# int64 inputs and outputs; MPSRT_ORT_HOST_MIRROR=0 turns them off for the A/B; bench/ort_ep_ab.py takes
# .onnx paths and --batch). Uses the release wheel in /tmp/site and /tmp/models from
# bench/engine_torch.py export. ~80 s: fresh processes, alternated twice.
#  1. placement of bert_base on our EP (group count, any CPU fallback line) — one process
#  2. bench/ort_ep.py: bert_base (b1, b8; ep, ep_iobinding, mpsrt) with mirrors on / off, resnet50
#     (b1, b32), each model its own process, the order alternated twice
#  3. bench/ort_ep_ab.py bert_base b1, interleaved EP/session runs in one process, mirror on/off
O="$OUT/ort"; mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$O/smi_before.txt" 2>&1
python3 - > "$O/placement.txt" 2>&1 <<'PY'
import os, json, numpy as np, onnxruntime as ort
os.environ["MPSRT_ORT_VERBOSE"] = "1"
import mpsrt.ort as mo
mo.register()
so = ort.SessionOptions(); so.log_severity_level = 2
so.enable_profiling = True; so.profile_file_prefix = "/tmp/ort_place"
s = ort.InferenceSession("/tmp/models/bert_base.onnx", so, providers=[mo.get_ep_name(), "CPUExecutionProvider"])
x = {"input_ids": np.random.default_rng(0).integers(0, 30000, (1, 128)).astype(np.int64),
     "attention_mask": np.ones((1, 128), np.int64)}
s.run(None, x); b = mo.transfer_stats(); s.run(None, x); a = mo.transfer_stats()
print(json.dumps({k: a[k] - b[k] for k in a}))
ev = json.load(open(s.end_profiling()))
from collections import Counter
print(Counter(e["args"]["provider"] for e in ev if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")))
PY
for round in 1 2; do
  for m in 1 0; do
    MPSRT_ORT_HOST_MIRROR=$m timeout 40 python3 bench/ort_ep.py /tmp/models --models bert_base --runtimes ep,ep_iobinding,mpsrt --iters 30 2>>"$O/err.txt" \
      | sed "s/^{/{\"round\": $round, \"host_mirror\": $m, /" >> "$O/ort_ep.jsonl"
  done
  timeout 30 python3 bench/ort_ep.py /tmp/models --models resnet50 --runtimes ep,mpsrt --iters 30 2>>"$O/err.txt" \
    | sed "s/^{/{\"round\": $round, /" >> "$O/ort_ep.jsonl"
  for m in 1 0; do
    MPSRT_ORT_HOST_MIRROR=$m timeout 25 python3 bench/ort_ep_ab.py /tmp/models/bert_base.onnx 40 gpu --batch 1 2>>"$O/err.txt" >> "$O/ab.jsonl"
  done
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$O/smi_after.txt" 2>&1
tail -c 8000 "$O/err.txt" > "$O/err_tail.txt"; rm -f "$O/err.txt"
grep -v "^\[mpsrt-ort\] \(CreateAllocator\|GetSupportedDevices\)" "$O/placement.txt" | tail -20
cat "$O/ort_ep.jsonl" "$O/ab.jsonl"
