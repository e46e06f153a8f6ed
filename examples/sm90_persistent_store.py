"""A persistent kernel written out by hand: CTAS CTAs each loop over their tiles, and each tile's TMA store
runs while the CTA computes the next tile.

The task loop has CTAS tasks, one per CTA, and each task's `seq` loop visits its tiles (tile = CTAS * it +
cta). Shared memory allocated in the task, outside that loop, lives from tile to tile, so the abstract machine
sees the reuse of a staging slot by a later tile as what it is: the same threads, in program order, writing
memory an asynchronous store of theirs may still be reading. Here the 128 threads write a 64 x 32 tile into
slot `it % 2`, fence the generic proxy before the async one, and one thread issues the TMA store and commits it
(`Arrive(tma_to_gmem_async, 1) >> cg`); `Await(cg, cuda_in_order, 1)` then waits only for the store before it,
whose slot the next tile overwrites, so a store is in flight while the next tile is computed. After the last
tile the task drains the group (`Await(cg, cuda_in_order, 0)`): shared memory may not outlive the task with a
store still reading it.

`sl.sync_check` checks the lag: `Await(cg, cuda_in_order, 2)` lets a tile overwrite a slot its predecessor's
store is still reading (a WAR at out_s), and dropping the drain leaves the last store reading freed memory.
"""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm90 import *

CTAS = 4  # the persistent grid: a constant, so that the tile index CTAS * it + cta is affine


@proc
def sm90_persistent_store(T: size, A: f32[64 * T, 32] @ CudaGmemLinear, C: f32[64 * T, 32] @ CudaGmemLinear):
    assert T % CTAS == 0
    C_tm = C[:, :] @ Sm90_tensorMap(0, 64, 32)
    with CudaDeviceFunction(blockDim=128):
        for cta in cuda_tasks(0, CTAS):
            out_s: f32[2, 64, 32] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for it in seq(0, T / CTAS):
                for t in cuda_threads(0, 128):
                    for j in seq(0, 16):
                        out_s[it % 2, t / 2, 16 * (t % 2) + j] = 2.0 * A[64 * (CTAS * it + cta) + t / 2, 16 * (t % 2) + j]
                Fence(cuda_in_order, tma_to_gmem_async)
                for t in cuda_threads(0, 1):
                    with CudaAsync(tma_to_gmem_async_instr):
                        Sm90_copy_tensor_to_gmem_linear_2f32(
                            C_tm[64 * (CTAS * it + cta) : 64 * (CTAS * it + cta) + 64, :], out_s[it % 2, :, :], box=(64, 32)
                        )
                    Arrive(tma_to_gmem_async, 1) >> cg
                    Await(cg, cuda_in_order, 1)
                Fence(cuda_in_order, cuda_in_order)
            for t in cuda_threads(0, 1):
                Await(cg, cuda_in_order, 0)
            Fence(cuda_in_order, cuda_in_order)


PROCS = [sm90_persistent_store]
ARCH = "sm_90a"  # TMA


def reference(T: int, A: np.ndarray, C: np.ndarray) -> dict:
    return {"C": 2 * A}


def make_args(rng: np.random.Generator, n: int = 40) -> dict:
    """T = n tiles (a multiple of CTAS): ten per CTA, so each staging slot is reused several times; C poisoned
    with NaN."""
    A = rng.standard_normal((64 * n, 32), dtype=np.float32)
    return {"T": n, "A": A, "C": np.full((64 * n, 32), np.nan, dtype=np.float32)}


if __name__ == "__main__":
    print(sm90_persistent_store)
