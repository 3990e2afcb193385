#!/usr/bin/env bash
# Final call part 2: ORT EP per model (fresh process each) beside the session and the WebGPU EP; Triton; ops.
REQ=none bash .gpureq/run.sh 2>&1 | tail -3
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p $OUT/final
for m in resnet50 densenet121 mobilenet_v3_small efficientnet_b0 bert_base; do
  timeout 150 python3 bench/ort_ep.py /tmp/models --models $m --iters 20 2>/dev/null | grep '^{' | tee -a $OUT/final/ort_per_model.jsonl | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r.get('model'), r.get('batch'), r.get('runtime'), r.get('p50_ms'))"
done
timeout 150 bash bench/gpu.sh triton > $OUT/final/gpu_triton.log 2>&1; echo "triton rc=$?"; grep ratio $OUT/triton.jsonl
timeout 150 bash bench/gpu.sh ops > $OUT/final/gpu_ops.log 2>&1; echo "ops rc=$?"
for f in triton.jsonl ops.jsonl ops_torch.jsonl; do mv $OUT/$f $OUT/final/ 2>/dev/null; done; rm -f $OUT/info.txt $OUT/nvidia_smi.txt
# Diagnostics for issue 21: the graph the EP gets under ORT's default rewrites vs the file, per-kind steps.
mkdir -p /tmp/ort_dump && MPSRT_ORT_DUMP_DIR=/tmp/ort_dump timeout 120 python3 -c "
import onnxruntime as ort, mpsrt.ort as mo
mo.register()
s = ort.InferenceSession('/tmp/models/bert_base.onnx', providers=['MpsrtExecutionProvider', 'CPUExecutionProvider'])
print('dumped')" 2>&1 | tail -1
for f in /tmp/models/bert_base.onnx /tmp/ort_dump/group_0_*.onnx; do
  echo "== $f"; timeout 60 ./target/release/mpsrt bench $f --device gpu --batch 1 --iterations 20 --warmup 5 --profile 2>/dev/null | sed -n 2,24p
done > $OUT/final/bert_ep_graph_profile.txt 2>&1
