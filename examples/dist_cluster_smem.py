"""Cluster-scope shared memory in distributed memory: one shard per CTA (seed 000, "Distributed Memory").

A cluster of 2 CTAs reverses each 128-element half of a 256-element tile. The
tile is declared once, at cluster scope, with its logical size:
`tile: f32[2, 128] @ CudaSmemLinear`. Its native unit is the CTA, and every
use indexes it `tile[cta, ...]` with the iterator of a
`cuda_threads(0, 2, unit=cuda_cta_in_cluster)` loop, so the deduction makes
dimension 0 distributed (cta: 256 -> 128): each CTA declares one 128-float
shard in its own shared memory and only synchronizes its own threads. The
last Fence is per CTA too: the abstract machine knows each shard is reused
by its own CTA only, so no cluster barrier is needed before the next task.

Clusters need sm_90: run `python examples/dist_cluster_smem.py` to see
sync_check pass on it.
"""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *


@proc
def dist_cluster_smem(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(blockDim=128, clusterDim=2):
        for task in cuda_tasks(0, n / 256):
            tile: f32[2, 128] @ CudaSmemLinear
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                for t in cuda_threads(0, 128):
                    tile[cta, t] = x[task * 256 + cta * 128 + t]
                Fence(cuda_in_order, cuda_in_order)  # without it: RAW hazard on tile
                for t in cuda_threads(0, 128):
                    y[task * 256 + cta * 128 + t] = tile[cta, 127 - t]
                Fence(cuda_in_order, cuda_in_order)  # without it: FREE hazard (the CTA reuses its shard)


PROCS = [dist_cluster_smem]
ARCH = "sm_90a"  # clusters

SHAPES = [256, 256 * 3, 256 * 1000]


def reference(n: int, x: np.ndarray, y: np.ndarray) -> dict:
    return {"y": x.reshape(-1, 128)[:, ::-1].reshape(-1).copy()}


def make_args(rng: np.random.Generator, n: int = 256 * 1000) -> dict:
    return {"n": n, "x": rng.standard_normal(n, dtype=np.float32), "y": np.zeros(n, dtype=np.float32)}


if __name__ == "__main__":
    import spork_lab as sl

    print(sl.sync_check(dist_cluster_smem, n=1024))
