"""cp.async double buffer: each thread prefetches tile it + 1 while it copies tile it out.

The copies run in CudaAsync(Sm80_cp_async_instr); a CudaCommitGroup orders them:
Arrive commits the thread's cp.async group, Await(cg, ..., 1) waits for all but
the newest group (cp.async.wait_group 1). Each thread reads only what it
copied, since commit groups are per thread. Run: python examples/cp_async_double_buffer.py
"""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *
from spork_lab.sync.checker import sync_check


@proc
def cp_async_double_buffer(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 1024 == 0
    with CudaDeviceFunction(blockDim=128, blocks_per_sm=4):
        for task in cuda_tasks(0, n / 1024):
            buf: f32[2, 128] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for t in cuda_threads(0, 128):
                with CudaAsync(Sm80_cp_async_instr):
                    Sm80_cp_async_f32(buf[0, t : t + 1], src[task * 1024 + t : task * 1024 + t + 1], size=4)
            Arrive(Sm80_cp_async, 1) >> cg
            for it in seq(0, 7):
                for t in cuda_threads(0, 128):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(
                            buf[(it + 1) % 2, t : t + 1],
                            src[task * 1024 + (it + 1) * 128 + t : task * 1024 + (it + 1) * 128 + t + 1],
                            size=4,
                        )
                Arrive(Sm80_cp_async, 1) >> cg
                Await(cg, cuda_in_order, 1)
                for t in cuda_threads(0, 128):
                    dst[task * 1024 + it * 128 + t] = buf[it % 2, t]
            Await(cg, cuda_in_order, 0)
            for t in cuda_threads(0, 128):
                dst[task * 1024 + 896 + t] = buf[1, t]
            Fence(cuda_in_order, cuda_in_order)  # the CTA's next task reuses buf


PROCS = [cp_async_double_buffer]


def reference(n: int, src: np.ndarray, dst: np.ndarray) -> dict:
    return {"dst": src.copy()}


def make_args(rng: np.random.Generator, n: int = 1024 * 2000) -> dict:
    return {"n": n, "src": rng.standard_normal(n, dtype=np.float32), "dst": np.zeros(n, dtype=np.float32)}


if __name__ == "__main__":
    print(sync_check(cp_async_double_buffer, n=4096))
