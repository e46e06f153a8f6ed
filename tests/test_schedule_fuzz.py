"""Random schedules of the examples (hypothesis): users' mistakes are user errors, and plain steps keep the verdict.

Each case starts from an example kernel, or one of its mutants with a sync
statement deleted, and applies up to three scheduling steps drawn at random
with random targets (loops, gaps, allocations of the current proc):

- every step, and `analyze`, `sync_check` and the code generator on the
  result, either succeed or raise exo's SchedulingError or a SporkError that
  names the user's file and line, never another exception (an internal error);
- steps that change neither loop modes nor sync statements (renaming,
  simplifying, reordering, dividing, unrolling, cutting or fissioning
  sequential loops) keep the sync_check verdict of the starting proc.

HYPOTHESIS_EXAMPLES=500 python -m pytest tests/test_schedule_fuzz.py runs a longer search.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import exo
import pytest
from conftest import check_sizes, runnable_examples
from exo.API import Procedure
from exo.core.LoopIR import LoopIR
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spork_lab
import spork_lab as sl
from spork_lab.core.loop_modes import CudaThreads
from spork_lab.core.ir import walk_stmts
from spork_lab.core.sync_stmts import is_barrier_alloc, sync_spec_of
from spork_lab.errors import SporkError
from spork_lab.platforms.cuda import CudaRmem, CudaSmemLinear, cuda_in_order, cuda_tasks, cuda_threads, cuda_warp
from spork_lab.scheduling import (
    SchedulingError,
    cut_loop,
    divide_loop,
    fission,
    insert_fence,
    rename,
    reorder_loops,
    set_loop_mode,
    set_memory,
    simplify,
    unroll_loop,
)
from spork_lab.core.ir import stmt_cursors
from spork_lab.sync.mutants import sync_cursors, without_syncs

EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "40"))
INTERNAL = (Path(spork_lab.__file__).parent, Path(exo.__file__).parent)  # no user's line is in these


def _starts() -> list:
    """(name, proc) of every example kernel and of each of its single-sync mutants."""
    out = []
    for name in runnable_examples():
        for p in importlib.import_module(name).PROCS:
            if "CudaDeviceFunction" not in str(p):
                continue
            out.append((p.name(), p))
            out += [(f"{p.name()}-sync{i}", without_syncs(p, [i])) for i in range(len(sync_cursors(p)))]
    return out


STARTS = _starts()


def _loops(p: Procedure, seq_only: bool) -> list:
    return [c for c in stmt_cursors(p) if isinstance(c._impl._node, LoopIR.For)
            and (not seq_only or isinstance(c._impl._node.loop_mode, LoopIR.Seq))]


def _pick(data, items: list, what: str):
    if not items:
        raise _NoTarget(what)
    return data.draw(st.sampled_from(items), label=what)


class _NoTarget(Exception):
    """The current proc has nothing this step applies to."""


# ---- steps: (name, keeps the verdict, apply(data, proc) -> proc) ----


def _rename(data, p):
    return rename(p, p.name() + "_v")


def _simplify(data, p):
    return simplify(p)


def _reorder(data, p):
    loops = [c for c in _loops(p, seq_only=True) if len(c._impl._node.body) == 1
             and isinstance(c._impl._node.body[0], LoopIR.For) and isinstance(c._impl._node.body[0].loop_mode, LoopIR.Seq)]
    return reorder_loops(p, _pick(data, loops, "outer loop"))


def _divide(data, p):
    loop = _pick(data, _loops(p, seq_only=True), "loop")
    factor = data.draw(st.sampled_from([2, 3, 4, 8]), label="factor")
    name = loop._impl._node.iter.name()
    return divide_loop(p, loop, factor, [f"{name}o", f"{name}i"], tail=data.draw(st.sampled_from(["cut", "guard"])))


def _unroll(data, p):
    loops = [c for c in _loops(p, seq_only=True) if isinstance(c._impl._node.hi, LoopIR.Const)
             and isinstance(c._impl._node.lo, LoopIR.Const) and c._impl._node.hi.val - c._impl._node.lo.val <= 8]
    return unroll_loop(p, _pick(data, loops, "short loop"))


def _cut(data, p):
    loop = _pick(data, _loops(p, seq_only=True), "loop")
    return cut_loop(p, loop, data.draw(st.sampled_from([1, 2, 3, 4, 0]), label="cut"))


def _fission(data, p):
    # Fission keeps the sequential meaning but moves statements across the loop's sync statements
    # (a Fence at the end of a K-loop body no longer orders the next iteration's loads after this
    # one's reads), so it is a plain step only in loops without them.
    loops = [loop for loop in _loops(p, seq_only=True)
             if not any(sync_spec_of(s) is not None for s in walk_stmts(loop._impl._node.body))]
    inside = [c for loop in loops for c in list(loop.body())[:-1]]
    return fission(p, _pick(data, inside, "statement").after())


def _set_mode(data, p):
    loop = _pick(data, _loops(p, seq_only=False), "loop")
    mode = data.draw(st.sampled_from(["seq", cuda_tasks, cuda_threads, cuda_threads(unit=cuda_warp)]), label="mode")
    return set_loop_mode(p, loop, mode)


def _fence(data, p):
    stmt = _pick(data, stmt_cursors(p), "statement")
    gap = stmt.before() if data.draw(st.sampled_from([True, False]), label="before") else stmt.after()
    return insert_fence(p, gap, cuda_in_order, cuda_in_order)


def _delete_sync(data, p):
    syncs = sync_cursors(p)
    return without_syncs(p, [_pick(data, list(range(len(syncs))), "sync statement")])


def _memory(data, p):
    allocs = [c for c in stmt_cursors(p) if isinstance(c._impl._node, LoopIR.Alloc) and not is_barrier_alloc(c._impl._node)]
    alloc = _pick(data, allocs, "allocation")
    return set_memory(p, alloc, data.draw(st.sampled_from([CudaSmemLinear, CudaRmem]), label="memory"))


def _divide_threads(data, p):
    loops = [c for c in _loops(p, seq_only=False) if isinstance(c._impl._node.loop_mode, CudaThreads)]
    loop = _pick(data, loops, "cuda_threads loop")
    name = loop._impl._node.iter.name()
    return divide_loop(p, loop, data.draw(st.sampled_from([2, 4, 32]), label="factor"), [f"{name}o", f"{name}i"],
                       perfect=data.draw(st.sampled_from([True, False]), label="perfect"))


PLAIN = [("rename", _rename), ("simplify", _simplify), ("reorder_loops", _reorder), ("divide_loop", _divide),
         ("unroll_loop", _unroll), ("cut_loop", _cut), ("fission", _fission)]
OTHER = [("set_loop_mode", _set_mode), ("insert_fence", _fence), ("delete a sync", _delete_sync),
         ("set_memory", _memory), ("divide a cuda_threads loop", _divide_threads)]


def _user_error(e: BaseException) -> bool:
    """exo's SchedulingError, or a SporkError at a line of the user's (not of spork_lab's or exo's) files."""
    if isinstance(e, SchedulingError):
        return True
    if not isinstance(e, SporkError) or e.filename is None or e.lineno is None:
        return False
    return not any(Path(e.filename).resolve().is_relative_to(d) for d in INTERNAL)


def _verdict(p, sizes: dict):
    """sync_check's verdict (True: hazard-free), or the user error that stops it (analysis, sizes)."""
    try:
        return sl.sync_check(p, max_events=0, **sizes).ok
    except (SchedulingError, SporkError) as e:
        assert _user_error(e), f"internal error: {type(e).__name__}: {e}"
        return type(e).__name__


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_schedules(data):
    name, start = data.draw(st.sampled_from(STARTS), label="start")
    sizes = check_sizes(start)
    before = _verdict(start, sizes)
    p, plain = start, True
    for _ in range(data.draw(st.integers(1, 3), label="steps")):
        step, apply = data.draw(st.sampled_from(PLAIN + OTHER), label="step")
        try:
            p = apply(data, p)
        except _NoTarget:
            continue
        except Exception as e:  # noqa: BLE001 -- anything but a user error fails the test
            assert _user_error(e), f"{step} on {name}: internal error {type(e).__name__}: {e}"
            continue
        plain = plain and (step, apply) in PLAIN
    after = _verdict(p, sizes)
    if plain:
        assert after == before, f"{name}: plain steps changed the verdict from {before} to {after}\n{p}"
    try:
        sl.compile_procs_to_strings([p], "fuzz")
    except Exception as e:  # noqa: BLE001
        assert _user_error(e), f"codegen on {name}: internal error {type(e).__name__}: {e}"


def test_the_starts_cover_both_verdicts():
    verdicts = {_verdict(p, check_sizes(p)) for _, p in STARTS}
    assert True in verdicts and False in verdicts


@pytest.mark.parametrize("step", [s for s, _ in PLAIN])
def test_each_plain_step_applies_to_some_example(step):
    """The plain steps are not vacuous: each changes some example's proc."""
    apply = dict(PLAIN)[step]

    class Draw:  # the first target and argument of each kind (every step draws with sampled_from)
        def draw(self, strategy, label=None):
            return strategy.elements[0]

    for _, p in STARTS:
        try:
            if str(apply(Draw(), p)) != str(p):
                return
        except (_NoTarget, SchedulingError, SporkError):
            continue
    pytest.fail(f"{step} applies to no example")
