"""Soundness audit of session 35: Sm90 GEMM variants off the benchmarked configurations, checked here and run on a GPU.

The variants: multicast TMA into a 128-byte-swizzled B_s at an offset that is not a whole swizzle atom (BN = 24, 40,
56 with two CTAs: each CTA's rows start 1536, 2560 or 3584 bytes in), several wgmma per K step on accumulator
windows (NW < BN, which sync_check refused until this session), and the TMA-store epilogue. Each is sync_checked
at a small size here and written to a prebuild folder; benchmarks/gemm.py --prebuilt then checks each on the GPU
against float64 on fresh random inputs at two shapes (a wrong tile fails it) and times it once.

    python3 benchmarks/soundness_audit35_gemms.py BUILD_DIR      # here (no GPU)
    python3 benchmarks/gemm.py --prebuilt BUILD_DIR --shapes 4096x4096x4096 --reps 5 --no-save   # on the GPU
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1] / "examples")]
import gemm  # noqa: E402
import sm90_gemm  # noqa: E402

import spork_lab as sl  # noqa: E402

VARIANTS = {
    "tf32": [dict(BN=24, CL=2, G=1), dict(BN=320, NW=160, clip=True)],
    "f16": [dict(BN=40, S=5, CL=2, G=1), dict(BN=56, CL=2, G=1), dict(CL=2, G=1, NW=128),
            dict(BN=128, out="f16", Q=1, tma_store=1, G=1)],
    "bf16": [dict(CL=2, G=1, NW=64, out="bf16"), dict(BN=320, NW=160, out="bf16", clip=True)],
}


def main(out: Path) -> None:
    sm90_gemm.CONFIGS = VARIANTS  # gemm.sm90_kernels builds the kernels of CONFIGS, with its check shapes
    kernels = [k for d in VARIANTS for k in gemm.sm90_kernels(d, False) if not k.name.endswith("_steps")]
    for k in kernels:
        start = time.perf_counter()
        M, N, K = k.checks[0]
        report = sl.sync_check(k.schedule(), M=min(M, 1024), N=N, K=K)
        verdict = "ok" if report.ok else [h.kind for h in report.hazards]
        print(f"{k.name}: sync_check at {min(M, 1024)}x{N}x{K}: {verdict} ({time.perf_counter() - start:.1f} s)")
    gemm.prebuild(kernels, out, "sm_90a")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
