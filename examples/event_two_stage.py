"""CudaEvent barriers in CPU code: two launches of y += x, then the CPU waits for the stream.

Await(launched[r], cuda_in_order, 0) orders later stream work after launch r
(cudaStreamWaitEvent); Await(done, cpu_in_order, 0) blocks the CPU until the
stream is done (cudaEventSynchronize).
Run: python examples/event_two_stage.py
"""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.sync.checker import sync_check


@proc
def event_two_stage(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    launched: barrier[2] @ CudaEvent
    done: barrier @ CudaEvent
    for r in seq(0, 2):
        with CudaDeviceFunction(blockDim=256):
            for task in cuda_tasks(0, n / 256):
                for t in cuda_threads(0, 256):
                    y[task * 256 + t] += x[task * 256 + t]
        Arrive(cuda_in_order, 1) >> launched[r]
        Await(launched[r], cuda_in_order, 0)
    Arrive(cuda_in_order, 1) >> done
    Await(done, cpu_in_order, 0)


PROCS = [event_two_stage]


def reference(n: int, x: np.ndarray, y: np.ndarray) -> dict:
    return {"y": y + 2 * x}


def make_args(rng: np.random.Generator, n: int = 1 << 20) -> dict:
    return {"n": n, "x": rng.standard_normal(n, dtype=np.float32), "y": rng.standard_normal(n, dtype=np.float32)}


if __name__ == "__main__":
    print(sync_check(event_two_stage, n=512))
