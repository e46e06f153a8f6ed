"""Test programs for the abstract machine's wgmma model (issue 12 item 5): a warpgroup accumulates into
registers with an asynchronous tensor-core instr reading shared memory (seed 003, "wgmma").

The instrs stand in for Sm90's (platforms/Sm90.py): what the machine needs of them is their instr-tl
(wgmma_async_instr), their collective unit (a warpgroup) and their operands' usage-tls.
"""

from __future__ import annotations

from pathlib import Path

from exo.API import Procedure

from spork_lab import instr, parse_source, proc
from spork_lab.core.memories import CudaMemory
from spork_lab.core.timelines import wgmma_usage_a, wgmma_usage_b, wgmma_usage_d
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm90 import *
from spork_lab.sync.mutants import without_syncs
from spork_lab.scheduling import insert_fence, rename


class WgAccumulator(CudaMemory):
    """Registers of a warpgroup holding a wgmma accumulator (as Sm90_RmemMatrixD)."""

    native_unit = cuda_warpgroup
    alloc_tls = frozenset({cuda_in_order_instr})
    read_tls = frozenset({cuda_in_order_instr, wgmma_async_instr})
    write_tls = frozenset({cuda_in_order_instr, wgmma_async_instr})


@instr("wg_zero({D_data});", coll_unit=cuda_warpgroup, convergent=True)
def wg_zero(D: [f32][64, 8] @ WgAccumulator):
    for i in seq(0, 64):
        for j in seq(0, 8):
            D[i, j] = 0.0


@instr(
    "wg_mma({D_data}, {A_data}, {B_data});",
    instr_tl=wgmma_async_instr,
    coll_unit=cuda_warpgroup,
    usage_tls={"D": wgmma_usage_d, "A": wgmma_usage_a, "B": wgmma_usage_b},
)
def wg_mma(D: [f32][64, 8] @ WgAccumulator, A: [f32][64, 8] @ CudaSmemLinear, B: [f32][8, 8] @ CudaSmemLinear):
    for i in seq(0, 64):
        for j in seq(0, 8):
            for k in seq(0, 8):
                D[i, j] += A[i, k] * B[k, j]


@instr("wg_store({C_data}, {D_data});", coll_unit=cuda_warpgroup, convergent=True)
def wg_store(C: [f32][64, 8] @ CudaGmemLinear, D: [f32][64, 8] @ WgAccumulator):
    for i in seq(0, 64):
        for j in seq(0, 8):
            C[i, j] = D[i, j]


# Syncs: 0 the proxy fence (generic smem writes -> wgmma's smem reads), 1 the wgmma fence (the zeroed
# registers -> wgmma), 2/3 the commit group's arrive and wait (wgmma done -> the store reads D), 4 the CTA
# fence before the next tile overwrites A_s and B_s.
@proc
def wgmma_tiles(
    k: size, A: f32[64, k, 8] @ CudaGmemLinear, B: f32[k, 8, 8] @ CudaGmemLinear, C: f32[64, 8] @ CudaGmemLinear
):
    assert k >= 2
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            cg: barrier @ CudaCommitGroup
            for wg in cuda_threads(0, 1, unit=cuda_warpgroup):
                D: f32[64, 8] @ WgAccumulator
                wg_zero(D)
                for kt in seq(0, k):
                    A_s: f32[64, 8] @ CudaSmemLinear
                    B_s: f32[8, 8] @ CudaSmemLinear
                    for t in cuda_threads(0, 64, unit=2 * cuda_thread):
                        for q in cuda_threads(0, 2):
                            for j in seq(0, 4):
                                A_s[t, 4 * q + j] = A[t, kt, 4 * q + j]
                    for t in cuda_threads(0, 64):
                        B_s[t / 8, t % 8] = B[kt, t / 8, t % 8]
                    Fence(cuda_in_order, wgmma_async_smem)
                    Fence(wgmma_fence_1, wgmma_fence_2)
                    with CudaAsync(wgmma_async_instr):
                        wg_mma(D, A_s, B_s)
                        wg_mma(D, A_s, B_s)  # the same accumulator again: no fence needed between
                    Arrive(wgmma_async, 1) >> cg
                    Await(cg, cuda_in_order, 0)
                    Fence(cuda_in_order, cuda_in_order)
                wg_store(C, D)


wgmma_no_proxy_fence = rename(without_syncs(wgmma_tiles, [0]), "wgmma_no_proxy_fence")
wgmma_no_wgmma_fence = rename(without_syncs(wgmma_tiles, [1]), "wgmma_no_wgmma_fence")
wgmma_no_wait = rename(without_syncs(wgmma_tiles, [2, 3]), "wgmma_no_wait")



# Only wgmma.fence orders a warpgroup's register writes before its wgmma (seed 003, "wgmma"): wgmma_tiles with
# its two fences replaced by one CTA-wide fence whose second sync-tl names wgmma (here the CTA is the
# warpgroup), which lowers to bar.sync and fence.proxy.async, no wgmma.fence, so the zeroed accumulator is
# read and written by the wgmma unordered.
def _cta_fence_only() -> Procedure:
    p = without_syncs(wgmma_tiles, [0, 1])
    return rename(insert_fence(p, p.find_loop("t #1").after(), cuda_in_order, wgmma_async), "wgmma_cta_fence_only")


wgmma_cta_fence_only = _cta_fence_only()


# wgmma's A operand in registers (rmem_a) is a register operand like the accumulator: the wgmma.fence before
# its load does not order the load, and the proxy fence after it is no wgmma.fence.
@proc
def wgmma_rmem_a_fenced_before_its_load(k: size, A: f32[64, 8] @ CudaGmemLinear, B: f32[8, 8] @ CudaGmemLinear,
                                        C: f32[64, 8] @ CudaGmemLinear):
    assert k >= 2
    B_tm = B[:, :] @ Sm90_tensorMap(32, 8, 8)
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            A_s: f32[64, 8] @ CudaSmemLinear
            B_s: f32[8, 8] @ Sm90_SmemSwizzled(32)
            D: f32[64, 8] @ Sm90_RmemMatrixD
            A_r: f32[64, 8] @ Sm90_RmemMatrixA
            bar: barrier @ CudaMbarrier
            cg: barrier @ CudaCommitGroup
            for t in cuda_threads(0, 1):
                with CudaAsync(tma_to_smem_async_instr):
                    Sm90_copy_tensor_to_smem_swizzled_2f32(B_s, B_tm[:, :], box=(8, 8)) >> bar
                Arrive(tma_to_smem_async, 1) >> bar
            for r in cuda_threads(0, 64, unit=2 * cuda_thread):
                for c in cuda_threads(0, 2):
                    for q in seq(0, 4):
                        A_s[r, 4 * c + q] = A[r, 4 * c + q]
            Fence(cuda_in_order, cuda_in_order)
            Await(bar, wgmma_async_smem, ~0)
            Sm90_zero_scale_d_f32(D, N=8)
            Fence(wgmma_fence_1, wgmma_fence_2)
            Sm90_mma_load_a_tf32(A_r, A_s)
            Fence(cuda_in_order, wgmma_async_smem)  # no wgmma.fence
            with CudaAsync(wgmma_async_instr):
                Sm90_mma_async_tf32(D, A_r, B_s, N=8, rmem_a=True)
            Arrive(wgmma_async, 1) >> cg
            Await(cg, cuda_in_order, 0)
            Sm90_mma_store_d_row_major_f32(C, D, N=8)
            Fence(cuda_in_order, cuda_in_order)


# PTX orders accumulator accesses across wgmma of the same shape only: an m64n8 wgmma into the first 8 columns of an
# accumulator, then an m64n16 wgmma into all 16, needs the first's wait and a wgmma.fence between (audit B, c5). The
# machine ordered every wgmma after the earlier ones by program order; on registers that wgmma of two shapes use, it
# now orders none (conservatively: two of one shape in a row would be ordered in PTX).
@proc
def wgmma_two_shapes(k: size, A: f32[64, 8] @ CudaGmemLinear, B: f32[16, 8] @ CudaGmemLinear,
                     C: f32[64, 16] @ CudaGmemLinear):
    assert k >= 2
    B_tm = B[:, :] @ Sm90_tensorMap(32, 16, 8)
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            A_s: f32[64, 8] @ CudaSmemLinear
            B_s: f32[16, 8] @ Sm90_SmemSwizzled(32)
            D: f32[64, 16] @ Sm90_RmemMatrixD
            A_r: f32[64, 8] @ Sm90_RmemMatrixA
            bar: barrier @ CudaMbarrier
            cg: barrier @ CudaCommitGroup
            for t in cuda_threads(0, 1):
                with CudaAsync(tma_to_smem_async_instr):
                    Sm90_copy_tensor_to_smem_swizzled_2f32(B_s, B_tm[:, :], box=(16, 8)) >> bar
                Arrive(tma_to_smem_async, 1) >> bar
            for r in cuda_threads(0, 64, unit=2 * cuda_thread):
                for c in cuda_threads(0, 2):
                    for q in seq(0, 4):
                        A_s[r, 4 * c + q] = A[r, 4 * c + q]
            Fence(cuda_in_order, cuda_in_order)
            Await(bar, wgmma_async_smem, ~0)
            Sm90_zero_scale_d_f32(D, N=16)
            Sm90_mma_load_a_tf32(A_r, A_s)
            Fence(wgmma_fence_1, wgmma_fence_2)
            with CudaAsync(wgmma_async_instr):
                Sm90_mma_async_tf32(D[:, 0:8], A_r, B_s[0:8, :], N=8, rmem_a=True)
            Arrive(wgmma_async, 1) >> cg
            Await(cg, cuda_in_order, 0)
            Fence(wgmma_fence_1, wgmma_fence_2)  # sync 6: orders the m64n8 results before the m64n16 wgmma
            with CudaAsync(wgmma_async_instr):
                Sm90_mma_async_tf32(D, A_r, B_s, N=16, rmem_a=True)
            Arrive(wgmma_async, 1) >> cg
            Await(cg, cuda_in_order, 0)
            Sm90_mma_store_d_row_major_f32(C, D, N=16)
            Fence(cuda_in_order, cuda_in_order)


wgmma_two_shapes_unfenced = rename(without_syncs(wgmma_two_shapes, [4, 5, 6]), "wgmma_two_shapes_unfenced")


# One m64n256 accumulator as two m64n128 halves: wgmma of one shape on two windows that share no register, back to
# back without a wait (PTX orders wgmma of one shape on the same registers; these are apart).
@proc
def wgmma_halves(A: f32[64, 32] @ CudaGmemLinear, B: f32[256, 32] @ CudaGmemLinear, C: f32[64, 256] @ CudaGmemLinear):
    A_tm = A[:, :] @ Sm90_tensorMap(128, 64, 32)
    B_tm = B[:, :] @ Sm90_tensorMap(128, 256, 32)
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            A_s: f32[64, 32] @ Sm90_SmemSwizzled(128)
            B_s: f32[256, 32] @ Sm90_SmemSwizzled(128)
            D: f32[64, 256] @ Sm90_RmemMatrixD
            bar: barrier @ CudaMbarrier
            cg: barrier @ CudaCommitGroup
            Sm90_zero_scale_d_f32(D, N=256)
            for t in cuda_threads(0, 1):
                with CudaAsync(tma_to_smem_async_instr):
                    Sm90_copy_tensor_to_smem_swizzled_2f32(A_s, A_tm[0:64, 0:32], box=(64, 32)) >> bar
                    Sm90_copy_tensor_to_smem_swizzled_2f32(B_s, B_tm[0:256, 0:32], box=(256, 32)) >> bar
                Arrive(tma_to_smem_async, 1) >> bar
            Await(bar, wgmma_async_smem, ~0)
            Fence(wgmma_fence_1, wgmma_fence_2)
            with CudaAsync(wgmma_async_instr):
                for kk in seq(0, 4):
                    Sm90_mma_async_tf32(D[:, 0:128], A_s[:, 8 * kk : 8 * kk + 8], B_s[0:128, 8 * kk : 8 * kk + 8], N=128)
                    Sm90_mma_async_tf32(D[:, 128:256], A_s[:, 8 * kk : 8 * kk + 8], B_s[128:256, 8 * kk : 8 * kk + 8], N=128)
            Arrive(wgmma_async, 1) >> cg
            Await(cg, cuda_in_order, 0)
            Sm90_mma_store_d_row_major_f32(C[:, :], D, N=256)


# The second half moved to columns 64:192: two windows of one shape that overlap without being the same registers
# (registers 32-63 in both). PTX does not order them: sync_check passed it until session 27, and on an H200 4073 of
# the 16384 elements of C differed from the sequential result (audit A, case wgmma_overlap_windows).
wgmma_overlapping_windows = rename(parse_source(str(wgmma_halves).replace("D[0:64, 128:256]", "D[0:64, 64:192]")),
                                   "wgmma_overlapping_windows")


def _halves_as_a_loop(step: int, count: int, name: str):
    """wgmma_halves with its wgmma of each K step written as one in a loop over `count` accumulator windows of 128
    columns, `step` columns apart (make_gemm's NW < BN writes its wgmma so)."""
    text = str(wgmma_halves)
    first, end = text.index("Sm90_mma_async_tf32(D[0:64, 0:128],"), text.index("Arrive(wgmma_async, 1) >> cg")
    loop = (f"for j in seq(0, {count}):\n" + " " * 24 + f"Sm90_mma_async_tf32(D[:, {step} * j:{step} * j + 128], "
            f"A_s[:, 8 * kk:8 * kk + 8], B_s[{step} * j:{step} * j + 128, 8 * kk:8 * kk + 8], N=128)\n" + " " * 12)
    return rename(parse_source(text[:first] + loop + text[end:]), name)


# The halves as `D[:, 128 * j:128 * j + 128]` for j < 2: one statement whose windows at its two runs are apart.
wgmma_halves_in_a_loop = _halves_as_a_loop(128, 2, "wgmma_halves_in_a_loop")

# Windows of 128 columns 64 apart (0:128, 64:192, 128:256): each run overlaps the one before without being the same
# registers, so the wgmma are unordered (each needs the earlier ones' wait and a wgmma fence).
wgmma_sliding_windows = _halves_as_a_loop(64, 3, "wgmma_sliding_windows")


# wgmma_halves completed by a Fence naming wgmma instead of a commit group and its wait: the Fence commits what is
# not yet committed before its wait_group (a wait_group alone waits for committed groups only).
wgmma_completed_by_fence = rename(parse_source(str(wgmma_halves).replace(
    "Arrive(wgmma_async, 1) >> cg\n            Await(cg, cuda_in_order, 0)",
    "Fence(wgmma_async, cuda_generic_and_async_proxy)")), "wgmma_completed_by_fence")


@instr("tma_load({dst_data}, {src_data});", instr_tl=tma_to_smem_async_instr)
def tma_load(dst: [f32][8] @ CudaSmemLinear, src: [f32][8] @ CudaGmemLinear):
    for i in seq(0, 8):
        dst[i] = src[i]


# A TMA load that trails no mbarrier (a hand-written instr on the TMA instr-tl, without `>> bar`): nothing ever
# completes it, not even a Fence naming its sync-tl (the code generator has no wait for it), so the read is RAW.
@proc
def uses_tma(src: f32[8] @ CudaGmemLinear, dst: f32[8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            s: f32[8] @ CudaSmemLinear
            for t in cuda_threads(0, 1):
                with CudaAsync(tma_to_smem_async_instr):
                    tma_load(s, src)
                Fence(tma_to_smem_async, cuda_in_order)
                for i in seq(0, 8):
                    dst[i] = s[i]


# B_s holds eight 8-row swizzle atoms, each loaded by one TMA box; `B_s[0:8, 0, 0:8]` is the first row of each atom,
# rows 1024 bytes apart, but a wgmma descriptor reads its operand's rows one swizzle row (128 bytes) apart. The
# analysis refuses it; on an H200, 407 of the 512 elements of C were wrong while sync_check passed (audit of
# session 33, case k_wgmma_b_rows_strided). `B_s[i, 0:8, 0:8]`, the rows of one atom, is the right form.
@proc
def wgmma_b_rows_of_atoms(A: f32[64, 32] @ CudaGmemLinear, B: f32[64, 32] @ CudaGmemLinear, C: f32[64, 8] @ CudaGmemLinear):
    A_tm = A[:, :] @ Sm90_tensorMap(128, 64, 32)
    B_tm = B[:, :] @ Sm90_tensorMap(128, 8, 32)
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            A_s: f32[64, 32] @ Sm90_SmemSwizzled(128)
            B_s: f32[8, 8, 32] @ Sm90_SmemSwizzled(128)
            D: f32[64, 8] @ Sm90_RmemMatrixD
            bar: barrier @ CudaMbarrier
            cg: barrier @ CudaCommitGroup
            Sm90_zero_scale_d_f32(D, N=8)
            for t in cuda_threads(0, 1):
                with CudaAsync(tma_to_smem_async_instr):
                    Sm90_copy_tensor_to_smem_swizzled_2f32(A_s, A_tm[:, :], box=(64, 32)) >> bar
                    Sm90_copy_tensor_to_smem_swizzled_2f32(B_s[0, :, :], B_tm[0:8, :], box=(8, 32)) >> bar
                    Sm90_copy_tensor_to_smem_swizzled_2f32(B_s[1, :, :], B_tm[8:16, :], box=(8, 32)) >> bar
                    Sm90_copy_tensor_to_smem_swizzled_2f32(B_s[2, :, :], B_tm[16:24, :], box=(8, 32)) >> bar
                    Sm90_copy_tensor_to_smem_swizzled_2f32(B_s[3, :, :], B_tm[24:32, :], box=(8, 32)) >> bar
                    Sm90_copy_tensor_to_smem_swizzled_2f32(B_s[4, :, :], B_tm[32:40, :], box=(8, 32)) >> bar
                    Sm90_copy_tensor_to_smem_swizzled_2f32(B_s[5, :, :], B_tm[40:48, :], box=(8, 32)) >> bar
                    Sm90_copy_tensor_to_smem_swizzled_2f32(B_s[6, :, :], B_tm[48:56, :], box=(8, 32)) >> bar
                    Sm90_copy_tensor_to_smem_swizzled_2f32(B_s[7, :, :], B_tm[56:64, :], box=(8, 32)) >> bar
                Arrive(tma_to_smem_async, 1) >> bar
            Await(bar, wgmma_async_smem, ~0)
            Fence(wgmma_fence_1, wgmma_fence_2)
            with CudaAsync(wgmma_async_instr):
                for kk in seq(0, 4):
                    Sm90_mma_async_tf32(D, A_s[:, 8 * kk : 8 * kk + 8], B_s[0:8, 0, 8 * kk : 8 * kk + 8], N=8)
            Arrive(wgmma_async, 1) >> cg
            Await(cg, cuda_in_order, 0)
            Sm90_mma_store_d_row_major_f32(C, D, N=8)


def wgmma_b_rows_of_atoms_reading(a: str, b: str) -> Procedure:
    """wgmma_b_rows_of_atoms with its wgmma reading the windows `a` and `b` (of A_s, B_s and the iterator kk), its
    lines numbered as in this file."""
    first = wgmma_b_rows_of_atoms._loopir_proc.srcinfo.lineno
    lines = Path(__file__).read_text().splitlines()[first - 1:]
    end = next(i for i, line in enumerate(lines) if i and line and not line[0].isspace())  # the def's last line + 1
    src = "\n".join(lines[:end]).replace("A_s[:, 8 * kk : 8 * kk + 8], B_s[0:8, 0, 8 * kk : 8 * kk + 8]", f"{a}, {b}")
    return parse_source(src, filename=__file__, first_line=first)
