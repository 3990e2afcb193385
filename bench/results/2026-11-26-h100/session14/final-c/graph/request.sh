# graph helper (issue 22: host record <= 4 us/step), call 3 (final, ~09:20). Needs the working tree as of
# 09:10 (commit 3a6378e or later (new default: adaptive early submits, MPSRT_REPLAY_EARLY_ADAPT=1; the per-run host
# breakdown `host_parts_us_p50` in `mpsrt bench --json`). ~80 s.
# A/B in fresh processes, alternated:
#   ad = new default (the first 8 commands submitted at once, later parts sized from the GPU
#        time per command learnt on the previous replay vs the host's recording speed)
#   g2 = MPSRT_REPLAY_EARLY_ADAPT=0 (previous default: parts of 8, 16, 32, ...)
#   (b32: the new default once each, beside torch CUDA graphs b1 for the latency targets on this card)
mkdir -p "$OUT/graph"
M=./target/release/mpsrt
G="$OUT/graph"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$G/nvidia_smi.txt" 2>&1
row() { # model batch iters tag env...
  local m=$1 b=$2 it=$3 tag=$4; shift 4
  env "$@" timeout 30 $M bench /tmp/models/$m.onnx --device gpu --batch $b --iterations $it --warmup 5 --json 2>>"$G/stderr.txt" \
    | sed "s/^{/{\"tag\": \"$m b$b $tag r$round\", /"
}
for round in 1 2 3 4; do
  for m in resnet50 densenet121 mobilenet_v3_small efficientnet_b0; do
    row $m 1 40 ad X=0
    row $m 1 40 g2 MPSRT_REPLAY_EARLY_ADAPT=0
  done
  if [ $round -eq 1 ]; then
    row resnet50 32 10 ad X=0
    row densenet121 32 10 ad X=0
  fi
done > "$G/ab.jsonl"
# torch CUDA graphs (TF32 off), same call, batch 1: the latency targets on this card.
timeout 80 python3 - > "$G/torch.jsonl" 2>>"$G/stderr.txt" <<'PY'
import json, sys, torch, torchvision
sys.path.insert(0, "bench")
import engine_torch as et
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
for name in ("resnet50", "densenet121", "mobilenet_v3_small", "efficientnet_b0"):
    m = et.MODELS[name](weights=None).eval().cuda()
    x = et.inputs(name, 1, "cuda")
    with torch.inference_mode():
        lat = et.timed(et.cuda_graph(m, x), 100)
        print(json.dumps({"torch": name, "mode": "cuda_graph", "batch": 1, "p50_ms": lat[len(lat) // 2]}), flush=True)
PY
cat "$G/torch.jsonl"
python3 - "$G" <<'PY'
import json, sys, os, statistics as st
g = sys.argv[1]
rows = []
for line in open(os.path.join(g, "ab.jsonl")):
    if not line.startswith("{"): continue
    try: r = json.loads(line)
    except Exception: continue
    rows.append(r)
    hp = r.get("host_parts_us_p50", {})
    print("%-30s p50 %.3f ms  host %.2f us/step %.3f ms | loop %s early %s(%s) final %s finish %s qsub %s rest %s submits %s disp %s"
          % (r["tag"], r["p50_ms"], r.get("host_record_us_per_step", 0), r.get("host_record_p50_ms", 0),
             hp.get("record_loop"), hp.get("early_submits"), hp.get("early_submits_n"), hp.get("final_submit"),
             hp.get("finish"), hp.get("queue_submit"), hp.get("rest"), hp.get("submits_n"), hp.get("dispatches_n")))
print("== summary (min / median / max over rounds)")
by = {}
for r in rows:
    m, b, tag, _ = r["tag"].split()
    by.setdefault((m, b, tag), []).append(r)
for k, rs in sorted(by.items()):
    p = sorted(x["p50_ms"] for x in rs); h = sorted(x.get("host_record_us_per_step", 0) for x in rs)
    print("%-20s %-4s %-3s p50 ms %s  host us/step %s" % (k[0], k[1], k[2], " ".join("%.3f" % v for v in p), " ".join("%.2f" % v for v in h)))
PY
