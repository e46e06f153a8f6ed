"""Barrier usage rules and timelines: each misuse is a SyncError at the user's line."""

from __future__ import annotations

import procs_sync as P
import pytest
from procs_sync import line_of

from spork_lab.analysis import analyze, barrier_usage
from spork_lab.core import timelines as tl
from spork_lab.errors import SyncError
from spork_lab.sync.checker import sync_check


@pytest.mark.parametrize(
    "p, statement, message",
    [
        (P.err_missing_await, "Arrive(Sm80_cp_async, 1) >> cg", "never awaited"),
        (P.err_missing_arrive, "Await(bar, cuda_in_order, ~0)", "no Arrive to pair with"),
        (P.err_mixed_tls, "Arrive(Sm80_cp_async, 1) >> bar", "mixed sync-tls"),
        (P.err_commit_group_in_order, "Arrive(cuda_in_order, 1) >> cg", "commit groups order"),
        (P.err_mbarrier_wait_group, "Await(bar, cuda_in_order, 0)", "needs N = ~lag"),
        (P.err_commit_group_units, "Await(cg, cuda_in_order, 0)", "same collective unit"),
    ],
)
def test_static_barrier_errors(p, statement, message):
    with pytest.raises(SyncError, match=message) as e:
        barrier_usage(p)
    assert e.value.lineno == line_of(p, statement) and e.value.filename == P.__file__


@pytest.mark.parametrize(
    "p, statement, message",
    [
        (P.err_mbarrier_wait_group, "Await(bar, cuda_in_order, 0)", r"needs N = ~lag \(< 0\)"),
        (P.err_commit_group_lag, "Await(cg, cuda_in_order, ~1)", r"needs N >= 0 \(wait_group N\), not ~1"),
        (P.err_event_count, "Await(done, cpu_in_order, 1)", "needs N = 0"),
    ],
)
def test_analyze_rejects_an_await_count_of_the_wrong_form(p, statement, message):
    """Each barrier kind's pairing rule for N is checked by sl.analyze itself, not only by sync_check."""
    with pytest.raises(SyncError, match=message) as e:
        analyze(p)
    assert e.value.lineno == line_of(p, statement) and e.value.filename == P.__file__


def test_mbarrier_queue_needs_the_same_threads():
    with pytest.raises(SyncError, match="same threads") as e:
        sync_check(P.err_mbarrier_other_threads, n=1)
    assert e.value.lineno == line_of(P.err_mbarrier_other_threads, "Arrive(cuda_in_order, 1) >> bar")


def test_sync_tls_are_pair_sets():
    assert tl.Sm80_generic.pairs == tl.cuda_in_order.pairs | tl.Sm80_cp_async.pairs
    assert tl.cuda_in_order <= tl.Sm80_generic and not tl.Sm80_generic <= tl.cuda_in_order
    assert tl.wgmma_async_smem.covers(tl.wgmma_async_instr, tl.wgmma_usage_a)
    assert not tl.wgmma_async_smem.covers(tl.wgmma_async_instr, tl.wgmma_usage_d)
    assert tl.cuda_temporal.mask == 0
    assert tl.Sm80_generic.mask == tl.cuda_in_order.mask | tl.Sm80_cp_async.mask
    assert tl.needs_proxy_fence(tl.cuda_in_order, tl.cuda_generic_and_async_proxy)
    assert not tl.needs_proxy_fence(tl.cuda_in_order, tl.Sm80_generic)
    # A thread's in-order accesses are seen by its later cp.async, not by async-proxy instrs.
    mask = tl.program_order_mask(tl.cuda_in_order_instr)
    assert mask == tl.Sm80_generic.mask and not mask & tl.wgmma_async.mask
