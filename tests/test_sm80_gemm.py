"""The Sm80 GEMM example (examples/sm80_gemm.py): its schedule replays, it is well synchronized, and each
racy mutant of its synchronization is flagged; on a GPU it matches float64 at several shapes."""

from __future__ import annotations

import dataclasses
import linecache
import re

import numpy as np
import pytest
from conftest import ir_equal, runnable_examples

import spork_lab as sl
from spork_lab.core.sync_stmts import sync_spec_of
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *
from spork_lab.sync.mutants import sync_cursors, with_await_n, without_syncs

runnable_examples()  # puts examples/ on sys.path
import sm80_gemm as g  # noqa: E402

# Small tiles (4 warps of 32 x 32, BK = 32, 3 slots) so that at K = 128 the main loop runs and reuses a slot.
SMALL = g.Config("f16", BM=64, BN=64, BK=32, WM=32, WN=32, S=3)


@pytest.fixture(scope="module")
def small():
    return g.schedule(g.naive(SMALL), SMALL)


# Config refuses up front what the schedule cannot build (before: an exo error, KeyError or racy kernel deep in a step).
REFUSED = [(dict(fragments_ahead=True, S=2), r"fragments_ahead=True needs S >= 3"),
           (dict(fragments_ahead=False, S=1), r"S=1 is not supported"),
           (dict(b_nk=True), r"b_nk=True is for tf32 only \(got dtype='f16'\)"),
           (dict(dtype="bf16", b_nk=True), r"b_nk=True is for tf32 only \(got dtype='bf16'\)"),
           (dict(BK=8), r"BK=8 is not a multiple of 16"),
           (dict(BK=16), r"fragments_ahead=True needs two k-steps .* got BK=16"),
           (dict(dtype="f32"), r"dtype='f32' is not supported"),
           (dict(late_copy=True), r"late_copy=True is a variant"),
           (dict(WM=8), r"WM=8 is not a multiple of 16"),
           (dict(WN=8), r"WN=8 is not a multiple of 16"),
           (dict(dtype="tf32", swap_ab=True, BM=32, WM=8), r"WM=8 is not a multiple of 16"),
           (dict(BM=96, WM=64), r"BM=96 is not a multiple of WM=64"),
           (dict(BM=32, BN=32, WM=16, WN=16, BK=16, fragments_ahead=False), r"BM=32, BK=16: A's tile cannot be copied"),
           (dict(dtype="tf32", BN=256, WM=64, WN=256), r"BK=32, BN=256: B's tile cannot be copied")]  # fmt: skip


@pytest.mark.parametrize("changes, message", REFUSED,
                         ids=[",".join(f"{k}={v}" for k, v in c.items()) for c, _ in REFUSED])
def test_config_refuses_what_the_schedule_cannot_build(changes, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(SMALL, **changes)
    # where they are supported (each of these schedules) the same parameters still construct
    for ok in [dict(S=2, fragments_ahead=False), dict(BK=16, fragments_ahead=False), dict(dtype="tf32", BK=16),
               dict(dtype="tf32", b_nk=True), dict(BM=32, BN=32, WM=16, WN=16)]:
        assert dataclasses.replace(SMALL, **ok)


def test_steps_replay_to_the_kernel(small):
    p = g.naive(SMALL)
    for k, step in enumerate(g.STEPS):
        p = step(p, SMALL)
    assert ir_equal(p._loopir_proc, small._loopir_proc)
    text = str(small)
    assert "D: f32[2, 2, 2, 4, 16, 8] @ Sm80_RmemMatrixD" in text  # CTA-scope accumulators, one shard per warp
    assert "A_s: f16[3, 64, 40] @ CudaSmemLinear" in text  # 3-slot ring, rows padded by 16 bytes
    assert "Await(cg, cuda_in_order, 1)" in text and "Sm80_mma_load_b_pair_f16" in text


@pytest.mark.parametrize("dtype", ["f16", "tf32_swap"])
def test_issue_size_passes_sync_check(dtype):
    assert sl.sync_check(g.sync_check_kernel(dtype), M=256, N=256, K=128).ok


def test_hazards_name_the_instr_calls_scheduling_made(small):
    """Every statement of the schedule carries the naive loop nest's line (`for i in seq(0, M):`); a report names
    a scheduled instr call as printed, not by that line."""
    report = sl.sync_check(without_syncs(small, [1]), M=64, N=64, K=128)  # the Await before the first products
    pairs = {(h.access.stmt.text.split("(")[0], h.other.stmt.text.split("(")[0]) for h in report.hazards}
    assert pairs == {("Sm80_mma_load_a_f16", "Sm80_cp_async_f16"), ("Sm80_mma_load_b_pair_f16", "Sm80_cp_async_f16")}
    (line,) = {h.access.stmt.line for h in report.hazards}
    assert linecache.getline(g.__file__, line).strip() == "for i in seq(0, M):"  # what reports quoted before
    assert f"between `Sm80_cp_async_f16(...)` (line {line}) and `Sm80_mma_load_a_f16(...)` (line {line})" in \
        report.hazards[0].fix  # not "between line 132 and line 132"


def _mutants(p):
    """(description, mutant) for each sync statement dropped and each Await's N moved to wait for less."""
    for i, c in enumerate(sync_cursors(p)):
        spec = sync_spec_of(c._impl._node)
        yield f"drop #{i} {spec.kind}", without_syncs(p, [i])
        if spec.is_await:
            yield f"#{i} Await N {spec.N} -> {spec.N + 1}", with_await_n(p, i, spec.N + 1)


# The survivors are not racy: pipeline_loop also puts an Await before the products stage, which with fragments
# ahead the Await before the same tile's first fragment loads, one time step earlier, already covers.
SURVIVORS = {False: [], True: ["drop #4 Await", "#4 Await N 2 -> 3", "drop #8 Await", "#8 Await N 2 -> 3"]}


@pytest.mark.parametrize("ahead", [False, True])
def test_racy_mutants_are_flagged(ahead):
    cfg = dataclasses.replace(SMALL, fragments_ahead=ahead)
    p = g.schedule(g.naive(cfg), cfg)
    assert sl.sync_check(p, M=64, N=64, K=128).ok
    survivors = [what for what, m in _mutants(p) if sl.sync_check(m, M=64, N=64, K=128).ok]
    assert survivors == SURVIVORS[ahead]


def test_fragments_ahead_is_the_hand_db_order():
    """Step 9 with fragments_ahead (the default) in the steady state: copies and their commit group, the
    products up to the last k-step's fragment loads (each k-step's loads before the k-step before's products),
    then the wait for the next tile (S - 2 groups in flight) and the barrier, that tile's first fragments, the
    last k-step's products; no guards, and the first fragments' registers are one set (read before they are
    refilled in the time step: no ring)."""
    p = g.schedule(g.naive(SMALL), SMALL)
    assert "A_r: f16[2, 2, 2, 16, 16] @ Sm80_RmemMatrixA" in str(p) and not re.search(r"% 2\b", str(p))
    _, _, cu, _ = sl.compile_procs_to_strings([p], "gemm")
    start = cu.index("for (int kt = 0; kt < K / 32 - 2; kt++)")
    steady = cu[start : cu.index("for (int kt = K / 32 - 2;", start)]
    marks = ["cp.async.cg.shared.global", "cp.async.commit_group", "cp.async.wait_group 2", "ldmatrix",
             "mma.sync", "cp.async.wait_group 1", "__syncthreads", "ldmatrix", "mma.sync"]
    at = 0
    for mark in marks:
        at = steady.index(mark, at) + 1
    assert "if (" not in steady and steady.count("__syncthreads") == 1


def test_fragments_ahead_with_middle_k_steps_passes_sync_check():
    """Four k-steps per tile (the defaults' BK = 64, S = 4; six K tiles: every slot reused), where SMALL has two."""
    cfg = dataclasses.replace(SMALL, BK=64, S=4)
    assert sl.sync_check(g.schedule(g.naive(cfg), cfg), M=64, N=64, K=384).ok


def test_tf32_with_b_given_as_nk_loads_every_fragment_with_ldmatrix():
    """With B given as [N, K] both tf32 operands are K-contiguous in shared memory: their fragments load with
    ldmatrix (B two fragments at a time), unrounded, and the GEMM stays well synchronized."""
    cfg = dataclasses.replace(SMALL, dtype="tf32", b_nk=True)
    p = g.schedule(g.naive(cfg), cfg)
    text = str(p)
    assert "B: f32[N, K]" in text and "B_s: f32[3, 64, 36] @ CudaSmemLinear" in text  # rows padded by 16 bytes
    assert "Sm80_mma_load_a_tf32_trunc" in text and "Sm80_mma_load_b_pair_nk_tf32_trunc" in text
    assert sl.sync_check(p, M=64, N=64, K=128).ok
    _, _, cu, _ = sl.compile_procs_to_strings([p], "gemm")
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in cu and "cvt." not in cu and ".trans" not in cu
    rng = np.random.default_rng(0)
    args = g.make_args(rng, proc=p, shape=(64, 128, 64))
    assert args["B"].shape == (128, 64)
    want = args["A"].astype(np.float64) @ args["B"].astype(np.float64).T
    np.testing.assert_allclose(g.reference(**args, proc=p)["C"], want, rtol=1e-6)


def test_tf32_with_swapped_operands_loads_b_in_pairs_of_words():
    """With swap_ab (B given as [K, N]) B's tile is the mma's A operand: two 8-byte loads per lane and fragment, no
    transposing or rounding; A's fragments load as the [N, K] GEMM's B; conflict-free banks with 8-word padding."""
    cfg = dataclasses.replace(SMALL, dtype="tf32", swap_ab=True)
    p = g.schedule(g.naive(cfg), cfg)
    text = str(p)
    assert "B: f32[K, N]" in text and "B_s: f32[3, 32, 72] @ CudaSmemLinear" in text  # rows padded by 8 words
    assert "D: f32[2, 2, 4, 2, 8, 16] @ Sm80_RmemMatrixD" in text  # 8 x 16 accumulator tiles
    assert "A_r: f32[2, 2, 4, 8, 8] @ Sm80_RmemMatrixB" in text and "Sm80_mma_load_b_swap_tf32_trunc" in text
    assert sl.sync_check(p, M=64, N=64, K=128).ok
    banks = sl.bank_conflicts(p, M=64, N=64, K=128)
    assert banks.ok and {a.instr for a in banks.accesses} >= {"Sm80_mma_load_b_swap_tf32_trunc"}
    _, _, cu, _ = sl.compile_procs_to_strings([p], "gemm")
    assert "reinterpret_cast<const float2 *>" in cu and "cvt." not in cu and ".trans" not in cu
    with pytest.raises(ValueError, match="swap_ab is for tf32"):
        dataclasses.replace(SMALL, swap_ab=True)


# One warp: C[:, 0:16] = A @ B through the swapped tf32 instrs, C's rows of odd pitch (the stores' scalar path).
@sl.proc
def swapped_mma(A: f32[16, 8] @ CudaGmemLinear, B: f32[8, 16] @ CudaGmemLinear, C: f32[16, 17] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            A_s: f32[16, 8] @ CudaSmemLinear
            B_s: f32[8, 16] @ CudaSmemLinear
            for r in cuda_threads(0, 16, unit=2 * cuda_thread):
                for c in cuda_threads(0, 2):
                    for i in seq(0, 4):
                        A_s[r, 4 * c + i] = A[r, 4 * c + i]
            for k in cuda_threads(0, 8, unit=4 * cuda_thread):
                for c in cuda_threads(0, 4):
                    for i in seq(0, 4):
                        B_s[k, 4 * c + i] = B[k, 4 * c + i]
            Fence(cuda_in_order, cuda_in_order)
            A_r: f32[2, 8, 8] @ Sm80_RmemMatrixB
            B_r: f32[8, 16] @ Sm80_RmemMatrixA
            D: f32[2, 8, 16] @ Sm80_RmemMatrixD
            Sm80_mma_load_b_pair_nk_tf32_trunc(A_r, A_s)
            Sm80_mma_load_b_swap_tf32_trunc(B_r, B_s)
            for j in seq(0, 2):
                Sm80_mma_zero_d_swap_tf32(D[j, :, :])
                Sm80_mma_swap_tf32(D[j, :, :], A_r[j, :, :], B_r)
                Sm80_mma_store_d_swap_tf32(C[8 * j:8 * j + 8, 0:16], D[j, :, :])
            Fence(cuda_in_order, cuda_in_order)


def test_swapped_mma_passes_sync_check():
    assert sl.sync_check(swapped_mma).ok


def test_swapped_b_load_is_counted_by_half_warps():
    """8-byte loads are served half a warp at a time (Nsight Compute agrees on the GEMM without padding): B_s's
    16-word rows put rows t and t + 2 of each half warp in the same banks, 2 wavefronts where 1 would do; counted
    over the whole warp they would look conflict-free (64 words over 32 banks, 2 deep)."""
    report = sl.bank_conflicts(swapped_mma)
    (load,) = [a for a in report.accesses if a.instr == "Sm80_mma_load_b_swap_tf32_trunc"]
    assert (load.requests, load.wavefronts, load.needed, load.worst_ways) == (4, 8, 4, 2)


@pytest.mark.gpu
def test_swapped_mma_places_every_element():
    """Small integers (exact in tf32 and in their sums): every element of A @ B lands where it belongs."""
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng()
    a = rng.integers(-8, 8, (16, 8)).astype(np.float32)
    b = rng.integers(-8, 8, (8, 16)).astype(np.float32)
    c = cupy.full((16, 17), 7.0, dtype=cupy.float32)
    built = sl.build([swapped_mma]).swapped_mma
    built(cupy.asarray(a), cupy.asarray(b), c)
    cupy.cuda.runtime.deviceSynchronize()
    assert getattr(built.module.lib, f"{built.module.lib_name}_last_error")() == 0
    want = np.full((16, 17), 7.0, np.float32)
    want[:, :16] = a @ b
    np.testing.assert_array_equal(c.get(), want)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["tf32", "f16", "bf16", "tf32_nk", "tf32_swap"])
def test_matches_float64_at_several_shapes(dtype):
    cupy = pytest.importorskip("cupy")
    p = getattr(g, f"sm80_gemm_{dtype}")
    built = getattr(sl.build([p]), p.name())
    rng = np.random.default_rng()
    for M, N, K in [(256, 512, 384), (512, 256, 256), (384, 768, 512), (1024, 1024, 1024)]:
        args = g.make_args(rng, proc=p, shape=(M, N, K))
        want = g.reference(**args, proc=p)["C"]
        dev = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
        built(*dev.values())
        cupy.cuda.runtime.deviceSynchronize()
        assert getattr(built.module.lib, f"{built.module.lib_name}_last_error")() == 0
        got = dev["C"].get()
        assert np.isfinite(got).all(), f"{dtype} {M}x{N}x{K}: elements left unwritten"
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < (2e-3 if dtype.startswith("tf32") else 1e-4), f"{dtype} {M}x{N}x{K}: max rel err {err:.2e}"
