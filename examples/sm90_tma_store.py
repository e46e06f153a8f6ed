"""TMA stores and reduce-adds: C = A and R += A, one 64 x 32 tile per task through linear shared memory.

One thread copies the tile of A into shared memory with ordinary stores, fences
the generic proxy before the async one (`Fence(cuda_in_order, tma_to_gmem_async)`
lowers to `fence.proxy.async`), and issues a TMA store to C and a TMA
reduce-add to R (`cp.async.bulk.tensor` / `cp.reduce.async.bulk.tensor .add`,
tensor maps with swizzle 0 for a linear tile); a bulk commit group
(`Arrive(tma_to_gmem_async, 1) >> cg`, `Await(cg, cuda_in_order, 0)`) keeps the
next task from overwriting the tile before both have read it.

`sl.sync_check` checks it: the stores complete through the bulk commit group, and
reusing the tile before its Await is a hazard.
"""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm90 import *


@proc
def sm90_tma_store(
    M: size, N: size, A: f32[M, N] @ CudaGmemLinear, C: f32[M, N] @ CudaGmemLinear, R: f32[M, N] @ CudaGmemLinear
):
    assert M % 64 == 0
    assert N % 32 == 0
    C_tm = C[:, :] @ Sm90_tensorMap(0, 64, 32)
    R_tm = R[:, :] @ Sm90_tensorMap(0, 64, 32)
    with CudaDeviceFunction(blockDim=128):
        for mt in cuda_tasks(0, M / 64):
            for nt in cuda_tasks(0, N / 32):
                t_s: f32[64, 32] @ CudaSmemLinear
                cg: barrier @ CudaCommitGroup
                for t in cuda_threads(0, 1):
                    for i in seq(0, 64):
                        for j in seq(0, 32):
                            t_s[i, j] = A[64 * mt + i, 32 * nt + j]
                    Fence(cuda_in_order, tma_to_gmem_async)
                    with CudaAsync(tma_to_gmem_async_instr):
                        Sm90_copy_tensor_to_gmem_linear_2f32(
                            C_tm[64 * mt : 64 * mt + 64, 32 * nt : 32 * nt + 32], t_s, box=(64, 32)
                        )
                        Sm90_reduce_tensor_to_gmem_linear_2f32(
                            R_tm[64 * mt : 64 * mt + 64, 32 * nt : 32 * nt + 32], t_s, box=(64, 32)
                        )
                    Arrive(tma_to_gmem_async, 1) >> cg
                    Await(cg, cuda_in_order, 0)
                Fence(cuda_in_order, cuda_in_order)


PROCS = [sm90_tma_store]
ARCH = "sm_90a"  # TMA


def reference(M: int, N: int, A: np.ndarray, C: np.ndarray, R: np.ndarray) -> dict:
    return {"C": A.copy(), "R": R + A}


def make_args(rng: np.random.Generator, n: int = 256) -> dict:
    """M = n, N = n + 32 (n a multiple of 64): not square, so a swapped index shows; C poisoned with NaN."""
    M, N = n, n + 32
    A = rng.standard_normal((M, N), dtype=np.float32)
    R = rng.standard_normal((M, N), dtype=np.float32)
    return {"M": M, "N": N, "A": A, "C": np.full((M, N), np.nan, dtype=np.float32), "R": R}


if __name__ == "__main__":
    print(sm90_tma_store)
