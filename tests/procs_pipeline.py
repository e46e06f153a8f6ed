"""Loops before software pipelining (tests/test_pipeline.py): no ring dimensions, no Arrive/Await yet.

Each consumer reads what other threads wrote, so the derived barriers have
cross-thread work to do; Fences that order threads of one collective among
themselves are statements of the body, with stages like the others.
"""

from __future__ import annotations

import sys
from pathlib import Path

from spork_lab import instr, proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
# mbarrier ring, one collective: cp.async tiles awaited by the whole CTA, read reversed; many tasks.
from pipelined_tiles import tiles_one_collective as mbar_tiles  # noqa: E402,F401

warps = [CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 1)]


# Commit groups: cp.async tiles, read reversed (another thread's element), summed per thread.
# Body: [copy, Fence (others' copies visible), consume, Fence (reads done before the slot is refilled)].
@proc
def cp_async_tiles(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear, sums: f32[128] @ CudaGmemLinear):
    assert n % 1024 == 0
    assert n >= 1024
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            buf: f32[128] @ CudaSmemLinear
            acc: f32[128] @ CudaSmemLinear
            for t in cuda_threads(0, 128):
                acc[t] = 0.0
            for it in seq(0, n / 128):
                for t in cuda_threads(0, 128):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[t : t + 1], src[it * 128 + t : it * 128 + t + 1], size=4)
                Fence(cuda_in_order, cuda_in_order)
                for t in cuda_threads(0, 128):
                    dst[it * 128 + t] = buf[127 - t]
                    acc[t] += buf[127 - t]
                Fence(cuda_in_order, cuda_in_order)
            for t in cuda_threads(0, 128):
                sums[t] = acc[t]
            Fence(cuda_in_order, cuda_in_order)


# mbarrier ring, warp-specialized: the producer warp fills a tile, the consumer warp reads it reversed.
@proc
def ws_tiles(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 64 == 0
    with CudaDeviceFunction(warp_config=warps):
        for task in cuda_tasks(0, 1):
            buf: f32[32] @ CudaSmemLinear
            for it in seq(0, n / 32):
                with CudaWarps(name="producer"):
                    for t in cuda_threads(0, 32):
                        buf[t] = src[it * 32 + t]
                with CudaWarps(name="consumer"):
                    for t in cuda_threads(0, 32):
                        dst[it * 32 + t] = 2.0 * buf[31 - t]
            Fence(cuda_in_order, cuda_in_order)


# Three stages: cp.async into a (async), b = 2 a (each thread its own element), then a reversed read of b.
@proc
def three_stages(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 512 == 0
    assert n >= 1024
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            a: f32[128] @ CudaSmemLinear
            b: f32[128] @ CudaSmemLinear
            for it in seq(0, n / 128):
                for t in cuda_threads(0, 128):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(a[t : t + 1], src[it * 128 + t : it * 128 + t + 1], size=4)
                for t in cuda_threads(0, 128):
                    b[t] = 2.0 * a[t]
                Fence(cuda_in_order, cuda_in_order)
                for t in cuda_threads(0, 128):
                    dst[it * 128 + t] = b[127 - t]
                Fence(cuda_in_order, cuda_in_order)
            Fence(cuda_in_order, cuda_in_order)


# The same on mbarrier rings: the barriers order the threads, no Fences needed.
@proc
def three_stages_mbar(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 512 == 0
    assert n >= 1024
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            a: f32[128] @ CudaSmemLinear
            b: f32[128] @ CudaSmemLinear
            for it in seq(0, n / 128):
                for t in cuda_threads(0, 128):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(a[t : t + 1], src[it * 128 + t : it * 128 + t + 1], size=4)
                for t in cuda_threads(0, 128):
                    b[t] = 2.0 * a[127 - t]
                for t in cuda_threads(0, 128):
                    dst[it * 128 + t] = b[127 - t]
            Fence(cuda_in_order, cuda_in_order)


# ---- loops that cannot be pipelined as asked ----


# The tile is read after the loop: a ring would leave that read one slot of it.
@proc
def escaping_tile(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            buf: f32[128] @ CudaSmemLinear
            for it in seq(0, n / 128):
                for t in cuda_threads(0, 128):
                    buf[t] = src[it * 128 + t]
                for t in cuda_threads(0, 128):
                    dst[it * 128 + t] = buf[t]
            for t in cuda_threads(0, 128):
                dst[t] = buf[t]
            Fence(cuda_in_order, cuda_in_order)


# A ring through a proc argument (global scratch) cannot get a ring dimension.
@proc
def argument_tile(n: size, src: f32[n] @ CudaGmemLinear, tmp: f32[128] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            for it in seq(0, n / 128):
                for t in cuda_threads(0, 128):
                    tmp[t] = src[it * 128 + t]
                for t in cuda_threads(0, 128):
                    dst[it * 128 + t] = tmp[t]


# The loop runs n / 128 times, which may be 1: too few for a 3-stage prologue.
@proc
def short_loop(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            buf: f32[128] @ CudaSmemLinear
            for it in seq(0, n / 128):
                for t in cuda_threads(0, 128):
                    buf[t] = src[it * 128 + t]
                for t in cuda_threads(0, 128):
                    dst[it * 128 + t] = buf[t]
            Fence(cuda_in_order, cuda_in_order)


# A big tile: 48 KiB per slot (the loop uses 128 floats of it).
@proc
def big_tile(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    assert n >= 512
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            buf: f32[12288] @ CudaSmemLinear
            for it in seq(0, n / 128):
                for t in cuda_threads(0, 128):
                    buf[t] = src[it * 128 + t]
                for t in cuda_threads(0, 128):
                    dst[it * 128 + t] = buf[t]
            Fence(cuda_in_order, cuda_in_order)


# A register ring distributed per thread (CTA scope, logical size): each thread keeps its values in
# flight in its own registers; the ring dimension goes after the distributed one.
@proc
def register_ring(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 512 == 0
    assert n >= 1024
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            buf: f32[128] @ CudaSmemLinear
            r: f32[128, 2] @ CudaRmem
            for it in seq(0, n / 128):
                for t in cuda_threads(0, 128):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[t : t + 1], src[it * 128 + t : it * 128 + t + 1], size=4)
                for t in cuda_threads(0, 128):
                    r[t, 0] = buf[t]
                    r[t, 1] = 3.0 * buf[t]
                for t in cuda_threads(0, 128):
                    dst[it * 128 + t] = r[t, 0] + r[t, 1]
            Fence(cuda_in_order, cuda_in_order)


# The ring buffer allocated in the loop body, as staging leaves it: pipeline_loop lifts it out (exo's lift_alloc).
@proc
def body_alloc_tiles(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 1024 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 1024):
            for it in seq(0, 8):
                buf: f32[128] @ CudaSmemLinear
                for t in cuda_threads(0, 128):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[t : t + 1], src[task * 1024 + it * 128 + t : task * 1024 + it * 128 + t + 1], size=4)
                for t in cuda_threads(0, 128):
                    dst[task * 1024 + it * 128 + t] = buf[127 - t]
            Fence(cuda_in_order, cuda_in_order)


# An asynchronous accumulator (as wgmma's): a later stage adds into it asynchronously and reads it back only
# through the same instruction; its own commit group waits for it. No queue of the pipeline's is needed.
@instr("/* acc[0] += x[0] */", instr_tl=Sm80_cp_async_instr)
def async_accumulate(acc: [f32][1] @ CudaSmemLinear, x: [f32][1] @ CudaSmemLinear):
    acc[0] += x[0]


@proc
def async_accumulator(n: size, src: f32[n] @ CudaGmemLinear, sums: f32[128] @ CudaGmemLinear):
    assert n % 1024 == 0
    assert n >= 1024
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            buf: f32[128] @ CudaSmemLinear
            acc: f32[128] @ CudaSmemLinear
            mine: barrier @ CudaCommitGroup
            for t in cuda_threads(0, 128):
                acc[t] = 0.0
            for it in seq(0, n / 128):
                for t in cuda_threads(0, 128):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[t : t + 1], src[it * 128 + t : it * 128 + t + 1], size=4)
                for t in cuda_threads(0, 128):
                    with CudaAsync(Sm80_cp_async_instr):
                        async_accumulate(acc[t : t + 1], buf[t : t + 1])
                Arrive(Sm80_cp_async, 1) >> mine
                Await(mine, cuda_in_order, 0)
            for t in cuda_threads(0, 128):
                sums[t] = acc[t]
            Fence(cuda_in_order, cuda_in_order)


# Mid-schedule: the CUDA blocks are there, the device function around them is not yet (as in a GEMM's steps).
@proc
def before_device_function(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    assert n >= 256
    buf: f32[128] @ CudaSmemLinear
    for it in seq(0, n / 128):
        for t in seq(0, 128):
            with CudaAsync(Sm80_cp_async_instr):
                Sm80_cp_async_f32(buf[t : t + 1], src[it * 128 + t : it * 128 + t + 1], size=4)
        for t in seq(0, 128):
            dst[it * 128 + t] = buf[127 - t]


# mbarrier rings in every CTA of a cluster: stages inside a per-CTA loop, one barrier per CTA (`bar[cta]`).
cluster_warps = [CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 1)]


@proc
def cluster_tiles(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 64 == 0
    with CudaDeviceFunction(clusterDim=2, warp_config=cluster_warps):
        for task in cuda_tasks(0, 1):
            buf: f32[2, 32] @ CudaSmemLinear
            for it in seq(0, n / 64):
                for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                    with CudaWarps(name="producer"):
                        for t in cuda_threads(0, 32):
                            buf[cta, t] = src[it * 64 + cta * 32 + t]
                    with CudaWarps(name="consumer"):
                        for t in cuda_threads(0, 32):
                            dst[it * 64 + cta * 32 + t] = 2.0 * buf[cta, 31 - t]
            Fence(cuda_in_order, cuda_in_order)


# The consumer reads the tile before the producer refills it: each iteration reads the previous tile's copy (the
# first reads what was there). Pipelining the reader a stage behind would make it read its own tile's.
@proc
def stale_read(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            buf: f32[128] @ CudaSmemLinear
            for it in seq(0, n / 128):
                for t in cuda_threads(0, 128):
                    dst[it * 128 + t] = buf[127 - t]
                Fence(cuda_in_order, cuda_in_order)
                for t in cuda_threads(0, 128):
                    buf[t] = src[it * 128 + t]
                Fence(cuda_in_order, cuda_in_order)
            Fence(cuda_in_order, cuda_in_order)
