"""Warp-specialized copy with named warps: "producer" warps fill shared memory with cp.async,
"consumer" warps write it back out; CTA-level Fences order the two (cp.async.wait_all + barrier)."""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *

warps = [CudaWarpConfig("producer", 2), CudaWarpConfig("consumer", 4)]


@proc
def warp_specialized_copy(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 512 == 0
    with CudaDeviceFunction(warp_config=warps):
        for task in cuda_tasks(0, n / 512):
            buf: f32[512] @ CudaSmemLinear
            with CudaWarps(name="producer"):
                for t in cuda_threads(0, 64):
                    with CudaAsync(Sm80_cp_async_instr):
                        for k in seq(0, 2):
                            Sm80_cp_async_f32(
                                buf[k * 256 + 4 * t : k * 256 + 4 * t + 4],
                                src[task * 512 + k * 256 + 4 * t : task * 512 + k * 256 + 4 * t + 4],
                                size=16,
                            )
            Fence(Sm80_generic, cuda_in_order)
            with CudaWarps(name="consumer"):
                for t in cuda_threads(0, 128):
                    for k in seq(0, 4):
                        dst[task * 512 + k * 128 + t] = buf[k * 128 + t]
            Fence(cuda_in_order, Sm80_generic)


PROCS = [warp_specialized_copy]


def reference(n: int, src: np.ndarray, dst: np.ndarray) -> dict:
    return {"dst": src.copy()}


def make_args(rng: np.random.Generator, n: int = 512 * 1000) -> dict:
    return {"n": n, "src": rng.standard_normal(n, dtype=np.float32), "dst": np.zeros(n, dtype=np.float32)}
