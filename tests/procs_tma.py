"""Small TMA programs for the sync checker (issue 12 item 5): loads completing on mbarriers, multicast
across a cluster of 2, expect-tx counts, and bulk commit groups of TMA stores.

Each broken variant names what sync_check must report; tests/test_sync_tma.py checks them and
tests/test_sync_engines.py runs every device proc here through both engines.
"""

from __future__ import annotations

from spork_lab import parse_source, proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm90 import *
from spork_lab.scheduling import rename


# One thread loads an 8 x 8 tile per task with TMA (completing on `bar`), the CTA awaits it and one thread copies it out.
@proc
def tma_tile_copy(n: size, src: f32[n, 8] @ CudaGmemLinear, dst: f32[n, 8] @ CudaGmemLinear):
    assert n % 8 == 0
    src_tm = src[:, :] @ Sm90_tensorMap(0, 8, 8)
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n / 8):
            tile: f32[8, 8] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            for t in cuda_threads(0, 1):
                with CudaAsync(tma_to_smem_async_instr):
                    Sm90_copy_tensor_to_smem_linear_2f32(tile, src_tm[8 * task : 8 * task + 8, :], box=(8, 8)) >> bar
                Arrive(tma_to_smem_async, 1) >> bar
            Await(bar, cuda_in_order, ~0)
            for t in cuda_threads(0, 1):
                for i in seq(0, 8):
                    for j in seq(0, 8):
                        dst[8 * task + i, j] = tile[i, j]
            Fence(cuda_in_order, cuda_in_order)


# Two loads into one tile complete on two barriers; the copy awaits only the first: the rows of the second are
# read before they land (RAW), even though an Await on some barrier came first.
@proc
def tma_wrong_barrier(src: f32[16, 8] @ CudaGmemLinear, dst: f32[16, 8] @ CudaGmemLinear):
    src_tm = src[:, :] @ Sm90_tensorMap(0, 8, 8)
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            tile: f32[16, 8] @ CudaSmemLinear
            bar: barrier[2] @ CudaMbarrier
            for t in cuda_threads(0, 1):
                with CudaAsync(tma_to_smem_async_instr):
                    Sm90_copy_tensor_to_smem_linear_2f32(tile[0:8, :], src_tm[0:8, :], box=(8, 8)) >> bar[0]
                Arrive(tma_to_smem_async, 1) >> bar[0]
                with CudaAsync(tma_to_smem_async_instr):
                    Sm90_copy_tensor_to_smem_linear_2f32(tile[8:16, :], src_tm[8:16, :], box=(8, 8)) >> bar[1]
                Arrive(tma_to_smem_async, 1) >> bar[1]
            Await(bar[0], cuda_in_order, ~0)
            for t in cuda_threads(0, 1):
                for i in seq(0, 16):
                    for j in seq(0, 8):
                        dst[i, j] = tile[i, j]
            Await(bar[1], cuda_in_order, ~0)
            Fence(cuda_in_order, cuda_in_order)



# A cluster of 2 (one warpgroup per CTA): each CTA multicasts its half of the rows to both CTAs (`>> ring[:]`);
# each CTA's Arrive expects both halves (the bytes of its own load, times the two CTAs that run it), its
# warpgroup awaits them and reads its own copy with wgmma; a cluster-wide Fence ends the task.
@proc
def tma_multicast_halves(src: f32[64, 32] @ CudaGmemLinear):
    half_tm = src[:, :] @ Sm90_tensorMap(128, 32, 32)
    whole_tm = src[:, :] @ Sm90_tensorMap(128, 64, 32)
    rows_tm = src[:, :] @ Sm90_tensorMap(128, 8, 32)
    with CudaDeviceFunction(clusterDim=2, blockDim=128):
        for task in cuda_tasks(0, 2):
            tile: f32[2, 64, 32] @ Sm90_SmemSwizzled(128)
            rows: f32[2, 8, 32] @ Sm90_SmemSwizzled(128)
            D: f32[2, 64, 8] @ Sm90_RmemMatrixD
            ring: barrier[2] @ CudaMbarrier
            cg: barrier @ CudaCommitGroup
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                for t in cuda_threads(0, 1):
                    with CudaAsync(tma_to_smem_async_instr):
                        Sm90_copy_tensor_to_smem_swizzled_2f32(rows[cta, :, :], rows_tm[0:8, :], box=(8, 32)) >> ring[cta]
                        Sm90_multicast_copy_tensor_to_smem_swizzled_2f32(
                            tile[:, 32 * cta : 32 * cta + 32, :], half_tm[32 * cta : 32 * cta + 32, :], box=(32, 32), ncta=2
                        ) >> ring[:]
                    Arrive(tma_to_smem_async, 1) >> ring[cta]
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                Await(ring[cta], wgmma_async_smem, ~0)
                Sm90_zero_scale_d_f32(D[cta, :, :], N=8)
                Fence(wgmma_fence_1, wgmma_fence_2)
                with CudaAsync(wgmma_async_instr):
                    Sm90_mma_async_tf32(D[cta, :, :], tile[cta, :, 0:8], rows[cta, :, 0:8], N=8)
                Arrive(wgmma_async, 1) >> cg
                Await(cg, cuda_in_order, 0)
            Fence(cuda_in_order, cuda_in_order)


# The same with its Arrive multicast (`>> ring[:]`): the code generator dropped the expect-tx of such an Arrive (each
# CTA's phase would complete on arrivals alone, before its bytes land); only sync_check's run refused it, while analyze,
# build and compile accepted it (session 32). Now the analysis refuses it.
tma_multicast_arrive = rename(parse_source(str(tma_multicast_halves).replace(
    "Arrive(tma_to_smem_async, 1) >> ring[cta]", "Arrive(tma_to_smem_async, 1) >> ring[:]")), "tma_multicast_arrive")


# Only CTA 0 multicasts (both halves: its barrier expects the bytes twice, CTA 1's none, yet CTA 1's receives
# the tile): a wrong tx count.
@proc
def tma_multicast_one_cta(src: f32[64, 32] @ CudaGmemLinear):
    half_tm = src[:, :] @ Sm90_tensorMap(128, 32, 32)
    whole_tm = src[:, :] @ Sm90_tensorMap(128, 64, 32)
    rows_tm = src[:, :] @ Sm90_tensorMap(128, 8, 32)
    with CudaDeviceFunction(clusterDim=2, blockDim=128):
        for task in cuda_tasks(0, 2):
            tile: f32[2, 64, 32] @ Sm90_SmemSwizzled(128)
            rows: f32[2, 8, 32] @ Sm90_SmemSwizzled(128)
            D: f32[2, 64, 8] @ Sm90_RmemMatrixD
            ring: barrier[2] @ CudaMbarrier
            cg: barrier @ CudaCommitGroup
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                for t in cuda_threads(0, 1):
                    if cta == 0:
                        with CudaAsync(tma_to_smem_async_instr):
                            Sm90_copy_tensor_to_smem_swizzled_2f32(rows[cta, :, :], rows_tm[0:8, :], box=(8, 32)) >> ring[cta]
                            Sm90_multicast_copy_tensor_to_smem_swizzled_2f32(tile[:, :, :], whole_tm[:, :], box=(64, 32),
                                                                             ncta=2) >> ring[:]
                        Arrive(tma_to_smem_async, 1) >> ring[cta]
                    else:
                        with CudaAsync(tma_to_smem_async_instr):
                            Sm90_copy_tensor_to_smem_swizzled_2f32(rows[cta, :, :], rows_tm[0:8, :], box=(8, 32)) >> ring[cta]
                        Arrive(tma_to_smem_async, 1) >> ring[cta]
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                Await(ring[cta], wgmma_async_smem, ~0)
                Sm90_zero_scale_d_f32(D[cta, :, :], N=8)
                Fence(wgmma_fence_1, wgmma_fence_2)
                with CudaAsync(wgmma_async_instr):
                    Sm90_mma_async_tf32(D[cta, :, :], tile[cta, :, 0:8], rows[cta, :, 0:8], N=8)
                Arrive(wgmma_async, 1) >> cg
                Await(cg, cuda_in_order, 0)
            Fence(cuda_in_order, cuda_in_order)


# Each CTA releases the multicast tile for itself only: a CTA may exit (or start its next task) while its peer
# can still write its shared memory; the free of a multicast destination needs the whole cluster.
@proc
def tma_multicast_no_cluster_sync(src: f32[64, 32] @ CudaGmemLinear):
    half_tm = src[:, :] @ Sm90_tensorMap(128, 32, 32)
    whole_tm = src[:, :] @ Sm90_tensorMap(128, 64, 32)
    rows_tm = src[:, :] @ Sm90_tensorMap(128, 8, 32)
    with CudaDeviceFunction(clusterDim=2, blockDim=128):
        for task in cuda_tasks(0, 2):
            tile: f32[2, 64, 32] @ Sm90_SmemSwizzled(128)
            rows: f32[2, 8, 32] @ Sm90_SmemSwizzled(128)
            D: f32[2, 64, 8] @ Sm90_RmemMatrixD
            ring: barrier[2] @ CudaMbarrier
            cg: barrier @ CudaCommitGroup
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                for t in cuda_threads(0, 1):
                    with CudaAsync(tma_to_smem_async_instr):
                        Sm90_copy_tensor_to_smem_swizzled_2f32(rows[cta, :, :], rows_tm[0:8, :], box=(8, 32)) >> ring[cta]
                        Sm90_multicast_copy_tensor_to_smem_swizzled_2f32(
                            tile[:, 32 * cta : 32 * cta + 32, :], half_tm[32 * cta : 32 * cta + 32, :], box=(32, 32), ncta=2
                        ) >> ring[:]
                    Arrive(tma_to_smem_async, 1) >> ring[cta]
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                Await(ring[cta], wgmma_async_smem, ~0)
                Sm90_zero_scale_d_f32(D[cta, :, :], N=8)
                Fence(wgmma_fence_1, wgmma_fence_2)
                with CudaAsync(wgmma_async_instr):
                    Sm90_mma_async_tf32(D[cta, :, :], tile[cta, :, 0:8], rows[cta, :, 0:8], N=8)
                Arrive(wgmma_async, 1) >> cg
                Await(cg, cuda_in_order, 0)
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                Fence(cuda_in_order, cuda_in_order)


# A TMA store reads the tile until its bulk commit group is awaited: rewriting the tile for the second store
# before the Await is a WAR hazard.
@proc
def tma_store_reuse(src: f32[8, 8] @ CudaGmemLinear, C: f32[16, 8] @ CudaGmemLinear):
    C_tm = C[:, :] @ Sm90_tensorMap(0, 8, 8)
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            t_s: f32[8, 8] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for t in cuda_threads(0, 1):
                for h in seq(0, 2):
                    for i in seq(0, 8):
                        for j in seq(0, 8):
                            t_s[i, j] = src[i, j]
                    Fence(cuda_in_order, tma_to_gmem_async)
                    with CudaAsync(tma_to_gmem_async_instr):
                        Sm90_copy_tensor_to_gmem_linear_2f32(C_tm[8 * h : 8 * h + 8, :], t_s, box=(8, 8))
                    Arrive(tma_to_gmem_async, 1) >> cg
                Await(cg, cuda_in_order, 0)
            Fence(cuda_in_order, cuda_in_order)


# The same with the Await (N = 0) before the tile is rewritten: correct.
@proc
def tma_store_waits(src: f32[8, 8] @ CudaGmemLinear, C: f32[16, 8] @ CudaGmemLinear):
    C_tm = C[:, :] @ Sm90_tensorMap(0, 8, 8)
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            t_s: f32[8, 8] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for t in cuda_threads(0, 1):
                for h in seq(0, 2):
                    for i in seq(0, 8):
                        for j in seq(0, 8):
                            t_s[i, j] = src[i, j]
                    Fence(cuda_in_order, tma_to_gmem_async)
                    with CudaAsync(tma_to_gmem_async_instr):
                        Sm90_copy_tensor_to_gmem_linear_2f32(C_tm[8 * h : 8 * h + 8, :], t_s, box=(8, 8))
                    Arrive(tma_to_gmem_async, 1) >> cg
                    Await(cg, cuda_in_order, 0)
            Fence(cuda_in_order, cuda_in_order)


# Each tile's TMA store completed by a Fence naming the bulk copies instead of a commit group, then its rows read
# back from C by the CTA. The Fence's wait_group waits for committed groups only: generated without a commit
# first, Z held C's NaN on an H200 (audit of session 27); the Fence now commits before it waits.
@proc
def tma_store_completed_by_fence(T: size, A: f32[64 * T, 32] @ CudaGmemLinear, C: f32[64 * T, 32] @ CudaGmemLinear,
                                 Z: f32[64 * T, 32] @ CudaGmemLinear):
    C_tm = C[:, :] @ Sm90_tensorMap(0, 64, 32)
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            t_s: f32[64, 32] @ CudaSmemLinear
            for it in seq(0, T):
                for t in cuda_threads(0, 128):
                    for j in seq(0, 16):
                        t_s[t / 2, 16 * (t % 2) + j] = A[64 * it + t / 2, 16 * (t % 2) + j]
                Fence(cuda_in_order, tma_to_gmem_async)
                for t in cuda_threads(0, 1):
                    with CudaAsync(tma_to_gmem_async_instr):
                        Sm90_copy_tensor_to_gmem_linear_2f32(C_tm[64 * it : 64 * it + 64, :], t_s, box=(64, 32))
                Fence(tma_to_gmem_async, cuda_in_order)
                for t in cuda_threads(0, 128):
                    for j in seq(0, 16):
                        Z[64 * it + t / 2, 16 * (t % 2) + j] = C[64 * it + 63 - t / 2, 16 * (t % 2) + j]
            Fence(cuda_in_order, cuda_in_order)


# A TMA load of global memory that the producer warp wrote with ordinary stores, handed over by an mbarrier: the
# consumer's await needs fence.proxy.async, as for shared memory (PTX memory model, proxies). It was generated
# without one (only generic access to shared memory counted; audit of session 27).
_producer_consumer = [CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 1)]


@proc
def tma_load_of_generic_writes(n: size, x: f32[8 * n, 32] @ CudaGmemLinear, y: f32[8 * n, 32] @ CudaGmemLinear,
                               z: f32[8 * n, 32] @ CudaGmemLinear):
    y_tm = y[:, :] @ Sm90_tensorMap(0, 8, 32)
    with CudaDeviceFunction(warp_config=_producer_consumer):
        for task in cuda_tasks(0, n):
            tile: f32[8, 32] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            ld: barrier @ CudaMbarrier
            with CudaWarps(name="producer"):
                for t in cuda_threads(0, 32):
                    for i in seq(0, 8):
                        y[8 * task + i, t] = 2.0 * x[8 * task + i, t]
                Arrive(cuda_in_order, 1) >> bar
            with CudaWarps(name="consumer"):
                Await(bar, tma_to_smem_async, ~0)
                for t in cuda_threads(0, 1):
                    with CudaAsync(tma_to_smem_async_instr):
                        Sm90_copy_tensor_to_smem_linear_2f32(tile, y_tm[8 * task : 8 * task + 8, :], box=(8, 32)) >> ld
                    Arrive(tma_to_smem_async, 1) >> ld
                Await(ld, cuda_in_order, ~0)
                for t in cuda_threads(0, 32):
                    for i in seq(0, 8):
                        z[8 * task + i, t] = tile[7 - i, t]
            Fence(cuda_in_order, cuda_in_order)
