# bert32 request C (~90 s, limit 120 s; issue 23 BERT-base f32: the p·v GEMM stores [B, S, H, D] so Reshape_3's
# copy is a view). Needs main at/after 535ac5b ("f32 attention: p·v can store [B, S, H, D]"); tip ok. Writes $OUT/bert32/.
# 1. BERT p50, alternated fresh processes: off (default) vs on (MPSRT_ATTENTION_F32_SEQ_MAJOR=1): f32 b8 x6 rounds,
#    f32 b1 x3 rounds; 2. per-step profiles f32 b8 off/on (Reshape and Attention steps listed); 3. accuracy on vs
#    onnxruntime CPU (b8, two sequences padded); 4. torch eager f32 b8 x2 (+b1) in the same call.
G="$OUT/bert32"; mkdir -p "$G"
M=./target/release/mpsrt
B=/tmp/models/bert_base.onnx
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
t0=$(date +%s); t=$t0
bench() {  # round cfg env batch
  env $3 timeout 14 $M bench $B --device gpu --batch $4 --precision f32 --iterations 40 --warmup 8 --json 2>/dev/null \
    | sed "s/^{/{\"round\": $1, \"cfg\": \"$2\", /"
}
for round in 1 2 3 4 5 6; do
  # alternate which goes first each round
  if [ $((round % 2)) = 1 ]; then order="off:X=1 on:MPSRT_ATTENTION_F32_SEQ_MAJOR=1"; else order="on:MPSRT_ATTENTION_F32_SEQ_MAJOR=1 off:X=1"; fi
  for cv in $order; do
    c=${cv%%:*}; e=${cv#*:}
    bench $round $c "$e" 8
    [ $round -le 3 ] && bench $round $c "$e" 1
  done
done > "$G/bert.jsonl"
echo "bench $(( $(date +%s) - t )) s"
t=$(date +%s)
prof() {  # label env
  env $2 timeout 20 $M bench $B --device gpu --batch 8 --iterations 5 --warmup 3 --profile --profile-repeat 20 --json \
    > "$G/prof_$1.json" 2>> "$G/err.txt"
}
prof off X=1
prof on MPSRT_ATTENTION_F32_SEQ_MAJOR=1
echo "prof $(( $(date +%s) - t )) s"
t=$(date +%s)
MPSRT_ATTENTION_F32_SEQ_MAJOR=1 PYTHONPATH=/tmp/site timeout 25 python3 - on >> "$G/accuracy.txt" 2>> "$G/err.txt" <<'PYEOF'
import sys, numpy as np, onnxruntime as ort, mpsrt.onnx as mo
B = "/tmp/models/bert_base.onnx"
rng = np.random.default_rng(0)
ids = rng.integers(0, 30522, (8, 128)).astype(np.int64)
mask = np.ones((8, 128), np.int64); mask[1, 100:] = 0; mask[5, 7:] = 0
feeds = {"input_ids": ids, "attention_mask": mask}
s = ort.InferenceSession(B, providers=["CPUExecutionProvider"])
feeds = {n: feeds[n] for n in [i.name for i in s.get_inputs()]}
want = s.run(None, feeds)[0]
got = mo.InferenceSession(B, place="gpu").run(None, feeds)[0]
print(sys.argv[1], "max_abs", float(np.abs(got - want).max()), "of", float(np.abs(want).max()), "finite", bool(np.isfinite(got).all()))
PYEOF
echo "acc $(( $(date +%s) - t )) s"
t=$(date +%s)
timeout 30 python3 - > "$G/torch.jsonl" 2>> "$G/err.txt" <<'PYEOF'
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
echo "torch rc=$? $(( $(date +%s) - t )) s; total $(( $(date +%s) - t0 )) s"
cat "$G/device.txt"
python3 - "$G" <<'PYEOF'
import json, sys, collections
G = sys.argv[1]
per = collections.defaultdict(list)
for l in open(f"{G}/bert.jsonl"):
    try: r = json.loads(l)
    except Exception: continue
    per[(r["cfg"], r["precision"], r["batch"])].append(r["p50_ms"])
    print("round", r["round"], r["cfg"], "b", r["batch"], "p50", round(r["p50_ms"], 3), "p90", round(r["p90_ms"], 3), "|", r.get("replay", "")[:60])
for k, v in sorted(per.items()):
    print("summary", k, "p50s", [round(x, 3) for x in v], "mean", round(sum(v) / len(v), 3), "min", round(min(v), 3))
for name in ("off", "on"):
    try: d = json.load(open(f"{G}/prof_{name}.json"))
    except Exception as e:
        print(name, "no profile", e); continue
    agg = collections.defaultdict(lambda: [0, 0.0])
    for s in d["profile_steps"]:
        g = s[4] if s[4] is not None else s[2]
        agg[s[0]][0] += 1; agg[s[0]][1] += g
    tot = sum(v[1] for v in agg.values())
    print(f"== {name}: gpu sum {tot:.3f} ms over {len(d['profile_steps'])} steps; p50 {d['p50_ms']:.3f}")
    for k, v in sorted(agg.items(), key=lambda x: -x[1][1])[:8]:
        print(f"   {k:22s} {v[0]:4d} {v[1]*1e3:9.1f} us  ({v[1]*1e3/v[0]:6.1f} each)")
    att = [(s[1].split('/')[-1], round((s[4] or s[2]) * 1e3, 1)) for s in d["profile_steps"] if s[0] in ("Attention", "Reshape") and (s[4] or s[2]) > 0.0005]
    print("   attention/reshape > 0.5 us (first 8):", att[:8])
PYEOF
cat "$G/accuracy.txt" "$G/torch.jsonl"; tail -5 "$G/err.txt"
