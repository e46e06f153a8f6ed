#!/usr/bin/env bash
# The whole GPU sweep in one device call: GPU tests, vector-add bandwidth, compute-sanitizer on
# every example, and the mutation test with its survivors run on the GPU. Results go to $OUT
# (copy them into benchmarks/ afterwards). Needs the wheels of ../shared/tools/gpu-wheels in .whl/.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_sweep}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1; } > "$OUT/machine.txt"
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests 2>&1 | tail -30 > "$OUT/gpu_tests.txt"
timeout 60 python3 benchmarks/bench_vec_add.py > "$OUT/bench_vec_add.txt" 2>&1
timeout 240 python3 benchmarks/sanitize_examples.py --out "$OUT/sanitizer_results.md" > "$OUT/sanitizer_log.txt" 2>&1
timeout 60 python3 benchmarks/mutation_test.py --gpu --out "$OUT/mutation_test_results.md" > /dev/null 2>"$OUT/mutation_log.txt"
tail -n 3 "$OUT"/*.txt
