"""Procs found by the session-17 soundness audit (each passed `sl.sync_check` and went wrong on an H200), with the
correct forms next to them.

- An mbarrier lives in one CTA's shared memory; used by a collective whose threads lie in two CTAs of a cluster,
  each CTA's threads arrived on their own CTA's barrier, which expected the whole collective's arrivals: the
  kernel hung (`mbarrier_straddles_ctas`, `mbarrier_whole_cluster`).
- TMA moves a shared-memory box as adjacent rows from a 128-byte aligned address: a window of wider rows was
  written (or read) elsewhere than the program said, and a box at a 32-byte row faulted
  (`tma_load_padded_rows`, `tma_store_padded_rows`, `tma_row_per_thread`, `tma_load_through_padded_alias`).
- Global memory allocated by CPU code (`tmp: f32[...] @ CudaGmemLinear`) called an allocator nothing defined: the
  library did not load (`scratch_between_kernels`).

And two right programs that were refused: a Fence by the consumer warps of each CTA of a cluster was "not yet
supported" by the code generator (`consumer_warps_fence`); loads on `bar[0]` and `bar[1]`, then an Arrive on each,
had the first Arrive expect the bytes of both (`two_barriers_two_phases`: TX hazards).

Found in session 18: the alignment a cp.async needs was checked at the window's offset in the logical tile, not in
its CTA's shard of cluster-distributed shared memory, so a copy at 4 bytes into a shard of 5 floats passed (at 24
bytes in the tile: the GPU faults), and one at 8 bytes into it was refused (at 28 bytes in the tile)
(`cp_async_into_shard_misaligned`, `cp_async_into_shard_aligned`).

Found in session 19: a multicast TMA load signals the mbarrier slot of its phase in every CTA it writes to, in
whatever phase that CTA's slot is then; sync_check credited its bytes to the right phase number and never asked
whether the slot had finished its previous phase. CTA 0's load of tile 2 landed in CTA 1's slot 0 while CTA 1 (slow
between its load and its Arrive) had not closed phase 0: that phase got 12288 bytes for 8192 expected and never
completed, and the kernel hung on an H200 (`multicast_lands_on_open_slot`, with 20000 rounds of `work`).
"""

from __future__ import annotations

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *
from spork_lab.platforms.Sm90 import *

# ---- mbarriers in clusters ----


# A 64-thread collective of warp 1 of CTA 0 and warp 0 of CTA 1 arrives on and awaits an mbarrier.
@proc
def mbarrier_straddles_ctas(n: size, x: f32[n, 64] @ CudaGmemLinear, y: f32[n, 64] @ CudaGmemLinear,
                            z: f32[n, 64] @ CudaGmemLinear):
    with CudaDeviceFunction(clusterDim=2, blockDim=64):
        for task in cuda_tasks(0, n):
            bar: barrier @ CudaMbarrier
            with CudaWarps(1, 3):
                for t in cuda_threads(0, 64):
                    y[task, t] = x[task, t]
                Arrive(cuda_in_order, 1) >> bar  # error here
            with CudaWarps(1, 3):
                Await(bar, cuda_in_order, ~0)
                for t in cuda_threads(0, 64):
                    z[task, t] = y[task, 63 - t]
            Fence(cuda_in_order, cuda_in_order)


# The whole cluster (two CTAs) arrives on and awaits one mbarrier after filling each CTA's shard.
@proc
def mbarrier_whole_cluster(n: size, x: f32[n, 128] @ CudaGmemLinear, z: f32[n, 128] @ CudaGmemLinear):
    with CudaDeviceFunction(clusterDim=2, blockDim=64):
        for task in cuda_tasks(0, n):
            s: f32[2, 64] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                for t in cuda_threads(0, 64):
                    s[cta, t] = x[task, 64 * cta + t]
            Arrive(cuda_in_order, 1) >> bar  # error here
            Await(bar, cuda_in_order, ~0)
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                for t in cuda_threads(0, 64):
                    z[task, 64 * cta + t] = s[cta, 63 - t]
            Fence(cuda_in_order, cuda_in_order)


# The correct form: each CTA arrives on and awaits its own barrier, `bar[cta]`.
@proc
def mbarrier_per_cta(n: size, x: f32[n, 128] @ CudaGmemLinear, z: f32[n, 128] @ CudaGmemLinear):
    with CudaDeviceFunction(clusterDim=2, blockDim=64):
        for task in cuda_tasks(0, n):
            s: f32[2, 64] @ CudaSmemLinear
            bar: barrier[2] @ CudaMbarrier
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                for t in cuda_threads(0, 64):
                    s[cta, t] = x[task, 64 * cta + t]
                Arrive(cuda_in_order, 1) >> bar[cta]
                Await(bar[cta], cuda_in_order, ~0)
                for t in cuda_threads(0, 64):
                    z[task, 64 * cta + t] = s[cta, 63 - t]
            Fence(cuda_in_order, cuda_in_order)


# ---- TMA boxes in shared memory ----


# A TMA load into 8 columns of a tile with 12-element rows.
@proc
def tma_load_padded_rows(n: size, src: f32[8 * n, 8] @ CudaGmemLinear, dst: f32[8 * n, 8] @ CudaGmemLinear):
    src_tm = src[:, :] @ Sm90_tensorMap(0, 8, 8)
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n):
            tile: f32[8, 12] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            for t in cuda_threads(0, 1):
                with CudaAsync(tma_to_smem_async_instr):
                    Sm90_copy_tensor_to_smem_linear_2f32(tile[:, 4:12], src_tm[8 * task : 8 * task + 8, :], box=(8, 8)) >> bar  # error here
                Arrive(tma_to_smem_async, 1) >> bar
            Await(bar, cuda_in_order, ~0)
            for t in cuda_threads(0, 32):
                for i in seq(0, 2):
                    dst[8 * task + 2 * (t / 8) + i, t % 8] = tile[2 * (t / 8) + i, 4 + t % 8]
            Fence(cuda_in_order, cuda_in_order)


# A TMA store from 8 columns of a tile with 12-element rows.
@proc
def tma_store_padded_rows(n: size, A: f32[8 * n, 8] @ CudaGmemLinear, C: f32[8 * n, 8] @ CudaGmemLinear):
    C_tm = C[:, :] @ Sm90_tensorMap(0, 8, 8)
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n):
            t_s: f32[8, 12] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for t in cuda_threads(0, 32):
                for i in seq(0, 2):
                    t_s[2 * (t / 8) + i, t % 8] = A[8 * task + 2 * (t / 8) + i, t % 8]
            Fence(cuda_in_order, tma_to_gmem_async)
            for t in cuda_threads(0, 1):
                with CudaAsync(tma_to_gmem_async_instr):
                    Sm90_copy_tensor_to_gmem_linear_2f32(C_tm[8 * task : 8 * task + 8, :], t_s[:, 0:8], box=(8, 8))  # error here
                Arrive(tma_to_gmem_async, 1) >> cg
                Await(cg, cuda_in_order, 0)
            Fence(cuda_in_order, cuda_in_order)


# Each of 32 threads loads one 32-byte row by TMA onto a barrier of its own: rows 1-3 of every 4 start 32, 64 or
# 96 bytes past a 128-byte boundary (the analysis cannot tell: the offset is the thread's iterator).
@proc
def tma_row_per_thread(n: size, src: f32[32 * n, 8] @ CudaGmemLinear, dst: f32[32 * n, 8] @ CudaGmemLinear):
    src_tm = src[:, :] @ Sm90_tensorMap(0, 1, 8)
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n):
            tile: f32[32, 8] @ CudaSmemLinear
            bar: barrier[32] @ CudaMbarrier
            for t in cuda_threads(0, 32):
                with CudaAsync(tma_to_smem_async_instr):
                    Sm90_copy_tensor_to_smem_linear_2f32(tile[t : t + 1, :], src_tm[32 * task + t : 32 * task + t + 1, :], box=(1, 8)) >> bar[t]  # error here
                Arrive(tma_to_smem_async, 1) >> bar[t]
                Await(bar[t], cuda_in_order, ~0)
                for j in seq(0, 8):
                    dst[32 * task + t, j] = tile[t, 7 - j]
            Fence(cuda_in_order, cuda_in_order)


# A TMA load through a window alias of 8 columns of 40-element rows: the analysis sees through the alias.
@proc
def tma_load_through_padded_alias(n: size, src: f32[8 * n, 8] @ CudaGmemLinear, dst: f32[8 * n, 8] @ CudaGmemLinear):
    src_tm = src[:, :] @ Sm90_tensorMap(0, 8, 8)
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n):
            tile: f32[8, 40] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            w = tile[:, 32:40]
            for t in cuda_threads(0, 1):
                with CudaAsync(tma_to_smem_async_instr):
                    Sm90_copy_tensor_to_smem_linear_2f32(w[:, :], src_tm[8 * task : 8 * task + 8, :], box=(8, 8)) >> bar  # error here
                Arrive(tma_to_smem_async, 1) >> bar
            Await(bar, cuda_in_order, ~0)
            for t in cuda_threads(0, 32):
                for i in seq(0, 2):
                    dst[8 * task + 2 * (t / 8) + i, t % 8] = tile[2 * (t / 8) + i, 32 + t % 8]
            Fence(cuda_in_order, cuda_in_order)


# The correct form: whole rows of an 8-wide tile, through an alias of its second slot (256 bytes in), and a
# four-row box at row 4 of the first (128 bytes in).
@proc
def tma_load_whole_rows(n: size, src: f32[8 * n, 8] @ CudaGmemLinear, dst: f32[8 * n, 8] @ CudaGmemLinear):
    src_tm = src[:, :] @ Sm90_tensorMap(0, 8, 8)
    half_tm = src[:, :] @ Sm90_tensorMap(0, 4, 8)
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n):
            tile: f32[2, 8, 8] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            w = tile[1, :, :]
            for t in cuda_threads(0, 1):
                with CudaAsync(tma_to_smem_async_instr):
                    Sm90_copy_tensor_to_smem_linear_2f32(w[:, :], src_tm[8 * task : 8 * task + 8, :], box=(8, 8)) >> bar
                    Sm90_copy_tensor_to_smem_linear_2f32(tile[0, 4:8, :], half_tm[8 * task : 8 * task + 4, :], box=(4, 8)) >> bar
                Arrive(tma_to_smem_async, 1) >> bar
            Await(bar, cuda_in_order, ~0)
            for t in cuda_threads(0, 32):
                for i in seq(0, 2):
                    dst[8 * task + 2 * (t / 8) + i, t % 8] = tile[1, 2 * (t / 8) + i, t % 8] - tile[0, 4 + (t / 8), t % 8]
            Fence(cuda_in_order, cuda_in_order)


# ---- global memory allocated by CPU code ----


# A scratch tensor the proc allocates: the first kernel writes it, the second reads it transposed.
@proc
def scratch_between_kernels(n: size, x: f32[n, 64] @ CudaGmemLinear, y: f32[64, n] @ CudaGmemLinear):
    tmp: f32[n, 64] @ CudaGmemLinear
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, n):
            for t in cuda_threads(0, 64):
                tmp[task, t] = 2.0 * x[task, 63 - t]
    with CudaDeviceFunction(blockDim=128):
        for c in cuda_tasks(0, 64):
            for r in cuda_threads(0, 128):
                for q in seq(0, (n + 127 - r) / 128):
                    y[c, 128 * q + r] = tmp[128 * q + r, c] + tmp[128 * q + r, (c + 1) % 64]


# Two TMA loads on two barriers of one array, then an Arrive on each: each phase expects its own load's bytes.
@proc
def two_barriers_two_phases(n: size, src: f32[16 * n, 8] @ CudaGmemLinear, dst: f32[16 * n, 8] @ CudaGmemLinear):
    src_tm = src[:, :] @ Sm90_tensorMap(0, 8, 8)
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n):
            tile: f32[2, 8, 8] @ CudaSmemLinear
            bar: barrier[2] @ CudaMbarrier
            for t in cuda_threads(0, 1):
                with CudaAsync(tma_to_smem_async_instr):
                    Sm90_copy_tensor_to_smem_linear_2f32(tile[0, :, :], src_tm[16 * task : 16 * task + 8, :], box=(8, 8)) >> bar[0]
                    Sm90_copy_tensor_to_smem_linear_2f32(tile[1, :, :], src_tm[16 * task + 8 : 16 * task + 16, :], box=(8, 8)) >> bar[1]
                Arrive(tma_to_smem_async, 1) >> bar[0]
                Arrive(tma_to_smem_async, 1) >> bar[1]
            Await(bar[0], cuda_in_order, ~0)
            Await(bar[1], cuda_in_order, ~0)
            for t in cuda_threads(0, 32):
                for j in seq(0, 2):
                    for i in seq(0, 2):
                        dst[16 * task + 8 * j + 2 * (t / 8) + i, t % 8] = tile[j, 2 * (t / 8) + i, t % 8]
            Fence(cuda_in_order, cuda_in_order)


# The consumer warps of each CTA of a cluster exchange data through shared memory around a Fence of their own.
@proc
def consumer_warps_fence(n: size, x: f32[n, 2, 64] @ CudaGmemLinear, z: f32[n, 2, 64] @ CudaGmemLinear):
    with CudaDeviceFunction(clusterDim=2, warp_config=[CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 2)]):
        for task in cuda_tasks(0, n):
            s: f32[2, 64] @ CudaSmemLinear
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                with CudaWarps(name="consumer"):
                    for t in cuda_threads(0, 64):
                        s[cta, t] = x[task, cta, t]
                    Fence(cuda_in_order, cuda_in_order)
                    for t in cuda_threads(0, 64):
                        z[task, cta, t] = s[cta, 63 - t]
            Fence(cuda_in_order, cuda_in_order)


# ---- cp.async into a shard of cluster-distributed shared memory (5 floats per CTA) ----


# CTA 1 copies 8 bytes to word 1 of its shard (word 6 of the logical tile).
@proc
def cp_async_into_shard_misaligned(n: size, x: f32[n, 2, 2] @ CudaGmemLinear, y: f32[n, 2, 2] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32, clusterDim=2):
        for task in cuda_tasks(0, n):
            tile: f32[2, 5] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                for t in cuda_threads(0, 1, unit=cuda_thread):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(tile[cta, cta:cta + 2], x[task, cta, 0:2], size=8)  # error here
                    Arrive(Sm80_cp_async, 1) >> cg
                    Await(cg, cuda_in_order, 0)
                    for i in seq(0, 2):
                        y[task, cta, i] = tile[cta, cta + i]
                Fence(cuda_in_order, cuda_in_order)


# CTA 1 copies 8 bytes to word 2 of its shard (word 7 of the logical tile).
@proc
def cp_async_into_shard_aligned(n: size, x: f32[n, 2, 2] @ CudaGmemLinear, y: f32[n, 2, 2] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32, clusterDim=2):
        for task in cuda_tasks(0, n):
            tile: f32[2, 5] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                for t in cuda_threads(0, 1, unit=cuda_thread):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(tile[cta, 2 * cta:2 * cta + 2], x[task, cta, 0:2], size=8)
                    Arrive(Sm80_cp_async, 1) >> cg
                    Await(cg, cuda_in_order, 0)
                    for i in seq(0, 2):
                        y[task, cta, i] = tile[cta, 2 * cta + i]
                Fence(cuda_in_order, cuda_in_order)


@proc
def multicast_lands_on_open_slot(src: f32[192, 32] @ CudaGmemLinear, Bsrc: f32[8, 32] @ CudaGmemLinear,
                                 x: f32[1] @ CudaGmemLinear, work: f32[3] @ CudaGmemLinear,
                                 C: f32[2, 3, 64, 8] @ CudaGmemLinear):
    half_tm = src[:, :] @ Sm90_tensorMap(128, 32, 32)
    rows_tm = Bsrc[:, :] @ Sm90_tensorMap(128, 8, 32)
    with CudaDeviceFunction(clusterDim=2, blockDim=128):
        for task in cuda_tasks(0, 1):
            tile: f32[2, 3, 64, 32] @ Sm90_SmemSwizzled(128)
            rows: f32[2, 8, 32] @ Sm90_SmemSwizzled(128)
            D: f32[2, 64, 8] @ Sm90_RmemMatrixD
            ring: barrier[2] @ CudaMbarrier
            bb: barrier[2] @ CudaMbarrier
            cg: barrier @ CudaCommitGroup
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                for t in cuda_threads(0, 1):
                    with CudaAsync(tma_to_smem_async_instr):
                        Sm90_copy_tensor_to_smem_swizzled_2f32(rows[cta, :, :], rows_tm[:, :], box=(8, 32)) >> bb[cta]
                    Arrive(tma_to_smem_async, 1) >> bb[cta]
                Await(bb[cta], wgmma_async_smem, ~0)
            for it in seq(0, 4):
                for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                    for t in cuda_threads(0, 1):
                        if it < 3:
                            with CudaAsync(tma_to_smem_async_instr):
                                Sm90_multicast_copy_tensor_to_smem_swizzled_2f32(  # error here
                                    tile[:, it, 32 * cta:32 * cta + 32, :],
                                    half_tm[64 * it + 32 * cta:64 * it + 32 * cta + 32, :],
                                    box=(32, 32), ncta=2) >> ring[:]
                            if cta == 1:  # CTA 1 is slow to close its phase
                                for j in seq(0, 20):
                                    work[it] += x[0]
                            Arrive(tma_to_smem_async, 1) >> ring[cta]
                        else:
                            Arrive(tma_to_smem_async, 1) >> ring[cta]
                    Await(ring[cta], wgmma_async_smem, ~1)
                    Fence(cuda_in_order, cuda_in_order)  # within the CTA: every thread waited before thread 0 loads
                    if it >= 1:
                        Sm90_zero_scale_d_f32(D[cta, :, :], N=8)
                        Fence(wgmma_fence_1, wgmma_fence_2)
                        with CudaAsync(wgmma_async_instr):
                            Sm90_mma_async_tf32(D[cta, :, :], tile[cta, it - 1, :, 0:8], rows[cta, :, 0:8], N=8)
                        Arrive(wgmma_async, 1) >> cg
                        Await(cg, cuda_in_order, 0)
                        Sm90_mma_store_d_row_major_f32(C[cta, it - 1, :, :], D[cta, :, :], N=8)
            Fence(cuda_in_order, cuda_in_order)

