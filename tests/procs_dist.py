"""Procs for tests/test_dist.py: distributed memory (seed 000, rules 1-4).

The seed's own examples are in examples/dist_gemm.py (the 16 x 32 register
tile, mma accumulators at CTA scope) and examples/dist_cluster_smem.py.
Each proc the deduction rejects marks its faulty line with `# error here`.
"""

from __future__ import annotations

import exo

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *

# ---------------------------------------------------------------- accepted procs


# The seed's 16 x 32 tile with the distributed indices in the other order: n (the inner loop) first.
@proc
def permuted_chain(y: f32[128, 128] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=512):
        for task in cuda_tasks(0, 1):
            acc: f32[32, 16, 8, 4] @ CudaRmem
            for m in cuda_threads(0, 16, unit=32 * cuda_thread):
                for n in cuda_threads(0, 32):
                    for i in seq(0, 8):
                        for j in seq(0, 4):
                            acc[n, m, i, j] = 1.0
            for m in cuda_threads(0, 16, unit=32 * cuda_thread):
                for n in cuda_threads(0, 32):
                    for i in seq(0, 8):
                        for j in seq(0, 4):
                            y[8 * m + i, 4 * n + j] = acc[n, m, i, j]


# A warp-native fragment owned per warp, allocated by a warpgroup inside a CTA: the allocation's own
# iterator (wg) stays outside the chain, and the lanes of each warp use their warp's shard through a window.
@proc
def fragments_per_warpgroup(C: f32[2, 4, 16, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, 1):
            for wg in cuda_threads(0, 2, unit=cuda_warpgroup):
                D: f32[4, 16, 8] @ Sm80_RmemMatrixD
                for w in cuda_threads(0, 4, unit=cuda_warp):
                    Sm80_mma_zero_d_tf32(D[w, :, :])
                for w in cuda_threads(0, 4, unit=cuda_warp):
                    Sm80_mma_store_d_tf32(C[wg, w, :, :], D[w, :, :])


# Warp specialization: each named group uses its own shards of a CTA-scope fragment array; the tile
# thread count ignores CudaWarps, so both uses deduce w: 128 -> 32 with the same owner for each shard.
@proc
def shards_under_cuda_warps(C: f32[4, 16, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            D: f32[4, 16, 8] @ Sm80_RmemMatrixD
            for w in cuda_threads(0, 4, unit=cuda_warp):
                Sm80_mma_zero_d_tf32(D[w, :, :])
            with CudaWarps(0, 2):
                for w in cuda_threads(0, 2, unit=cuda_warp):
                    Sm80_mma_store_d_tf32(C[w, :, :], D[w, :, :])


# A no-op tiling operator (one warp out of a warp) ahead of the chain's end is consumed like any other.
@proc
def noop_link(y: f32[4, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            r: f32[4, 1, 32] @ CudaRmem
            for w in cuda_threads(0, 4, unit=cuda_warp):
                for one in cuda_threads(0, 1, unit=cuda_warp):
                    for t in cuda_threads(0, 32):
                        r[w, one, t] = 2.0
                        y[w, t] = r[w, one, t]


# A window of one shard, bound to a name first (WindowStmt), then used without distributed indices.
@proc
def window_of_a_shard(y: f32[128] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            r: f32[128, 2] @ CudaRmem
            for t in cuda_threads(0, 128):
                r[t, 0] = 1.0
                r[t, 1] = 2.0
                mine = r[t, :]
                y[t] = mine[0] + mine[1]


# ---------------------------------------------------------------- rejected procs: rule 1


@proc
def smem_per_warp(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            for w in cuda_threads(0, 4, unit=cuda_warp):
                tmp: f32[32] @ CudaSmemLinear  # error here
                for t in cuda_threads(0, 32):
                    tmp[t] = 0.0


@proc
def fragment_per_thread(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 32):
                D: f32[16, 8] @ Sm80_RmemMatrixD  # error here
                y[t] = 0.0


# ---------------------------------------------------------------- rejected procs: rule 2


@proc
def index_not_an_iterator(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            r: f32[32, 32] @ CudaRmem
            for t in cuda_threads(0, 32):
                for i in seq(0, 4):
                    r[i, t] = 0.0  # error here


@proc
def index_is_an_expression(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            r: f32[32] @ CudaRmem
            for t in cuda_threads(0, 32):
                r[31 - t] = 0.0  # error here


@proc
def iterator_outside_allocation(y: f32[4, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            for w in cuda_threads(0, 4, unit=cuda_warp):
                r: f32[4, 32] @ CudaRmem
                for t in cuda_threads(0, 32):
                    r[w, t] = 0.0  # error here


@proc
def chain_stops_short(y: f32[4] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            r: f32[4] @ CudaRmem
            for w in cuda_threads(0, 4, unit=cuda_warp):
                for t in cuda_threads(0, 1):
                    r[w] = 0.0  # error here


# r[t, t] would be legal: t alone completes the chain, and the second t is an ordinary index.
@proc
def iterator_twice(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            r: f32[4, 4, 32] @ CudaRmem
            for w in cuda_threads(0, 4, unit=cuda_warp):
                for t in cuda_threads(0, 32):
                    r[w, w, t] = 0.0  # error here


@proc
def skips_a_level(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            r: f32[2, 32] @ CudaRmem
            for h in cuda_threads(0, 2, unit=2 * cuda_warp):
                for w in cuda_threads(0, 2, unit=cuda_warp):
                    for t in cuda_threads(0, 32):
                        r[h, t] = 0.0  # error here


@exo.proc
def zero_all(x: f32[32, 4] @ CudaRmem):
    for i in seq(0, 32):
        for j in seq(0, 4):
            x[i, j] = 0.0


@exo.proc
def zero_row(x: [f32][1, 4] @ CudaRmem):
    for j in seq(0, 4):
        x[0, j] = 0.0


@proc
def slice_of_distributed_dim(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            r: f32[32, 4] @ CudaRmem
            for t in cuda_threads(0, 32):
                zero_row(r[t : t + 1, :])  # error here


@proc
def whole_buffer_argument(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            r: f32[32, 4] @ CudaRmem
            for t in cuda_threads(0, 1):
                zero_all(r)  # error here


# ---------------------------------------------------------------- rejected procs: rule 3


# Written as acc[ty, tx], read as acc[tx, ty]: thread (ty, tx) would read registers of thread (tx, ty).
@proc
def transposed_read(x: f32[256] @ CudaGmemLinear, y: f32[256] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, 1):
            acc: f32[16, 16] @ CudaRmem
            for ty in cuda_threads(0, 16, unit=16 * cuda_thread):
                for tx in cuda_threads(0, 16):
                    acc[ty, tx] = x[ty * 16 + tx]
            Fence(cuda_in_order, cuda_in_order)
            for ty in cuda_threads(0, 16, unit=16 * cuda_thread):
                for tx in cuda_threads(0, 16):
                    y[ty * 16 + tx] = acc[tx, ty]  # error here


# Same indices, but the second nest tiles the 128 threads 8 x 16 instead of 16 x 8: shard [1, 0] is thread 8
# in the first and thread 16 in the second.
@proc
def retiled(y: f32[128] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            acc: f32[16, 16] @ CudaRmem
            for a in cuda_threads(0, 16, unit=8 * cuda_thread):
                for b in cuda_threads(0, 8):
                    acc[a, b] = 1.0
            for a in cuda_threads(0, 8, unit=16 * cuda_thread):
                for b in cuda_threads(0, 16):
                    y[a * 16 + b] = acc[a, b]  # error here


@proc
def other_warps(C: f32[4, 16, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            D: f32[2, 16, 8] @ Sm80_RmemMatrixD
            with CudaWarps(0, 2):
                for w in cuda_threads(0, 2, unit=cuda_warp):
                    Sm80_mma_zero_d_tf32(D[w, :, :])
            with CudaWarps(2, 4):
                for w in cuda_threads(0, 2, unit=cuda_warp):
                    Sm80_mma_store_d_tf32(C[w, :, :], D[w, :, :])  # error here


@proc
def different_dim_count(y: f32[128] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            r: f32[4, 32, 32] @ CudaRmem
            for w in cuda_threads(0, 4, unit=cuda_warp):
                for t in cuda_threads(0, 32):
                    r[w, t, 0] = 1.0
            for t in cuda_threads(0, 4):
                y[t] = r[t, 0, 0]  # error here


# Each use alone gives each shard one owner, but together they give warp 1 both shard [0, 1] and shard [1, 0]:
# with distributed dims stripped, the two would share warp 1's registers.
@proc
def two_shards_one_owner(C: f32[2, 16, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            D: f32[2, 2, 16, 8] @ Sm80_RmemMatrixD
            with CudaWarps(0, 2):
                for a in cuda_threads(0, 1, unit=2 * cuda_warp):
                    for b in cuda_threads(0, 2, unit=cuda_warp):
                        Sm80_mma_zero_d_tf32(D[a, b, :, :])
            with CudaWarps(0, 2):
                for a in cuda_threads(0, 1, unit=2 * cuda_warp):
                    for b in cuda_threads(0, 2, unit=cuda_warp):
                        Sm80_mma_store_d_tf32(C[b, :, :], D[b, a, :, :])  # error here
