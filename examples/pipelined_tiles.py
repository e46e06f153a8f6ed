"""Software pipelining with `pipeline_loop`: one loop, three pipelines, every barrier derived.

`tiles` copies each 128-float tile of src into shared memory and writes it back
reversed and doubled; the loop has no ring buffers and no Arrive/Await. The
op derives each pipeline from it:

- `tiles_commit`: cp.async into a ring of 3 slots on commit groups (wait_group
  N = producer head - consumer head); the Fences of the body order the threads
  of the CTA, since a commit group makes a thread's copies visible to it only;
- `tiles_mbarrier`: the same copies on an mbarrier ring: the Await gives the
  whole CTA the tile, the reverse barrier frees the slot (no Fences needed);
- `tiles_ws`: warp specialization: a producer warpgroup fills a ring of 4
  slots, a consumer warpgroup drains it, on an mbarrier with reverse barriers.

Run `python examples/pipelined_tiles.py` to print the pipelined procs and their checks.
"""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *
from spork_lab.scheduling import pipeline_loop, rename

warps = [CudaWarpConfig("producer", 4), CudaWarpConfig("consumer", 4)]


@proc
def tiles(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 1024 == 0
    with CudaDeviceFunction(blockDim=128, blocks_per_sm=4):
        for task in cuda_tasks(0, n / 1024):
            buf: f32[128] @ CudaSmemLinear
            for it in seq(0, 8):
                for t in cuda_threads(0, 128):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[t : t + 1], src[task * 1024 + it * 128 + t : task * 1024 + it * 128 + t + 1], size=4)
                Fence(cuda_in_order, cuda_in_order)  # everyone's copies, for the reversed read
                for t in cuda_threads(0, 128):
                    dst[task * 1024 + it * 128 + t] = 2.0 * buf[127 - t]
                Fence(cuda_in_order, cuda_in_order)  # the reads, before the slot is refilled
            Fence(cuda_in_order, cuda_in_order)  # the CTA's next task reuses buf


@proc
def tiles_one_collective(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 1024 == 0
    with CudaDeviceFunction(blockDim=128, blocks_per_sm=4):
        for task in cuda_tasks(0, n / 1024):
            buf: f32[128] @ CudaSmemLinear
            for it in seq(0, 8):
                for t in cuda_threads(0, 128):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[t : t + 1], src[task * 1024 + it * 128 + t : task * 1024 + it * 128 + t + 1], size=4)
                for t in cuda_threads(0, 128):
                    dst[task * 1024 + it * 128 + t] = 2.0 * buf[127 - t]
            Fence(cuda_in_order, cuda_in_order)


@proc
def tiles_warps(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 1024 == 0
    with CudaDeviceFunction(warp_config=warps, blocks_per_sm=2):
        for task in cuda_tasks(0, n / 1024):
            buf: f32[128] @ CudaSmemLinear
            for it in seq(0, 8):
                with CudaWarps(name="producer"):
                    for t in cuda_threads(0, 128):
                        buf[t] = src[task * 1024 + it * 128 + t]
                with CudaWarps(name="consumer"):
                    for t in cuda_threads(0, 128):
                        dst[task * 1024 + it * 128 + t] = 2.0 * buf[127 - t]
            Fence(cuda_in_order, cuda_in_order)


tiles_commit = rename(pipeline_loop(tiles, "it", [0, 2, 2, 2], [0], CudaCommitGroup), "tiles_commit")
tiles_mbarrier = rename(pipeline_loop(tiles_one_collective, "it", [0, 2], [0], CudaMbarrier), "tiles_mbarrier")
tiles_ws = rename(pipeline_loop(tiles_warps, "it", [0, 3], [], CudaMbarrier), "tiles_ws")

PROCS = [tiles_commit, tiles_mbarrier, tiles_ws]


def reference(n: int, src: np.ndarray, dst: np.ndarray) -> dict:
    return {"dst": 2 * src.reshape(-1, 128)[:, ::-1].reshape(-1)}


def make_args(rng: np.random.Generator, n: int = 1024 * 4000) -> dict:
    return {"n": n, "src": rng.standard_normal(n, dtype=np.float32), "dst": np.zeros(n, dtype=np.float32)}


if __name__ == "__main__":
    import spork_lab as sl

    for p in PROCS:
        print(p)
        print(sl.sync_check(p, n=2048))
