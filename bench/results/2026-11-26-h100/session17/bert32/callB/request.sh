# bert32 request B (~120 s; issue 23 BERT-base f32 non-GEMM steps). Needs main at/after 71c8d92 ("GPU gather:
# rows of a multiple of 4 words ... as vec4s"; with 25f6c4d arange-only-when-needed and 2d4d4ea identity Gather
# -> view / And(x, true) gone); tip ok. Writes under $OUT/bert32/.
# 1. BERT p50, alternated fresh processes, 4 rounds f32 b8: new (default: identity-gather view, And(true) gone,
#    vec4 gather), prev (MPSRT_GATHER_IDENTITY_VIEW=0 MPSRT_AND_TRUE=0 MPSRT_GATHER_VEC4=0: call A's new less its
#    12 per-layer arange uploads, which have no knob), old (prev + MPSRT_ATTENTION_NAN_GUARD=f16: call A's old), lnseg (new + MPSRT_LAYERNORM_SEG=1);
#    f32 b1 x2 each; f16 b8 x1 new/prev;
# 2. per-step profiles (--profile-repeat 20) of f32 b8: new, prev, lnseg;
# 3. accuracy: f32 b8 (two sequences padded) vs onnxruntime CPU, new and prev;
# 4. torch eager f32 b8/b1/b8 (TF32 off) in the same call.
G="$OUT/bert32"; mkdir -p "$G"
M=./target/release/mpsrt
B=/tmp/models/bert_base.onnx
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
t0=$(date +%s); t=$t0
OFF="MPSRT_GATHER_IDENTITY_VIEW=0,MPSRT_AND_TRUE=0,MPSRT_GATHER_VEC4=0"
CFGS="new:X=1 prev:$OFF old:$OFF,MPSRT_ATTENTION_NAN_GUARD=f16 lnseg:MPSRT_LAYERNORM_SEG=1"
bench() {  # round cfg env batch precision
  env $3 timeout 14 $M bench $B --device gpu --batch $4 --precision $5 --iterations 40 --warmup 8 --json 2>/dev/null \
    | sed "s/^{/{\"round\": $1, \"cfg\": \"$2\", /"
}
for round in 1 2 3 4; do
  for cv in $CFGS; do
    c=${cv%%:*}; e=$(echo "${cv#*:}" | tr ',' ' ')
    bench $round $c "$e" 8 f32
    [ $round -le 2 ] && bench $round $c "$e" 1 f32
    [ $round = 1 ] && [ $c != lnseg ] && [ $c != old ] && bench $round $c "$e" 8 f16
  done
done > "$G/bert.jsonl"
echo "bench $(( $(date +%s) - t )) s"
t=$(date +%s)
prof() {  # label env
  env $2 timeout 20 $M bench $B --device gpu --batch 8 --iterations 5 --warmup 3 --profile --profile-repeat 20 --json \
    > "$G/prof_$1.json" 2>> "$G/err.txt"
}
prof new X=1
prof prev "MPSRT_GATHER_IDENTITY_VIEW=0 MPSRT_AND_TRUE=0 MPSRT_GATHER_VEC4=0"
prof lnseg MPSRT_LAYERNORM_SEG=1
echo "prof $(( $(date +%s) - t )) s"
t=$(date +%s)
# 2b. the word-embedding Gather alone (live replay step: indices read on the host): a [30522, 768] f32 table
#     gathered at [b, 128] ids, p50 and per-step profile (is call A's 19.6-26.6 us the kernel or the step's uploads?)
timeout 25 python3 - 2>> "$G/err.txt" <<'PYEOF'
import numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((30522, 768)).astype(np.float32), "w")
ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", 128])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 128, 768])
g = helper.make_graph([helper.make_node("Gather", ["w", "ids"], ["y"], axis=0)], "emb", [ids], [y], [w])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), "/tmp/emb_gather.onnx")
PYEOF
for cv in "8:X=1" "8:MPSRT_GATHER_VEC4=0" "1:X=1" "1:MPSRT_GATHER_VEC4=0" "8:X=1" "8:MPSRT_GATHER_VEC4=0"; do
  b=${cv%%:*}; e=${cv#*:}
  env $e timeout 15 $M bench /tmp/emb_gather.onnx --device gpu --batch $b --iterations 40 --warmup 8 --profile --profile-repeat 20 --json 2>> "$G/err.txt" \
    | python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print('emb_gather $e b$b p50', round(d['p50_ms']*1e3,1), 'us |', d.get('replay','')[:70], '| steps', [(s[0], round((s[4] or s[2])*1e3,1), round(s[2]*1e3,1)) for s in d['profile_steps']])" >> "$G/emb.txt" 2>> "$G/err.txt"
done
acc() {  # label env
  env $2 PYTHONPATH=/tmp/site timeout 25 python3 - "$1" >> "$G/accuracy.txt" 2>> "$G/err.txt" <<'PYEOF'
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
acc prev "MPSRT_GATHER_IDENTITY_VIEW=0 MPSRT_AND_TRUE=0 MPSRT_GATHER_VEC4=0"
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
    print("round", r["round"], r["cfg"], r["precision"], "b", r["batch"], "p50", round(r["p50_ms"], 3), "p90", round(r["p90_ms"], 3), "steps:", r["plan"].split(" (")[0], "|", r.get("replay", "")[:80])
for k, v in sorted(per.items()):
    print("summary", k, "p50s", [round(x, 3) for x in v], "mean", round(sum(v) / len(v), 3), "min", round(min(v), 3))
for name in ("new", "prev", "lnseg"):
    try: d = json.load(open(f"{G}/prof_{name}.json"))
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
    print("   head:", [(s[0], s[1].split('/')[-1], round((s[4] or s[2]) * 1e3, 1)) for s in d["profile_steps"][:12]])
PYEOF
cat "$G/emb.txt" "$G/accuracy.txt"; tail -5 "$G/err.txt"
cat "$G/torch.jsonl"
