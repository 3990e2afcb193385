#!/usr/bin/env bash
# Lead (issue 21): the ORT plugin EP vs mpsrt's session vs the WebGPU EP, one fresh process per model,
# interleaved rounds (bench/ort_ep.py --rounds), ROUNDS rounds of all five models.
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONUNBUFFERED=1
mkdir -p $OUT/lead
for round in $(seq 1 ${ROUNDS:-2}); do
  for m in resnet50 densenet121 mobilenet_v3_small efficientnet_b0 bert_base; do
    t=$(date +%s)
    timeout 150 python3 bench/ort_ep.py /tmp/models --models $m --iters 30 --rounds 5 2>/dev/null | grep '^{' | sed "s/^{/{\"round\": $round, /" >> $OUT/lead/ort.jsonl
    echo "round $round $m $(( $(date +%s) - t )) s"
  done
done
python3 - $OUT/lead/ort.jsonl <<'PY'
import json, sys, collections
d = collections.defaultdict(dict)
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "p50_ms" in r: d[(r["round"], r["model"], r["batch"])][r["runtime"]] = r
for k, v in sorted(d.items()):
    ep, s, w = (v.get(x, {}).get("p50_ms", float("nan")) for x in ("mpsrt_ep", "mpsrt_session", "webgpu_ep"))
    print(k, "ep %.3f session %.3f webgpu %.3f  ep/session %.2f  webgpu/ep %.2f" % (ep, s, w, ep / s, w / ep),
          "ep rounds", v.get("mpsrt_ep", {}).get("round_p50_ms"), "mhz", v.get("mpsrt_ep", {}).get("sm_mhz_before_after"))
PY
