"""Time sync_check on the 2-warp mbarrier ring of examples/sync_ring.py, a 128-thread cp.async double
buffer (tests/procs_sync.py) and a CTA-tiled matmul.

Run: python benchmarks/bench_sync_check.py [ring N ...] [cpasync N ...] [gemm M N K ...] [--engine python]
(default: ring 32768 131072 524288, cpasync 1048576, gemm 256 256 256). One line per
case: best of 3 wall-clock runs (time.perf_counter) of the whole sync_check call, in
one process, after one untimed call that compiles the proc's checker (or finds it in
the cache).
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from sync_ring import ring_copy  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from procs_sync import cp_async_double_buffer  # noqa: E402

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


def bench(p, engine: str, repeats: int = 3, **sizes) -> float:
    assert sync_check(p, engine=engine, **sizes).ok  # compiles (or loads) the checker
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        report = sync_check(p, engine=engine, **sizes)
        best = min(best, time.perf_counter() - t0)
        assert report.ok, str(report)
    return best


CASES = {"ring": (ring_copy, ("n",)), "cpasync": (cp_async_double_buffer, ("n",)), "gemm": (gemm, ("M", "N", "K"))}


def _cases(argv: list) -> list:
    cases, i = [], 0
    while i < len(argv):
        if argv[i] not in CASES:
            raise SystemExit(f"unknown case {argv[i]!r}: use ring N, cpasync N or gemm M N K")
        names = CASES[argv[i]][1]
        cases.append((argv[i], dict(zip(names, map(int, argv[i + 1 : i + 1 + len(names)])))))
        i += 1 + len(names)
    return cases or [
        ("ring", {"n": 32768}),
        ("ring", {"n": 131072}),
        ("ring", {"n": 524288}),
        ("cpasync", {"n": 1 << 20}),
        ("gemm", {"M": 256, "N": 256, "K": 256}),
    ]


if __name__ == "__main__":
    args = sys.argv[1:]
    engine = "compiled"
    if "--engine" in args:
        at = args.index("--engine")
        engine = args[at + 1]
        del args[at : at + 2]
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"engine {engine}")
    for name, sizes in _cases(args):
        print(f"{name} {sizes}: {bench(CASES[name][0], engine, **sizes):.3f} s (best of 3)", flush=True)
