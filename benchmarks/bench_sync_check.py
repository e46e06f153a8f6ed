"""Time sync_check on the 2-warp mbarrier ring of examples/sync_ring.py and on a CTA-tiled matmul.

Run: python benchmarks/bench_sync_check.py [ring N ...] [gemm M N K ...]
(default: ring 524288, gemm 128 128 64). One line per case: best of 3 wall-clock
runs (time.perf_counter) of the whole sync_check call, in one process.
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from sync_ring import ring_copy  # noqa: E402

from spork_lab import proc  # noqa: E402
from spork_lab.platforms.cuda import *  # noqa: E402,F403
from spork_lab.sync.checker import sync_check  # noqa: E402


# 64x64 CTA tiles, 256 threads with a 4x4 register accumulator each, K staged through shared memory 16 at a time.
@proc
def gemm(M: size, N: size, K: size, A: f32[M, K] @ CudaGmemLinear, B: f32[K, N] @ CudaGmemLinear, C: f32[M, N] @ CudaGmemLinear):
    assert M % 64 == 0
    assert N % 64 == 0
    assert K % 16 == 0
    with CudaDeviceFunction(blockDim=256):
        for mt in cuda_tasks(0, M / 64):
            for nt in cuda_tasks(0, N / 64):
                acc: f32[16, 16, 4, 4] @ CudaRmem
                for ty in cuda_threads(0, 16, unit=16 * cuda_thread):
                    for tx in cuda_threads(0, 16):
                        for i in seq(0, 4):
                            for j in seq(0, 4):
                                acc[ty, tx, i, j] = 0.0
                for kt in seq(0, K / 16):
                    A_s: f32[64, 16] @ CudaSmemLinear
                    B_s: f32[16, 64] @ CudaSmemLinear
                    for r in cuda_threads(0, 64, unit=4 * cuda_thread):
                        for c in cuda_threads(0, 4):
                            for q in seq(0, 4):
                                A_s[r, c * 4 + q] = A[mt * 64 + r, kt * 16 + c * 4 + q]
                    for r in cuda_threads(0, 16, unit=16 * cuda_thread):
                        for c in cuda_threads(0, 16):
                            for q in seq(0, 4):
                                B_s[r, c * 4 + q] = B[kt * 16 + r, nt * 64 + c * 4 + q]
                    Fence(cuda_in_order, cuda_in_order)
                    for ty in cuda_threads(0, 16, unit=16 * cuda_thread):
                        for tx in cuda_threads(0, 16):
                            for k in seq(0, 16):
                                for i in seq(0, 4):
                                    for j in seq(0, 4):
                                        acc[ty, tx, i, j] += A_s[ty * 4 + i, k] * B_s[k, tx * 4 + j]
                    Fence(cuda_in_order, cuda_in_order)
                for ty in cuda_threads(0, 16, unit=16 * cuda_thread):
                    for tx in cuda_threads(0, 16):
                        for i in seq(0, 4):
                            for j in seq(0, 4):
                                C[mt * 64 + ty * 4 + i, nt * 64 + tx * 4 + j] = acc[ty, tx, i, j]


def bench(p, repeats: int = 3, **sizes) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        report = sync_check(p, **sizes)
        best = min(best, time.perf_counter() - t0)
        assert report.ok, str(report)
    return best


def _cases(argv: list) -> list:
    cases, i = [], 0
    while i < len(argv):
        if argv[i] == "ring":
            cases.append(("ring", {"n": int(argv[i + 1])}))
            i += 2
        elif argv[i] == "gemm":
            cases.append(("gemm", {"M": int(argv[i + 1]), "N": int(argv[i + 2]), "K": int(argv[i + 3])}))
            i += 4
        else:
            raise SystemExit(f"unknown case {argv[i]!r}: use ring N or gemm M N K")
    return cases or [("ring", {"n": 524288}), ("gemm", {"M": 128, "N": 128, "K": 64})]


if __name__ == "__main__":
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    for name, sizes in _cases(sys.argv[1:]):
        p = ring_copy if name == "ring" else gemm
        print(f"{name} {sizes}: {bench(p, **sizes):.2f} s (best of 3)")
