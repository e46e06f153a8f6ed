"""The abstract machine (`sync_check`): correct programs pass; removing one sync names the precise hazard."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import procs_sync as P
import pytest
from procs_sync import line_of

from spork_lab.errors import SyncError
from spork_lab.sync.checker import sync_check
from spork_lab.sync.mutants import sync_cursors, with_sync_moved


def only(report, kind):
    hazards = [h for h in report.hazards if h.kind == kind]
    assert hazards, str(report)
    return hazards[0]


@pytest.mark.parametrize(
    "p, sizes",
    [
        (P.reverse_tiles, {"n": 768}),
        (P.cp_async_double_buffer, {"n": 640}),
        (P.ring_copy, {"n": 256}),
        (P.warp_sums, {}),
    ],
)
def test_correct_programs_pass(p, sizes):
    report = sync_check(p, **sizes)
    assert report.ok, str(report)


def test_tile_reverse_without_first_fence_is_raw_on_tile():
    h = only(sync_check(P.reverse_tiles_no_fence1, n=512), "RAW")
    assert (h.buffer, h.index) == ("tile", (255,))
    assert h.access.stmt.line == line_of(P.reverse_tiles, "y[task * 256 + tid] = tile[255 - tid]") and h.access.threads == ((0, 1),)
    assert h.access.iters == {"task": 0, "tid": 0}
    assert h.other.stmt.line == line_of(P.reverse_tiles, "tile[tid] = x[task * 256 + tid]") and h.other.threads == ((255, 256),)
    assert h.other.iters == {"task": 0, "tid": 255}


def test_tile_reverse_without_second_fence_fails_at_the_free():
    h = only(sync_check(P.reverse_tiles_no_fence2, n=512), "FREE")
    assert (h.buffer, h.index) == ("tile", (0,))
    assert h.access.stmt.line == line_of(P.reverse_tiles, "tile: f32[256] @ CudaSmemLinear") and h.access.threads == ((0, 256),)
    assert h.other.stmt.line == line_of(P.reverse_tiles, "y[task * 256 + tid] = tile[255 - tid]") and h.other.iters == {"task": 0, "tid": 255}


def test_persistent_tile_reuse_is_war():
    h = only(sync_check(P.reverse_tiles_shared_tile, n=512), "WAR")
    assert (h.buffer, h.index) == ("tile", (0,))
    assert h.access.stmt.line == line_of(P.reverse_tiles_shared_tile, "tile[tid] = x[it * 256 + tid]") and h.access.iters["it"] == 1
    assert h.other.stmt.line == line_of(P.reverse_tiles_shared_tile, "y[it * 256 + tid] = tile[255 - tid]") and h.other.iters["it"] == 0


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_a_read_of_an_element_nothing_wrote_is_uninit(engine):
    """Its value is undefined on the GPU and in run_cpu alike (malloc's): sync_check cannot promise they agree."""
    h = only(sync_check(P.half_loaded_tile, engine=engine), "UNINIT")
    assert (h.buffer, h.index, h.other) == ("tile", (127,), None)
    assert h.access.stmt.line == line_of(P.half_loaded_tile, "y[t] = tile[127 - t]") and h.access.iters["t"] == 0
    assert "nothing has written" in h.message
    h = only(sync_check(P.unzeroed_sum, engine=engine), "UNINIT")  # an update reads too
    assert h.buffer == "acc" and h.access.stmt.line == line_of(P.unzeroed_sum, "acc += x[t, k]")
    assert h.access.iters == {"task": 0, "t": 0, "k": 0}


def test_a_buffer_written_by_an_earlier_kernel_is_defined_in_the_next():
    """A kernel boundary forgets the records (everything is visible), not what was written."""
    from procs_cluster_tma import scratch_between_kernels

    report = sync_check(scratch_between_kernels, n=3)
    assert report.ok, str(report)


def test_accesses_of_different_iterations_of_a_thread_loop_are_told_to_split_it():
    """Warp w fills buf[w] and reads buf[w + 1]: the fix said to put a Fence in the body of `for w` (between the two
    statements, or at its end), which each warp runs on its own: the hazard stayed (workbench audit of session 39).
    Iterations of a cuda_threads loop are other threads at once: the loop is to be split."""
    p = P.cp_async_per_warp_reads_across
    lines = str(p).splitlines()  # parsed from its printed text: `<string>`'s lines
    copy, read = (next(n for n, text in enumerate(lines, 1) if part in text)
                  for part in ("Sm80_cp_async_f32(", "= buf[(w + 1) % 4, t]"))
    report = sync_check(p, n=256)
    for kind in ("RAW", "WAR"):
        h = only(report, kind)
        assert h.fence is None and h.fix == (
            "the accesses are in different iterations of `for w in cuda_threads(...)`, which run at once, so no Fence "
            f"inside that loop orders them: split the loop between line {copy} and line {read} (exo's `fission`), and "
            "order the two loops with a Fence run by the threads of both (sync_check then names its sync-tls)"), h.fix


def test_a_tma_loads_free_is_ordered_by_an_in_order_fence():
    """No Fence completes a TMA load (its mbarrier's Await does): the fix proposed Fence(tma_to_smem_async, ...),
    which left the FREE of a multicast tile (workbench audit of session 39)."""
    import procs_tma

    h = only(sync_check(procs_tma.tma_multicast_no_cluster_sync), "FREE")
    assert h.fence == ("cuda_in_order", "cuda_in_order") and h.fix.startswith("a Fence(cuda_in_order, cuda_in_order)")


def test_a_printed_hazard_says_which_fence_orders_its_accesses():
    """A script's user saw the hazard but not the fix (the workbench's cards had it): the Fence's sync-tls come from
    the two accesses' instr-tls (a cp.async before a read: Sm80_cp_async, where a cuda_in_order Fence or Await
    leaves the copy unordered), and where it goes: between them, at the end of the loop around both, or before the
    end of the buffer's scope."""
    line = lambda p, text: line_of(p, text)  # noqa: E731
    cases = [
        (P.reverse_tiles_no_fence1, "RAW", ("cuda_in_order", "cuda_in_order"),
         f"between line {line(P.reverse_tiles, 'tile[tid] = x[task * 256 + tid]')} and line "
         f"{line(P.reverse_tiles, 'y[task * 256 + tid] = tile[255 - tid]')}"),
        (P.reverse_tiles_shared_tile, "WAR", ("cuda_in_order", "cuda_in_order"),
         f"after line {line(P.reverse_tiles_shared_tile, 'y[it * 256 + tid] = tile[255 - tid]')}, at the end of the "
         f"loop body around both (before its next iteration reaches line "
         f"{line(P.reverse_tiles_shared_tile, 'tile[tid] = x[it * 256 + tid]')})"),
        (P.reverse_tiles_no_fence2, "FREE", ("cuda_in_order", "cuda_in_order"),
         f"before the end of tile's scope (it is allocated at line {line(P.reverse_tiles, 'tile: f32[256] @ CudaSmemLinear')})"),
        (P.cp_async_cross_thread, "RAW", ("Sm80_cp_async", "cuda_in_order"),
         f"between line {line(P.cp_async_cross_thread, 'Sm80_cp_async_f32(buf[t : t + 1]')} and line "
         f"{line(P.cp_async_cross_thread, 'dst[t] = buf[127 - t]')}"),
    ]
    for p, kind, fence, where in cases:
        report = sync_check(p, n=512 if p is not P.cp_async_cross_thread else 128)
        h = only(report, kind)
        assert h.fence == fence, (p.name(), h.fence)
        assert h.fix == f"a Fence({fence[0]}, {fence[1]}) run by the threads of both accesses, {where}", h.fix
        assert f"  to fix: {h.fix}" in str(report) and h.to_json()["fence"] == list(fence)


def test_tasks_that_share_an_element_are_told_no_fence_orders_them():
    h = sync_check(P.tasks_share_an_element).hazards[0]
    assert h.fence is None and h.fix.startswith("different tasks touch the same element of y: tasks are ordered only "
                                                "by the end of the device function"), str(h)


def test_tasks_are_distinct_collectives():
    # 2 tasks: thread 0 of task 1 has id 256 (task offset); the hazard is reported in every task's first.
    report = sync_check(P.reverse_tiles_no_fence1, n=512)
    assert len([h for h in report.hazards if h.kind == "RAW"]) == 1  # one per (kind, buffer, statement)


def test_double_buffer_without_await_is_raw():
    report = sync_check(P.cp_async_double_buffer_no_await, n=512)
    h = report.hazards[0]
    assert (h.kind, h.buffer, h.index) == ("RAW", "buf", (0, 0))
    assert h.access.stmt.line == line_of(P.cp_async_double_buffer, "dst[it * 128 + t] = buf[it % 2, t]")
    assert h.access.iters == {"task": 0, "it": 0, "t": 0}
    assert h.other.stmt.line == line_of(P.cp_async_double_buffer, "Sm80_cp_async_f32(buf[0, t : t + 1]") and h.other.threads == ((0, 1),)


def test_commit_group_is_per_thread():
    h = only(sync_check(P.cp_async_cross_thread, n=128), "RAW")
    assert (h.buffer, h.index) == ("buf", (127,))
    assert h.access.stmt.line == line_of(P.cp_async_cross_thread, "dst[t] = buf[127 - t]") and h.other.stmt.line == line_of(P.cp_async_cross_thread, "Sm80_cp_async_f32(")
    assert h.other.threads == ((127, 128),)


def test_ring_without_forward_barrier_is_raw():
    h = only(sync_check(P.ring_copy_no_forward, n=256), "RAW")
    assert (h.buffer, h.index) == ("buf", (0, 0))
    assert h.access.stmt.line == line_of(P.ring_copy, "dst[it * 32 + t] = buf[it % 2, t]") and h.access.threads == ((32, 33),)
    assert h.other.stmt.line == line_of(P.ring_copy, "buf[it % 2, t] = src[it * 32 + t]") and h.other.threads == ((0, 1),)


def test_ring_without_reverse_barrier_overruns_the_phase_then_is_war_two_iterations_later():
    report = sync_check(P.ring_copy_no_reverse, n=256)
    h = report.hazards[0]
    assert h.kind == "DEADLOCK" and h.access.iters["it"] == 1 and h.other.iters["it"] == 0
    assert h.access.stmt.line == line_of(P.ring_copy, " Arrive(cuda_in_order, 1) >> bar")
    assert h.other.stmt.line == line_of(P.ring_copy, "Await(bar, cuda_in_order, ~0)")
    h = only(report, "WAR")
    assert (h.buffer, h.index) == ("buf", (0, 0))
    assert h.access.stmt.line == line_of(P.ring_copy, "buf[it % 2, t] = src[it * 32 + t]") and h.access.iters["it"] == 2
    assert h.other.stmt.line == line_of(P.ring_copy, "dst[it * 32 + t] = buf[it % 2, t]") and h.other.iters["it"] == 0


def test_ring_with_too_much_reverse_lag_is_war():
    report = sync_check(P.ring_copy_lag3, n=256)
    h = report.hazards[0]
    assert (h.kind, h.buffer, h.index, h.access.iters["it"]) == ("WAR", "buf", (0, 0), 2)


def test_await_before_its_arrive_is_deadlock():
    report = sync_check(P.ring_copy_deadlock, n=128)
    h = report.hazards[0]
    assert h.kind == "DEADLOCK" and h.access.stmt.line == line_of(P.ring_copy_deadlock, "Await(bar, cuda_in_order, ~0)")
    assert h.access.threads == ((32, 64),)
    assert "COUNT" in {h.kind for h in report.hazards}


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_a_ring_slot_is_reused_only_after_every_thread_of_its_await_waited(engine):
    """Each thread of a collective waits for a phase on its own: the hand-back Fence of warps 0 and 1 orders the
    producer after warp 1's wait but not warp 2's (the GPU hung); a Fence of all three warps does."""
    (h,) = sync_check(P.ring_released_by_part_of_its_awaiters, n=2, engine=engine).hazards
    assert h.kind == "DEADLOCK" and h.access.stmt.line == line_of(P.ring_released_by_part_of_its_awaiters,
                                                                   "Arrive(cuda_in_order, 1) >> bar")
    assert "reuses ring slot 0 (depth 1), but its threads are not ordered after the Await of arrive #1" in h.message
    assert sync_check(P.ring_released_by_all_its_awaiters, n=2, engine=engine).ok


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_ring_whose_last_release_is_never_sent_deadlocks_at_the_scope_end(engine):
    """Found by the mutation test's move mutants: the generated scope end (barrier_text.scope_end_lines) waits
    for the phase of every await, the skipped first `lag` ones too."""
    (h,) = sync_check(P.ring_copy_last_release_skipped, n=128, engine=engine).hazards
    assert h.kind == "DEADLOCK" and "4 ReverseAwait(s) but only 3 ReverseArrive(s)" in h.message


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_what_runs_past_a_deadlock_is_marked_as_never_reached(engine):
    """The consumer releases only two slots, so the producer's ReverseAwait of iteration 3 waits forever. The run
    goes on as if it had not: what it finds past that point in the hung threads is marked (hazards: `after_hang`,
    the DEADLOCK; barrier events: `hang`), and the consumer's Await of the arrive the hung producer never makes
    hangs too."""
    report = sync_check(P.ring_copy_releases_stop, n=256, engine=engine)
    root, *after = report.hazards
    assert root.kind == "DEADLOCK" and "wait forever" in root.message and root.after_hang is None
    assert root.access.iters["it"] == 3 and root.access.threads == ((0, 32),)
    assert {h.kind for h in after} == {"DEADLOCK", "WAR"} and all(h.after_hang == 0 for h in after)
    hang = {(e.kind, e.iters["it"]): e.hang for e in report.barrier_timeline}
    assert [hang[k, 2] for k in ("ReverseAwait", "Arrive", "Await")] == [None, None, None]
    assert [hang[k, 3] for k in ("ReverseAwait", "Arrive", "Await")] == ["here", "after", "here"]
    assert {hang[k, it] for k in ("ReverseAwait", "Arrive", "Await") for it in range(4, 8)} == {"after"}
    assert str(report).startswith("sync_check(ring_copy_releases_stop, {'n': 256}): 4 hazard(s), 3 of them after a "
                                  "deadlock")
    assert report.to_json()["hazards"][1]["after_hang"] == 0 and not report.ok


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_an_await_written_before_its_arrive_is_a_wrong_order_not_a_hang(engine):
    """The consumer's block comes first: its Await pairs with the arrive the producer makes later in the same
    iteration. The program's own order waits forever there; on the GPU the producer warp would arrive. The
    message says which arrive and where, and nothing is marked as past a hang."""
    report = sync_check(P.ring_copy_deadlock, n=128, engine=engine)
    root = report.hazards[0]
    arrive = line_of(P.ring_copy_deadlock, "buf[it % 2, t] = src[it * 32 + t]") + 1  # the producer's Arrive
    assert root.kind == "DEADLOCK" and root.access.threads == ((32, 64),)
    assert f"pairs with arrive #1, which the program makes only after it (line {arrive}, task=0, it=0)" in root.message
    assert "put the code that arrives before the code that awaits" in root.message
    assert all(h.after_hang is None for h in report.hazards)
    assert all(e.hang is None for e in report.barrier_timeline)


def test_without_a_wait_that_never_ends_every_hazard_is_real():
    """A ring slot reused too early or a drain at the scope end that never completes is a DEADLOCK too, but no
    thread is left waiting in the loop: nothing is marked."""
    for name in ("ring_copy_no_reverse", "ring_copy_last_release_skipped", "ring_copy_lag3", "ring_copy_deadlock"):
        report = sync_check(getattr(P, name), n=128)
        assert report.hazards and all(h.after_hang is None for h in report.hazards), name
        assert all(e.hang is None for e in report.barrier_timeline), name


def _place(p, i: int) -> int:
    """The index of p's sync statement number i in its block."""
    return sync_cursors(p)[i]._impl._path[-1][1]


def test_a_moved_sync_statement_swaps_with_its_neighbour_and_keeps_its_line():
    p = P.reverse_tiles  # task body: tile alloc, write loop, Fence #0, read loop, Fence #1
    assert (_place(p, 0), _place(p, 1)) == (2, 4)
    earlier, later = with_sync_moved(p, 0, -1), with_sync_moved(p, 0, 1)
    assert (_place(earlier, 0), _place(later, 0)) == (1, 3)
    assert "tile[255 - tid]" in str(later).split("Fence")[0] and "tile[tid] = x" in str(earlier).split("Fence")[1]
    assert sync_cursors(later)[0]._impl._node.srcinfo.lineno == line_of(p, "without it: RAW")
    assert with_sync_moved(p, 1, 1) is None  # the last statement of its block
    with pytest.raises(ValueError):
        with_sync_moved(p, 0, 2)


def test_warp_reduction_without_fence_is_raw():
    h = only(sync_check(P.warp_sums_no_fence), "RAW")
    assert (h.buffer, h.index) == ("vals", (0, 1))
    assert h.access.stmt.line == line_of(P.warp_sums, "acc += vals[w, i]") and h.access.iters == {"task": 0, "w": 0, "t": 0, "i": 1}
    assert h.other.stmt.line == line_of(P.warp_sums, "vals[w, t] = x[w * 32 + t]") and h.other.threads == ((1, 2),)


def test_barrier_timeline_of_the_ring():
    report = sync_check(P.ring_copy, n=128)
    fwd = [e for e in report.barrier_timeline if e.queue == "forward"]
    rev = [e for e in report.barrier_timeline if e.queue == "reverse"]
    assert [(e.kind, e.index, e.slot, e.parity) for e in fwd[:4]] == [
        ("Arrive", 1, 0, 0), ("Await", 1, 0, 0), ("Arrive", 2, 0, 1), ("Await", 2, 0, 1)
    ]
    assert [(e.kind, e.index) for e in rev[:3]] == [("ReverseAwait", 0), ("ReverseArrive", 1), ("ReverseAwait", 1)]
    assert [(e.slot, e.parity) for e in rev if e.kind == "ReverseArrive"][:3] == [(0, 0), (1, 0), (0, 1)]
    assert fwd[0].threads == ((0, 32),) and fwd[1].threads == ((32, 64),) and fwd[2].iters == {"task": 0, "it": 1}


def test_events_and_hazards_name_the_scheduled_statement_by_path():
    from spork_lab.core.sync_stmts import sync_spec_of

    def at(ir, path):
        block, node = ir.body, None
        for step in path:
            if step == "else":
                block = node.orelse
            else:
                node = block[step]
                block = getattr(node, "body", None)
        return node

    ir = P.ring_copy._loopir_proc
    for event in sync_check(P.ring_copy, n=128).barrier_timeline:
        assert sync_spec_of(at(ir, event.stmt.path)).kind == event.kind
    broken = P.ring_copy_no_reverse
    h = only(sync_check(broken, n=128), "WAR")
    assert str(at(broken._loopir_proc, h.other.stmt.path)).strip() == "dst[it * 32 + t] = buf[it % 2, t]"
    assert h.to_json()["other"]["stmt"]["path"] == list(h.other.stmt.path)


def test_report_is_json():
    report = sync_check(P.ring_copy_no_reverse, n=128)
    data = json.loads(json.dumps(report.to_json()))
    assert data["ok"] is False and [h["kind"] for h in data["hazards"]] == ["DEADLOCK", "WAR"]
    assert data["hazards"][1]["other"]["stmt"]["line"] == line_of(P.ring_copy, "dst[it * 32 + t] = buf[it % 2, t]")
    assert data["barriers"]["bar"]["forward_depth"] == 1
    assert data["barrier_timeline"][0]["kind"] == "Arrive"


def test_sizes_are_checked():
    with pytest.raises(SyncError, match="needs a value for n"):
        sync_check(P.reverse_tiles)
    with pytest.raises(SyncError, match="violate"):
        sync_check(P.reverse_tiles, n=100)
    with pytest.raises(SyncError, match="reverse_tiles has no size 'm'; its sizes are n"):
        sync_check(P.reverse_tiles, n=256, m=256)
    with pytest.raises(SyncError, match="n=0, but a size is positive"):
        sync_check(P.reverse_tiles, n=0)


@pytest.mark.parametrize("value", ["1024x", None, 256.0, 256.5, True], ids=["str", "None", "float", "fraction", "bool"])
def test_a_size_that_is_not_an_int_is_refused_at_the_call(value):
    """int() used to raise a ValueError or TypeError from inside the checker, truncate 256.5 to a checked
    256, or take True for 1. The error names the sync_check call, where the value is (it named the proc's def)."""
    with pytest.raises(SyncError, match=rf"sync_check: n={re.escape(repr(value))}, but n is size: give an int") as e:
        sync_check(P.reverse_tiles, n=value)
    assert (e.value.filename, e.value.lineno) == (__file__, inspect.currentframe().f_lineno - 1)


def test_sizes_that_break_an_assertion_name_the_call_and_the_assertion():
    with pytest.raises(SyncError) as e:
        sync_check(P.reverse_tiles, n=100)
    assert (e.value.filename, e.value.lineno) == (__file__, inspect.currentframe().f_lineno - 1)
    assert e.value.message == (f"sync_check: the sizes {{'n': 100}} violate the assertion `n % 256 == 0` of reverse_tiles "
                               f"(line {line_of(P.reverse_tiles, 'assert n % 256 == 0')}): choose sizes it holds for")


def test_limits_that_are_not_ints_are_refused():
    with pytest.raises(TypeError, match=r"sync_check\(max_hazards='all'\): give an int >= 0"):
        sync_check(P.reverse_tiles, n=256, max_hazards="all")
    with pytest.raises(TypeError, match=r"takes the sizes as keywords: write sync_check\(p, n=256\) or sync_check\(p, \*\*sizes\)"):
        sync_check(P.reverse_tiles, {"n": 256})


def test_sizes_too_big_to_track_are_refused_before_the_run():
    # Each element costs the machine a few hundred bytes: n = 1 << 30 used to take the process's memory (and a
    # notebook's kernel with it) before any message.
    with pytest.raises(SyncError, match="the arguments hold 2147483648 elements, more than max_elements=4194304"):
        sync_check(P.reverse_tiles, n=1 << 30)
    assert sync_check(P.reverse_tiles, n=512, max_elements=1024).ok


def test_sizes_that_would_run_for_hours_are_refused_before_the_run():
    """n = 10**9 only counts a loop's trips: sync_check ran for hours, and a C call cannot be interrupted."""
    with pytest.raises(SyncError, match=r"at n=1000000000 the program runs about 1\.3e\+11 statements \(thread by "
                                        r"thread\), more than max_ops=5e\+08") as e:
        sync_check(P.repeated_increments, n=10**9)
    assert (e.value.filename, e.value.lineno) == (__file__, inspect.currentframe().f_lineno - 1)
    assert sync_check(P.repeated_increments, n=4).ok
    with pytest.raises(SyncError, match=r"more than max_ops=1e\+02"):
        sync_check(P.repeated_increments, n=4, max_ops=100)


@pytest.mark.parametrize("n", [2**64, 2**64 + 1, 2**31])
def test_sizes_past_32_bits_are_refused(n):
    """The machine's ints wrapped: n = 2**64 ran as n = 0 and said ok, having checked nothing."""
    with pytest.raises(SyncError, match=rf"n={n}, but device code indexes with 32-bit ints: give less than 2147483648"):
        sync_check(P.repeated_increments, n=n)


def test_a_bool_argument_takes_true_or_false():
    """`twice=True` was refused ("twice is bool: give an int") and `twice=1` taken."""
    assert sync_check(P.increments_if, n=256, twice=True).ok and sync_check(P.increments_if, n=256, twice=False).ok
    with pytest.raises(SyncError, match="twice=1, but twice is bool: give True or False"):
        sync_check(P.increments_if, n=256, twice=1)


def _accesses(p, line: int, buffer: str, write: bool) -> list:
    """The Access ops the lowering made for one statement of p (by source line) on one buffer."""
    from spork_lab.sync import program as prog
    from spork_lab.sync.checker import program_of

    program = program_of(p._loopir_proc)
    return program, [
        op for op in program.ops
        if isinstance(op, prog.Access) and program.stmt_of(op.site).line == line
        and program.slots[op.slot].name == buffer and bool(op.mode & prog.WRITE) == write
    ]


def test_threads_come_from_the_collective_analysis():
    line = line_of(P.ring_copy, "dst[it * 32 + t] = buf[it % 2, t]")
    program, (read,) = _accesses(P.ring_copy, line, "buf", False)
    table = program.tables[read.mask.table]  # the consumer warp's lanes, indexed by t
    assert program.masks[table[5]] == ((32 + 5, 32 + 6),)
    assert program.threads(table[5], 1, read.site) == ((64 + 32 + 5, 64 + 32 + 6),)  # task 1 of 64 threads


def test_lowered_elements_match_the_index_arithmetic():
    from spork_lab.sync import program as prog
    from spork_lab.sync.reference import Reference

    line = line_of(P.reverse_tiles, "y[task * 256 + tid] = tile[255 - tid]")
    program, (read,) = _accesses(P.reverse_tiles, line, "tile", False)
    _, (write,) = _accesses(P.reverse_tiles, line, "y", True)
    loops = dict(program.sites[write.site].loops)
    V = [0] * program.n_vars
    V[loops["task"]], V[loops["tid"]] = 2, 7
    evaluate = Reference(program).expr
    assert evaluate(read.element)(V) == 255 - 7 and evaluate(write.element)(V) == 2 * 256 + 7
    assert isinstance(read.mask, prog.Table) and read.mode == prog.READ


def test_tiled_gemm_benchmark_proc_passes():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from bench_sync_check import gemm

    assert sync_check(gemm, M=64, N=64, K=32).ok


def test_lanes_of_a_fragment_load_do_not_see_each_other():
    """A warp's fragment load reads shared memory lane by lane (not convergent, unlike mma.sync):
    overwriting the tile needs a Fence even though the whole warp issued the load."""
    from sm80_mma_gemm import sm80_mma_gemm

    from spork_lab.sync.mutants import sync_cursors, without_syncs

    assert sync_check(sm80_mma_gemm, M=64, N=64, K=64).ok
    k_tile_fence = next(i for i, c in enumerate(sync_cursors(sm80_mma_gemm))
                        if "Fence(cuda_in_order, Sm80_generic)" in str(c._impl._node))
    broken = sync_check(without_syncs(sm80_mma_gemm, [k_tile_fence]), M=64, N=64, K=64)
    h = broken.hazards[0]
    assert (h.kind, h.buffer) == ("WAR", "A_s")
    assert "Sm80_mma_load_a_tf32" in h.other.stmt.text and "Sm80_cp_async_f32" in h.access.stmt.text


def test_only_non_convergent_multi_thread_instrs_leave_shared_accesses_unordered():
    from sm80_mma_gemm import sm80_mma_gemm  # noqa: F401 -- registers the Sm80 instrs' calls below

    from spork_lab.platforms.cuda import CudaGmemLinear, CudaRmem, CudaSmemLinear
    from spork_lab.platforms.Sm80 import (
        Sm80_mma_load_a_tf32,
        Sm80_mma_tf32,
        Sm80_RmemMatrixA,
    )
    from spork_lab.sync.access import unordered_access

    load, mma = str(Sm80_mma_load_a_tf32.name()), str(Sm80_mma_tf32.name())
    assert unordered_access(load, 32, CudaSmemLinear)
    assert unordered_access(load, 32, CudaGmemLinear)
    assert not unordered_access(load, 32, Sm80_RmemMatrixA)  # the warp's own registers
    assert not unordered_access(load, 1, CudaSmemLinear)  # one thread: program order
    assert not unordered_access(mma, 32, CudaSmemLinear)  # convergent by definition
    assert not unordered_access(None, 32, CudaRmem)  # plain code outside instrs


@pytest.mark.parametrize(
    ("p", "owner", "statement"),
    [
        (P.err_cp_async_misaligned_in_loop, None, "Sm80_cp_async_f32(buf[4 * t + k"),
        (P.err_ldmatrix_misaligned_in_loop, None, "Sm80_mma_load_a_f16(A_r, A_s[:, 4 * kk"),
        (P.err_cp_async_misaligned_in_callee, P.copy_from_one, "Sm80_cp_async_f32(dst[1:5]"),  # the instr's line
    ],
)
def test_a_window_misaligned_at_the_checked_sizes_is_an_error(p, owner, statement):
    """Where the alignment an instr needs depends on an iterator, or on a window parameter's caller, the analysis
    cannot decide it; the run does (found by the session-16 audit: such programs passed and faulted on the GPU
    with a misaligned address)."""
    sizes = {"n": 2} if "n" in [str(a.name) for a in p._loopir_proc.args] else {}
    with pytest.raises(SyncError, match="misaligned") as e:
        sync_check(p, **sizes)
    assert e.value.lineno == line_of(owner or p, statement)


def test_a_statement_written_over_several_lines_is_printed_as_cut():
    """Its first line's open call ran on into the report's `threads [...]`, which read as an argument."""
    from spork_lab.analysis.result import StmtRef

    assert str(StmtRef("k.py", 3, "Sm80_cp_async_f32(buf[(it + 1) % 2, 4 * t:4 * t + 4],")).endswith("4 * t + 4], ...")
    assert str(StmtRef("k.py", 4, "dst[t] = buf[127 - t]")) == "k.py:4: dst[t] = buf[127 - t]"


RACE_CELL = '''\
from __future__ import annotations
import spork_lab as sl
from spork_lab import proc
from spork_lab.platforms.cuda import *

@proc
def neighbour_sum(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 128):
            s: f32[129] @ CudaSmemLinear
            for t in cuda_threads(0, 128):
                s[t] = x[task * 128 + t]
            for t in cuda_threads(0, 1):
                s[128] = 0.0
            for t in cuda_threads(0, 128):
                y[task * 128 + t] = s[t] + s[t + 1]
'''


def test_a_report_in_a_notebook_names_the_cell(capsys):
    """In IPython a cell's file is a temporary path (/tmp/ipykernel_.../123.py); the report printed it, where every
    error names `Cell In[n]` (session 38's workbench walkthrough)."""
    shell = pytest.importorskip("IPython.core.interactiveshell").InteractiveShell.instance()
    shell.run_cell(RACE_CELL)
    capsys.readouterr()
    result = shell.run_cell("print(sl.sync_check(neighbour_sum, n=256))")
    shown = capsys.readouterr().out
    assert result.error_in_exec is None and "RAW s[1]" in shown, shown
    cell = re.search(r"at (Cell In\[\d+\]):17: y\[task \* 128 \+ t\] = s\[t\] \+ s\[t \+ 1\]", shown)
    assert cell and f"after {cell.group(1)}:13: s[t] = x[task * 128 + t]" in shown, shown
    assert "ipykernel" not in shown and ".py:" not in shown, shown



def test_a_statement_staging_rewrote_is_quoted_as_it_is_now():
    """stage_mem keeps the source line of `y[j, i] = x[i, j]` for the statement that now reads `tile`: the hazard
    quoted that line, which does not mention tile (new-user walkthrough of session 39)."""
    h = next(h for h in sync_check(P.staged_transpose_no_fence, n=64).hazards if h.kind == "RAW")
    assert h.buffer == "tile" and h.access.stmt.line == line_of(P.staged_transpose, "y[j, i] = x[i, j]")
    assert h.access.stmt.text == "y[j, ii + 32 * bi] = tile[ii, j]", h.access.stmt.text
    assert h.other.stmt.text == "tile[i0, i1] = x[i0 + 32 * bi, i1]", h.other.stmt.text
