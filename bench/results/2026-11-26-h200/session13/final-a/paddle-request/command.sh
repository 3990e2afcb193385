# paddle helper (issue 20, tiny-op cost). Needs the working tree at or after commit 05650b0
# (runtime long batches MPSRT_MAX_OPS_PER_LONG_BATCH, plugin MPSRT_PADDLE_NOOP_OP, bench noop row)
# and ./target/release/libmpsrt_paddle.so built from it. ~60-90 s.
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
# Alternated fresh processes: the new default (long batches) vs the old behaviour (64 per batch).
# Each run prints three rows: mps, cpu, mps with the no-op add (Paddle's own custom-device path).
for r in 1 2 3; do
  for cfg in long512 old64; do
    if [ $cfg = old64 ]; then export MPSRT_MAX_OPS_PER_LONG_BATCH=64; else unset MPSRT_MAX_OPS_PER_LONG_BATCH; fi
    timeout 60 python3 bench/paddle_plugin.py tiny 2>>"$OUT/paddle/stderr.txt" \
      | sed "s/^{/{\"cfg\": \"$cfg\", \"round\": $r, /" | tee -a "$OUT/paddle/tiny.jsonl"
  done
done
unset MPSRT_MAX_OPS_PER_LONG_BATCH
