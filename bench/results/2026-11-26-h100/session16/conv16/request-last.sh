# conv16 final request (issue 23, ResNet-50 b32 --precision f16). Needs the working tree at/after conv16
# commit ed8afc1 (64x128 blocks for the stem / 64-channel 3x3 / small 1x1, split-K to 396 workgroups,
# subsampled strided 1x1, vector f16 max pool). ~60 s. Under $OUT/conv16/.
# 1. per-step --profile of the new default and of the session-start behaviour (OLD below);
# 2. p50 A/B in fresh processes, new / old alternated x4; 3. torch eager f16 x3 (bench/engine_torch.py's
#    timed(), torchvision resnet50, TF32 off, cudnn.benchmark off); 4. accuracy of the new default.
G="$OUT/conv16"; mkdir -p "$G"; export G
M=./target/release/mpsrt
R=/tmp/models/resnet50.onnx
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader > "$G/device.txt" 2>&1
B="$M bench $R --device gpu --batch 32 --precision f16 --json"
timeout 10 $B --iterations 5 --warmup-s 0.7 > "$G/warm.json" 2>&1
OLD="MPSRT_COOP_CONV_TUNED=15 MPSRT_COOP_CONV_SPLITK_WGS=264 MPSRT_COOP_CONV_SUBSAMPLE=0 MPSRT_POOL_F16_VEC=0"
V="old:$OLD new:"
V=$(echo "$V" | sed 's/ MPSRT_/,MPSRT_/g')
for vv in $V; do
  v=${vv%%:*}; e=$(echo "${vv#*:}" | tr ',' ' ')
  T=12
  t0=$(date +%s.%N)
  env $e MPSRT_CONV_PLAN_LOG=1 timeout $T $B --iterations 8 --warmup-s 1.2 --profile --profile-repeat 3 > "$G/prof_$v.json" 2> "$G/plan_$v.err"
  rc=$?; t1=$(date +%s.%N)
  echo "$v rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,1))") env=[$e]" >> "$G/runs.txt"
done
for r in 1 2 3 4; do
  timeout 9 $B --iterations 20 --warmup-s 0.5 > "$G/ab_new_$r.json" 2>> "$G/bench.err"
  env $OLD timeout 9 $B --iterations 20 --warmup-s 0.5 > "$G/ab_old_$r.json" 2>> "$G/bench.err"
done
timeout 15 python3 - > "$G/torch.jsonl" 2> "$G/torch.err" <<'PYEOF'
import json, sys, torch, torchvision
sys.path.insert(0, "bench")
from engine_torch import timed
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
m = torchvision.models.resnet50(weights=None).eval().cuda().half()
x = torch.randn(32, 3, 224, 224, device="cuda").half()
for rep in range(3):
    with torch.inference_mode():
        lat = timed(lambda: m(x), 50)
    print(json.dumps({"torch": "resnet50", "mode": "eager_f16", "batch": 32, "repeat": rep,
                      "p50_ms": lat[len(lat) // 2], "mean_ms": sum(lat) / len(lat),
                      "device": torch.cuda.get_device_name(0), "torch_version": torch.__version__}), flush=True)
PYEOF
timeout 20 python3 - > "$G/acc.jsonl" 2> "$G/acc.err" <<'PYEOF'
import json, numpy as np, onnxruntime as ort, mpsrt.onnx
R = "/tmp/models/resnet50.onnx"
x = np.random.default_rng(1).standard_normal((32, 3, 224, 224), dtype=np.float32)
ref = ort.InferenceSession(R, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
scale = float(np.abs(ref).max())
y = mpsrt.onnx.InferenceSession(R, place="gpu", precision="f16").run(None, {"x": x})[0].astype(np.float32)
print(json.dumps({"side": "new default", "max_err_over_max_ref": float(np.abs(y - ref).max()) / scale,
                  "mean_abs_err": float(np.abs(y - ref).mean()), "ref_max": scale,
                  "top1_agree": float((y.argmax(1) == ref.argmax(1)).mean()),
                  "finite": bool(np.isfinite(y).all())}), flush=True)
PYEOF
cat "$G/runs.txt" "$G/device.txt" "$G/torch.jsonl" "$G/acc.jsonl"; tail -n 3 "$G/torch.err" "$G/acc.err" "$G/bench.err"
for f in "$G"/ab_*.json "$G"/prof_*.json; do
  python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(sys.argv[1].split('/')[-1], 'p50_ms', round(d['p50_ms'], 3), 'gpu_ms', round(d.get('profile_gpu_ms', 0), 3))" "$f" 2>&1 | tail -1
done
