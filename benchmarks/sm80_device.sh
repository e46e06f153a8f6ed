#!/bin/bash
# The Sm80 GEMM's GPU run, in one device call: every kernel of a prebuild folder compiled there, checked
# against float64 and timed against cuBLAS (benchmarks/gemm.py), then an Nsight Compute profile of one kernel.
#
# Here first (scheduling takes minutes; no GPU needed), from the repository root:
#   python3 benchmarks/gemm.py --platform sm80 [--sweep] --prebuild .carry_sm80/sweep --arch sm_90a
# then, from /work/main with that folder copied to /work/main/.carry_sm80/sweep:
#   run(command="bash benchmarks/sm80_device.sh .carry_sm80/sweep sm80_gemm_f16", carry=[".whl", ".carry_sm80"])
# Arguments: the prebuild folder, and (optional) the name of the kernel to profile. Files land in $OUT.
set -o pipefail
DIR=${1:?usage: sm80_device.sh PREBUILD_DIR [KERNEL_TO_PROFILE]}
PROFILE=${2:-}
OUT=${OUT:-/tmp/sm80_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHL:-.whl}/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv \
  | tee "$OUT/gpu.txt"
python3 benchmarks/gemm.py --prebuilt "$DIR" --out "$OUT/rows.json" 2>&1 | tee "$OUT/gemm.log"
status=$?
cp benchmarks/results/gemm.json "$OUT/gemm.json"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee -a "$OUT/gpu.txt"
if [ -n "$PROFILE" ]; then
  # the first kernel named like $PROFILE, its third launch: the first two are gemm.py's small checks
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  "$NCU" --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section WarpStateStats --section LaunchStats --section Occupancy \
      -k "regex:_device0" --launch-skip 2 --launch-count 1 \
      python3 benchmarks/gemm.py --prebuilt "$DIR" --only "$PROFILE" --shapes 8192x8192x8192 --reps 1 --no-save \
      > "$OUT/ncu.txt" 2>&1
  grep -E "Throughput|Pipe|Utilization|Stall|Warp Cycles|Issued|Eligible|Bank|Registers|Shared Memory" "$OUT/ncu.txt" | head -60
fi
exit $status
