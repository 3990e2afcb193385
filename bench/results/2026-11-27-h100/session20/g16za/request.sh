# g16za call 2 (issue 23, 14th session), <= 200 s. Writes $OUT/g16za/. rs1: f32 outputs (split-K partials,
# f32-out products) through the row scratch, four floats per store, instead of coopStoreT straight to the
# output (ns1@f32out ran 4096^3 at 231 vs 265 for the f16 store in g16z). Kernel A/B, then BERT-base f16
# b1 / b8 end to end with MPSRT_COOP_RS=0/1 alternated in fresh processes.
G="$OUT/g16za"; mkdir -p "$G"
S=./target/release/examples/bench_coop_sweep; M=./target/release/mpsrt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader > "$G/device.txt" 2>&1
R="fi1_cl1_vs4_uc1_ov1_su3_rp1_rq1_ad1"; L="fi1_cl1_vs4_uc1_ov1_su3_rp1"; Q="w2x2_t2x2_k64_fi1_cl1_vs4_uc1_ov1_su1_ad1"
COOP_STATS="$R $R@f16out ${R}_rs1 $L ${L}_rs1 $Q ${Q}_rs1" timeout 20 $S > "$G/stats.csv" 2> "$G/ab.err"
V="default@f32out ${R}_rs1@f32out ${Q}@f32out ${Q}_rs1@f32out default@splitk ${L}_rs1@splitk default"
COOP_AB="$V" COOP_AB_ROUNDS=4 COOP_AB_MS=25 COOP_AB_BUDGET_S=80 \
  COOP_AB_SHAPES="4096x4096x4096 2048x3072x768 1024x768x3072 128x768x3072 128x2304x768 1024x1024x1024" timeout 90 $S > "$G/ab.csv" 2>> "$G/ab.err"
echo "rc=$?" >> "$G/ab.csv"
tail -c 2000 "$G/ab.err" > "$G/ab.err.tail"; rm -f "$G/ab.err"
cat "$G/device.txt"; cut -d, -f2,4 "$G/stats.csv" | cut -c1-200; grep -v '^# r' "$G/ab.csv" | grep -v "^#" | cut -d, -f1,2,4,6,7,8
t=$(date +%s); timeout 100 python3 bench/engine_torch.py export /tmp/models --only bert_base 2>&1 | grep -v -i warn | tail -2; echo "export $(( $(date +%s) - t )) s"
B=/tmp/models/bert_base.onnx
run() { echo "bert b$1 f16 $2 $(env $2 timeout 15 $M bench $B --device gpu --batch $1 --precision f16 --iterations 60 --warmup 15 2>&1 | grep -E 'latency' | tr '\n' ' ')" >> "$G/bert_e2e.txt"; }
for r in 1 2 3; do for b in 1 8; do run $b MPSRT_COOP_RS=0; run $b MPSRT_COOP_RS=1; done; done
cat "$G/bert_e2e.txt"
