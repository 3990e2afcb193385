# g16r call 2 (issue 23, 13th session), <= 120 s. Writes $OUT/g16r/. Which operand's L2 traffic costs
# (pr7: B refills from slab 0, pr8: A's), one register set + L1 touch-prefetch (rp1_ad1 + lp2..4:
# four registers instead of a second set), and the L2 read bandwidth torch's sum reaches (ceiling).
G="$OUT/g16r"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
R="fi1_cl1_vs4_uc1_ov1_su3_rp1"
V="${R}_rq1_ad1_pr7 ${R}_rq1_ad1_pr8 ${R}_ad1 ${R}_ad1_lp2 ${R}_ad1_lp3 ${R}_ad1_lp4"
COOP_STATS="$(for v in $V; do echo -n "$v@f16out "; done)" timeout 20 $S > "$G/stats.csv" 2> "$G/ab.err"
COOP_AB="default $V" COOP_AB_ROUNDS=4 COOP_AB_MS=25 COOP_AB_BUDGET_S=70 \
  COOP_AB_SHAPES="4096x4096x4096 8192x8192x8192" timeout 80 $S > "$G/ab.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
timeout 25 python3 - > "$G/l2bw.txt" 2>&1 <<'PY'
import torch
for mb in (4, 16, 32, 256):
    x = torch.ones(mb * 2**20 // 2, dtype=torch.float16, device="cuda")
    for _ in range(20): x.sum()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
    n = 200
    e0.record()
    for _ in range(n): x.sum()
    e1.record(); torch.cuda.synchronize()
    t = e0.elapsed_time(e1) / n / 1e3
    print(f"sum over {mb} MiB f16: {t*1e6:.1f} us, {mb*2**20/t/1e12:.2f} TB/s")
PY
cat "$G/device.txt"; cut -d, -f2,4 "$G/stats.csv" | cut -c1-200; grep -v '^# r' "$G/ab.csv" | grep -v "^#" | cut -d, -f1,2,4,6,7,8; cat "$G/l2bw.txt"
