"""An mbarrier ring per buffer slot, reused across tasks: CTAs run many tasks (persistent grid).

Slot q = it % 2 of `buf` has its own barrier position bar[q]. The producer warp
waits (ReverseAwait, lag 1) until the consumer released slot q two iterations
ago, fills it and arrives; the consumer warps await, scale it into dst and
reverse-arrive. Each CTA reuses the mbarriers for its next task, so this
exercises the per-thread phase counters and the drain at the end of the
barrier's scope. Run: python examples/mbarrier_ring_tasks.py
"""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.sync.checker import sync_check

warps = [CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 1)]


@proc
def mbarrier_ring_tasks(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(warp_config=warps, blocks_per_sm=2):
        for task in cuda_tasks(0, n / 256):
            buf: f32[2, 32] @ CudaSmemLinear
            bar: barrier[2] @ CudaMbarrier
            for it in seq(0, 8):
                with CudaWarps(name="producer"):
                    ReverseAwait(bar[it % 2], cuda_in_order, ~1)
                    for t in cuda_threads(0, 32):
                        buf[it % 2, t] = src[task * 256 + it * 32 + t]
                    Arrive(cuda_in_order, 1) >> bar[it % 2]
                with CudaWarps(name="consumer"):
                    Await(bar[it % 2], cuda_in_order, ~0)
                    for t in cuda_threads(0, 32):
                        dst[task * 256 + it * 32 + t] = 2.0 * buf[it % 2, t]
                    ReverseArrive(cuda_in_order, 1) >> bar[it % 2]
            Fence(cuda_in_order, cuda_in_order)  # the CTA's next task reuses buf


PROCS = [mbarrier_ring_tasks]


def reference(n: int, src: np.ndarray, dst: np.ndarray) -> dict:
    return {"dst": 2 * src}


def make_args(rng: np.random.Generator, n: int = 256 * 4000) -> dict:
    return {"n": n, "src": rng.standard_normal(n, dtype=np.float32), "dst": np.zeros(n, dtype=np.float32)}


if __name__ == "__main__":
    print(sync_check(mbarrier_ring_tasks, n=1024))
