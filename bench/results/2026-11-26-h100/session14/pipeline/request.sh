# lead: Triton softmax with row-loop load pipelining (ttir/pipeline.rs) vs MPSRT_TRITON_PREFETCH=0, alternated
L=$OUT/lead; mkdir -p $L
for r in 1 2; do
  for pf in 1 0; do
    MPSRT_TRITON_PREFETCH=$pf timeout 60 python3 bench/triton_backend.py --only softmax 2>>$L/err.txt | sed "s/^{/{\"prefetch\": $pf, \"round\": $r, /" >> $L/softmax.jsonl
  done
done
grep ratio $L/softmax.jsonl
timeout 100 python3 bench/triton_backend.py --only matmul,add 2>>$L/err.txt | tee $L/rest.jsonl | grep ratio
