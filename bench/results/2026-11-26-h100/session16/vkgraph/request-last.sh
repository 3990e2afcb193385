# vkgraph FINAL call (issue 22: native Vulkan replay). Needs commit 029a2bc or later (working
# tree). ~50 s. Writes $OUT/vkgraph/.
# Call 3 found DenseNet's native outputs differed from the wgpu replay's: a missing barrier after
# copy_strided (its module declares binding 1 read-only in one entry point, written in the
# other), fixed in 029a2bc. Default is the pre-recorded secondary buffer again (S).
# 1) Correctness: replayed outputs of DenseNet/EfficientNet b1, S vs W vs R (MPSRT_REPLAY=0: a
#    fresh plan every run), separate processes.
# 2) Fresh processes: S (default), D (MPSRT_REPLAY_NATIVE=direct), W (MPSRT_REPLAY_NATIVE=0).
V="$OUT/vkgraph"; mkdir -p "$V"
M=./target/release/mpsrt
t=$(date +%s)
cat > /tmp/vk_check.py <<'PY'
import sys, numpy as np, mpsrt.onnx as mo
m, out = sys.argv[1], sys.argv[2]
s = mo.InferenceSession(f"/tmp/models/{m}.onnx", providers=["CUDAExecutionProvider"])
res = {}
for k in range(5):
    rng = np.random.default_rng(100 + k)
    feeds = {"x": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    y = s.run(None, feeds)[0]
    if k >= 2: res[f"r{k}"] = np.asarray(y)
np.savez(out, **res)
PY
for m in densenet121 efficientnet_b0; do
  timeout 25 python3 /tmp/vk_check.py $m /tmp/vk_$m.S.npz 2>>"$V/check_err.txt"
  MPSRT_REPLAY_NATIVE=0 timeout 25 python3 /tmp/vk_check.py $m /tmp/vk_$m.W.npz 2>>"$V/check_err.txt"
  [ $m = densenet121 ] && MPSRT_REPLAY_NATIVE=direct timeout 25 python3 /tmp/vk_check.py $m /tmp/vk_$m.D.npz 2>>"$V/check_err.txt"
  MPSRT_REPLAY=0 timeout 25 python3 /tmp/vk_check.py $m /tmp/vk_$m.R.npz 2>>"$V/check_err.txt"
  python3 - $m <<'PY'
import sys, os, numpy as np
m = sys.argv[1]
try:
    r = np.load(f"/tmp/vk_{m}.R.npz")
    for tag in ("S", "D", "W"):
        p = f"/tmp/vk_{m}.{tag}.npz"
        if not os.path.exists(p): continue
        a = np.load(p)
        for k in a.files:
            x, y = a[k], r[k]
            print(f"check {m} {tag} vs fresh {k}: bit-identical {np.array_equal(x, y)} max|diff| {float(np.max(np.abs(x.astype(np.float64) - y))):.3g} max|y| {float(np.max(np.abs(y))):.3g}")
except Exception as e:
    print("check", m, "failed:", e)
PY
done > "$V/check.txt"
cat "$V/check.txt"
echo "check $(( $(date +%s) - t )) s"
row() { # model tag env...
  local m=$1 tag=$2; shift 2
  local b=${B:-1} it=30; [ $b -gt 1 ] && it=10
  local j; j=$(env "$@" timeout 20 $M bench /tmp/models/$m.onnx --device gpu --batch $b --iterations $it --warmup 5 --json --host-detail 2>>"$V/stderr.txt" | tail -1)
  echo "{\"tag\": \"$tag\", \"m\": \"$m\", \"round\": $round, ${j#\{}"
}
t=$(date +%s)
{
round=1; row densenet121 S X=0; row densenet121 W MPSRT_REPLAY_NATIVE=0; row densenet121 D MPSRT_REPLAY_NATIVE=direct
round=2; row densenet121 S X=0; row densenet121 S X=0
round=3; row densenet121 W MPSRT_REPLAY_NATIVE=0; row densenet121 S X=0
round=1; B=32 row densenet121 S X=0
for m in resnet50 mobilenet_v3_small efficientnet_b0 bert_base; do row $m S X=0; done
} > "$V/procs.jsonl"
echo "procs $(( $(date +%s) - t )) s"
python3 - "$V/procs.jsonl" <<'PY'
import json, sys, statistics as st
rows = []
for l in open(sys.argv[1]):
    try: rows.append(json.loads(l))
    except Exception: pass
for m in ("densenet121", "resnet50", "mobilenet_v3_small", "efficientnet_b0", "bert_base"):
  for b in (1, 32):
    for tag in ("S", "D", "W"):
        rs = [r for r in rows if r["m"] == m and r["tag"] == tag and r.get("batch") == b]
        if not rs: continue
        print("==", m, f"b{b}", tag, "host us/step:", sorted(round(r["host_record_us_per_step"], 2) for r in rs),
              "p50 ms:", sorted(round(r["p50_ms"], 3) for r in rs))
        for r in rs:
            d = r.get("host_detail", {}); w = [round(x) for x in d.get("wait_us", [])]; hp = r.get("host_parts_us_p50", {})
            print(f"  r{r['round']} p50 {r['p50_ms']:.3f} p90 {r['p90_ms']:.3f} host {r['host_record_p50_ms']*1e3:.1f} us (loop {hp.get('record_loop')}) chase {d.get('chase_probe_ns')} wait first {w[:3]} med {st.median(w) if w else None} last {w[-2:]}")
        print("  replay:", rs[0].get("replay", "?"))
PY
tail -c 3000 "$V/stderr.txt" > "$V/stderr.tail" 2>/dev/null; tail -c 2000 "$V/check_err.txt" > "$V/check_err.tail" 2>/dev/null; rm -f "$V/stderr.txt" "$V/check_err.txt"
