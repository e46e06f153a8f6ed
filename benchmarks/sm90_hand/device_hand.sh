#!/usr/bin/env bash
# One device call: the hand kernel's sweep (run_hand.py) with clocks logged, then ncu on the best tf32/f16 configs.
set -uo pipefail
D=${1:-.carry_sm90}
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; } > "$OUT/machine.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 250 > "$OUT/smi.csv" 2>&1 &
SMI=$!
PYTHONUNBUFFERED=1 timeout 240 python3 "$D/run_hand.py" "$D" "$OUT/hand.json" 2>&1 | tee "$OUT/hand_log.txt"
kill $SMI
cat "$OUT/hand.json.best"
while read dt i g; do
  [ "$dt" = bf16 ] && continue
  timeout 100 ncu --kernel-name regex:gemm_kernel --launch-skip 1 --launch-count 1 --clock-control none \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --metrics sm__cycles_elapsed.avg.per_second \
    python3 "$D/prof_hand.py" "$D" "$i" "$g" > "$OUT/ncu_$dt.txt" 2>&1
  grep -E "SM Frequency|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Duration|per_second" "$OUT/ncu_$dt.txt"
done < "$OUT/hand.json.best"
