"""Barrier usage rules and timelines: each misuse is a SyncError at the user's line."""

from __future__ import annotations

import procs_sync as P
import pytest
from procs_sync import line_of

from spork_lab.analysis import analyze
from spork_lab.core import timelines as tl
from spork_lab.errors import SyncError
from spork_lab.sync.checker import sync_check


@pytest.mark.parametrize(
    "p, statement, message",
    [
        (P.err_missing_await, "Arrive(Sm80_cp_async, 1) >> cg", "never awaited"),
        (P.err_missing_arrive, "Await(bar, cuda_in_order, ~0)", "no Arrive to pair with"),
        (P.err_mixed_tls, "Arrive(Sm80_cp_async, 1) >> bar", "mixed sync-tls"),
        (P.err_commit_group_in_order, "Arrive(cuda_in_order, 1) >> cg", "so its first sync-tl names them: `Arrive\\(Sm80_cp_async, 1\\) >> cg`"),
        (P.err_mbarrier_wait_group, "Await(bar, cuda_in_order, 0)", "takes N = ~lag, not 0: write ~0"),
        (P.err_commit_group_units, "Await(cg, cuda_in_order, 0)", "same collective unit"),
        # an Await count of the wrong form for its barrier kind (docs/language.md states each kind's rule)
        (P.err_commit_group_lag, "Await(cg, cuda_in_order, ~1)", r"needs N >= 0 \(wait_group N\), not ~1"),
        (P.err_event_count, "Await(done, cpu_in_order, 1)", "needs N = 0"),
        # one mbarrier used by every iteration of a cuda_threads loop: CUDA would count one collective's arrivals
        (P.err_mbarrier_arrive_per_warp, "Arrive(cuda_in_order, 1) >> bar",
         r"inside `for w in cuda_threads\(0, 2, ...\)`, so each of its 2 collectives \(cuda_warp\) arrives on the one "
         "barrier bar"),
        (P.err_mbarrier_await_per_thread, "Await(bar[0], cuda_in_order, ~0)", "each of its 64 collectives .* awaits"),
        (P.err_mbarrier_alloc_per_thread, "bar: barrier @ CudaMbarrier", "lives in shared memory, one per CTA"),
        (P.err_multicast_cp_async_arrive, "Arrive(Sm80_cp_async, 1) >> ring[:]",
         r"a cp.async Arrive signals this CTA's mbarrier only .* cannot arrive on a slice ring\[...\]"),
        (P.err_mbarrier_two_warp_ranges, "# other threads",
         r"every Arrive on mbarrier bar must be made by the same threads .* is made by threads \[32, 64\), "
         r"the Arrive at line \d+ by threads \[0, 32\)"),
    ],
)
def test_static_barrier_errors(p, statement, message):
    with pytest.raises(SyncError, match=message) as e:
        analyze(p)
    assert e.value.lineno == line_of(p, statement) and e.value.filename == P.__file__


def test_mbarrier_queue_needs_the_same_threads():
    with pytest.raises(SyncError, match="every arrive on mbarrier bar must be executed by the same threads") as e:
        sync_check(P.err_mbarrier_other_threads, n=1)
    assert e.value.lineno == line_of(P.err_mbarrier_other_threads, "# two warps per barrier")


def test_a_barrier_per_collective_is_allowed():
    assert sync_check(P.mbarrier_per_thread_array, n=64).ok


def test_sync_tls_are_pair_sets():
    assert tl.Sm80_generic.pairs == tl.cuda_in_order.pairs | tl.Sm80_cp_async.pairs
    assert tl.cuda_in_order <= tl.Sm80_generic and not tl.Sm80_generic <= tl.cuda_in_order
    assert tl.wgmma_async_smem.covers(tl.wgmma_async_instr, tl.wgmma_usage_a)
    assert not tl.wgmma_async_smem.covers(tl.wgmma_async_instr, tl.wgmma_usage_d)
    assert tl.cuda_temporal.mask == 0
    assert tl.Sm80_generic.mask == tl.cuda_in_order.mask | tl.Sm80_cp_async.mask
    assert tl.needs_proxy_fence(tl.cuda_in_order, tl.cuda_generic_and_async_proxy)
    assert not tl.needs_proxy_fence(tl.cuda_in_order, tl.Sm80_generic)
    # A thread's in-order accesses are seen by its later cp.async, not by async-proxy instrs; its register
    # accesses by its own later register accesses only.
    register = 1 << tl.pair_bit(tl.cuda_in_order_instr, tl.register_usage)
    mask = tl.program_order_mask(tl.cuda_in_order_instr)
    assert mask == tl.Sm80_generic.mask & ~register and not mask & tl.wgmma_async.mask
    assert tl.program_order_mask(tl.cuda_in_order_instr, tl.register_usage) == register
    # Asynchronous accesses are seen by nothing without a sync statement, but wgmma's accumulator by the
    # next wgmma (seed 003: the same accumulator needs no wgmma.fence between two wgmma).
    assert tl.program_order_mask(tl.wgmma_async_instr, tl.wgmma_usage_a) == 0
    assert tl.program_order_mask(tl.Sm80_cp_async_instr) == 0
    d = tl.pair_bit(tl.wgmma_async_instr, tl.wgmma_usage_d)
    assert tl.program_order_mask(tl.wgmma_async_instr, tl.wgmma_usage_d) == 1 << d


def test_barrier_memories_are_asked_through_their_hooks_not_by_name():
    """A platform's own mbarrier flavour (a subclass) is analysed, checked and lowered as an mbarrier."""
    import spork_lab as sl
    from spork_lab.platforms.cuda import CudaMbarrier

    class RingBarrier(CudaMbarrier):
        pass

    text = str(P.ring_copy).replace("CudaMbarrier", "RingBarrier")
    assert "@ RingBarrier" in text
    p = sl.parse_source(text, func_locals={"RingBarrier": RingBarrier})
    (info,) = analyze(p).barriers.values()
    assert info.mem is RingBarrier and (info.forward_depth, info.reverse_depth, info.forward_arrivals) == (1, 2, 1)
    assert info.queue_rule(True).lag == 1 and info.queue_rule(True).same_threads
    report = sync_check(p, n=256)
    assert report.ok and [e.slot for e in report.barrier_timeline if e.kind == "ReverseArrive"][:3] == [0, 1, 0]
    _, _, cu, _ = sl.compile_procs_to_strings([p], "ring")
    assert "spork_mbar_init(&spork_bar_f[i], 1u)" in cu and "spork_mbar_wait" in cu


def test_a_consumer_lagging_behind_gets_a_deeper_ring():
    """Await ~1 with ReverseAwait ~2: before arrive i the producer knows only that the consumer's Await of arrive
    i - 3 is done, so the forward ring has 3 mbarriers (it had 2 and the check reported a deadlock)."""
    (info,) = analyze(P.ring_copy_consumer_lags).barriers.values()
    assert (info.forward_lag, info.reverse_lag, info.forward_depth, info.reverse_depth) == (1, 2, 3, 3)
    # printed as the docs name it (the allocation and the uses, IR, made it thousands of characters)
    assert repr(info).startswith("BarrierInfo(bar: memory='CudaMbarrier', dims=[], forward_lag=1, reverse_lag=2, "
                                 "forward_depth=3, reverse_depth=3, "), repr(info)
    for engine in ("compiled", "python"):
        assert sync_check(P.ring_copy_consumer_lags, n=256, engine=engine).ok
        report = sync_check(P.ring_copy_consumer_lags_two_slots, n=256, engine=engine)
        assert not report.ok and {(h.kind, h.buffer) for h in report.hazards} == {("WAR", "buf")}


def test_an_arrive_never_awaited_says_which_await_pairs_with_it():
    """The COUNT hazard named the arrive but gave no fix; a Fence that completes the copies is no Await (new-user
    walkthrough of session 39)."""
    (h,) = sync_check(P.cp_async_second_group_drained, n=512).hazards
    assert h.kind == "COUNT" and h.access.stmt.line == line_of(P.cp_async_second_group_drained, "Arrive(Sm80_cp_async, 1) >> cg")
    assert h.fix.startswith(f"`Await(cg, cuda_in_order, 0)` after line {h.access.stmt.line}, before the barrier's scope ends")


@pytest.mark.gpu
@pytest.mark.parametrize("name, n", [("ring_copy_consumer_lags", 32 * 1000), ("cp_async_per_warp", 128 * 3001),
                                     ("cp_async_per_warp_pair", 128 * 3001), ("mbar_split_barrier_2", 1024 * 1001)])
def test_the_gpu_copies_as_run_cpu(name, n):
    """A consumer lagging behind its ring's producer; warps (pairs of warps) with commit groups of their own; an
    mbarrier as a split barrier of the whole CTA."""
    pytest.importorskip("cupy")
    import numpy as np
    from gpu_vs_cpu import assert_gpu_matches_cpu

    src = np.random.default_rng().standard_normal(n).astype(np.float32)
    assert_gpu_matches_cpu(getattr(P, name), n=n, src=src, dst=np.full_like(src, np.nan))


def test_a_fence_in_cpu_code_is_a_user_error():
    from spork_lab.platforms.cuda import cuda_in_order
    from spork_lab.scheduling import insert_fence

    p = insert_fence(P.reverse_tiles, P.reverse_tiles.body()[0].before(), cuda_in_order, cuda_in_order)
    with pytest.raises(SyncError, match="is CPU code") as e:
        analyze(p)
    assert e.value.filename == P.reverse_tiles._loopir_proc.srcinfo.filename


def test_a_producer_running_phases_ahead_of_the_consumer_is_reported():
    """Arrive #2 takes over the slot of arrive #1: the producer must be ordered after the consumer's Await of
    arrive #1 (else the GPU's parity wait meets an overrun phase), which here nothing does."""
    for engine in ("compiled", "python"):
        report = sync_check(P.mbar_phase_overrun, engine=engine)
        h = report.hazards[0]
        assert h.kind == "DEADLOCK" and "Arrive #2 on bar reuses ring slot 0 (depth 1)" in h.message
        assert "not ordered after the Await of arrive #1" in h.message
        assert h.message.endswith("give the ring more slots, or make the arriving threads wait until the slot is free "
                                  "(a reverse queue: the awaiting threads ReverseArrive when done with the slot, the "
                                  "arriving ones ReverseAwait before they refill it)")
        assert h.access.stmt.line == line_of(P.mbar_phase_overrun, "Arrive(cuda_in_order, 1) >> bar")
        assert h.access.threads == ((0, 32),) and h.access.iters["it"] == 1
        assert h.other.stmt.line == line_of(P.mbar_phase_overrun, "Await(bar, cuda_in_order, ~0)")
        assert h.other.threads == ((32, 64),) and h.other.iters["it"] == 0


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_a_lag_scope_with_fewer_awaits_than_arrives_is_reported(engine):
    """The generated scope end drains the phases its Awaits skipped, not arrives no Await counted: the consumer's
    count stayed behind and its next task's Await passed on an old phase (audit of session 32)."""
    report = sync_check(P.lag_scope_skips_its_await, n=7, engine=engine)
    (h,) = report.hazards
    assert h.kind == "COUNT" and "the scope of bar ends after 1 Arrive(s) but only 0 Await(s)" in h.message, h.message
    assert "would pair with these older phases" in h.message
    assert h.access.stmt.line == line_of(P.lag_scope_skips_its_await, "# no Await counts it")


@pytest.mark.parametrize("p, sizes", [(P.ring_copy, {"n": 256}), (P.mbar_handed_back, {}),
                                      (P.mbar_fenced_each_iteration, {})])
def test_a_producer_ordered_after_the_consumers_await_may_reuse_the_slot(p, sizes):
    """Ordered through the reverse queue, through another barrier, or through a Fence: execution order
    flows through every sync, also those whose sync-tls order none of the ring's data (cp.async, temporal)."""
    for engine in ("compiled", "python"):
        assert sync_check(p, engine=engine, **sizes).ok


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_the_threads_that_awaited_a_phase_may_arrive_for_the_next_one(engine):
    """An mbarrier as a split barrier: the same threads arrive on it and await it, every iteration, without a
    Fence. Each arrives after its own wait and the phase needs all of them, so none falls two phases behind (it was
    a DEADLOCK, session 38). The data still needs its ring: one buffer is a WAR, refilled while another thread
    reads it."""
    assert sync_check(P.mbar_split_barrier_2, n=3072, engine=engine).ok
    report = sync_check(P.split_barrier_copy(1), n=2048, engine=engine)
    assert [(h.kind, h.buffer) for h in report.hazards] == [("WAR", "buf")]


@pytest.mark.parametrize("arrive_warps, await_warps", [(4, 4), (1, 1), (4, 1), (1, 4), (2, 4)])
@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_only_the_threads_that_awaited_a_phase_may_take_its_slot_over_unordered(engine, arrive_warps, await_warps):
    """More arriving warps than awaiting ones: a warp that did not wait may arrive for the next phase before this
    one completes; more awaiting ones: the next phase may complete before a slow waiter saw this one."""
    p = P.split_barrier_warps(arrive_warps, await_warps)
    report = sync_check(p, engine=engine)
    if arrive_warps == await_warps:
        assert report.ok, report
    else:
        (h,) = report.hazards
        assert h.kind == "DEADLOCK" and "Arrive #2 on bar reuses ring slot 0 (depth 1)" in h.message
        assert "not ordered after the Await of arrive #1" in h.message
        assert h.access.stmt.line == line_of(p, "Arrive(cuda_in_order, 1) >> bar")
        assert h.access.threads == ((0, 32 * arrive_warps),) and h.access.iters["it"] == 1


def test_the_next_task_taking_over_a_slot_is_reported():
    """The CTA's next task reuses the mbarriers, counting on: its first Arrive takes over the slot of this task's
    last, so the producer must be ordered after the consumer's last Await of this task (the unordered form can hang
    on the GPU; the Fenced one runs)."""
    p = P.mbar_next_task_overrun
    for engine in ("compiled", "python"):
        h = sync_check(p, engine=engine, n=2).hazards[0]
        assert h.kind == "DEADLOCK" and "Arrive #1 on bar reuses ring slot 0 (depth 1) from the barrier's previous scope" in h.message
        assert h.access.stmt.line == line_of(p, "Arrive(cuda_in_order, 1) >> bar") and h.access.iters == {"task": 1}
        assert h.other.stmt.line == line_of(p, "Await(bar, cuda_in_order, ~0)") and h.other.iters == {"task": 0}
        assert sync_check(P.mbar_next_task_fenced, engine=engine, n=2).ok


def test_a_task_answers_for_every_earlier_task():
    """Only odd tasks fence: task 2 follows task 1 (fenced) in the checker, but task 0 on a GPU whose grid is even
    (two CTAs per SM), and task 0 left the producer unordered."""
    p = P.mbar_fenced_odd_tasks
    for engine in ("compiled", "python"):
        h = sync_check(p, engine=engine, n=3).hazards[0]
        assert h.kind == "DEADLOCK" and "from the barrier's previous scope (an earlier task" in h.message
        assert (h.access.iters, h.other.iters) == ({"task": 2}, {"task": 0})


def test_threads_that_swap_roles_between_tasks_are_refused():
    """Each thread counts the phases it sees, across tasks: in task n, warp 0 awaited with a count of 0 and read y
    before warp 1 wrote it (on an H200, 25% of z was wrong)."""
    for engine in ("compiled", "python"):
        with pytest.raises(SyncError, match="must be executed by the same threads, in every scope of it") as e:
            sync_check(P.mbar_roles_swap_between_tasks, engine=engine, n=1)
        assert e.value.lineno == line_of(P.mbar_roles_swap_between_tasks, "# other threads in task n")


def test_commit_groups_are_counted_per_warp_where_each_warp_uses_its_own():
    """Each thread counts its own commit groups. Where every arrive and await on a barrier is one warp's, the
    machine keeps a queue per warp: warp 0's `Await(cg, cuda_in_order, 1)` pairs with warp 0's one arrive (it waits
    for nothing: RAW at its read) and warp 0's group is never awaited. Warps that each allocate a commit group for
    their own copies (cp_async_per_warp) pass, and so do pairs of warps on one barrier (a queue per pair); a warp
    reading the next warp's copies is RAW."""
    for engine in ("compiled", "python"):
        found = sync_check(P.commit_groups_of_two_warps, engine=engine, n=2).hazards
        assert [h.kind for h in found] == ["RAW", "COUNT", "FREE"], found
        assert found[0].access.stmt.line == line_of(P.commit_groups_of_two_warps, "dst[task, 0, t] = buf[0, t]")
        assert "the queue of threads 0..31" in found[1].message
        assert sync_check(P.cp_async_per_warp, engine=engine, n=512).ok
        assert sync_check(P.cp_async_per_warp_pair, engine=engine, n=512).ok
        found = sync_check(P.cp_async_per_warp_reads_across, engine=engine, n=512).hazards
        assert {h.kind for h in found} >= {"RAW"} and all(h.buffer == "buf" for h in found), found


def test_commit_groups_on_one_queue_are_the_same_threads():
    """Where no aligned group of threads smaller than the CTA holds every arrive and await of a barrier, one queue
    counts for every thread only if the same threads made them all: cp_async_overlapping_pairs's are warps 0-1's,
    then warps 1-2's."""
    p = P.cp_async_overlapping_pairs
    second = next(i for i, text in enumerate(str(p).splitlines(), 1) if "CudaWarps(1, 3)" in text) + 1
    for engine in ("compiled", "python"):
        with pytest.raises(SyncError, match="every arrive on commit group cg must be executed by the same threads") as e:
            sync_check(p, engine=engine, n=512)
        assert e.value.lineno == second and "Arrive" in str(p).splitlines()[second - 1]


@pytest.mark.gpu
def test_the_gpu_runs_the_next_task_after_the_fence():
    cupy = pytest.importorskip("cupy")
    import numpy as np
    from gpu_vs_cpu import assert_gpu_matches_cpu

    n = 64 * cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]  # many tasks per CTA
    rng = np.random.default_rng()  # fresh inputs every run
    arrays = {k: rng.integers(-8, 9, size=(n, 32)).astype(np.float32) for k in "xyz"}
    assert_gpu_matches_cpu(P.mbar_next_task_fenced, n=n, **arrays)


def test_global_data_handed_over_by_a_remote_arrive_is_reported():
    """A remote arrive (`>> ring[:]`) is `mbarrier.arrive.shared::cluster` at the default .cta scope: it does not
    order one CTA's global writes before another CTA's reads (at .cluster scope it would halve the Sm90 GEMM:
    benchmarks/sm90_gemm_notes.md, run 11). A cluster Fence does."""
    report = sync_check(P.remote_arrive_hands_over_global)
    assert not report.ok and [(h.kind, h.buffer) for h in report.hazards] == [("RAW", "y")]
    assert "y is global memory: a remote `Arrive(...) >> bar[:]` does not order it" in report.hazards[0].message
    assert sync_check(P.cluster_fence_hands_over_global).ok


def test_a_barrier_index_may_read_any_user_name():
    """The generated mbarrier code's own locals are spork_-prefixed, so `bar[k]` reads the user's k."""
    from spork_lab.codegen import compile_procs_to_strings

    assert sync_check(P.await_indexed_by_k, n=3).ok
    cu = compile_procs_to_strings([P.await_indexed_by_k], "await_k")[2]
    assert "const unsigned spork_k = spork_bar_fw[k];" in cu and "spork_mbar_wait(&spork_bar_f[(k) * 1 + spork_k % 1u]" in cu


@pytest.mark.gpu
def test_the_gpu_awaits_the_barrier_the_user_indexed():
    pytest.importorskip("cupy")
    import numpy as np
    from gpu_vs_cpu import assert_gpu_matches_cpu

    n = 300
    rng = np.random.default_rng()
    arrays = {k: rng.standard_normal((n, 4, 32)).astype(np.float32) for k in "xy"}
    assert_gpu_matches_cpu(P.await_indexed_by_k, n=n, **arrays)


def test_awaits_on_one_mbarrier_wait_with_one_lag():
    """An mbarrier's phases form a ring of lag + 1 slots: its Awaits all wait the same number of phases back. The
    check says so at the Await that differs (insert_await refuses it with the same words)."""
    from spork_lab.sync.mutants import sync_cursors, with_await_n

    p = P.lag_scope_skips_its_await
    awaits = [i for i, c in enumerate(sync_cursors(p)) if "Await(bar" in str(c._impl._node)]
    mixed = with_await_n(p, awaits[1], ~0)
    with pytest.raises(SyncError, match=r"the Awaits on bar wait with N = ~1, and every Await on one barrier uses the "
                                        r"same N \(~lag\): not ~0") as e:
        analyze(mixed)
    assert e.value.lineno == line_of(p, "Await(bar, cuda_in_order, ~1)  # the second")
