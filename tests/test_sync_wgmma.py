"""The abstract machine's wgmma model (issue 12 item 5; seed 003, "wgmma"), in both engines.

wgmma reads its shared-memory operands and updates its accumulator asynchronously (visible after its
commit group's wait); generic-proxy writes to shared memory reach it through fence.proxy.async (a sync
statement whose second sync-tl holds the wgmma operands), register writes through wgmma.fence, which
orders registers only; the next wgmma of the same warpgroup accumulates into the same registers
without a fence. Each missing piece is reported at the wgmma (or the read of its result).
"""

from __future__ import annotations

import re

import procs_wgmma as W
from procs_sync import line_of
import pytest

from spork_lab.codegen import compile_procs_to_strings
from spork_lab.core import timelines as tl
from spork_lab.sync.checker import sync_check

ENGINES = ("compiled", "python")


def hazards(p, engine: str) -> set:
    report = sync_check(p, k=2, engine=engine)
    assert report.engine == engine and report.engine_note == ""
    return {(h.kind, h.buffer, h.access.stmt.text.split("  #")[0], h.other.stmt.text) for h in report.hazards}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_synchronized_wgmma_pipeline_passes(engine):
    assert hazards(W.wgmma_tiles, engine) == set()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_missing_proxy_fence_is_a_raw_on_the_smem_operands(engine):
    """Fence(wgmma_fence_1, wgmma_fence_2) is wgmma.fence: it does not order the shared-memory writes."""
    assert hazards(W.wgmma_no_proxy_fence, engine) == {
        ("RAW", "A_s", "wg_mma(D, A_s, B_s)", "A_s[t, 4 * q + j] = A[t, kt, 4 * q + j]"),
        ("RAW", "B_s", "wg_mma(D, A_s, B_s)", "B_s[t / 8, t % 8] = B[kt, t / 8, t % 8]"),
    }


@pytest.mark.parametrize("engine", ENGINES)
def test_a_missing_wgmma_fence_is_a_hazard_on_the_accumulator(engine):
    assert hazards(W.wgmma_no_wgmma_fence, engine) == {
        ("RAW", "D", "wg_mma(D, A_s, B_s)", "wg_zero(D)"),
        ("WAW", "D", "wg_mma(D, A_s, B_s)", "wg_zero(D)"),
    }


@pytest.mark.parametrize("engine", ENGINES)
def test_wgmma_results_need_the_commit_groups_wait(engine):
    """Without the wait, the store reads the accumulator too early, and the tiles and the accumulator
    go out of scope (are reused) while the wgmma may still read or write them."""
    found = hazards(W.wgmma_no_wait, engine)
    last_mma = "wg_mma(D, A_s, B_s)"
    assert ("RAW", "D", "wg_store(C, D)", last_mma + "  # the same accumulator again: no fence needed between") in {
        (k, b, a, o) for k, b, a, o in found
    }
    assert {(k, b) for k, b, _, _ in found} == {("RAW", "D"), ("FREE", "D"), ("FREE", "A_s"), ("FREE", "B_s")}


def test_wgmma_fence_orders_registers_only():
    assert tl.wgmma_fence_1.pairs == {(tl.cuda_in_order_instr, tl.register_usage)}
    assert (tl.cuda_in_order_instr, tl.register_usage) in tl.cuda_in_order.pairs  # every in-order sync covers both
    assert tl.needs_proxy_fence(tl.cuda_in_order, tl.wgmma_async_smem)


def test_a_tma_load_without_a_trailing_barrier_never_completes():
    """TMA completes only through the mbarrier its load trails (`>> bar`): without one, not even a Fence on
    its sync-tl makes the data visible, and the read is RAW at the user's line."""
    for engine in ENGINES:
        hazards = sync_check(W.uses_tma, engine=engine).hazards
        assert [(h.kind, h.buffer) for h in hazards][0] == ("RAW", "s")
        assert hazards[0].access.stmt.line == line_of(W.uses_tma, "dst[i] = s[i]")
        assert "procs_wgmma.py" in hazards[0].access.stmt.file and "tma_load(s, src)" in hazards[0].other.stmt.text


@pytest.mark.parametrize("engine", ENGINES)
def test_only_wgmma_fence_orders_register_writes_before_wgmma(engine):
    """A CTA fence whose second sync-tl names wgmma lowers to bar.sync and fence.proxy.async: no wgmma.fence,
    so it does not order the zeroed accumulator (seed 003: wgmma.fence between a register access and the
    wgmma that accesses the register)."""
    assert hazards(W.wgmma_cta_fence_only, engine) == {
        ("RAW", "D", "wg_mma(D, A_s, B_s)", "wg_zero(D)"),
        ("WAW", "D", "wg_mma(D, A_s, B_s)", "wg_zero(D)"),
    }


@pytest.mark.parametrize("engine", ENGINES)
def test_an_a_operand_in_registers_needs_a_wgmma_fence_after_its_load(engine):
    """rmem_a: A is a register operand of wgmma like the accumulator; the wgmma.fence before its load and the
    proxy fence after it leave the load unordered."""
    assert hazards(W.wgmma_rmem_a_fenced_before_its_load, engine) == {
        ("RAW", "A_r", "Sm90_mma_async_tf32(D, A_r, B_s, N=8, rmem_a=True)", "Sm90_mma_load_a_tf32(A_r, A_s)"),
    }


@pytest.mark.parametrize("p, fence", [(W.wgmma_no_wgmma_fence, "Fence(wgmma_fence_1, wgmma_fence_2)"),
                                      (W.wgmma_cta_fence_only, "Fence(wgmma_fence_1, wgmma_fence_2)"),
                                      (W.wgmma_rmem_a_fenced_before_its_load, "Fence(wgmma_fence_1, wgmma_fence_2)"),
                                      (W.wgmma_no_proxy_fence, "Fence(cuda_in_order, wgmma_async)")])
def test_the_fix_of_a_hazard_before_a_wgmma_names_the_fence_that_orders_it(p, fence):
    """Registers written before a wgmma are ordered by wgmma.fence alone; the fix named
    Fence(cuda_in_order, wgmma_async), which lowers without it, and the hazard stayed (audit of session 38).
    Shared memory needs the proxy fence, which that Fence has."""
    report = sync_check(p, k=2)
    assert report.hazards and all(h.fix.startswith(f"a {fence} run by") for h in report.hazards), report


@pytest.mark.parametrize("engine", ENGINES)
def test_wgmma_of_another_shape_needs_a_wgmma_fence(engine):
    """PTX orders accumulator accesses across wgmma of one shape only: an m64n16 wgmma after an m64n8 one on the
    same registers needs its wait and a wgmma.fence."""
    assert hazards(W.wgmma_two_shapes, engine) == set()
    wide, narrow = "Sm90_mma_async_tf32(D, A_r, B_s, N=16, rmem_a=True)", "Sm90_mma_async_tf32(D[:, 0:8], A_r, "
    found = hazards(W.wgmma_two_shapes_unfenced, engine)
    assert {(k, b, a) for k, b, a, _ in found} == {("RAW", "D", wide), ("WAW", "D", wide)}, found
    assert all(other.startswith(narrow) for _, _, _, other in found), found


@pytest.mark.parametrize("engine", ENGINES)
def test_wgmma_of_one_shape_on_overlapping_windows_needs_a_wait(engine):
    """PTX orders wgmma of one shape on the same registers only: two m64n128 halves of an accumulator that share no
    register need nothing between them, but windows D[:, 0:128] and D[:, 64:192] (registers 32-63 in both) do; so
    with one statement in a loop: D[:, 128 * j:128 * j + 128] names the same registers or apart ones at each run,
    D[:, 64 * j:64 * j + 128] does not."""
    assert sync_check(W.wgmma_halves, engine=engine).ok
    assert sync_check(W.wgmma_halves_in_a_loop, engine=engine).ok
    found = sync_check(W.wgmma_overlapping_windows, engine=engine).hazards
    assert {(h.kind, h.buffer) for h in found} == {("RAW", "D"), ("WAW", "D")}, found
    assert any("D[0:64, 64:192]" in h.access.stmt.text and "D[0:64, 0:128]" in h.other.stmt.text for h in found)
    found = sync_check(W.wgmma_sliding_windows, engine=engine).hazards
    assert {(h.kind, h.buffer) for h in found} == {("RAW", "D"), ("WAW", "D")}, found
    assert all("D[0:64, 64 * j:64 * j + 128]" in h.access.stmt.text for h in found), found


def test_a_fence_completes_the_wgmma_it_names_by_committing_them_first():
    """wgmma.wait_group waits for committed groups only: a Fence whose first sync-tl names wgmma commits first."""
    assert sync_check(W.wgmma_completed_by_fence).ok
    cu = compile_procs_to_strings([W.wgmma_completed_by_fence], "fenced", "sm_90a")[2]
    assert re.search(r'"wgmma\.commit_group\.sync\.aligned;".*\n\s*asm volatile\("wgmma\.wait_group\.sync\.aligned 0;"', cu)


def test_wgmma_register_operands_are_ordered_by_wgmma_fence_only():
    """The pair of wgmma's register operands is in the second sync-tl of syncs whose lowering has wgmma.fence."""
    assert tl.emits_wgmma_fence("Fence", tl.wgmma_fence_2)
    for kind, second in [("Fence", tl.wgmma_async), ("Fence", tl.cuda_generic_and_async_proxy),
                         ("Fence", tl.wgmma_async_smem), ("Await", tl.wgmma_async)]:
        assert not tl.emits_wgmma_fence(kind, second)


def test_wgmma_fence_alone_orders_no_execution_between_threads():
    """wgmma.fence has no thread barrier (codegen), so the checker's execution order (ring slot reuse)
    goes through every other Fence of wgmma_tiles but not through it."""
    from spork_lab.sync import program as P
    from spork_lab.sync.checker import program_of

    fences = [op for op in program_of(W.wgmma_tiles._loopir_proc).ops if isinstance(op, P.Fence)]
    assert [(op.m1 == tl.wgmma_fence_1.mask, op.barrier) for op in fences] == [(False, True), (True, False),
                                                                                (False, True)]


@pytest.mark.gpu
def test_the_gpu_computes_the_accumulator_halves_as_written():
    """wgmma_halves (two m64n128 wgmma on apart halves of one accumulator, no wait between) and the same completed by
    a Fence, which sync_check passes, on the GPU against run_cpu; multiples of 1/8, exact in tf32 and in f32 sums."""
    pytest.importorskip("cupy")
    import numpy as np
    from gpu_vs_cpu import assert_gpu_matches_cpu

    rng = np.random.default_rng()  # fresh inputs every run
    A, B = ((rng.integers(-8, 9, size=shape) / 8).astype(np.float32) for shape in ((64, 32), (256, 32)))
    for p in (W.wgmma_halves, W.wgmma_halves_in_a_loop, W.wgmma_completed_by_fence):
        assert_gpu_matches_cpu(p, "sm_90a", A=A, B=B, C=np.full((64, 256), np.nan, np.float32))


@pytest.mark.gpu
def test_the_gpu_computes_the_two_shape_program_as_written():
    """wgmma_two_shapes (an m64n8 wgmma, its wait and a wgmma.fence, then an m64n16 one on the same registers), which
    sync_check passes, on the GPU against run_cpu; small integers, exact in tf32 and in f32 sums."""
    pytest.importorskip("cupy")
    import numpy as np
    from gpu_vs_cpu import assert_gpu_matches_cpu

    rng = np.random.default_rng()  # fresh inputs every run
    A = rng.integers(-4, 5, size=(64, 8)).astype(np.float32)
    B = rng.integers(-4, 5, size=(16, 8)).astype(np.float32)
    assert_gpu_matches_cpu(W.wgmma_two_shapes, "sm_90a", k=2, A=A, B=B, C=np.full((64, 16), np.nan, np.float32))
