"""Random scheduling steps for the fuzzers: the example kernels to start from, and steps that draw their targets.

A step is `apply(data, proc) -> proc`; it draws its targets and arguments with `data.draw(st.sampled_from(items),
label=...)`, so that hypothesis (tests/test_schedule_fuzz.py) and a seeded `RandomDraw`
(benchmarks/soundness_fuzz.py) both drive it. PLAIN steps change neither loop modes nor sync statements, so they
keep a proc's sync_check verdict; OTHER steps may change it.
"""

from __future__ import annotations

import importlib
import random
from pathlib import Path

import exo
from conftest import runnable_examples
from exo.API import Procedure
from exo.core.LoopIR import LoopIR
from hypothesis import strategies as st

import spork_lab
from spork_lab.core.ir import stmt_cursors, walk_stmts
from spork_lab.core.loop_modes import CudaThreads
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
from spork_lab.sync.mutants import sync_cursors, with_await_n, with_sync_moved, without_syncs

INTERNAL = (Path(spork_lab.__file__).parent, Path(exo.__file__).parent)  # no user's line is in these


def _with_mutants(procs: list, prefix: str = "") -> list:
    """(name, proc) of every device-function proc of `procs` and of each of its single-sync mutants."""
    out = []
    for p in procs:
        if "CudaDeviceFunction" not in str(p):
            continue
        out.append((prefix + p.name(), p))
        out += [(f"{prefix}{p.name()}-sync{i}", without_syncs(p, [i])) for i in range(len(sync_cursors(p)))]
    return out


def procs_module_starts() -> list:
    """Starts from the test programs (tests/procs_*.py), which exercise checker rules that no example does (per-warp
    commit groups, accumulator windows, remote arrives, ...), named `module.proc` (their printouts parse with the
    module's names: its own memories and instrs); imported on demand (~10 s)."""
    out, seen = [], set()
    for f in sorted(Path(__file__).parent.glob("procs_*.py")):
        module = vars(importlib.import_module(f.stem))
        procs = [v for v in module.values() if isinstance(v, Procedure) and id(v) not in seen]
        seen.update(map(id, procs))
        out += _with_mutants(procs, f"{f.stem}.")
    return out


STARTS = _with_mutants([p for name in runnable_examples() for p in importlib.import_module(name).PROCS])


def loops_of(p: Procedure, seq_only: bool) -> list:
    return [c for c in stmt_cursors(p) if isinstance(c._impl._node, LoopIR.For)
            and (not seq_only or isinstance(c._impl._node.loop_mode, LoopIR.Seq))]


def pick(data, items: list, what: str):
    if not items:
        raise NoTarget(what)
    return data.draw(st.sampled_from(items), label=what)


class NoTarget(Exception):
    """The current proc has nothing this step applies to."""


# ---- steps: (name, keeps the verdict, apply(data, proc) -> proc) ----


def _rename(data, p):
    return rename(p, p.name() + "_v")


def _simplify(data, p):
    return simplify(p)


def _reorder(data, p):
    loops = [c for c in loops_of(p, seq_only=True) if len(c._impl._node.body) == 1
             and isinstance(c._impl._node.body[0], LoopIR.For) and isinstance(c._impl._node.body[0].loop_mode, LoopIR.Seq)]
    return reorder_loops(p, pick(data, loops, "outer loop"))


def _divide(data, p):
    loop = pick(data, loops_of(p, seq_only=True), "loop")
    factor = data.draw(st.sampled_from([2, 3, 4, 8]), label="factor")
    name = loop._impl._node.iter.name()
    return divide_loop(p, loop, factor, [f"{name}o", f"{name}i"], tail=data.draw(st.sampled_from(["cut", "guard"])))


def _unroll(data, p):
    loops = [c for c in loops_of(p, seq_only=True) if isinstance(c._impl._node.hi, LoopIR.Const)
             and isinstance(c._impl._node.lo, LoopIR.Const) and c._impl._node.hi.val - c._impl._node.lo.val <= 8]
    return unroll_loop(p, pick(data, loops, "short loop"))


def _cut(data, p):
    loop = pick(data, loops_of(p, seq_only=True), "loop")
    return cut_loop(p, loop, data.draw(st.sampled_from([1, 2, 3, 4, 0]), label="cut"))


def _fission(data, p):
    # Fission keeps the sequential meaning but moves statements across the loop's sync statements
    # (a Fence at the end of a K-loop body no longer orders the next iteration's loads after this
    # one's reads), so it is a plain step only in loops without them.
    loops = [loop for loop in loops_of(p, seq_only=True)
             if not any(sync_spec_of(s) is not None for s in walk_stmts(loop._impl._node.body))]
    inside = [c for loop in loops for c in list(loop.body())[:-1]]
    return fission(p, pick(data, inside, "statement").after())


def _set_mode(data, p):
    loop = pick(data, loops_of(p, seq_only=False), "loop")
    mode = data.draw(st.sampled_from(["seq", cuda_tasks, cuda_threads, cuda_threads(unit=cuda_warp)]), label="mode")
    return set_loop_mode(p, loop, mode)


def _fence(data, p):
    stmt = pick(data, stmt_cursors(p), "statement")
    gap = stmt.before() if data.draw(st.sampled_from([True, False]), label="before") else stmt.after()
    return insert_fence(p, gap, cuda_in_order, cuda_in_order)


def _delete_sync(data, p):
    syncs = sync_cursors(p)
    return without_syncs(p, [pick(data, list(range(len(syncs))), "sync statement")])


def _move_sync(data, p):
    index = pick(data, list(range(len(sync_cursors(p)))), "sync statement")
    moved = with_sync_moved(p, index, data.draw(st.sampled_from([-1, 1]), label="direction"))
    if moved is None:
        raise NoTarget("a statement beside it in its block")
    return moved


def _await_n(data, p):
    awaits = [i for i, c in enumerate(sync_cursors(p)) if sync_spec_of(c._impl._node).is_await]
    index = pick(data, awaits, "await")
    n = sync_spec_of(sync_cursors(p)[index]._impl._node).N
    return with_await_n(p, index, n + data.draw(st.sampled_from([-1, 1]), label="change"))


def _memory(data, p):
    allocs = [c for c in stmt_cursors(p) if isinstance(c._impl._node, LoopIR.Alloc) and not is_barrier_alloc(c._impl._node)]
    alloc = pick(data, allocs, "allocation")
    return set_memory(p, alloc, data.draw(st.sampled_from([CudaSmemLinear, CudaRmem]), label="memory"))


def _divide_threads(data, p):
    loops = [c for c in loops_of(p, seq_only=False) if isinstance(c._impl._node.loop_mode, CudaThreads)]
    loop = pick(data, loops, "cuda_threads loop")
    name = loop._impl._node.iter.name()
    return divide_loop(p, loop, data.draw(st.sampled_from([2, 4, 32]), label="factor"), [f"{name}o", f"{name}i"],
                       perfect=data.draw(st.sampled_from([True, False]), label="perfect"))


PLAIN = [("rename", _rename), ("simplify", _simplify), ("reorder_loops", _reorder), ("divide_loop", _divide),
         ("unroll_loop", _unroll), ("cut_loop", _cut), ("fission", _fission)]
OTHER = [("set_loop_mode", _set_mode), ("insert_fence", _fence), ("delete a sync", _delete_sync),
         ("move a sync", _move_sync), ("change an await's N", _await_n),
         ("set_memory", _memory), ("divide a cuda_threads loop", _divide_threads)]


def user_error(e: BaseException) -> bool:
    """exo's SchedulingError, or a SporkError at a line of the user's (not of spork_lab's or exo's) files."""
    if isinstance(e, SchedulingError):
        return True
    if not isinstance(e, SporkError) or e.filename is None or e.lineno is None:
        return False
    return not any(Path(e.filename).resolve().is_relative_to(d) for d in INTERNAL)




class RandomDraw:
    """hypothesis' `data` for a seeded run outside hypothesis: each draw picks uniformly from a sampled_from's items."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def draw(self, strategy, label: str | None = None):
        return self.rng.choice(list(strategy.elements))
