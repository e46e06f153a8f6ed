"""Procs whose collectives are not made of whole warps: lanes strided across warps (found by the session-16 audit).

Each passes `sl.sync_check`; the generated CUDA must still compute what the
program says. Two lowerings had assumed that a collective whose thread count
or pitch is a multiple of 32 runs in whole warps: the broadcast of a
warp-uniform iterator (`__shfl_sync` from lane 0) and the elected mbarrier
arrive (`__syncwarp`, then lane 0 arrives once for its warp).
"""

from __future__ import annotations

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.scheduling import mult_loops, rename

LANE = CollUnit((blockDim / 32, 32), (blockDim / 32, 1))  # lane l of every warp
LANES8 = CollUnit((blockDim / 32, 32), (4, 8))  # lanes 8 g .. 8 g + 7 of four warps: 32 threads
ROW8 = CollUnit((blockDim / 32, 32), (1, 8))  # 8 lanes of one warp
two_roles = [CudaWarpConfig("producer", 4), CudaWarpConfig("consumer", 4)]


# The warp loop `w` has pitch 32 but runs in lanes 16-31 only: lane 0 cannot broadcast its index.
@proc
def upper_lanes_copy(n: size, x: f32[n, 128] @ CudaGmemLinear, y: f32[n, 128] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n):
            for l in cuda_threads(0, 32, unit=LANE):
                if l >= 16:
                    for w in cuda_threads(0, 4):
                        y[task, 32 * w + l] = x[task, 32 * w + l]


# Each 32-thread producer group (lanes 8 g .. 8 g + 7 of four warps) arrives on its own mbarrier bar[g].
@proc
def strided_arrive_groups(n: size, x: f32[n, 4, 32] @ CudaGmemLinear, y: f32[n, 4, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=two_roles):
        for task in cuda_tasks(0, n):
            buf: f32[4, 32] @ CudaSmemLinear
            bar: barrier[4] @ CudaMbarrier
            with CudaWarps(name="producer"):
                for g in cuda_threads(0, 4, unit=LANES8):
                    for w in cuda_threads(0, 4, unit=ROW8):
                        for l in cuda_threads(0, 8):
                            buf[g, 8 * w + l] = x[task, g, 8 * w + l]
                    Arrive(cuda_in_order, 1) >> bar[g]
            with CudaWarps(name="consumer"):
                for g in cuda_threads(0, 4, unit=cuda_warp):
                    Await(bar[g], cuda_in_order, ~0)
                    for t in cuda_threads(0, 32):
                        y[task, g, t] = buf[g, t]
            Fence(cuda_in_order, cuda_in_order)


# One strided 32-thread producer group fills a two-slot ring that a consumer warp drains.
@proc
def strided_arrive_ring(n: size, x: f32[n, 8, 32] @ CudaGmemLinear, y: f32[n, 8, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=two_roles):
        for task in cuda_tasks(0, n):
            buf: f32[2, 32] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            for it in seq(0, 8):
                with CudaWarps(name="producer"):
                    for g in cuda_threads(0, 1, unit=LANES8):
                        ReverseAwait(bar, cuda_in_order, ~1)
                        for w in cuda_threads(0, 4, unit=ROW8):
                            for l in cuda_threads(0, 8):
                                buf[it % 2, 8 * w + l] = x[task, it, 8 * w + l]
                        Arrive(cuda_in_order, 1) >> bar
                with CudaWarps(name="consumer"):
                    Await(bar, cuda_in_order, ~0)
                    for t in cuda_threads(0, 32):
                        y[task, it, t] = buf[it % 2, t]
                    ReverseArrive(cuda_in_order, 1) >> bar
            Fence(cuda_in_order, cuda_in_order)


# y is written only through a window alias: its kernel parameter must not be const.
@proc
def written_through_gmem_alias(n: size, x: f32[n, 64] @ CudaGmemLinear, y: f32[n, 64] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, n):
            row = y[task, :]
            part = row[32:64]
            for t in cuda_threads(0, 32):
                row[31 - t] = x[task, t]
                part[t] = x[task, 32 + t]


# The control: a warp loop at CTA scope runs in whole warps, and its index is broadcast from lane 0.
@proc
def whole_warps_copy(n: size, x: f32[n, 128] @ CudaGmemLinear, y: f32[n, 128] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n):
            for w in cuda_threads(0, 4, unit=cuda_warp):
                for t in cuda_threads(0, 32):
                    y[task, 32 * w + t] = x[task, 32 * w + t]


LANE_PROCS = [whole_warps_copy, upper_lanes_copy, strided_arrive_groups, strided_arrive_ring, written_through_gmem_alias]


# Nested CudaWarps inside a named-warp block of 5 warps: the predicate's coordinate joined an empty list of offsets,
# `if ((exo_thread / 32 - ) < 1)`, which nvcc rejects (audit D, session 20).
@proc
def nested_warps_in_a_name(n: size, x: f32[n, 32] @ CudaGmemLinear, y: f32[n, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=[CudaWarpConfig("pa", 5), CudaWarpConfig("pb", 3)]):
        for task in cuda_tasks(0, n):
            with CudaWarps(name="pa"):
                with CudaWarps(0, 2):
                    with CudaWarps(0, 1):
                        for t in cuda_threads(0, 32):
                            y[task, t] = x[task, t]


LANE_PROCS.append(nested_warps_in_a_name)


# A warp loop and a lane loop made one thread loop by mult_loops: exo's product kept the warp loop's mode (128 warps;
# audit E, P6). Thread 32 w + t copies element 32 w + t, as in whole_warps_copy.
fused_warp_lanes = rename(mult_loops(whole_warps_copy, "w t", "wt"), "fused_warp_lanes")
LANE_PROCS.append(fused_warp_lanes)
