"""Procs that use every Exo-GPU construct of LANGUAGE.md (parsed at import)."""

from __future__ import annotations

from exo import proc as exo_proc

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *


@exo_proc
def plain_scale(n: size, x: f32[n] @ DRAM):
    for i in seq(0, n):
        x[i] = x[i] * 2.0


@proc
def calls_plain_exo(n: size, x: f32[n] @ DRAM):
    for j in par(0, 4):
        plain_scale(n, x)


my_unit = CollUnit((clusterDim, blockDim / 32, 32), (clusterDim, 1, 32))


@proc
def units_and_blocks(n: size, x: f32[n, 64] @ CudaGmemLinear):
    assert n % 4 == 0
    with CudaDeviceFunction(blockDim=256, clusterDim=2, blocks_per_sm=2):
        for t0 in cuda_tasks(0, n / 4):
            for t1 in cuda_tasks(0, 2):
                for wg in cuda_threads(0, 2, unit=cuda_warpgroup):
                    with CudaWarps(3, 4):
                        for lane in cuda_threads(0, 32):
                            x[t0 * 4 + t1 * 2 + wg, lane] = 0.0
                for m in cuda_threads(0, 8, unit=16 * cuda_thread):
                    for k in cuda_threads(0, 16):
                        x[t0 * 4 + t1, m * 8 + k / 2] = 1.0
                for c in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                    for w in cuda_threads(0, 1, unit=my_unit):
                        pass


warps = [CudaWarpConfig("producer", 1, setmaxnreg=40), CudaWarpConfig("consumer", 4, setmaxnreg=232)]


@proc
def barriers_everywhere(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 64 == 0
    with CudaDeviceFunction(warp_config=warps):
        for task in cuda_tasks(0, 1):
            buf: f32[2, 32] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            groups: barrier[2, 4] @ CudaCommitGroup
            for it in seq(0, n / 32):
                with CudaWarps(name="producer"):
                    ReverseAwait(bar, cuda_in_order, ~1)
                    for t in cuda_threads(0, 32):
                        buf[it % 2, t] = src[it * 32 + t]
                    Arrive(cuda_in_order, 1) >> bar
                with CudaWarps(name="consumer"):
                    with CudaWarps(0, 1, name="consumer"):
                        Await(bar, cuda_in_order, ~0)
                        for t in cuda_threads(0, 32):
                            with CudaAsync(Sm80_cp_async_instr):
                                Sm80_cp_async_f32(buf[it % 2, t:t + 1], src[it * 32 + t:it * 32 + t + 1], size=4)
                        Arrive(Sm80_cp_async, 1) >> groups[it % 2, 3]
                        Await(groups[it % 2, 3], Sm80_generic, 0)
                        for t in cuda_threads(0, 32):
                            dst[it * 32 + t] = buf[it % 2, t]
                        ReverseArrive(cuda_in_order, 1) >> bar
            Fence(Sm80_generic, cuda_generic_and_async_proxy)


@proc
def events(n: size, x: f32[n] @ CudaGmemLinear):
    ev: barrier @ CudaEvent
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 32):
                pass
    Arrive(cuda_in_order, 1) >> ev
    Await(ev, cpu_in_order, 0)


@proc
def mma_tile(A: f32[16, 8] @ CudaGmemLinear, B: f32[8, 8] @ CudaGmemLinear, D: f32[16, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            A_smem: f32[16, 8] @ CudaSmemLinear
            B_smem: f32[8, 8] @ CudaSmemLinear
            for w in cuda_threads(0, 1, unit=cuda_warp):
                A_rmem: f32[16, 8] @ Sm80_RmemMatrixA
                B_rmem: f32[8, 8] @ Sm80_RmemMatrixB
                D_rmem: f32[16, 8] @ Sm80_RmemMatrixD
                Sm80_mma_zero_d_tf32(D_rmem)
                Sm80_mma_load_a_tf32(A_rmem, A_smem)
                Sm80_mma_load_b_tf32(B_rmem, B_smem)
                Sm80_mma_tf32(D_rmem, A_rmem, B_rmem)
                Sm80_mma_store_d_tf32(D, D_rmem)
                if w == 0:
                    Fence(cuda_in_order, cuda_in_order)
                else:
                    pass
