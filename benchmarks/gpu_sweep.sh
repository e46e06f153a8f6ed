#!/usr/bin/env bash
# The whole GPU sweep in one device call: every GPU test, the GEMMs against cuBLAS, compute-sanitizer on
# the examples that changed. Results go to $OUT (copy them into benchmarks/ afterwards).
#
# Here first (the Sm80 schedule takes minutes; no GPU needed), from the repository root:
#   python3 benchmarks/gemm.py --platform sm80 --prebuild .carry_final/sm80 --arch sm_90a
#   python3 benchmarks/gemm.py --platform sm90 --prebuild .carry_final/sm90
# then: run(command="bash benchmarks/gpu_sweep.sh .carry_final/sm80 .carry_final/sm90", carry=[".whl", ".carry_final"]).
# (Without the second folder the Sm90 GEMMs are built there, one nvcc after the other: minutes.)
# Needs the wheels of ../shared/tools/gpu-wheels in .whl/.
# The workbench's GPU tests need the notebook extra as wheels in .whl_lab/ (without them their modules are skipped):
#   python3 -m pip download --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl_lab nbclient ipykernel ipywidgets anywidget plotly nbformat
#   then remove from .whl_lab what .whl has (platformdirs) and what no kernel needs (debugpy, widgetsnbextension): the
#   carry limit is 64 MiB, so a call carries .whl_lab with .whl and either .carry_final or .carry_lab, not both.
set -uo pipefail
PREBUILT_SM80=${1:?usage: gpu_sweep.sh SM80_PREBUILD_DIR [SM90_PREBUILD_DIR]}
PREBUILT_SM90=${2:-}
OUT=${OUT:-/tmp/gpu_sweep}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl || exit 1
# the workbench's tests need IPython, nbformat...: wheels of the notebook extra, where carried (see the header)
if compgen -G ".whl_lab/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl_lab/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1; } > "$OUT/machine.txt"
timeout 420 python3 -m pytest -q -p no:cacheprovider -m gpu -n 12 tests > "$OUT/gpu_tests.txt" 2>&1
timeout 120 python3 benchmarks/gemm.py --prebuilt "$PREBUILT_SM80" 2>&1 | tee "$OUT/gemm_log.txt"
if [[ -n $PREBUILT_SM90 ]]; then
  timeout 130 python3 benchmarks/gemm.py --prebuilt "$PREBUILT_SM90" 2>&1 | tee -a "$OUT/gemm_log.txt"
else
  timeout 300 python3 benchmarks/gemm.py --platform sm90 --dtypes tf32,f16,bf16 2>&1 | tee -a "$OUT/gemm_log.txt"
fi
cp benchmarks/results/gemm.json "$OUT/gemm.json"
# the Sm80 GEMMs from the prebuild (no scheduling there): racecheck + synccheck at 256x256x384, ~11 s a kernel
timeout 120 python3 benchmarks/sm80_sanitize.py "$PREBUILT_SM80" --out "$OUT/sm80_sanitizer.md" > "$OUT/sm80_sanitizer_log.txt" 2>&1
timeout 100 python3 benchmarks/sanitize_examples.py --only index_arithmetic,dist_gemm,pipelined_tiles,sm90_gemm,sm90_tma_store \
  --out "$OUT/sanitizer_results.md" > "$OUT/sanitizer_log.txt" 2>&1
tail -n 4 "$OUT"/*.txt "$OUT"/*.md
