"""pipeline_loop (issue 13): the pipelined program passes the sync check and computes what the loop did.

For ring depths 1 to 4, both mechanisms (commit groups; mbarrier rings with
reverse barriers, warp-specialized or not) and both shapes (prologue/steady
state/epilogue, or one guarded loop), the pipelined proc passes `sync_check`,
and its sequential meaning, built with gcc, gives the same results as the
loop it came from. Off-by-one variants of every derived count are flagged;
loops that cannot be pipelined are refused with the statements named.
"""

from __future__ import annotations

import functools
import runpy

import numpy as np
import pytest
from conftest import ir_equal
from exo.rewrite.LoopIR_scheduling import SchedulingError
from procs_pipeline import (
    argument_tile,
    async_accumulator,
    before_device_function,
    big_tile,
    body_alloc_tiles,
    cluster_tiles,
    cp_async_tiles,
    escaping_tile,
    mbar_tiles,
    register_ring,
    short_loop,
    stale_read,
    three_stages,
    three_stages_mbar,
    ws_tiles,
)
from procs_sync import line_of
from spork_lab import run_cpu

import spork_lab as sl
from spork_lab.core.ir import walk_stmts
from spork_lab.core.sync_stmts import sync_spec_of
from spork_lab.platforms.cuda import CudaCommitGroup, CudaMbarrier, Sm80_generic, cuda_in_order, cuda_temporal
from spork_lab.scheduling import pipeline_loop
from spork_lab.sync.mutants import sync_cursors, with_await_n

RNG = np.random.default_rng(7)


def _args(p, n: int) -> dict:
    args = {"n": n, "src": RNG.standard_normal(n, dtype=np.float32), "dst": np.zeros(n, dtype=np.float32)}
    if p is cp_async_tiles:
        args["sums"] = np.zeros(128, dtype=np.float32)
    return args


# (proc, loop, stages for ring depth d, async stages, barrier memory, size for the check and the run)
CASES = {
    "commit": (cp_async_tiles, lambda d: [0, d - 1, d - 1, d - 1], [0], CudaCommitGroup, 1024),
    "mbarrier": (mbar_tiles, lambda d: [0, d - 1], [0], CudaMbarrier, 2048),
    "mbarrier_ws": (ws_tiles, lambda d: [0, d - 1], [], CudaMbarrier, 256),
    "commit_3stage": (three_stages, lambda d: [0, d - 1, 2 * d - 2, 2 * d - 2, 2 * d - 2], [0], CudaCommitGroup, 1024),
    "commit_registers": (register_ring, lambda d: [0, d - 1, 2 * d - 2], [0], CudaCommitGroup, 1024),
    "mbarrier_3stage": (three_stages_mbar, lambda d: [0, d - 1, d], [0], CudaMbarrier, 1024),  # rings of d and 2
}


def pipelined(case: str, depth: int, keep_loop: bool = False):
    p, stages, async_stages, mem, _ = CASES[case]
    return pipeline_loop(p, "it", stages(depth), async_stages, mem, keep_loop=keep_loop)


@functools.cache
def unpipelined_results(case: str) -> tuple:
    """(arguments, results on the CPU) of the loop before pipelining."""
    p, _, _, _, n = CASES[case]
    args = _args(p, n)
    return args, run_cpu(p, **args)


# Every case at every depth as prologue, steady state and epilogue; one guarded loop for one case per mechanism.
MATRIX = [(c, d, False) for c in sorted(CASES) for d in (1, 2, 3, 4)]
MATRIX += [(c, d, True) for c in ("commit", "mbarrier_3stage") for d in (1, 2, 3, 4)]


@pytest.mark.parametrize("case,depth,keep_loop", MATRIX)
def test_pipelined_checks_and_computes_the_same(case, depth, keep_loop):
    q = pipelined(case, depth, keep_loop)
    report = sl.sync_check(q, n=CASES[case][4])
    assert report.ok, "\n".join(map(str, report.hazards))
    args, want = unpipelined_results(case)
    got = run_cpu(q, **args)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert ir_equal(sl.parse_source(str(q))._loopir_proc, q._loopir_proc), str(q)  # printing round-trips


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_cluster_ring_computes_the_same(depth):
    """Stages inside a per-CTA loop: one barrier per CTA (`bar: barrier[2]`, used as `bar[cta]`), a ring in each
    CTA's shard (after the distributed dimension); the sequential meaning is the loop's."""
    q = pipeline_loop(cluster_tiles, "it", [0, depth - 1], [], CudaMbarrier)
    text = " ".join(str(q).split())
    ring = "buf: f32[2, 32]" if depth == 1 else f"buf: f32[2, {depth}, 32]"  # depth 1: one slot, no ring dimension
    assert "bar: barrier[2] @ CudaMbarrier" in text and ring in text
    for stmt in [f"ReverseAwait(bar[cta], cuda_in_order, ~{depth})", "Arrive(cuda_in_order, 1) >> bar[cta]",
                 "Await(bar[cta], cuda_in_order, ~0)", "ReverseArrive(cuda_in_order, 1) >> bar[cta]"]:
        assert stmt in text, stmt
    args = {"n": 256, "src": RNG.standard_normal(256, dtype=np.float32), "dst": np.zeros(256, dtype=np.float32)}
    np.testing.assert_array_equal(run_cpu(q, **args)["dst"], run_cpu(cluster_tiles, **args)["dst"])


@pytest.mark.parametrize("depth", [1, 3])
def test_cluster_ring_passes_sync_check(depth):
    """On the reference engine (the compiled one segfaulted on per-CTA barrier arrays before the TMA model)."""
    q = pipeline_loop(cluster_tiles, "it", [0, depth - 1], [], CudaMbarrier)
    assert sl.sync_check(q, n=512, engine="python").ok


def test_register_ring_keeps_its_shards():
    """The ring dimension of a distributed buffer goes after its distributed one: each thread its own slots."""
    q = pipelined("commit_registers", 3)
    assert "r: f32[128, 3, 2] @ CudaRmem" in str(q) and "r[t, (it + 2) % 3, 0]" in str(q)
    assert sl.analyze(q).result("dist")[_alloc_sym(q, "r")].dims == 1


def _alloc_sym(q, name: str):
    return next(s.name for s in walk_stmts(q._loopir_proc.body) if getattr(s, "name", None) and str(s.name) == name)


def test_the_cpu_comparison_sees_a_wrong_ring():
    """The comparison can fail: the same pipeline with the consumer reading the slot one tile ahead differs."""
    q = pipelined("mbarrier", 3)
    wrong = sl.parse_source(str(q).replace("buf[it % 3, 127 - t]", "buf[(it + 1) % 3, 127 - t]"))
    args = _args(mbar_tiles, 2048)
    assert not np.array_equal(run_cpu(wrong, **args)["dst"], run_cpu(mbar_tiles, **args)["dst"])


def _syncs(q) -> list:
    return [(i, sync_spec_of(c._impl._node)) for i, c in enumerate(sync_cursors(q))]


def test_derived_counts():
    """Commit groups: N = producer head - consumer head; mbarriers: forward lag 0, reverse lag = ring depth."""
    q = pipelined("commit", 3)  # stages [0, 2, 2, 2]: body copy, Arrive, Await, ... ; ring depth 3
    waits = [s.N for _, s in _syncs(q) if s.kind == "Await"]
    assert waits == [2, 2, 0]  # steady state, epilogue (empty groups keep the count), the drain
    assert "buf: f32[3, 128]" in str(q)
    q = pipelined("mbarrier_ws", 4)
    specs = {s.kind: s.N for _, s in _syncs(q) if s.kind != "Fence"}
    assert specs == {"ReverseAwait": ~4, "Arrive": 1, "Await": ~0, "ReverseArrive": 1}
    assert "buf: f32[4, 32]" in str(q)
    q = pipelined("commit_3stage", 2)  # stages [0, 1, 2, 2, 2]: a: depth 2 behind a cp.async queue; b: depth 2
    assert "a: f32[2, 128]" in str(q) and "b: f32[2, 128]" in str(q)
    # stage 1 needs the tile before the one just committed: N = 1; then the drain
    assert [s.N for _, s in _syncs(q) if s.kind == "Await"] == [1, 1, 1, 0]


def _loosened(q, group: list):
    """q with each Await of `group` (sync statement numbers) waiting for one arrive less: N + 1, lag + 1."""
    for i in group:
        spec = sync_spec_of(sync_cursors(q)[i]._impl._node)
        q = with_await_n(q, i, spec.N + 1 if spec.N >= 0 else ~(~spec.N + 1))
    return q


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
@pytest.mark.parametrize("case", ["commit", "mbarrier", "mbarrier_ws", "mbarrier_3stage"])
def test_off_by_one_counts_are_flagged(case, depth):
    """Waiting for one arrive too few is a hazard, for every derived count: each commit-group Await's N + 1;
    an mbarrier queue's lag + 1 (all copies of it: one queue has one lag)."""
    q = pipelined(case, depth)
    n = CASES[case][4]
    groups: dict = {}
    for i, spec in _syncs(q):
        if spec.is_await:
            bar = sync_cursors(q)[i]._impl._node.args[0].name
            key = (i,) if spec.N >= 0 else (spec.kind, bar)
            groups.setdefault(key, []).append(i)
    for key, group in groups.items():
        report = sl.sync_check(_loosened(q, group), n=n)
        assert not report.ok, f"{key} loosened by one passed"
    assert len(groups) >= (1 if case == "commit" else 2)


# ---- order=: a time step runs the consumer before the producer ----

READER_FIRST = [1, 2, 3, 0]  # cp_async_tiles' time step: Fence, consume, Fence, then the copy


def reader_first(c: int, keep_loop: bool = False):
    """cp_async_tiles with the consumer at stage c, run before the copy in each time step."""
    return pipeline_loop(cp_async_tiles, "it", [0, c, c, c], [0], CudaCommitGroup, keep_loop=keep_loop,
                         order=READER_FIRST)


@pytest.mark.parametrize("c,keep_loop", [(1, False), (2, False), (3, False), (2, True)])
def test_reader_first_needs_a_slot_less(c, keep_loop):
    """A consumer that reads before the copy in the time step is done with its slot in the step that refills it:
    a ring of c slots (not c + 1), and its Await waits for all but the c - 1 groups committed after its tile's.
    sync_check passes and the sequential meaning is the loop's."""
    q = reader_first(c, keep_loop)
    text = " ".join(str(q).split())
    assert (f"buf: f32[{c}, 128]" if c > 1 else "buf: f32[128]") in text
    steady = text[text.index("for it in seq(0, n / 128") :]
    assert steady.index(f"Await(cg, cuda_in_order, {c - 1})") < steady.index("127 - t]") < steady.index("Sm80_cp_async")
    report = sl.sync_check(q, n=1024)
    assert report.ok, "\n".join(map(str, report.hazards))
    args, want = unpipelined_results("commit")
    got = run_cpu(q, **args)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.parametrize("c", [2, 3])
def test_reader_first_off_by_one_is_flagged(c):
    """The derived ring depth is the smallest right one: a slot less is a race (the copy of the tile after the
    one read lands in its slot), and so is each Await waiting for one group less."""
    q = reader_first(c)
    short = str(q).replace(f"% {c}", f"% {c - 1}").replace(f"buf: f32[{c}, 128]", f"buf: f32[{c - 1}, 128]")
    assert short != str(q)
    assert not sl.sync_check(sl.parse_source(short), n=1024).ok
    waits = [i for i, s in _syncs(q) if s.kind == "Await" and s.N == c - 1]  # steady state, epilogue
    assert waits
    for i in waits:
        assert not sl.sync_check(_loosened(q, [i]), n=1024).ok, f"Await #{i} loosened by one passed"


def test_order_refusals():
    msg = _refused(cp_async_tiles, "it", [0, 1, 1, 1], [0], CudaCommitGroup, order=[1, 2, 0])
    assert "must list each of the 4 statements" in msg
    msg = _refused(cp_async_tiles, "it", [0, 1, 1, 1], [0], CudaCommitGroup, order=[0, 2, 1, 3])
    assert "both of stage 1: the statements of one stage keep their order" in msg
    msg = _refused(mbar_tiles, "it", [0, 1], [0], CudaMbarrier, order=[1, 0])
    assert "order= reorders the time steps of a commit-group pipeline" in msg


def test_stale_read_is_refused():
    """A later stage that reads a buffer before its producer writes it in the body reads the previous tile's
    value: pipelined, it would read its own tile's."""
    msg = _refused(stale_read, "it", [1, 1, 0, 0], [], CudaCommitGroup)
    assert "(stage 1) reads buf before stage 0 is done writing it" in msg


@pytest.mark.parametrize("case", ["commit", "mbarrier"])
def test_without_the_derived_syncs_it_races(case):
    """Deleting the derived barrier statements (keeping the user's Fences) makes the program racy."""
    from spork_lab.sync.mutants import without_syncs

    q = pipelined(case, 2)
    derived = [i for i, s in _syncs(q) if s.kind != "Fence"]
    assert not sl.sync_check(without_syncs(q, derived), n=CASES[case][4]).ok


def test_result_is_an_ordinary_proc():
    """The steady-state loop is the original loop (cursors forward to it), and scheduling goes on."""
    loop = cp_async_tiles.find_loop("it")
    q = pipeline_loop(cp_async_tiles, loop, [0, 1, 1, 1], [0], CudaCommitGroup)
    steady = q.forward(loop)
    text = str(steady._impl._node)
    assert text.startswith("for it in seq(0, n / 128 - 1):") and "Await(cg, cuda_in_order, 1)" in text
    from spork_lab.scheduling import insert_fence

    r = insert_fence(q, steady.body()[0].before(), cuda_in_order, cuda_in_order)
    fence = "Fence(cuda_in_order, cuda_in_order)"
    assert str(r).count(fence) == str(q).count(fence) + 1


def test_ring_allocated_in_the_body_is_lifted():
    """A buffer the loop body allocates and a later stage reads is lifted above the loop (exo's lift_alloc)."""
    q = pipeline_loop(body_alloc_tiles, "it", {"buf": 0, "*": 2}, [0], CudaMbarrier)
    text = str(q)
    assert text.index("buf: f32[3, 128] @ CudaSmemLinear") < text.index("for it in seq(0, 2):")
    assert sl.sync_check(q, n=2048).ok
    args = _args(body_alloc_tiles, 2048)
    np.testing.assert_array_equal(run_cpu(q, **args)["dst"], run_cpu(body_alloc_tiles, **args)["dst"])


def test_asynchronous_accumulator_in_a_later_stage():
    """A later stage's asynchronous accumulator, read back only by its own instruction, needs no queue and no
    async declaration: only the stage that hands buffers on asynchronously does."""
    q = pipeline_loop(async_accumulator, "it", [0, 1, 1, 1], [0], CudaCommitGroup)
    assert str(q).count("Arrive(Sm80_cp_async, 1) >> cg") == 3  # the op's: prologue, steady state, epilogue
    assert "acc: f32[128]" in str(q)  # no ring for the accumulator
    msg = _refused(async_accumulator, "it", [0, 1, 1, 1], [0, 1], CudaCommitGroup)
    assert "async stage 1" in msg and "writes nothing that a later statement of the loop reads" in msg


def test_before_the_device_function_exists():
    """A proc in the middle of its schedule (CUDA blocks, no device function yet) does not analyse; the op
    still pipelines it, and its sequential meaning is kept."""
    q = pipeline_loop(before_device_function, "it", [0, 1], [0], CudaCommitGroup)
    assert "buf: f32[2, 128]" in str(q) and "Await(cg, cuda_in_order, 1)" in str(q)
    args = _args(before_device_function, 1024)
    np.testing.assert_array_equal(run_cpu(q, **args)["dst"], run_cpu(before_device_function, **args)["dst"])


def test_stage_rule():
    """{buffer: stage, "*": stage}: a statement gets the stage of what it writes."""
    by_rule = pipeline_loop(cp_async_tiles, "it", {"buf": 0, "*": 2}, [0], CudaCommitGroup)
    assert str(by_rule) == str(pipeline_loop(cp_async_tiles, "it", [0, 2, 2, 2], [0], CudaCommitGroup))


def test_workbench_records_the_step(tmp_path):
    """Workbench.apply(pipeline_loop, ...) shows the step and replays it from wb.script()."""
    wb = sl.Workbench(cp_async_tiles, sizes={"n": 1024})
    wb.apply(pipeline_loop, "it", [0, 2, 2, 2], [0], CudaCommitGroup, keep_loop=True)
    assert wb.error is None and len(wb.steps) == 1 and wb.check.state == "ok"
    script = wb.script()
    assert "pipeline_loop(p, 'it', [0, 2, 2, 2], [0], CudaCommitGroup, keep_loop=True)" in script
    path = tmp_path / "replay.py"
    path.write_text(script)
    assert str(runpy.run_path(str(path))["p"]) == str(wb.proc)


def test_workbench_shows_the_ring_in_the_barrier_timeline(tmp_path):
    """The barrier timeline of a replayed pipeline_loop step shows the derived ring: its barrier with the ring's
    depth and lag, arrives cycling through the slots, the prologue's reverse awaits passing before any slot was
    released, every await paired with an arrive, nothing bad."""
    wb = sl.Workbench(mbar_tiles, sizes={"n": 2048})
    wb.apply(pipeline_loop, "it", [0, 2], [0], CudaMbarrier)
    path = tmp_path / "replay.py"
    path.write_text(wb.script())
    replayed = sl.Workbench(runpy.run_path(str(path))["p"], sizes={"n": 2048})
    (ring,) = replayed.state["data"]["timelines"]
    assert ring["name"] == "bar" and ring["bad"] is None
    info = replayed.check.value.barriers["bar"]
    assert {k: info[k] for k in ("forward_depth", "reverse_lag")} == {"forward_depth": 3, "reverse_lag": 3}
    task0 = [e for e in ring["events"] if e["iters"].get("task") == 0]
    arrives = [e for e in task0 if e["kind"] == "Arrive"]
    assert [e["slot"] for e in arrives] == [k % 3 for k in range(8)]
    waits = [e for e in task0 if e["kind"] == "ReverseAwait"]
    assert [e["state"] for e in waits] == ["pass"] * 3 + ["ok"] * 5  # the prologue fills 3 slots without waiting
    assert all(e["pairs"] is not None for e in task0 if e["kind"] == "Await")


# ---- refusals ----


def _refused(p, *args, **kwargs) -> str:
    with pytest.raises(SchedulingError) as e:
        pipeline_loop(p, *args, **kwargs)
    return str(e.value)


@pytest.mark.parametrize("argument", ["arrive_tl", "await_tl", "reverse_await_tl"])
def test_sync_tl_narrower_than_derived(argument):
    """A given sync-tl that orders less than the derived one is refused at the call, not left to sync_check."""
    msg = _refused(mbar_tiles, "it", [0, 2], [0], CudaMbarrier, **{argument: cuda_temporal})
    assert msg.startswith(f"{__file__}:") and f"{argument}=cuda_temporal" in msg and "ring of buf" in msg
    wider = pipeline_loop(mbar_tiles, "it", [0, 2], [0], CudaMbarrier, **{argument: Sm80_generic})
    assert not sl.sync_check(wider, n=2048).hazards


def test_later_stage_feeding_an_earlier_one():
    msg = _refused(cp_async_tiles, "it", [1, 0, 0, 0], [1], CudaCommitGroup)
    assert "a later stage feeds an earlier one" in msg and msg.startswith(f"{__file__}:")  # the user's call
    assert f"procs_pipeline.py:{line_of(cp_async_tiles, 'dst[it * 128 + t] = buf[127 - t]') - 1} `for t in cuda_threads(0, 128): dst[it * 128 + t] = buf[127 - t]" in msg  # the consumer's loop


def test_buffer_escaping_the_loop():
    msg = _refused(escaping_tile, "it", [0, 1], [], CudaMbarrier)
    assert "buf escapes the loop" in msg and f"procs_pipeline.py:{line_of(escaping_tile, 'dst[t] = buf[t]')} `dst[t] = buf[t]`" in msg


def test_ring_over_the_shared_memory_budget():
    msg = _refused(big_tile, "it", [0, 4], [], CudaMbarrier)
    assert "buf[5, 12288] (245760 bytes per CTA)" in msg and "over the budget of 232448 bytes" in msg
    pipeline_loop(big_tile, "it", [0, 3], [], CudaMbarrier)  # 4 slots: 196608 bytes fit
    assert "smem_budget" in _refused(big_tile, "it", [0, 1], [], CudaMbarrier, smem_budget=65536)


def test_ring_through_an_argument():
    assert "tmp is an argument of the proc" in _refused(argument_tile, "it", [0, 1], [], CudaMbarrier)


def test_reads_in_flight_without_release_with_is_refused():
    """It counts release_with's commit groups; alone it was ignored (the same pipeline as without it)."""
    msg = _refused(body_alloc_tiles, "it", [0, 2], [0], CudaCommitGroup, reads_in_flight=1)
    assert "reads_in_flight=1 counts the commit groups of release_with=CudaCommitGroup" in msg and "pass both" in msg


def test_loop_that_may_be_too_short():
    msg = _refused(short_loop, "it", [0, 2], [], CudaMbarrier)
    assert "may run fewer than 2 iterations" in msg and "assert n / 128 >= 2" in msg and "keep_loop=True" in msg
    # a constant trip count: no assertion can make 8 iterations 9 (the message suggested `assert 8 >= 9`)
    msg = _refused(body_alloc_tiles, "it", [0, 0, 9], [0], CudaCommitGroup)
    assert "runs 8 iterations, fewer than the 9 which the prologue of a 10-stage pipeline needs" in msg, msg
    assert "assert" not in msg and "fewer stages, or pass keep_loop=True" in msg
    q = pipeline_loop(short_loop, "it", [0, 2], [], CudaMbarrier, keep_loop=True)
    for n in (128, 256, 1024):  # one guarded loop is right for any trip count
        assert sl.sync_check(q, n=n).ok
        args = _args(short_loop, n)
        np.testing.assert_array_equal(run_cpu(q, **args)["dst"], run_cpu(short_loop, **args)["dst"])


def test_async_stages_must_match_the_statements():
    line = line_of(cp_async_tiles, "Sm80_cp_async_f32(buf[t") - 2
    msg = _refused(cp_async_tiles, "it", [0, 1, 1, 1], [], CudaCommitGroup)
    assert "stage 0 writes buf with asynchronous instructions" in msg and f"procs_pipeline.py:{line} " in msg
    assert "add 0 to async_stages" in msg
    msg = _refused(cp_async_tiles, "it", [0, 1, 1, 1], [0, 1], CudaCommitGroup)
    assert "stage 1 is in async_stages, but none of its statements writes with asynchronous instructions" in msg


def test_other_refusals():
    assert "4 stages for a loop body of 2 statements" in _refused(ws_tiles, "it", [0, 1, 1, 1], [], CudaMbarrier)
    assert "use CudaMbarrier" in _refused(ws_tiles, "it", [0, 1], [], CudaCommitGroup)
    assert "not a seq loop" in _refused(ws_tiles, "t", [0], [], CudaMbarrier)
    assert "no barrier named 'nope'" in _refused(ws_tiles, "it", [0, 1], [], "nope")
    # a misspelt buffer in a rule used to be reported as "async stage 0 has no statements"
    msg = _refused(cp_async_tiles, "it", {"bfu": 0, "*": 1}, [0], CudaCommitGroup)
    assert "the stage rule names bfu, which no statement of the loop body writes; the body writes acc, buf, dst" in msg
