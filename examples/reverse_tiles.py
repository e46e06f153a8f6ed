"""Reverse every 256-element tile through shared memory, with the two Fences LANGUAGE.md explains.

Run `python examples/reverse_tiles.py` to see sync_check pass on it.
"""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *


@proc
def reverse_tiles(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, n / 256):
            tile: f32[256] @ CudaSmemLinear
            for tid in cuda_threads(0, 256):
                tile[tid] = x[task * 256 + tid]
            Fence(cuda_in_order, cuda_in_order)  # without it: RAW hazard on tile
            for tid in cuda_threads(0, 256):
                y[task * 256 + tid] = tile[255 - tid]
            Fence(cuda_in_order, cuda_in_order)  # without it: FREE hazard (the CTA reuses tile for its next task)


PROCS = [reverse_tiles]


def reference(n: int, x: np.ndarray, y: np.ndarray) -> dict:
    return {"y": x.reshape(-1, 256)[:, ::-1].reshape(-1).copy()}


def make_args(rng: np.random.Generator, n: int = 256 * 1000) -> dict:
    return {"n": n, "x": rng.standard_normal(n, dtype=np.float32), "y": np.zeros(n, dtype=np.float32)}


if __name__ == "__main__":
    import spork_lab as sl

    print(sl.sync_check(reverse_tiles, n=1024))
