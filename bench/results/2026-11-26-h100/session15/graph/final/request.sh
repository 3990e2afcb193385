# graph helper (issue 22: host record <= 4 us/step in every process), FINAL call (<= 60 s).
# Needs commit c6c6245 or later: replay tail on by default on GPUs (MPSRT_REPLAY_TAIL=2, 60%),
# early parts that never shrink once the GPU outruns the host.
# Fresh processes, alternated:
#   N = new default (tail 2 threads + early-part fix)
#   O = MPSRT_REPLAY_TAIL=0 (old serial replay, with the early-part fix)
# DenseNet b1 8 rounds; ResNet-50 / MobileNet / EfficientNet b1 new default 2 rounds (their plans
# are shorter than the tail minimum, so they stay serial), DenseNet b32 once (no regression).
G="$OUT/graph"; mkdir -p "$G"
M=./target/release/mpsrt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$G/nvidia_smi.txt" 2>&1
row() { # model batch tag env...
  local m=$1 b=$2 tag=$3; shift 3
  local it=30; [ $b -gt 1 ] && it=10
  local j; j=$(env "$@" timeout 15 $M bench /tmp/models/$m.onnx --device gpu --batch $b --iterations $it --warmup 5 --json --host-detail 2>>"$G/stderr.txt" | tail -1)
  echo "{\"tag\": \"$tag\", \"m\": \"$m\", \"round\": $round, ${j#\{}"
}
t=$(date +%s)
for round in 1 2 3 4 5 6 7 8; do
  row densenet121 1 N X=0
  row densenet121 1 O MPSRT_REPLAY_TAIL=0
  if [ $round -le 2 ]; then
    row resnet50 1 N X=0
    row mobilenet_v3_small 1 N X=0
    row efficientnet_b0 1 N X=0
  fi
  [ $round -eq 1 ] && row densenet121 32 N X=0
done > "$G/procs.jsonl"
echo "procs $(( $(date +%s) - t )) s"
python3 - "$G/procs.jsonl" <<'PY'
import json, sys
rows = []
for l in open(sys.argv[1]):
    try: rows.append(json.loads(l))
    except Exception: pass
for m in ("densenet121", "resnet50", "mobilenet_v3_small", "efficientnet_b0"):
  for b in (1, 32):
    for tag in ("N", "O"):
      rs = [r for r in rows if r["m"] == m and r["tag"] == tag and r.get("batch") == b]
      if not rs: continue
      print("==", m, f"b{b}", tag, "host us/step:", sorted(round(r["host_record_us_per_step"], 2) for r in rs), "p50 ms:", sorted(round(r["p50_ms"], 3) for r in rs))
      for r in rs:
          d = r.get("host_detail", {}); hp = r.get("host_parts_us_p50", {})
          print(f"  r{r['round']} p50 {r['p50_ms']:.3f} host {r['host_record_us_per_step']:.2f} finish {hp.get('finish')} loop {hp.get('record_loop')} subm {hp.get('submits_n')} | cpu {d.get('cpus')} chase {d.get('chase_probe_ns')}")
PY
