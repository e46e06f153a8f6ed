"""Vector add, y += x: the smallest device function (one element per thread per task).

`vec_add` is LANGUAGE.md's example; `vec_add_wide` is the benchmarked variant:
8 CTAs per SM and 4 coalesced elements per thread per task.
"""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *


@proc
def vec_add(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 128):
            for tid in cuda_threads(0, 128, unit=cuda_thread):
                y[task * 128 + tid] += x[task * 128 + tid]


@proc
def vec_add_wide(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 1024 == 0
    with CudaDeviceFunction(blockDim=256, blocks_per_sm=8):
        for task in cuda_tasks(0, n / 1024):
            for tid in cuda_threads(0, 256, unit=cuda_thread):
                for k in seq(0, 4):
                    y[task * 1024 + k * 256 + tid] += x[task * 1024 + k * 256 + tid]


PROCS = [vec_add, vec_add_wide]


def reference(n: int, x: np.ndarray, y: np.ndarray) -> dict:
    """Expected outputs by argument name."""
    return {"y": y + x}


def make_args(rng: np.random.Generator, n: int = 1 << 20) -> dict:
    return {"n": n, "x": rng.standard_normal(n, dtype=np.float32), "y": rng.standard_normal(n, dtype=np.float32)}
