#!/usr/bin/env bash
# One device call for the Sm90a GEMM (results under $OUT; copy them into benchmarks/results/ afterwards).
# Run from the repository root (or a copy of it), with the wheels of exo-lang and its deps in $WHL (default .whl)
# and a prebuilt benchmarks/sm90_hand/gemm_hand.so in $HAND (default benchmarks/sm90_hand):
#   1. sm90_sweep.py: generated GEMM (and diagnostic variants) + hand kernel, checked against float64 at
#      non-square shapes and timed against cuBLAS in the same run (clocks logged meanwhile);
#   3. compute-sanitizer racecheck + synccheck on the Sm90 examples at small sizes (SANITIZE: which);
#   2. mutation_test_sm90.py --gpu: every mutant the checker does not kill, built and run (last: least urgent).
# Knobs: DTYPES (generated dtypes, default tf32), VARIANTS (default base,wg,persist,both), STEPS (default 123),
# HAND_DTYPES, MUTANTS (survivor numbers to run, default all), MUTANT_TIMEOUT (s per mutant run),
# SWEEP_S / MUTANT_S / SANITIZE_S (time limits of the steps).
set -uo pipefail
OUT=${OUT:-/tmp/sm90_device}
WHL=${WHL:-.whl}
HAND=${HAND:-benchmarks/sm90_hand}
DTYPES=${DTYPES:-tf32}
VARIANTS=${VARIANTS:-base,wg,persist,both}
STEPS=${STEPS:-123}
ONLY=${MUTANTS:+--only $MUTANTS}
SANITIZE=${SANITIZE:-sm90_tma_wgmma,sm90_rmem_a,sm90_gemm,sm90_tma_store}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site "$WHL"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SPORK_LAB_CACHE=/tmp/spork_cache
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; nvcc --version | tail -1; } > "$OUT/machine.txt"
# builds in the background while the sweep builds its own (nvcc is single-threaded; the machine has 16 cores)
[[ $STEPS == *2* ]] && { python3 benchmarks/mutation_test_sm90.py --prebuild $ONLY > "$OUT/prebuild_log.txt" 2>&1 & }
if [[ $STEPS == *3* ]]; then
  for ex in ${SANITIZE//,/ }; do
    python3 -c "import sys; sys.path.insert(0, 'examples'); import spork_lab as sl, $ex as m; sl.build(m.PROCS)" &
  done
fi
if [[ $STEPS == *1* ]]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 > "$OUT/smi.csv" 2>&1 &
  SMI=$!
  HAND_ARGS=()  # the hand kernel only where its library was built (nvcc -shared ... benchmarks/sm90_hand/gemm_hand.cu)
  [[ -f $HAND/gemm_hand.so ]] && HAND_ARGS=(--hand "$HAND" --hand-dtypes "${HAND_DTYPES:-tf32,f16,bf16}")
  timeout "${SWEEP_S:-200}" python3 benchmarks/sm90_sweep.py --out "$OUT" --dtypes "$DTYPES" --variants "$VARIANTS" "${HAND_ARGS[@]}" 2>&1 | grep -v Warning | tee "$OUT/sweep.txt"
  kill $SMI
fi
wait  # the background builds
if [[ $STEPS == *3* ]]; then
  timeout "${SANITIZE_S:-200}" python3 benchmarks/sanitize_examples.py --only "$SANITIZE" --out "$OUT/sanitizer.md" 2>&1 | tail -8
fi
if [[ $STEPS == *2* ]]; then
  timeout "${MUTANT_S:-200}" python3 benchmarks/mutation_test_sm90.py --gpu $ONLY --timeout "${MUTANT_TIMEOUT:-40}" --out "$OUT/mutation_sm90.md" > "$OUT/mutation_log.txt" 2>&1
  grep -E "Kill rate|proc [0-9]+:" "$OUT/mutation_log.txt"
fi
cat "$OUT/machine.txt"
