# graph helper (issue 22), call 2. Needs commit 1027034 or later (new defaults: replay early
# submits, depthwise conv + pool, GEMV SE convs, SE gate Mul fold). ~90 s.
# A/B in fresh processes, alternated:
#   new = defaults
#   old = MPSRT_REPLAY_EARLY=0 MPSRT_DW_POOL=0 MPSRT_CONV_VEC=0 MPSRT_GATE_FOLD=0 (the previous defaults)
#   e4/e16 = new with MPSRT_REPLAY_EARLY=4/16 (default 8)
mkdir -p "$OUT/graph"
M=./target/release/mpsrt
G="$OUT/graph"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$G/nvidia_smi.txt" 2>&1
OLD="MPSRT_REPLAY_EARLY=0 MPSRT_DW_POOL=0 MPSRT_CONV_VEC=0 MPSRT_GATE_FOLD=0"
row() { # model batch iters tag env...
  local m=$1 b=$2 it=$3 tag=$4; shift 4
  env "$@" timeout 40 $M bench /tmp/models/$m.onnx --device gpu --batch $b --iterations $it --warmup 5 --json 2>>"$G/stderr.txt" \
    | sed "s/^{/{\"tag\": \"$m b$b $tag r$round\", /"
}
timeout 40 $M bench /tmp/models/efficientnet_b0.onnx --device gpu --batch 1 --iterations 20 --warmup 5 --profile --json > "$G/prof_effnet_b1.json" 2>>"$G/stderr.txt"
for round in 1 2 3; do
  row efficientnet_b0 1 40 new X=0
  row efficientnet_b0 1 40 old $OLD
  row resnet50 1 40 new X=0
  row resnet50 1 40 old $OLD
  if [ $round -le 2 ]; then
    row efficientnet_b0 1 40 e4 MPSRT_REPLAY_EARLY=4
    row efficientnet_b0 1 40 e16 MPSRT_REPLAY_EARLY=16
    row mobilenet_v3_small 1 40 new X=0
    row mobilenet_v3_small 1 40 old $OLD
    row densenet121 1 30 new X=0
    row densenet121 1 30 old $OLD
  fi
  if [ $round -eq 1 ]; then
    row efficientnet_b0 32 10 new X=0
    row efficientnet_b0 32 10 old $OLD
  fi
done > "$G/ab.jsonl"
# Output check on the GPU (new defaults vs old vs onnxruntime CPU), relative to the output's scale.
python3 -c "import numpy as np; np.save('/tmp/graph_x.npy', np.random.RandomState(0).rand(1,3,224,224).astype('float32'))"
for m in efficientnet_b0 mobilenet_v3_small; do
  timeout 30 $M run /tmp/models/$m.onnx --input x=/tmp/graph_x.npy --output /tmp/graph_${m}_new.npz --device gpu > /dev/null 2>>"$G/stderr.txt"
  env $OLD timeout 30 $M run /tmp/models/$m.onnx --input x=/tmp/graph_x.npy --output /tmp/graph_${m}_old.npz --device gpu > /dev/null 2>>"$G/stderr.txt"
done
timeout 60 python3 - > "$G/outcheck.txt" 2>&1 <<'PY'
import numpy as np
x = np.load("/tmp/graph_x.npy")
try:
    import onnxruntime as ort
except Exception as e:
    ort = None; print("ort unavailable", e)
for m in ("efficientnet_b0", "mobilenet_v3_small"):
    n = np.load(f"/tmp/graph_{m}_new.npz"); o = np.load(f"/tmp/graph_{m}_old.npz")
    k = n.files[0]
    ref = ort.InferenceSession(f"/tmp/models/{m}.onnx", providers=["CPUExecutionProvider"]).run(None, {"x": x})[0] if ort else o[k]
    s = np.abs(ref).max()
    print(m, k, n[k].shape, "max|y| %.3g  new vs ORT %.3g  old vs ORT %.3g  new vs old %.3g (relative to max|y|)"
          % (s, np.abs(n[k] - ref).max() / s, np.abs(o[k] - ref).max() / s, np.abs(n[k] - o[k]).max() / s))
PY
# torch CUDA graphs (TF32 off), same call, batch 1.
timeout 70 python3 - > "$G/torch.jsonl" 2>>"$G/stderr.txt" <<'PY'
import json, sys, torch, torchvision
sys.path.insert(0, "bench")
import engine_torch as et
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
for name in ("efficientnet_b0", "resnet50", "mobilenet_v3_small", "densenet121"):
    m = et.MODELS[name](weights=None).eval().cuda()
    x = et.inputs(name, 1, "cuda")
    with torch.inference_mode():
        lat = et.timed(et.cuda_graph(m, x), 100)
        print(json.dumps({"torch": name, "mode": "cuda_graph", "batch": 1, "p50_ms": lat[len(lat) // 2]}), flush=True)
PY
python3 - "$G" <<'PY'
import json, sys, os
g = sys.argv[1]
for line in open(os.path.join(g, "ab.jsonl")):
    if not line.startswith("{"): continue
    try: r = json.loads(line)
    except Exception: continue
    print("%-32s p50 %.3f ms  host %.2f us/step  host %.3f ms  %s" % (r["tag"], r["p50_ms"], r.get("host_record_us_per_step", 0), r.get("host_record_p50_ms", 0), r.get("plan", "")[:40]))
for line in open(os.path.join(g, "torch.jsonl")):
    print(line.strip())
print(open(os.path.join(g, "outcheck.txt")).read())
try:
    r = json.loads(open(os.path.join(g, "prof_effnet_b1.json")).read().strip().splitlines()[-1])
    print("== effnet b1 profile p50 %.3f gpu total %.3f ms" % (r["p50_ms"], r.get("profile_gpu_ms", 0)))
    for op, name, ms, host, gpu in r.get("profile_steps", []):
        print("  %-18s %-60s gpu %s" % (op, name[-60:], "%.4f" % gpu if gpu is not None else "-"))
except Exception as e:
    print("profile unreadable", e)
PY
