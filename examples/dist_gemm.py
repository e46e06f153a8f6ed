"""C = A @ B with CTA-scope accumulators in distributed memory (seed 000, "Distributed Memory").

`dist_register_tile` is the seed's example: a CTA of 512 threads arranged
16 x 32 owns a 128 x 128 tile of C; the accumulator is declared at CTA scope
with its logical size, `acc: f32[16, 32, 8, 4] @ CudaRmem`, and every use
indexes it `acc[m, n, i, j]` with the thread loops' iterators first. The
deduction finds the tiling chain m: 512 -> 32, n: 32 -> 1 (CTA down to
CudaRmem's native unit, the thread), so each thread declares one 8 x 4 shard
(`float acc[32]`). The accumulator lives across the CTA-level K loop.

`dist_mma_cta` does the same with tf32 tensor cores: a CTA of 4 warps owns a
64 x 64 tile; its accumulator `D: f32[2, 2, 2, 4, 16, 8] @ Sm80_RmemMatrixD`
is declared at CTA scope and distributed per warp (wm: 128 -> 64,
wn: 64 -> 32), so each warp holds 2 x 4 fragments of 16 x 8. The whole CTA
stages each 16-wide K slice of A and B in shared memory.

Run `python examples/dist_gemm.py` to see sync_check pass on both and the
shard shapes the analysis deduces.
"""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *


@proc
def dist_register_tile(
    M: size, N: size, K: size, A: f32[M, K] @ CudaGmemLinear, B: f32[K, N] @ CudaGmemLinear, C: f32[M, N] @ CudaGmemLinear
):
    assert M % 128 == 0
    assert N % 128 == 0
    with CudaDeviceFunction(blockDim=512):
        for mt in cuda_tasks(0, M / 128):
            for nt in cuda_tasks(0, N / 128):
                acc: f32[16, 32, 8, 4] @ CudaRmem
                for m in cuda_threads(0, 16, unit=32 * cuda_thread):
                    for n in cuda_threads(0, 32):
                        for i in seq(0, 8):
                            for j in seq(0, 4):
                                acc[m, n, i, j] = 0.0
                for k in seq(0, K):
                    for m in cuda_threads(0, 16, unit=32 * cuda_thread):
                        for n in cuda_threads(0, 32):
                            for i in seq(0, 8):
                                for j in seq(0, 4):
                                    acc[m, n, i, j] += A[mt * 128 + 8 * m + i, k] * B[k, nt * 128 + 4 * n + j]
                for m in cuda_threads(0, 16, unit=32 * cuda_thread):
                    for n in cuda_threads(0, 32):
                        for i in seq(0, 8):
                            for j in seq(0, 4):
                                C[mt * 128 + 8 * m + i, nt * 128 + 4 * n + j] = acc[m, n, i, j]


@proc
def dist_mma_cta(
    M: size, N: size, K: size, A: f32[M, K] @ CudaGmemLinear, B: f32[K, N] @ CudaGmemLinear, C: f32[M, N] @ CudaGmemLinear
):
    assert M % 64 == 0
    assert N % 64 == 0
    assert K % 16 == 0
    with CudaDeviceFunction(blockDim=128):
        for mt in cuda_tasks(0, M / 64):
            for nt in cuda_tasks(0, N / 64):
                D: f32[2, 2, 2, 4, 16, 8] @ Sm80_RmemMatrixD
                A_s: f32[64, 16] @ CudaSmemLinear
                B_s: f32[16, 64] @ CudaSmemLinear
                for wm in cuda_threads(0, 2, unit=2 * cuda_warp):
                    for wn in cuda_threads(0, 2, unit=cuda_warp):
                        for i in seq(0, 2):
                            for j in seq(0, 4):
                                Sm80_mma_zero_d_tf32(D[wm, wn, i, j, :, :])
                for kt in seq(0, K / 16):
                    for r in cuda_threads(0, 8, unit=16 * cuda_thread):
                        for c in cuda_threads(0, 16):
                            for q in seq(0, 8):
                                A_s[8 * q + r, c] = A[mt * 64 + 8 * q + r, kt * 16 + c]
                    for r in cuda_threads(0, 2, unit=64 * cuda_thread):
                        for c in cuda_threads(0, 64):
                            for q in seq(0, 8):
                                B_s[2 * q + r, c] = B[kt * 16 + 2 * q + r, nt * 64 + c]
                    Fence(cuda_in_order, cuda_in_order)
                    for wm in cuda_threads(0, 2, unit=2 * cuda_warp):
                        for wn in cuda_threads(0, 2, unit=cuda_warp):
                            for kk in seq(0, 2):
                                A_r: f32[2, 16, 8] @ Sm80_RmemMatrixA
                                B_r: f32[4, 8, 8] @ Sm80_RmemMatrixB
                                for i in seq(0, 2):
                                    Sm80_mma_load_a_tf32(
                                        A_r[i, :, :], A_s[32 * wm + 16 * i : 32 * wm + 16 * i + 16, 8 * kk : 8 * kk + 8]
                                    )
                                for j in seq(0, 4):
                                    Sm80_mma_load_b_tf32(
                                        B_r[j, :, :], B_s[8 * kk : 8 * kk + 8, 32 * wn + 8 * j : 32 * wn + 8 * j + 8]
                                    )
                                for i in seq(0, 2):
                                    for j in seq(0, 4):
                                        Sm80_mma_tf32(D[wm, wn, i, j, :, :], A_r[i, :, :], B_r[j, :, :])
                    Fence(cuda_in_order, cuda_in_order)  # the next K slice overwrites A_s and B_s
                for wm in cuda_threads(0, 2, unit=2 * cuda_warp):
                    for wn in cuda_threads(0, 2, unit=cuda_warp):
                        for i in seq(0, 2):
                            for j in seq(0, 4):
                                Sm80_mma_store_d_tf32(
                                    C[
                                        mt * 64 + 32 * wm + 16 * i : mt * 64 + 32 * wm + 16 * i + 16,
                                        nt * 64 + 32 * wn + 8 * j : nt * 64 + 32 * wn + 8 * j + 8,
                                    ],
                                    D[wm, wn, i, j, :, :],
                                )


PROCS = [dist_register_tile, dist_mma_cta]

# Shapes (M, N, K) for the GPU tests: every proc's divisibility holds, non-square ones included.
SHAPES = [(128, 128, 16), (256, 384, 48), (384, 128, 160), (512, 256, 32)]


def reference(M: int, N: int, K: int, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> dict:
    return {"C": (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)}


def make_args(rng: np.random.Generator, n: int = 256, shape: tuple = None) -> dict:
    """M = N = K = n, or shape = (M, N, K). Entries are multiples of 1/8 in [-1, 1]: exact in tf32, so products
    and their sums are exact in f32 and both procs must match the float64 reference to the last bit."""
    M, N, K = shape or (n, n, n)
    A = (rng.integers(-8, 9, size=(M, K)) / 8).astype(np.float32)
    B = (rng.integers(-8, 9, size=(K, N)) / 8).astype(np.float32)
    return {"M": M, "N": N, "K": K, "A": A, "B": B, "C": np.zeros((M, N), dtype=np.float32)}


if __name__ == "__main__":
    import json

    import spork_lab as sl

    for p in PROCS:
        print(sl.sync_check(p, M=256, N=128, K=32))
        for alloc in sl.analyze(p).to_json()["distributed"]:
            print(json.dumps({k: alloc[k] for k in ("name", "shape", "shard_shape", "native_unit", "chain")}))
