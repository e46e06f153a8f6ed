"""tf32 GEMM C = A @ B^T on one warpgroup per CTA: TMA loads into swizzled shared memory, wgmma m64n128k8.

The smallest Sm90a kernel with every piece of the big GEMM (examples/sm90_gemm.py)
but no pipelining: per K-block, one thread issues two TMA loads that complete on
the mbarrier `bar` (`... >> bar`; the Arrive expects their 24 KiB), the
warpgroup awaits them, fences its accumulator registers (`wgmma.fence`), runs
four wgmma on the tiles and waits for them (a wgmma commit group) before the CTA
barrier lets the next loads overwrite the tiles. A and B are row-major with K
contiguous (B is N x K: wgmma reads tf32 operands K-major only).

`sl.sync_check` checks it: the loads' data reaches the wgmma only through `bar`
(with the bytes its Arrive expects), and the fence after the wait orders the
wgmma reads before the next loads (its second sync-tl reaches the async proxy).
"""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm90 import *


@proc
def sm90_tma_wgmma(
    M: size, N: size, K: size, A: f32[M, K] @ CudaGmemLinear, B: f32[N, K] @ CudaGmemLinear, C: f32[M, N] @ CudaGmemLinear
):
    assert M % 64 == 0
    assert N % 128 == 0
    assert K % 32 == 0
    A_tm = A[:, :] @ Sm90_tensorMap(128, 64, 32)
    B_tm = B[:, :] @ Sm90_tensorMap(128, 128, 32)
    with CudaDeviceFunction(blockDim=128):
        for mt in cuda_tasks(0, M / 64):
            for nt in cuda_tasks(0, N / 128):
                A_s: f32[64, 32] @ Sm90_SmemSwizzled(128)
                B_s: f32[128, 32] @ Sm90_SmemSwizzled(128)
                D: f32[64, 128] @ Sm90_RmemMatrixD
                bar: barrier @ CudaMbarrier
                cg: barrier @ CudaCommitGroup
                Sm90_zero_scale_d_f32(D, N=128)
                for k in seq(0, K / 32):
                    for t in cuda_threads(0, 1):
                        with CudaAsync(tma_to_smem_async_instr):
                            Sm90_copy_tensor_to_smem_swizzled_2f32(
                                A_s, A_tm[64 * mt : 64 * mt + 64, 32 * k : 32 * k + 32], box=(64, 32)
                            ) >> bar
                            Sm90_copy_tensor_to_smem_swizzled_2f32(
                                B_s, B_tm[128 * nt : 128 * nt + 128, 32 * k : 32 * k + 32], box=(128, 32)
                            ) >> bar
                        Arrive(tma_to_smem_async, 1) >> bar
                    Await(bar, wgmma_async_smem, ~0)
                    Fence(wgmma_fence_1, wgmma_fence_2)
                    with CudaAsync(wgmma_async_instr):
                        for kk in seq(0, 4):
                            Sm90_mma_async_tf32(D, A_s[:, 8 * kk : 8 * kk + 8], B_s[:, 8 * kk : 8 * kk + 8], N=128)
                    Arrive(wgmma_async, 1) >> cg
                    Await(cg, cuda_in_order, 0)
                    Fence(cuda_in_order, cuda_generic_and_async_proxy)  # the next loads (async proxy) overwrite A_s, B_s
                Sm90_mma_store_d_row_major_f32(C[64 * mt : 64 * mt + 64, 128 * nt : 128 * nt + 128], D, N=128)


PROCS = [sm90_tma_wgmma]
ARCH = "sm_90a"  # TMA and wgmma
TOLERANCE = dict(rtol=2e-2, atol=2e-2)  # wgmma reads tf32 (10 mantissa bits, truncated) of f32 inputs


def reference(M: int, N: int, K: int, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> dict:
    return {"C": (A.astype(np.float64) @ B.astype(np.float64).T).astype(np.float32)}


def make_args(rng: np.random.Generator, n: int = 256) -> dict:
    """M = n, N = n + 128, K = n / 2 (n a multiple of 128): not square, so a swapped index shows."""
    M, N, K = n, n + 128, n // 2
    scale = np.float32(K**-0.25)  # C of unit variance at every K: TOLERANCE's atol stays a fixed number of sigmas
    A = rng.standard_normal((M, K), dtype=np.float32) * scale
    B = rng.standard_normal((N, K), dtype=np.float32) * scale
    return {"M": M, "N": N, "K": K, "A": A, "B": B, "C": np.full((M, N), np.nan, dtype=np.float32)}


if __name__ == "__main__":
    import spork_lab as sl

    print(sm90_tma_wgmma)
    print(sl.compile_procs_to_strings(PROCS, "sm90_tma_wgmma", "sm_90a")[2][-3000:])
