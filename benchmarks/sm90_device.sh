#!/usr/bin/env bash
# One device call for the Sm90a GEMM; results under $OUT (copy them into benchmarks/results/ afterwards).
# Here first (no GPU needed; nvcc 13.0 builds the libraries, which travel with the call):
#   python3 benchmarks/gemm.py --platform sm90 [--sweep] --prebuild DIR
# then, from the repository root with the wheels in .whl:  bash benchmarks/sm90_device.sh DIR
#   1. gemm.py --prebuilt DIR: every kernel checked against float64 (non-square shapes, then each timed shape)
#      and timed against cuBLAS asked for the same output type, interleaved (clocks logged meanwhile);
#   2. the cuBLAS kernels those comparisons run (their names give tile, cluster, schedule; CUBLAS_NAMES=0 skips);
#   3. ncu (one launch after a warm-up, clocks as found) of each kernel named in PROFILE and of its cuBLAS;
#   4. compute-sanitizer racecheck + synccheck on the examples in SANITIZE (none by default).
set -uo pipefail
PRE=${1:?usage: sm90_device.sh PREBUILT_DIR}
OUT=${OUT:-/tmp/sm90_device}
PROFILE=${PROFILE:-}
SANITIZE=${SANITIZE:-}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site "${WHL:-.whl}"/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 SPORK_LAB_CACHE=/tmp/spork_cache
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader; nvcc --version | tail -1; } > "$OUT/machine.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 > "$OUT/smi.csv" 2>&1 &
SMI=$!
timeout "${GEMM_S:-150}" python3 benchmarks/gemm.py --prebuilt "$PRE" --out "$OUT/sm90_rows.json" ${SHAPES:+--shapes $SHAPES} 2>&1 \
  | grep -v Warning | tee "$OUT/gemm_log.txt"
kill $SMI
[[ ${CUBLAS_NAMES:-1} == 1 ]] && timeout 60 python3 benchmarks/sm90_prof.py names > "$OUT/cublas_kernels.txt" 2>&1
for name in ${PROFILE//,/ }; do
  timeout 90 ncu --kernel-name regex:'gemm|nvjet|xmma|cutlass' --launch-skip 2 --launch-count 2 --clock-control none --section SpeedOfLight \
    --metrics sm__cycles_elapsed.avg.per_second,sm__cycles_active.avg,dram__bytes.sum,lts__t_bytes.sum \
    python3 benchmarks/sm90_prof.py run "$PRE" "$name" > "$OUT/ncu_$name.txt" 2>&1
done
[[ -n $SANITIZE ]] && timeout "${SANITIZE_S:-150}" python3 benchmarks/sanitize_examples.py --only "$SANITIZE" \
  --out "$OUT/sanitizer.md" 2>&1 | tail -8
[[ -f $OUT/cublas_kernels.txt ]] && cat "$OUT/cublas_kernels.txt"
for f in "$OUT"/ncu_*.txt; do [[ -f $f ]] && grep -E "^  [a-zA-Z_]|Duration|SM Frequency|Compute \(SM\) Throughput|DRAM Throughput|per_second|cycles_active|bytes.sum" "$f"; done
cat "$OUT/machine.txt"
