"""Procs for tests/test_analysis*.py. Each proc that analyze() rejects marks its faulty line with `# error here`."""

from __future__ import annotations

import exo

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *
from spork_lab.platforms.Sm90 import *

# ---------------------------------------------------------------- accepted procs


@proc
def seed_threads(y: f32[128] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            for m in cuda_threads(0, 8, unit=16 * cuda_thread):
                for n in cuda_threads(0, 16):
                    y[m * 16 + n] = 0.0


@proc
def seed_warpgroups(y: f32[2, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, 1):
            for wg in cuda_threads(0, 2, unit=cuda_warpgroup):
                with CudaWarps(3, 4):
                    for t in cuda_threads(0, 32):
                        y[wg, t] = 0.0


@proc
def named_warps(n: size, y: f32[n, 64] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=[CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 2)]):
        for task in cuda_tasks(0, n):
            with CudaWarps(name="producer"):
                for t in cuda_threads(0, 32):
                    y[task, t] = 1.0
            with CudaWarps(name="consumer"):
                with CudaWarps(1, 2):
                    for t in cuda_threads(0, 32):
                        y[task, t + 32] = 2.0
            with CudaWarps(0, 1, name="consumer"):
                pass


@proc
def cluster_ctas(y: f32[2, 128] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128, clusterDim=2):
        for task in cuda_tasks(0, 1):
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                for t in cuda_threads(0, 128):
                    y[cta, t] = 0.0


@proc
def cluster_named_warps(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(clusterDim=2, warp_config=[CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 3)]):
        for task in cuda_tasks(0, 1):
            with CudaWarps(name="producer"):
                pass


@proc
def nested_tasks(n: size, y: f32[n, n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for i in cuda_tasks(0, n):
            for j in cuda_tasks(0, n):
                for t in cuda_threads(0, 1):
                    y[i, j] = 0.0


@proc
def mma_and_cp_async(A: f32[16, 8] @ CudaGmemLinear, D: f32[16, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, 1):
            A_smem: f32[16, 8] @ CudaSmemLinear
            for m in cuda_threads(0, 16, unit=4 * cuda_thread):
                for k in cuda_threads(0, 4):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(A_smem[m, 2 * k : 2 * k + 2], A[m, 2 * k : 2 * k + 2], size=8)
            Fence(Sm80_generic, cuda_in_order)
            for w in cuda_threads(0, 1, unit=cuda_warp):
                A_rmem: f32[16, 8] @ Sm80_RmemMatrixA
                B_rmem: f32[8, 8] @ Sm80_RmemMatrixB
                D_rmem: f32[16, 8] @ Sm80_RmemMatrixD
                Sm80_mma_load_a_tf32(A_rmem[:, :], A_smem[:, :])
                Sm80_mma_load_b_tf32(B_rmem[:, :], A_smem[0:8, :])
                Sm80_mma_zero_d_tf32(D_rmem[:, :])
                Sm80_mma_tf32(D_rmem[:, :], A_rmem[:, :], B_rmem[:, :])
                Sm80_mma_store_d_tf32(D[:, :], D_rmem[:, :])


@exo.proc
def zero4(x: [f32][4] @ CudaGmemLinear):
    for i in seq(0, 4):
        x[i] = 0.0


@exo.instr("{x_data}[0] = 0.0f;")
def exo_cpu_zero(x: [f32][1]):
    x[0] = 0.0


@proc
def plain_call_per_thread(y: f32[32, 4] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 32):
                zero4(y[t, :])


@proc
def cpu_only(n: size, x: f32[n]):
    for i in par(0, n):
        x[i] = 0.0


# ---------------------------------------------------------------- rejected procs: structure


@proc
def df_two_children(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        tmp: f32[32] @ CudaSmemLinear  # error here
        for task in cuda_tasks(0, 1):
            pass


@proc
def df_not_perfect(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for i in cuda_tasks(0, 2):
            tmp: f32[32] @ CudaSmemLinear
            for j in cuda_tasks(0, 2):  # error here
                pass


@proc
def tasks_on_cpu(y: f32[32] @ CudaGmemLinear):
    for task in cuda_tasks(0, 1):  # error here
        pass


@proc
def threads_on_cpu(x: f32[32]):
    for t in cuda_threads(0, 32):  # error here
        x[t] = 0.0


@proc
def async_on_cpu(x: f32[32]):
    with CudaAsync(Sm80_cp_async_instr):  # error here
        x[0] = 0.0


@proc
def warps_on_cpu(x: f32[32]):
    with CudaWarps(0, 1):  # error here
        x[0] = 0.0


@proc
def par_in_cuda(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for i in par(0, 32):  # error here
                pass


@proc
def nested_device_functions(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            with CudaDeviceFunction(blockDim=64):  # error here
                for t2 in cuda_tasks(0, 1):
                    pass


# ---------------------------------------------------------------- rejected procs: collectives


@proc
def threads_lo_nonzero(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(1, 32):  # error here
                y[t] = 0.0


@proc
def threads_hi_folds_to_a_constant(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 32 - 0):  # error here
                y[t] = 0.0


@proc
def threads_hi_not_constant(n: size, y: f32[n] @ CudaGmemLinear):
    assert n <= 32
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, n):  # error here
                y[t] = 0.0


@proc
def too_many_threads(y: f32[10, 4] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            for w in cuda_threads(0, 4, unit=cuda_warp):
                for i in cuda_threads(0, 10, unit=4 * cuda_thread):  # error here
                    for t in cuda_threads(0, 4):
                        y[i, t] = 0.0


@proc
def mma_by_thread(D: f32[16, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 32):
                D_rmem: f32[16, 8] @ Sm80_RmemMatrixD
                Sm80_mma_zero_d_tf32(D_rmem[:, :])  # error here



# mma fragments: a lane holds the elements the instruction's layout gives it, not those a flat index names
@proc
def fragment_scalar_read(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            D: f32[16, 8] @ Sm80_RmemMatrixD
            Sm80_mma_zero_d_tf32(D[:, :])
            for t in cuda_threads(0, 32):
                y[t] = D[0, 1]  # error here


@proc
def fragment_scalar_write(x: f32[1] @ CudaGmemLinear, y: f32[16, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            D: f32[16, 8] @ Sm80_RmemMatrixD
            Sm80_mma_zero_d_tf32(D[:, :])
            for t in cuda_threads(0, 1):
                D[0, 3] = x[0]  # error here
            Sm80_mma_store_d_tf32(y[:, :], D[:, :])


@proc
def wgmma_accumulator_scalar_read(y: f32[128] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            D: f32[64, 8] @ Sm90_RmemMatrixD
            Sm90_zero_scale_d_f32(D, N=8)
            for t in cuda_threads(0, 128):
                y[t] = D[t / 2, 0]  # error here



@proc
def zero_fragment_elements(D: f32[16, 8] @ Sm80_RmemMatrixD):
    for i in seq(0, 16):
        for j in seq(0, 8):
            D[i, j] = 0.0


@proc
def fragment_to_plain_proc(y: f32[16, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            D: f32[16, 8] @ Sm80_RmemMatrixD
            for t in cuda_threads(0, 1):
                zero_fragment_elements(D[:, :])  # error here
            Fence(cuda_in_order, cuda_in_order)
            Sm80_mma_store_d_tf32(y[:, :], D[:, :])

@proc
def fragment_window_not_adjacent(b: f32[16, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            B_s: f32[16, 8] @ CudaSmemLinear
            B_r: f32[2, 2, 8, 8] @ Sm80_RmemMatrixB
            Sm80_mma_load_b_pair_nk_tf32_trunc(B_r[0:2, 1, :, :], B_s[:, :])  # error here


# the 8 x 16 accumulator of the swapped tf32 mma and the 16 x 8 one hold different elements in the same registers:
# such a program (zeroed and stored as 16 x 8, multiplied as 8 x 16) passed sync_check and compiled, and on an H200
# stored the product's elements in other places than its sequential meaning (session 26)
@proc
def fragment_tiles_of_two_shapes(y: f32[16, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            D: f32[16, 16] @ Sm80_RmemMatrixD
            Sm80_mma_zero_d_swap_tf32(D[0:8, :])  # error here
            Sm80_mma_store_d_tf32(y[:, :], D[:, 0:8])


# A name for a window of fragment registers: the instrs place a fragment window's registers from the window itself,
# which an alias hides (Sm80 instr templates failed inside exo, the wgmma call failed nvcc; audit of session 27).
@proc
def fragment_alias(y: f32[16, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            D: f32[2, 16, 8] @ Sm80_RmemMatrixD
            Dw = D[1, :, :]  # error here
            Sm80_mma_zero_d_tf32(Dw)
            Sm80_mma_store_d_tf32(y[:, :], Dw)


@proc
def cp_async_by_warp(A: f32[4] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            A_smem: f32[4] @ CudaSmemLinear
            with CudaAsync(Sm80_cp_async_instr):
                Sm80_cp_async_f32(A_smem[0:4], A[0:4], size=16)  # error here


@proc
def wgmma_zero_by_misaligned_warps(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=[CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 4)]):
        for task in cuda_tasks(0, 1):
            with CudaWarps(name="consumer"):
                D: f32[64, 8] @ Sm90_RmemMatrixD
                Sm90_zero_scale_d_f32(D, N=8)  # error here


@proc
def wgmma_zero_in_a_64_thread_cta(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, 1):
            D: f32[64, 8] @ Sm90_RmemMatrixD
            Sm90_zero_scale_d_f32(D, N=8)  # error here


@proc
def cp_async_misaligned(A: f32[64] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            A_smem: f32[68] @ CudaSmemLinear
            for t in cuda_threads(0, 15):
                with CudaAsync(Sm80_cp_async_instr):
                    Sm80_cp_async_f32(A_smem[4 * t + 2:4 * t + 6], A[4 * t:4 * t + 4], size=16)  # error here


@proc
def ldmatrix_rows_misaligned(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            A_s: f16[16, 20] @ CudaSmemLinear
            for w in cuda_threads(0, 1, unit=cuda_warp):
                A_r: f16[16, 16] @ Sm80_RmemMatrixA
                Sm80_mma_load_a_f16(A_r, A_s[0:16, 0:16])  # error here


@proc
def cp_async_to_a_column(A: f32[16, 4] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            A_smem: f32[4, 16] @ CudaSmemLinear
            for t in cuda_threads(0, 16):
                with CudaAsync(Sm80_cp_async_instr):
                    Sm80_cp_async_f32(A_smem[0:4, t], A[t, 0:4], size=16)  # error here


@proc
def cp_async_from_a_column_alias(src: f32[8, 8] @ CudaGmemLinear):
    # the column through an alias was copied as 16 adjacent bytes of a row (audit of session 31)
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            buf: f32[8] @ CudaSmemLinear
            col = src[:, 4]
            for t in cuda_threads(0, 2):
                with CudaAsync(Sm80_cp_async_instr):
                    Sm80_cp_async_f32(buf[4 * t:4 * t + 4], col[4 * t:4 * t + 4], size=16)  # error here


@proc
def cp_async_misaligned_through_alias(src: f32[8, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            buf: f32[8] @ CudaSmemLinear
            rows = src[:, 1:9]
            for t in cuda_threads(0, 2):
                with CudaAsync(Sm80_cp_async_instr):
                    Sm80_cp_async_f32(buf[4 * t:4 * t + 4], rows[t, 0:4], size=16)  # error here


@proc
def mma_store_to_a_bare_alias(C: f32[16, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            D: f32[16, 8] @ Sm80_RmemMatrixD
            Cw = C[:, :]
            Sm80_mma_zero_d_tf32(D)
            Sm80_mma_store_d_tf32(Cw, D)  # error here


@proc
def scalar_write_by_cta(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, 1):
            for w in cuda_threads(0, 2, unit=cuda_warp):
                y[0] = 1.0  # error here


@proc
def block_dim_not_warps(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=100):  # error here
        for task in cuda_tasks(0, 1):
            pass


@proc
def cluster_dim_not_pow2(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32, clusterDim=3):  # error here
        for task in cuda_tasks(0, 1):
            pass


@proc
def block_dim_too_big(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=2048):  # error here
        for task in cuda_tasks(0, 1):
            pass


@proc
def cluster_dim_too_big(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32, clusterDim=16):  # error here
        for task in cuda_tasks(0, 1):
            pass


@proc
def warp_name_not_identifier(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=[CudaWarpConfig("1st", 1)]):  # error here
        for task in cuda_tasks(0, 1):
            pass


@proc
def warp_name_twice(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=[CudaWarpConfig("a", 1), CudaWarpConfig("a", 1)]):  # error here
        for task in cuda_tasks(0, 1):
            pass


@proc
def setmaxnreg_bad_value(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=[CudaWarpConfig("a", 4, setmaxnreg=30)]):  # error here
        for task in cuda_tasks(0, 1):
            pass


MIXED_REGS = [CudaWarpConfig("producer", 1, setmaxnreg=40), CudaWarpConfig("consumer", 3, setmaxnreg=232)]


@proc
def setmaxnreg_mixed(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=MIXED_REGS):  # error here
        for task in cuda_tasks(0, 1):
            pass


@proc
def setmaxnreg_partial_warpgroup(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=[CudaWarpConfig("a", 2, setmaxnreg=40)]):  # error here
        for task in cuda_tasks(0, 1):
            pass


# A slice of barriers multicasts to a cluster's CTAs; without a cluster the analysis said that the dimensions
# indexed by the CTA's rank differ between uses (audit 38)
@proc
def arrive_on_a_slice_without_a_cluster(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            bar: barrier[2] @ CudaMbarrier
            Arrive(cuda_in_order, 1) >> bar[:]  # error here
            Await(bar[0], cuda_in_order, ~0)


# Four CTAs of a cluster of two: the enclosing collective, the whole cluster, was named by its repr
# `CollUnit((clusterDim * blockDim,), (clusterDim * blockDim,))` (audit 38)
@proc
def ctas_past_the_cluster(y: f32[4, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32, clusterDim=2):
        for task in cuda_tasks(0, 1):
            for cta in cuda_threads(0, 4, unit=cuda_cta_in_cluster):  # error here
                for t in cuda_threads(0, 32):
                    y[cta, t] = 0.0


# 44 warps: the block's size is the error, not the registers its budgets would need (said first, audit 38)
@proc
def setmaxnreg_too_many_threads(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=[CudaWarpConfig("a", 4, setmaxnreg=40), CudaWarpConfig("b", 40, setmaxnreg=232)]):  # error here
        for task in cuda_tasks(0, 1):
            pass


@proc
def unknown_warp_name(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=[CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 1)]):
        for task in cuda_tasks(0, 1):
            with CudaWarps(name="consumr"):  # error here
                pass


@proc
def warp_name_without_config(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, 1):
            with CudaWarps(name="producer"):  # error here
                pass


@proc
def named_range_too_wide(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=[CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 2)]):
        for task in cuda_tasks(0, 1):
            with CudaWarps(0, 3, name="consumer"):  # error here
                pass


@proc
def nested_name_change(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=[CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 2)]):
        for task in cuda_tasks(0, 1):
            with CudaWarps(name="consumer"):
                with CudaWarps(name="producer"):  # error here
                    pass


@proc
def numbered_outside_named(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=[CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 2)]):
        for task in cuda_tasks(0, 1):
            with CudaWarps(0, 1):  # error here
                pass


@proc
def warps_out_of_range(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            with CudaWarps(2, 5):  # error here
                pass


@proc
def plain_call_by_warp(y: f32[32, 4] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            zero4(y[0, :])  # error here


@proc
def rows_by_lanes(y: f32[4, 32] @ CudaGmemLinear, w: index):
    assert w >= 0 and w < 4
    for lane in cuda_threads(0, 32):
        y[w, lane] = 0.0


@proc
def plain_call_with_thread_loops_by_warps(y: f32[4, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            for w in cuda_threads(0, 4, unit=cuda_warp):
                rows_by_lanes(y, w)  # error here


# ---------------------------------------------------------------- rejected procs: timelines


@proc
def async_on_cpu_timeline(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            with CudaAsync(cpu_in_order_instr):  # error here
                pass


@proc
def exo_instr_in_cuda(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 32):
                r: f32[1] @ CudaRmem
                exo_cpu_zero(r[0:1])  # error here


@proc
def plain_call_writes_gmem_on_cpu(y: f32[32, 4] @ CudaGmemLinear):
    zero4(y[0, :])  # error here


@proc
def cp_async_outside_async(A: f32[4] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            A_smem: f32[4] @ CudaSmemLinear
            for t in cuda_threads(0, 1):
                Sm80_cp_async_f32(A_smem[0:4], A[0:4], size=16)  # error here


@proc
def mma_inside_async(D: f32[16, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            D_rmem: f32[16, 8] @ Sm80_RmemMatrixD
            with CudaAsync(Sm80_cp_async_instr):
                Sm80_mma_zero_d_tf32(D_rmem[:, :])  # error here


@proc
def scalar_code_in_async(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 32):
                with CudaAsync(Sm80_cp_async_instr):
                    y[t] = 0.0  # error here


@proc
def dram_in_cuda(x: f32[32], y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 32):
                y[t] = x[t]  # error here


@proc
def gmem_on_cpu(x: f32[32], y: f32[32] @ CudaGmemLinear):
    for i in seq(0, 32):
        x[i] = y[i]  # error here


@proc
def smem_lifted_to_cpu(y: f32[32] @ CudaGmemLinear):
    tile: f32[32] @ CudaSmemLinear  # error here
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 32):
                tile[t] = y[t]


@proc
def gmem_alloc_in_cuda(y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            tmp: f32[32] @ CudaGmemLinear  # error here
            for t in cuda_threads(0, 32):
                tmp[t] = y[t]


@proc
def tensor_map_in_cuda(A: f32[64, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            A_tm = A[:, :] @ Sm90_tensorMap(128, 64, 32)  # error here
            A_s: f32[64, 32] @ Sm90_SmemSwizzled(128)
            bar: barrier @ CudaMbarrier
            for t in cuda_threads(0, 1):
                with CudaAsync(tma_to_smem_async_instr):
                    Sm90_copy_tensor_to_smem_swizzled_2f32(A_s, A_tm[0:64, 0:32], box=(64, 32)) >> bar
                Arrive(tma_to_smem_async, 1) >> bar
            Await(bar, cuda_in_order, ~0)


@proc
def fill_kernel(n: size, x: f32[n] @ CudaGmemLinear):
    assert n % 32 == 0
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n / 32):
            for t in cuda_threads(0, 32):
                x[task * 32 + t] = 0.0


@proc
def calls_kernel(n: size, x: f32[n] @ CudaGmemLinear):
    assert n % 32 == 0
    fill_kernel(n, x)


@proc
def calls_rejected_proc(y: f32[32] @ CudaGmemLinear):
    smem_lifted_to_cpu(y)


@proc
def cpu_fence_in_cuda(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n):
            Fence(cpu_in_order, cpu_in_order)  # error here


@proc
def scalar_in_cuda(n: size, a: f32, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n):
            for t in cuda_threads(0, 32):
                x[task] = a  # error here


# launch arguments: what a device function uses from outside it must be a size, index, bool, whole CudaGmemLinear
# tensor or tensor map (these passed sl.analyze and were refused only when compiled)
@proc
def smem_argument(x: f32[4] @ CudaSmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 1):
                x[0] = 1.0  # error here


@proc
def gmem_scalar_in_cuda(n: size, a: f32 @ CudaGmemLinear, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n):
            for t in cuda_threads(0, 1):
                x[task] = a  # error here


@proc
def window_argument_in_cuda(x: [f32][4] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 1):
                x[0] = 1.0  # error here


@proc
def cpu_window_in_cuda(x: f32[8] @ CudaGmemLinear):
    xw = x[0:4]
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 1):
                xw[0] = 2.0  # error here


# exo's own checks at C generation (were TypeErrors from inside exo at a build or run_cpu)
@proc
def mixed_precisions(a: f16[4] @ DRAM, y: f32[4] @ DRAM):
    for i in seq(0, 4):
        y[i] = a[i] * a[i] + y[i]  # error here


@proc
def racy_par_loop(x: f32[8] @ DRAM):
    for i in par(0, 8):  # error here
        x[0] += x[i]


@proc
def zero_four(x: f32[4] @ DRAM):
    for i in seq(0, 4):
        x[i] = 0.0


@proc
def window_for_tensor(y: f32[8] @ DRAM):
    zero_four(y[0:4])  # error here
