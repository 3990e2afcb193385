# bert32 request A (~150 s; issue 23 BERT-base f32 non-GEMM steps). Needs main at/after c82306f (tip ok)
# ("layer norm: opt-in flat form ..."). Writes under $OUT/bert32/.
# 1. BERT p50, alternated fresh processes: new (default: f32 NaN-guarded chain -> Attention ->
#    GEMM + masked softmax + GEMM) vs old (MPSRT_ATTENTION_NAN_GUARD=f16: the unfused chain);
#    vs lnflat (new + MPSRT_LAYERNORM_SEG=2: one-barrier layer norm); f32 b8 x3 rounds, f32 b1 x2,
#    f16 b8 x1 (must be unchanged);
# 2. per-step profiles (--profile-repeat 20, GPU timestamps) of f32 b8: new, old, new with
#    MPSRT_MASKED_SOFTMAX_SEG=8, new with MPSRT_LAYERNORM_SEG=2, old with MPSRT_LAYERNORM_SEG=1;
# 3. accuracy: f32 b8 (two sequences padded) vs onnxruntime CPU, new and old;
# 4. torch eager f32 b8/b1 (TF32 off) in the same call.
G="$OUT/bert32"; mkdir -p "$G"
M=./target/release/mpsrt
B=/tmp/models/bert_base.onnx
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
t=$(date +%s)
CFGS="new:X=1 old:MPSRT_ATTENTION_NAN_GUARD=f16 lnflat:MPSRT_LAYERNORM_SEG=2"
bench() {  # round cfg env batch precision
  env $3 timeout 14 $M bench $B --device gpu --batch $4 --precision $5 --iterations 30 --warmup 8 --json 2>/dev/null \
    | sed "s/^{/{\"round\": $1, \"cfg\": \"$2\", /"
}
for round in 1 2 3; do
  for cv in $CFGS; do
    c=${cv%%:*}; e=$(echo "${cv#*:}" | tr ',' ' ')
    bench $round $c "$e" 8 f32
    [ $round -le 2 ] && bench $round $c "$e" 1 f32
    [ $round = 1 ] && [ $c != lnflat ] && bench $round $c "$e" 8 f16
  done
done > "$G/bert.jsonl"
echo "bench $(( $(date +%s) - t )) s"
t=$(date +%s)
prof() {  # label env
  env $2 timeout 20 $M bench $B --device gpu --batch 8 --iterations 5 --warmup 3 --profile --profile-repeat 20 --json \
    > "$G/prof_$1.json" 2> "$G/prof.err"
}
prof new X=1
prof old MPSRT_ATTENTION_NAN_GUARD=f16
prof seg8 MPSRT_MASKED_SOFTMAX_SEG=8
prof lnflat MPSRT_LAYERNORM_SEG=2
prof oldlnseg "MPSRT_ATTENTION_NAN_GUARD=f16 MPSRT_LAYERNORM_SEG=1"
echo "prof $(( $(date +%s) - t )) s"
t=$(date +%s)
acc() {  # label env
  env $2 PYTHONPATH=/tmp/site timeout 25 python3 - "$1" >> "$G/accuracy.txt" 2>> "$G/accuracy.err" <<'PYEOF'
import sys, numpy as np, onnxruntime as ort, mpsrt.onnx as mo
B = "/tmp/models/bert_base.onnx"
rng = np.random.default_rng(0)
ids = rng.integers(0, 30522, (8, 128)).astype(np.int64)
mask = np.ones((8, 128), np.int64); mask[1, 100:] = 0; mask[5, 7:] = 0
feeds = {"input_ids": ids, "attention_mask": mask}
s = ort.InferenceSession(B, providers=["CPUExecutionProvider"])
names = [i.name for i in s.get_inputs()]
feeds = {n: feeds[n] for n in names}
want = s.run(None, feeds)[0]
got = mo.InferenceSession(B, place="gpu").run(None, feeds)[0]
print(sys.argv[1], "max_abs", float(np.abs(got - want).max()), "of", float(np.abs(want).max()), "finite", bool(np.isfinite(got).all()))
PYEOF
}
acc new X=1
acc old MPSRT_ATTENTION_NAN_GUARD=f16
echo "acc $(( $(date +%s) - t )) s"
t=$(date +%s)
timeout 30 python3 - > "$G/torch.jsonl" 2> "$G/torch.err" <<'PYEOF'
import json, sys, torch
sys.path.insert(0, "bench")
import engine_torch as et
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
m = et.bert().eval().cuda()
for b in (8, 1, 8):
    x = et.inputs("bert_base", b, "cuda")
    with torch.inference_mode():
        lat = et.timed(lambda: m(*x), 50)
    print(json.dumps({"torch": "bert_base", "mode": "eager_f32", "batch": b, "p50_ms": lat[len(lat)//2], "device": torch.cuda.get_device_name(0)}), flush=True)
PYEOF
echo "torch rc=$? $(( $(date +%s) - t )) s"
cat "$G/device.txt"
python3 - "$G" <<'PYEOF'
import json, sys, os, collections
G = sys.argv[1]
for l in open(f"{G}/bert.jsonl"):
    try: r = json.loads(l)
    except Exception: continue
    print("round", r["round"], r["cfg"], r["precision"], "b", r["batch"], "p50", round(r["p50_ms"], 3), "p90", round(r["p90_ms"], 3), "steps:", r["plan"].split(" (")[0], "|", r.get("replay", "")[:40])
for name in ("new", "old", "seg8", "lnflat", "oldlnseg"):
    p = f"{G}/prof_{name}.json"
    try: d = json.load(open(p))
    except Exception as e:
        print(name, "no profile", e); continue
    agg = collections.defaultdict(lambda: [0, 0.0])
    for s in d["profile_steps"]:
        g = s[4] if s[4] is not None else s[2]
        agg[s[0]][0] += 1; agg[s[0]][1] += g
    tot = sum(v[1] for v in agg.values())
    print(f"== {name}: gpu sum {tot:.3f} ms over {len(d['profile_steps'])} steps; p50 {d['p50_ms']:.3f}")
    for k, v in sorted(agg.items(), key=lambda x: -x[1][1]):
        print(f"   {k:22s} {v[0]:4d} {v[1]*1e3:9.1f} us  ({v[1]*1e3/v[0]:6.1f} each)")
    print("   layer 3:", [(s[0], s[1].split('/')[-1], round((s[4] or s[2]) * 1e3, 1)) for s in d["profile_steps"] if "layer.3/" in s[1]])
PYEOF
cat "$G/accuracy.txt"; tail -3 "$G/accuracy.err"
cat "$G/torch.jsonl"
