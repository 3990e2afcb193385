# conv16 final request (issue 23, ResNet-50 b32 --precision f16): needs the working tree at/after
# conv16 commit 0ca09b2 (one slab stage, split-K under 132 workgroups, paired stores + tap masks
# by default; MPSRT_COOP_CONV_TUNED=0 = the session-14 default). ~50 s. Under $OUT/conv16/.
# 0. warm-up process; 1. p50, alternated fresh processes: new / old / new / old / new;
# 2. torch eager f16 b32 (torchvision resnet50, same timing as bench/engine_torch.py);
# 3. accuracy of the final default vs onnxruntime CPU f32 (b32 random input, max err / max |ref|, top-1).
G="$OUT/conv16"; mkdir -p "$G"; export G
M=./target/release/mpsrt
R=/tmp/models/resnet50.onnx
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader > "$G/device.txt" 2>&1
B="$M bench $R --device gpu --batch 32 --precision f16 --json"
timeout 10 $B --iterations 10 --warmup-s 1.0 > "$G/warm.json" 2>&1
for r in 1 2; do
  timeout 9 $B --iterations 20 --warmup-s 0.5 > "$G/ab_new_$r.json" 2>> "$G/bench.err"
  MPSRT_COOP_CONV_TUNED=0 timeout 9 $B --iterations 20 --warmup-s 0.5 > "$G/ab_old_$r.json" 2>> "$G/bench.err"
done
timeout 9 $B --iterations 20 --warmup-s 0.5 > "$G/ab_new_3.json" 2>> "$G/bench.err"
timeout 14 python3 - > "$G/torch.jsonl" 2> "$G/torch.err" <<'PYEOF'
import json, sys, torch, torchvision
sys.path.insert(0, "bench")
from engine_torch import timed
torch.backends.cudnn.allow_tf32 = False
m = torchvision.models.resnet50(weights=None).eval().cuda().half()
x = torch.randn(32, 3, 224, 224, device="cuda").half()
with torch.inference_mode():
    lat = timed(lambda: m(x), 50)
print(json.dumps({"torch": "resnet50", "mode": "eager_f16", "batch": 32, "p50_ms": lat[len(lat) // 2],
                  "mean_ms": sum(lat) / len(lat), "device": torch.cuda.get_device_name(0),
                  "torch_version": torch.__version__}), flush=True)
PYEOF
timeout 18 python3 - > "$G/acc.jsonl" 2> "$G/acc.err" <<'PYEOF'
import json, numpy as np, onnxruntime as ort, mpsrt.onnx
R = "/tmp/models/resnet50.onnx"
x = np.random.default_rng(1).standard_normal((32, 3, 224, 224), dtype=np.float32)
ref = ort.InferenceSession(R, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
scale = float(np.abs(ref).max())
y = mpsrt.onnx.InferenceSession(R, place="gpu", precision="f16").run(None, {"x": x})[0].astype(np.float32)
print(json.dumps({"side": "final default", "max_err_over_max_ref": float(np.abs(y - ref).max()) / scale,
                  "mean_abs_err": float(np.abs(y - ref).mean()), "ref_max": scale,
                  "top1_agree": float((y.argmax(1) == ref.argmax(1)).mean()),
                  "finite": bool(np.isfinite(y).all())}), flush=True)
PYEOF
for f in "$G"/warm.json "$G"/ab_*.json; do
  python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(sys.argv[1].split('/')[-1], 'p50_ms', round(d['p50_ms'], 3), 'mean_ms', round(d['mean_ms'], 3))" "$f" 2>&1 | tail -1
done
cat "$G/device.txt" "$G/torch.jsonl" "$G/acc.jsonl"; tail -n 3 "$G/torch.err" "$G/acc.err" "$G/bench.err"
