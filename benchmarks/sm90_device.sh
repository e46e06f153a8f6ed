#!/usr/bin/env bash
# One device call for the Sm90a work (results under $OUT; copy them into benchmarks/ afterwards):
# GPU tests of the Sm90 examples, compute-sanitizer racecheck/synccheck on them at small sizes,
# benchmarks/gemm.py --platform sm90 (DTYPES, default tf32,f16,bf16) with clocks logged, and ncu on one
# launch of the generated GEMM at 8192^3. Needs the wheels of exo-lang and its deps in .whl/.
set -uo pipefail
OUT=${OUT:-/tmp/sm90_device}
DTYPES=${DTYPES:-tf32,f16,bf16}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; nvcc --version | tail -1; } > "$OUT/machine.txt"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_examples.py -k "sm90" 2>&1 | tail -12 | tee "$OUT/gpu_tests.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 500 > "$OUT/smi.csv" 2>&1 &
SMI=$!
timeout 300 python3 benchmarks/gemm.py --platform sm90 --dtypes "$DTYPES" --out "$OUT/gemm_rows.json" 2>&1 | tee "$OUT/gemm.txt"
kill $SMI
timeout 200 python3 benchmarks/sanitize_examples.py --only sm90_tma_wgmma,sm90_rmem_a,sm90_gemm --out "$OUT/sanitizer.md" 2>&1 | tail -8
timeout 120 ncu --kernel-name regex:gemm_sm90 --launch-skip 1 --launch-count 1 --clock-control none \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --metrics sm__cycles_elapsed.avg.per_second \
  python3 benchmarks/gemm.py --platform sm90 --dtypes "${DTYPES##*,}" --shapes 8192x8192x8192 --reps 1 --no-save > "$OUT/ncu.txt" 2>&1
grep -E "SM Frequency|Elapsed Cycles|SM Active|Duration|DRAM Through|L2 Hit|Compute \(SM\)" "$OUT/ncu.txt"
