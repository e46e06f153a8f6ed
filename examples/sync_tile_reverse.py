"""The tile reverse of LANGUAGE.md: correct with both fences, and what sync_check says without each.

Run: python examples/sync_tile_reverse.py
"""

from __future__ import annotations

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.sync.checker import sync_check


@proc
def reverse_tiles(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, n / 256):
            tile: f32[256] @ CudaSmemLinear
            for tid in cuda_threads(0, 256):
                tile[tid] = x[task * 256 + tid]
            Fence(cuda_in_order, cuda_in_order)  # without it: RAW on tile
            for tid in cuda_threads(0, 256):
                y[task * 256 + tid] = tile[255 - tid]
            Fence(cuda_in_order, cuda_in_order)  # without it: FREE (the next task reuses tile)


if __name__ == "__main__":
    print(sync_check(reverse_tiles, n=1024))
