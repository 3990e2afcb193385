# g16w final call (issue 23, 13th session), <= 100 s. Writes $OUT/g16w/. The issue's f16 GEMM row:
# 4096^3 in three fresh processes (bench_ops_a) beside torch f16 matmul in the same call.
G="$OUT/g16w"; mkdir -p "$G"
E=./target/release/examples
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
for r in 1 2 3; do
  BENCH_ONLY=f16gemm timeout 8 $E/bench_ops_a 2>&1 | grep matmul_f16 | cut -c1-220
  timeout 30 python3 - <<'PY'
import json, torch, time
a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16); b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
for _ in range(3): a @ b
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(20): a @ b
torch.cuda.synchronize(); s = (time.perf_counter() - t) / 20
print(json.dumps({"torch": torch.__version__, "bench": "matmul_f16", "m": 4096, "ms": s * 1e3, "tflops": 2 * 4096**3 / s / 1e12}))
PY
done > "$G/f16gemm.txt" 2>&1
cat "$G/device.txt" "$G/f16gemm.txt"
