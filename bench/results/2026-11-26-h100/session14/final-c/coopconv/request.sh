# coopconv request 2 (final; issue 23, ResNet-50 b32 --precision f16) — needs the working tree
# at/after b45010b. Defaults now: conv epilogue up-front loads for residual convs only, convs of
# <= 64 channels on 64x64 blocks (OC64, new default: its accuracy is unchecked on hardware so far),
# f16 MaxPool, small-M Gemm on tiled split-K. All off with OFF below (= call 1's code paths).
# 0. accuracy: mpsrt f16 default vs onnxruntime CPU f32, b32 random input (max err / max |ref|, top-1)
# 1. p50, fresh processes alternated on/off/on/off (20 iters, 10 warm-up)
# 2. one --profile of the default: per-op totals and the steps the fixes touch.   ~45 s. $OUT/coopconv/
G="$OUT/coopconv"; mkdir -p "$G"; export G
M=./target/release/mpsrt
R=/tmp/models/resnet50.onnx
OFF="MPSRT_COOP_CONV_PREFETCH=0 MPSRT_COOP_CONV_OC64=0 MPSRT_POOL_F16=0 MPSRT_COOP_SMALL_M=0"
timeout 40 python3 - > "$G/acc.jsonl" 2> "$G/acc.err" <<'EOF'
import json, numpy as np, onnxruntime as ort, mpsrt.onnx
R = "/tmp/models/resnet50.onnx"
x = np.random.default_rng(1).standard_normal((32, 3, 224, 224), dtype=np.float32)
ref = ort.InferenceSession(R, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
scale = float(np.abs(ref).max())
y = mpsrt.onnx.InferenceSession(R, place="gpu", precision="f16").run(None, {"x": x})[0].astype(np.float32)
print(json.dumps({"side": "default", "max_err_over_max_ref": float(np.abs(y - ref).max()) / scale,
                  "mean_abs_err": float(np.abs(y - ref).mean()), "ref_max": scale,
                  "top1_agree": float((y.argmax(1) == ref.argmax(1)).mean()),
                  "finite": bool(np.isfinite(y).all())}), flush=True)
EOF
for r in 1 2; do for side in on off; do
  if [ $side = on ]; then e=""; else e="$OFF"; fi
  env $e timeout 15 $M bench $R --device gpu --batch 32 --precision f16 --iterations 20 --warmup 10 --json > "$G/b_${side}_$r.json" 2>> "$G/bench.err"
  python3 -c "import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print('$side round $r p50_ms', round(d['p50_ms'],3), 'mean_ms', round(d['mean_ms'],3))" "$G/b_${side}_$r.json" >> "$G/ab.txt" 2>&1
done; done
timeout 20 $M bench $R --device gpu --batch 32 --precision f16 --iterations 20 --profile --json > "$G/prof_on.json" 2>> "$G/bench.err"
python3 - > "$G/prof_summary.txt" 2>&1 <<'EOF'
import json, os
d = json.loads(open(os.environ["G"] + "/prof_on.json").read().strip().splitlines()[-1])
steps = d.get("profile_steps", [])
by = {}
for op, name, ms, host, gpu in steps:
    by[op] = by.get(op, 0.0) + (gpu if gpu is not None else ms)
print("default p50", d.get("p50_ms"), "profile_gpu_ms", d.get("profile_gpu_ms"))
for k, v in sorted(by.items(), key=lambda x: -x[1]):
    print(f"  {k:24s} {v:8.3f} ms")
for op, name, ms, host, gpu in sorted(steps, key=lambda s: -(s[4] or s[2]))[:20]:
    print(f"  {name:55s} {op:14s} {gpu}")
EOF
cat "$G/acc.jsonl" "$G/ab.txt" "$G/prof_summary.txt"; tail -3 "$G/acc.err" "$G/bench.err"
