"""Procs for the sync tests: each correct program, and variants with one synchronization removed.

Line numbers matter: tests look statements up by their text with `line_of`.
"""

from __future__ import annotations

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *


# ---- tile reverse (LANGUAGE.md) ----


@proc
def reverse_tiles(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, n / 256):
            tile: f32[256] @ CudaSmemLinear
            for tid in cuda_threads(0, 256):
                tile[tid] = x[task * 256 + tid]
            Fence(cuda_in_order, cuda_in_order)
            for tid in cuda_threads(0, 256):
                y[task * 256 + tid] = tile[255 - tid]
            Fence(cuda_in_order, cuda_in_order)


@proc
def reverse_tiles_no_fence1(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, n / 256):
            tile: f32[256] @ CudaSmemLinear
            for tid in cuda_threads(0, 256):
                tile[tid] = x[task * 256 + tid]  # nofence1: write
            for tid in cuda_threads(0, 256):
                y[task * 256 + tid] = tile[255 - tid]  # nofence1: read
            Fence(cuda_in_order, cuda_in_order)


@proc
def reverse_tiles_no_fence2(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, n / 256):
            tile: f32[256] @ CudaSmemLinear  # nofence2: alloc
            for tid in cuda_threads(0, 256):
                tile[tid] = x[task * 256 + tid]
            Fence(cuda_in_order, cuda_in_order)
            for tid in cuda_threads(0, 256):
                y[task * 256 + tid] = tile[255 - tid]  # nofence2: read


# A persistent kernel whose tile lives outside the task loop: the reuse is a WAR.
@proc
def reverse_tiles_shared_tile(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, 1):
            tile: f32[256] @ CudaSmemLinear
            for it in seq(0, n / 256):
                for tid in cuda_threads(0, 256):
                    tile[tid] = x[it * 256 + tid]  # shared: write
                Fence(cuda_in_order, cuda_in_order)
                for tid in cuda_threads(0, 256):
                    y[it * 256 + tid] = tile[255 - tid]  # shared: read
            Fence(cuda_in_order, cuda_in_order)


# ---- cp.async double buffer on commit groups ----


@proc
def cp_async_double_buffer(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    assert n >= 256
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            buf: f32[2, 128] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for t in cuda_threads(0, 128):
                with CudaAsync(Sm80_cp_async_instr):
                    Sm80_cp_async_f32(buf[0, t : t + 1], src[t : t + 1], size=4)
            Arrive(Sm80_cp_async, 1) >> cg
            for it in seq(0, n / 128 - 1):
                for t in cuda_threads(0, 128):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[(it + 1) % 2, t : t + 1], src[(it + 1) * 128 + t : (it + 1) * 128 + t + 1], size=4)
                Arrive(Sm80_cp_async, 1) >> cg
                Await(cg, cuda_in_order, 1)
                for t in cuda_threads(0, 128):
                    dst[it * 128 + t] = buf[it % 2, t]  # db: consume
            Await(cg, cuda_in_order, 0)
            for t in cuda_threads(0, 128):
                dst[n - 128 + t] = buf[(n / 128 - 1) % 2, t]
            Fence(cuda_in_order, cuda_in_order)


@proc
def cp_async_double_buffer_no_await(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    assert n >= 256
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            buf: f32[2, 128] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for t in cuda_threads(0, 128):
                with CudaAsync(Sm80_cp_async_instr):
                    Sm80_cp_async_f32(buf[0, t : t + 1], src[t : t + 1], size=4)  # db: copy0
            Arrive(Sm80_cp_async, 1) >> cg
            for it in seq(0, n / 128 - 1):
                for t in cuda_threads(0, 128):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[(it + 1) % 2, t : t + 1], src[(it + 1) * 128 + t : (it + 1) * 128 + t + 1], size=4)
                Arrive(Sm80_cp_async, 1) >> cg
                for t in cuda_threads(0, 128):
                    dst[it * 128 + t] = buf[it % 2, t]  # db: consume
            Await(cg, cuda_in_order, 0)
            for t in cuda_threads(0, 128):
                dst[n - 128 + t] = buf[(n / 128 - 1) % 2, t]
            Fence(cuda_in_order, cuda_in_order)


# Each thread reads what another thread copied: the commit group is per thread, so it needs a fence.
@proc
def cp_async_cross_thread(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n == 128
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            buf: f32[128] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for t in cuda_threads(0, 128):
                with CudaAsync(Sm80_cp_async_instr):
                    Sm80_cp_async_f32(buf[t : t + 1], src[t : t + 1], size=4)  # cross: copy
            Arrive(Sm80_cp_async, 1) >> cg
            Await(cg, cuda_in_order, 0)
            for t in cuda_threads(0, 128):
                dst[t] = buf[127 - t]  # cross: read
            Fence(cuda_in_order, cuda_in_order)


# ---- warp-specialized ring on an mbarrier with reverse barriers ----

ring_warps = [CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 1)]


@proc
def ring_copy(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 64 == 0
    with CudaDeviceFunction(warp_config=ring_warps):
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
            Fence(cuda_in_order, cuda_in_order)


@proc
def ring_copy_no_forward(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 64 == 0
    with CudaDeviceFunction(warp_config=ring_warps):
        for task in cuda_tasks(0, 1):
            buf: f32[2, 32] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            for it in seq(0, n / 32):
                with CudaWarps(name="producer"):
                    ReverseAwait(bar, cuda_in_order, ~1)
                    for t in cuda_threads(0, 32):
                        buf[it % 2, t] = src[it * 32 + t]  # ring: produce
                with CudaWarps(name="consumer"):
                    for t in cuda_threads(0, 32):
                        dst[it * 32 + t] = buf[it % 2, t]  # ring: consume
                    ReverseArrive(cuda_in_order, 1) >> bar
            Fence(cuda_in_order, cuda_in_order)


@proc
def ring_copy_no_reverse(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 64 == 0
    with CudaDeviceFunction(warp_config=ring_warps):
        for task in cuda_tasks(0, 1):
            buf: f32[2, 32] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            for it in seq(0, n / 32):
                with CudaWarps(name="producer"):
                    for t in cuda_threads(0, 32):
                        buf[it % 2, t] = src[it * 32 + t]  # ring: produce
                    Arrive(cuda_in_order, 1) >> bar
                with CudaWarps(name="consumer"):
                    Await(bar, cuda_in_order, ~0)
                    for t in cuda_threads(0, 32):
                        dst[it * 32 + t] = buf[it % 2, t]  # ring: consume
            Fence(cuda_in_order, cuda_in_order)


@proc
def ring_copy_lag3(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 64 == 0
    with CudaDeviceFunction(warp_config=ring_warps):
        for task in cuda_tasks(0, 1):
            buf: f32[2, 32] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            for it in seq(0, n / 32):
                with CudaWarps(name="producer"):
                    ReverseAwait(bar, cuda_in_order, ~3)
                    for t in cuda_threads(0, 32):
                        buf[it % 2, t] = src[it * 32 + t]  # ring: produce
                    Arrive(cuda_in_order, 1) >> bar
                with CudaWarps(name="consumer"):
                    Await(bar, cuda_in_order, ~0)
                    for t in cuda_threads(0, 32):
                        dst[it * 32 + t] = buf[it % 2, t]  # ring: consume
                    ReverseArrive(cuda_in_order, 1) >> bar
            Fence(cuda_in_order, cuda_in_order)


@proc
def ring_copy_deadlock(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 64 == 0
    with CudaDeviceFunction(warp_config=ring_warps):
        for task in cuda_tasks(0, 1):
            buf: f32[2, 32] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            for it in seq(0, n / 32):
                with CudaWarps(name="consumer"):
                    Await(bar, cuda_in_order, ~0)  # ring: early await
                    for t in cuda_threads(0, 32):
                        dst[it * 32 + t] = buf[it % 2, t]
                    ReverseArrive(cuda_in_order, 1) >> bar
                with CudaWarps(name="producer"):
                    ReverseAwait(bar, cuda_in_order, ~1)
                    for t in cuda_threads(0, 32):
                        buf[it % 2, t] = src[it * 32 + t]
                    Arrive(cuda_in_order, 1) >> bar
            Fence(cuda_in_order, cuda_in_order)


# ---- warp-level reduction, fenced per warp ----


@proc
def warp_sums(x: f32[256] @ CudaGmemLinear, y: f32[8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, 1):
            vals: f32[8, 32] @ CudaSmemLinear
            for w in cuda_threads(0, 8, unit=cuda_warp):
                for t in cuda_threads(0, 32):
                    vals[w, t] = x[w * 32 + t]
                Fence(cuda_in_order, cuda_in_order)
                for t in cuda_threads(0, 1):
                    acc: f32 @ CudaRmem
                    acc = 0.0
                    for i in seq(0, 32):
                        acc += vals[w, i]
                    y[w] = acc
            Fence(cuda_in_order, cuda_in_order)


@proc
def warp_sums_no_fence(x: f32[256] @ CudaGmemLinear, y: f32[8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, 1):
            vals: f32[8, 32] @ CudaSmemLinear
            for w in cuda_threads(0, 8, unit=cuda_warp):
                for t in cuda_threads(0, 32):
                    vals[w, t] = x[w * 32 + t]  # warp: write
                for t in cuda_threads(0, 1):
                    acc: f32 @ CudaRmem
                    acc = 0.0
                    for i in seq(0, 32):
                        acc += vals[w, i]  # warp: read
                    y[w] = acc
            Fence(cuda_in_order, cuda_in_order)


# ---- barrier misuse (static errors) ----


@proc
def err_missing_await(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            cg: barrier @ CudaCommitGroup
            Arrive(Sm80_cp_async, 1) >> cg  # err: missing await


@proc
def err_missing_arrive(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            bar: barrier @ CudaMbarrier
            Await(bar, cuda_in_order, ~0)  # err: missing arrive


@proc
def err_mixed_tls(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            bar: barrier @ CudaMbarrier
            Arrive(cuda_in_order, 1) >> bar
            Await(bar, cuda_in_order, ~0)
            Arrive(Sm80_cp_async, 1) >> bar  # err: mixed
            Await(bar, cuda_in_order, ~0)


@proc
def err_commit_group_in_order(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            cg: barrier @ CudaCommitGroup
            Arrive(cuda_in_order, 1) >> cg  # err: mechanism
            Await(cg, cuda_in_order, 0)


@proc
def err_mbarrier_wait_group(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            bar: barrier @ CudaMbarrier
            Arrive(cuda_in_order, 1) >> bar
            Await(bar, cuda_in_order, 0)  # err: mbarrier N


@proc
def err_commit_group_units(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            cg: barrier @ CudaCommitGroup
            Arrive(Sm80_cp_async, 1) >> cg
            for t in cuda_threads(0, 32):
                Await(cg, cuda_in_order, 0)  # err: unit


@proc
def err_mbarrier_other_threads(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, 1):
            bar: barrier @ CudaMbarrier
            for w in cuda_threads(0, 2, unit=cuda_warp):
                Arrive(cuda_in_order, 1) >> bar  # err: other threads
            Await(bar, cuda_in_order, ~0)
            Await(bar, cuda_in_order, ~0)
