# g16zb call 3 (issue 23, 14th session), <= 150 s. Writes $OUT/g16zb/. The planner's kernels with rs1 on by
# default for f32 outputs: f32-out and split-K rows checked and timed with MPSRT_COOP_RS unset (on) and =0,
# two processes each, alternated; then the issue's row (BENCH_ONLY=f16gemm bench_ops_a beside torch f16), three
# fresh processes.
G="$OUT/g16zb"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep; E=./target/release/examples
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
ab() { env $1 COOP_AB="default@f32out default@splitk" COOP_AB_ROUNDS=3 COOP_AB_MS=25 COOP_AB_BUDGET_S=25 \
  COOP_AB_SHAPES="4096x4096x4096 2048x3072x768 1024x768x3072 128x768x3072 128x2304x768 1024x1024x1024" timeout 35 $S 2>>"$G/ab.err" | grep -v "^# r" | sed "s/^/$1,/"; }
for r in 1 2; do ab MPSRT_COOP_RS=1; ab MPSRT_COOP_RS=0; done > "$G/ab.csv"
tail -c 1500 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
cat "$G/device.txt"; grep -v "^.*,#" "$G/ab.csv" | grep -v ",variant," | cut -d, -f1,2,3,5,7,8,9 | sed 's/coop 16x16 float32 accumulation v3 //' | cut -c1-200
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
done > "$G/f16gemm.txt" 2>&1; cat "$G/f16gemm.txt"
