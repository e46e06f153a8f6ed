"""tf32 C = A @ B^T with wgmma's A operand in registers: one warpgroup per 64 x 64 tile of C.

Per K-block of 8, the warpgroup copies A's 64 x 8 slice into linear shared memory
(ordinary loads and stores), loads it into the register fragment
(`Sm90_mma_load_a_tf32`, `Sm90_RmemMatrixA`), and runs one wgmma with B's 64 x 8
slice from swizzled shared memory, brought by TMA (64 x 32 per four K-blocks).

`sl.sync_check` checks it: the fence after each slice orders the warpgroup's reads before the next
slice's stores and TMA load (its second sync-tl reaches the async proxy).
"""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm90 import *


@proc
def sm90_rmem_a(
    M: size, N: size, K: size, A: f32[M, K] @ CudaGmemLinear, B: f32[N, K] @ CudaGmemLinear, C: f32[M, N] @ CudaGmemLinear
):
    assert M % 64 == 0
    assert N % 64 == 0
    assert K % 32 == 0
    B_tm = B[:, :] @ Sm90_tensorMap(128, 64, 32)
    with CudaDeviceFunction(blockDim=128):
        for mt in cuda_tasks(0, M / 64):
            for nt in cuda_tasks(0, N / 64):
                A_s: f32[64, 8] @ CudaSmemLinear
                B_s: f32[64, 32] @ Sm90_SmemSwizzled(128)
                D: f32[64, 64] @ Sm90_RmemMatrixD
                bar: barrier @ CudaMbarrier
                cg: barrier @ CudaCommitGroup
                Sm90_zero_scale_d_f32(D, N=64)
                for k in seq(0, K / 32):
                    for t in cuda_threads(0, 1):
                        with CudaAsync(tma_to_smem_async_instr):
                            Sm90_copy_tensor_to_smem_swizzled_2f32(
                                B_s, B_tm[64 * nt : 64 * nt + 64, 32 * k : 32 * k + 32], box=(64, 32)
                            ) >> bar
                        Arrive(tma_to_smem_async, 1) >> bar
                    Await(bar, wgmma_async_smem, ~0)
                    for kk in seq(0, 4):
                        for r in cuda_threads(0, 64, unit=2 * cuda_thread):
                            for c in cuda_threads(0, 2):
                                for q in seq(0, 4):
                                    A_s[r, 4 * c + q] = A[64 * mt + r, 32 * k + 8 * kk + 4 * c + q]
                        Fence(cuda_in_order, cuda_in_order)
                        A_r: f32[64, 8] @ Sm90_RmemMatrixA
                        Sm90_mma_load_a_tf32(A_r, A_s)
                        Fence(wgmma_fence_1, wgmma_fence_2)
                        with CudaAsync(wgmma_async_instr):
                            Sm90_mma_async_tf32(D, A_r, B_s[:, 8 * kk : 8 * kk + 8], N=64, rmem_a=True)
                        Arrive(wgmma_async, 1) >> cg
                        Await(cg, cuda_in_order, 0)
                        Fence(cuda_in_order, cuda_generic_and_async_proxy)  # the next slice overwrites A_s (and, at kk = 3, B_s: TMA)
                Sm90_mma_store_d_row_major_f32(C[64 * mt : 64 * mt + 64, 64 * nt : 64 * nt + 64], D, N=64)


PROCS = [sm90_rmem_a]
ARCH = "sm_90a"
TOLERANCE = dict(rtol=2e-2, atol=2e-2)  # wgmma reads tf32


def reference(M: int, N: int, K: int, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> dict:
    return {"C": (A.astype(np.float64) @ B.astype(np.float64).T).astype(np.float32)}


def make_args(rng: np.random.Generator, n: int = 256) -> dict:
    """M = n, N = n + 64, K = n / 2 (n a multiple of 64)."""
    M, N, K = n, n + 64, n // 2
    scale = np.float32(K**-0.25)  # C of unit variance at every K: TOLERANCE's atol stays a fixed number of sigmas
    A = rng.standard_normal((M, K), dtype=np.float32) * scale
    B = rng.standard_normal((N, K), dtype=np.float32) * scale
    return {"M": M, "N": N, "K": K, "A": A, "B": B, "C": np.full((M, N), np.nan, dtype=np.float32)}
