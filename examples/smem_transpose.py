"""Matrix transpose through shared memory, y = x^T: the classic bank-conflict lesson.

Each CTA moves one 32 x 32 tile: its 8 warps read rows of x (coalesced) into
`tile`, and after a Fence write rows of y, which are columns of `tile`. A warp
reading a column of a 32-float-wide tile hits one bank 32 times;
`sl.bank_conflicts` counts it, and one scheduling step, padding each row by one
float (`resize_dim`), spreads the column over all 32 banks:

    python examples/smem_transpose.py
"""

from __future__ import annotations

import numpy as np

import spork_lab as sl
from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.scheduling import rename, resize_dim


@proc
def transpose(M: size, N: size, x: f32[M, N] @ CudaGmemLinear, y: f32[N, M] @ CudaGmemLinear):
    assert M % 32 == 0
    assert N % 32 == 0
    with CudaDeviceFunction(blockDim=256):
        for bi in cuda_tasks(0, M / 32):
            for bj in cuda_tasks(0, N / 32):
                tile: f32[32, 32] @ CudaSmemLinear
                for w in cuda_threads(0, 8, unit=cuda_warp):
                    for lane in cuda_threads(0, 32):
                        for q in seq(0, 4):
                            tile[8 * q + w, lane] = x[32 * bi + 8 * q + w, 32 * bj + lane]
                Fence(cuda_in_order, cuda_in_order)
                for w in cuda_threads(0, 8, unit=cuda_warp):
                    for lane in cuda_threads(0, 32):
                        for q in seq(0, 4):
                            y[32 * bj + 8 * q + w, 32 * bi + lane] = tile[lane, 8 * q + w]
                Fence(cuda_in_order, cuda_in_order)  # the CTA's next task overwrites the tile


# Rows of 33 floats: element (r, c) is word 33 r + c, so a column's 32 words fall in 32 different banks.
transpose_padded = rename(resize_dim(transpose, "tile", 1, 33, 0), "transpose_padded")

PROCS = [transpose, transpose_padded]
SHAPES = [(64, 96), (96, 32)]


def reference(M: int, N: int, x: np.ndarray, y: np.ndarray) -> dict:
    """Expected outputs by argument name."""
    return {"y": x.T.copy()}


def make_args(rng: np.random.Generator, n: int = 0, shape: tuple = (1024, 2048)) -> dict:
    """Random x of shape (M, N), or M = N = n."""
    M, N = (n, n) if n else shape
    return {"M": M, "N": N, "x": rng.standard_normal((M, N), dtype=np.float32), "y": np.zeros((N, M), np.float32)}


if __name__ == "__main__":
    for p in PROCS:
        print(sl.sync_check(p, M=64, N=64))
        print(sl.bank_conflicts(p, M=64, N=64))
