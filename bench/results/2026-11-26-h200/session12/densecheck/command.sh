#!/usr/bin/env bash
REQ=none bash .gpureq/run.sh 2>&1 | tail -1
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
mkdir -p $OUT/final
for i in 1 2 3 4 5 6; do
  MPSRT_ORT_VERBOSE=1 timeout 100 python3 bench/ort_ep.py /tmp/models --models densenet121 --iters 30 --runtimes ep > $OUT/final/dense_$i.txt 2>&1
  grep -h -E "replay|^\{" $OUT/final/dense_$i.txt | cut -c1-260 | sed "s/^/$i: /" | grep -v "Fresh" | head -8
done
