"""Sum of every 256-element block: per-warp tree reductions in shared memory with warp-level Fences
(__syncwarp), then one thread adds the 8 warp sums after a CTA-level Fence (__syncthreads)."""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *


@proc
def block_reduce(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n / 256] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, n / 256):
            buf: f32[256] @ CudaSmemLinear
            for w in cuda_threads(0, 8, unit=cuda_warp):
                for lane in cuda_threads(0, 32):
                    buf[w * 32 + lane] = x[task * 256 + w * 32 + lane]
                Fence(cuda_in_order, cuda_in_order)
                for lane in cuda_threads(0, 16):
                    buf[w * 32 + lane] += buf[w * 32 + lane + 16]
                Fence(cuda_in_order, cuda_in_order)
                for lane in cuda_threads(0, 8):
                    buf[w * 32 + lane] += buf[w * 32 + lane + 8]
                Fence(cuda_in_order, cuda_in_order)
                for lane in cuda_threads(0, 4):
                    buf[w * 32 + lane] += buf[w * 32 + lane + 4]
                Fence(cuda_in_order, cuda_in_order)
                for lane in cuda_threads(0, 2):
                    buf[w * 32 + lane] += buf[w * 32 + lane + 2]
                Fence(cuda_in_order, cuda_in_order)
                for lane in cuda_threads(0, 1):
                    buf[w * 32 + lane] += buf[w * 32 + lane + 1]
            Fence(cuda_in_order, cuda_in_order)
            for t in cuda_threads(0, 1):
                acc: f32 @ CudaRmem
                acc = 0.0
                for w in seq(0, 8):
                    acc += buf[w * 32]
                y[task] = acc
            Fence(cuda_in_order, cuda_in_order)


PROCS = [block_reduce]


def reference(n: int, x: np.ndarray, y: np.ndarray) -> dict:
    return {"y": x.reshape(-1, 256).astype(np.float64).sum(axis=1).astype(np.float32)}


def make_args(rng: np.random.Generator, n: int = 256 * 1000) -> dict:
    return {"n": n, "x": rng.standard_normal(n, dtype=np.float32), "y": np.zeros(n // 256, dtype=np.float32)}
