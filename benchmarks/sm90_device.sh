#!/usr/bin/env bash
# One device call for the Sm90a GEMM (results under $OUT; copy them into benchmarks/results/ afterwards).
# Run from the repository root (or a copy of it), with the wheels of exo-lang and its deps in $WHL (default .whl)
# and a prebuilt benchmarks/sm90_hand/gemm_hand.so in $HAND (default benchmarks/sm90_hand):
#   1. sm90_sweep.py: generated GEMM (and diagnostic variants) + hand kernel, checked against float64 at
#      non-square shapes and timed against cuBLAS in the same run (clocks logged meanwhile);
#   2. mutation_test_sm90.py --gpu: every mutant the checker does not kill, built and run;
#   3. compute-sanitizer racecheck + synccheck on the Sm90 examples at small sizes.
# Knobs: DTYPES (generated dtypes, default tf32), VARIANTS (default base,wg,persist,both), STEPS (default 123).
set -uo pipefail
OUT=${OUT:-/tmp/sm90_device}
WHL=${WHL:-.whl}
HAND=${HAND:-benchmarks/sm90_hand}
DTYPES=${DTYPES:-tf32}
VARIANTS=${VARIANTS:-base,wg,persist,both}
STEPS=${STEPS:-123}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site "$WHL"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SPORK_LAB_CACHE=/tmp/spork_cache
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; nvcc --version | tail -1; } > "$OUT/machine.txt"
[[ $STEPS == *2* ]] && { python3 benchmarks/mutation_test_sm90.py --prebuild > "$OUT/prebuild_log.txt" 2>&1 & }
if [[ $STEPS == *1* ]]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 > "$OUT/smi.csv" 2>&1 &
  SMI=$!
  timeout 200 python3 benchmarks/sm90_sweep.py --out "$OUT" --dtypes "$DTYPES" --variants "$VARIANTS" --hand "$HAND" 2>&1 | tee "$OUT/sweep.txt"
  kill $SMI
fi
if [[ $STEPS == *2* ]]; then
  wait  # the prebuild
  timeout 200 python3 benchmarks/mutation_test_sm90.py --gpu --timeout 15 --out "$OUT/mutation_sm90.md" > "$OUT/mutation_log.txt" 2>&1
  grep -E "Kill rate|proc [0-9]+:" "$OUT/mutation_log.txt"
fi
if [[ $STEPS == *3* ]]; then
  timeout 200 python3 benchmarks/sanitize_examples.py --only sm90_tma_wgmma,sm90_rmem_a,sm90_gemm --out "$OUT/sanitizer.md" 2>&1 | tail -8
fi
cat "$OUT/machine.txt"
