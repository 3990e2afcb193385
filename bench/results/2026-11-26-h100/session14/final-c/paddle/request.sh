# paddle helper (issue 20, tiny-op cost), FINAL call. Needs the working tree at or after commit
# c42f40e (plugin eager fast path kernels/fast.rs, opt-in recorder thread MPSRT_PADDLE_RECORDER=1,
# bench `tiny ROUNDS MODES` A/B with wall-including-sync) and ./target/release/libmpsrt_paddle.so
# built from it. Needs paddle on the machine (exits at once without it). <= 60 s (one step, timeout 58).
mkdir -p "$OUT/paddle"
if ! python3 -c 'import paddle' >/dev/null 2>&1; then
  echo "paddle is not importable on this machine: nothing measured" | tee "$OUT/paddle/missing.txt"
  exit 0
fi
nvidia-smi -L > "$OUT/paddle/gpu.txt" 2>&1
git log -1 --format='%h %s' > "$OUT/paddle/commit.txt" 2>&1
root=$(mktemp -d)
ln -s "$PWD/target/release/libmpsrt_paddle.so" "$root/libmpsrt_paddle.so"
export CUSTOM_DEVICE_ROOT="$root" GLOG_minloglevel=2
# Tiny adds: 5 rounds of fresh processes alternated mps (default: fast path, dispatch inline),
# cpu (Paddle's CPU), recorder (fast path + MPSRT_PADDLE_RECORDER=1); per add: calling-thread CPU,
# wall, wall including one final synchronize; then medians and each mode's ratio to cpu
# (target <= 2). Rows are printed as they come, so a timeout keeps the finished rounds.
# (~40 s on the 2-core dev VM; Paddle's own floor, MPSRT_PADDLE_NOOP_OP, was measured last session.)
timeout 110 python3 bench/paddle_plugin.py tiny 5 mps,cpu,recorder,noop 2>>"$OUT/paddle/stderr.txt" \
  | tee "$OUT/paddle/tiny.jsonl"
