"""Warp-specialized producer/consumer ring on an mbarrier with reverse barriers, checked by sync_check.

The producer warp fills buf[it % 2] and arrives; the consumer warp awaits, copies
buf to dst and reverse-arrives; the producer's ReverseAwait (lag 1) keeps it from
overwriting a slot the consumer still reads. Run: python examples/sync_ring.py
"""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.sync.checker import sync_check

warps = [CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 1)]


@proc
def ring_copy(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 64 == 0
    with CudaDeviceFunction(warp_config=warps):
        for task in cuda_tasks(0, 1):
            buf: f32[2, 32] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            for it in seq(0, n / 32):
                with CudaWarps(name="producer"):
                    ReverseAwait(bar, cuda_in_order, ~1)
                    for t in cuda_threads(0, 32):
                        buf[it % 2, t] = src[it * 32 + t]
                    Arrive(cuda_in_order, 1) >> bar
                with CudaWarps(name="consumer"):
                    Await(bar, cuda_in_order, ~0)
                    for t in cuda_threads(0, 32):
                        dst[it * 32 + t] = buf[it % 2, t]
                    ReverseArrive(cuda_in_order, 1) >> bar
            Fence(cuda_in_order, cuda_in_order)  # the CTA reuses buf after the task


PROCS = [ring_copy]


def reference(n: int, src: np.ndarray, dst: np.ndarray) -> dict:
    return {"dst": src.copy()}


def make_args(rng: np.random.Generator, n: int = 64 * 4096) -> dict:
    return {"n": n, "src": rng.standard_normal(n, dtype=np.float32), "dst": np.zeros(n, dtype=np.float32)}


if __name__ == "__main__":
    report = sync_check(ring_copy, n=256)
    print(report)
    for e in report.barrier_timeline[:6]:
        print(f"  {e.queue:8} {e.kind:13} #{e.index} slot {e.slot} parity {e.parity} threads {e.threads} {e.iters}")
