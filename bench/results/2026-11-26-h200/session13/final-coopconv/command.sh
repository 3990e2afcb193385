# coopconv request 3 (issue 23: the cooperative-matrix f16 conv) — needs commit 5c3f014 or later
# (128x64 blocks of 8 subgroups by default) in the release binaries and the wheel. ~80 s.
# Writes $OUT/coopconv/:
#  1. bench_*.json: `mpsrt bench resnet50 --batch 32 --precision f16`, fresh processes alternated:
#     coop off (0), default (1: 128x64, 8 subgroups), 64x64 of 4 subgroups (1s), default with
#     clamped loads (1c), 64x64 of 8 subgroups (1t): 0, 1, 1s, 1c, 1t, 1, 0;
#  2. shapes.jsonl: every ResNet-50 conv shape at batch 1 and 32 with the default kernel vs torch f32
#     (max |err| / max |ref|), and the fallback's error beside it;
#  3. model.jsonl: ResNet-50 b32 precision=f16, coop off / on vs onnxruntime CPU f32;
#  4. torch_f16.json: torch eager f16 b32 in the same call.
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
export PYTHONUNBUFFERED=1
D="$OUT/coopconv"; mkdir -p "$D"
mark() { echo "$(date +%s.%N) $*" >> "$D/marks.txt"; }
mark start
M=/tmp/models/resnet50.onnx
B="./target/release/mpsrt bench $M --device gpu --precision f16 --batch 32"
for run in 0_1 1_1 1s_1 1c_1 1t_1 1_2 0_2; do
  r=${run%%_*}; WA=""; TI=""; CL=0
  [ "$r" = 1s ] && WA=2x2
  [ "$r" = 1t ] && WA=4x2 && TI=1x2
  [ "$r" = 1c ] && CL=1
  MPSRT_COOP_CONV_WARPS=$WA MPSRT_COOP_CONV_TILE=$TI MPSRT_COOP_CONV_CLAMP=$CL MPSRT_COOP_CONV=${r:0:1} \
    timeout 20 $B --iterations 20 --warmup 3 --json > "$D/bench_coop$run.json" 2> "$D/bench_coop$run.err"
  echo "rc=$?" >> "$D/bench_coop$run.err"
done
mark bench_done
timeout 15 python3 - > "$D/torch_f16.json" 2>&1 <<'EOF'
import json, time, torch, torchvision
torch.backends.cudnn.allow_tf32 = False
m = torchvision.models.resnet50(weights=None).eval().cuda().half()
x = torch.randn(32, 3, 224, 224, device="cuda").half()
with torch.inference_mode():
    for _ in range(5):
        m(x)
    torch.cuda.synchronize()
    lat = []
    for _ in range(30):
        t0 = time.perf_counter(); m(x); torch.cuda.synchronize(); lat.append((time.perf_counter() - t0) * 1e3)
lat.sort()
print(json.dumps({"torch": "resnet50", "mode": "eager_f16", "batch": 32, "p50_ms": lat[15],
                  "mean_ms": sum(lat) / len(lat), "device": torch.cuda.get_device_name(0)}))
EOF
mark torch_done
timeout 30 python3 bench/conv_coop_check.py shapes > "$D/shapes.jsonl" 2> "$D/shapes.err"; echo "rc=$?" >> "$D/shapes.err"
mark shapes_done
timeout 20 python3 bench/conv_coop_check.py model /tmp/models > "$D/model.jsonl" 2> "$D/model.err"; echo "rc=$?" >> "$D/model.err"
mark model_done
for f in "$D"/bench_coop*.json; do echo "$(basename $f) $(grep -o '"p50[^,]*' $f | head -1)"; done
grep -h p50 "$D/torch_f16.json"; tail -1 "$D/shapes.jsonl"; cat "$D/model.jsonl"; tail -2 "$D/shapes.err" "$D/model.err"
