"""`sl.analyze(p)`: the static analysis of a proc, as an ordered list of named passes.

`PASSES` runs in order; each pass reads the proc and the values of the passes
before it (`PassContext.results`) and returns its own value, or raises a
`SporkError` at the user's line:

1. ``scopes``: one walk in source order gives every statement its device scope
   ("cpu" | "cuda"), instr-tl, collective tiling and enclosing loops, and each
   device function its cuda_tasks nest; rejects misplaced constructs
   (cuda_tasks outside the task nest of a device function,
   cuda_threads/CudaAsync/CudaWarps on the CPU, par loops or nested device
   functions in CUDA code, cuda_threads tilings that do not fit, bad CudaWarps
   names and ranges, and, through ``config``, launch configurations CUDA
   cannot run). Value: `Scopes`.
2. ``checks``: per statement, instrs run with their declared collective unit
   and instr-tl, scalar writes are made by single threads, and every
   allocation/read/write is allowed on the statement's instr-tl by its memory.
   Value: None.
3. ``barriers``: the uses of every barrier, checked against its memory's rules
   (`BarrierMemory` hooks). Value: {Sym: BarrierInfo}.
4. ``dist`` (`spork_lab.dist`): distributed memory deduction, seed 000
   rules 1-3: per device allocation whose memory has a native unit, its
   distributed dimensions, shard shape, tiling chain and the owner threads of
   each shard. Value: {Sym: DistAlloc}.

Adding a pass is one line in `PASSES`: ``Pass("name", module.run)``, where
``run(ctx: PassContext)`` returns the pass's value; `Analysis.result("name")`
reads it.

The result is computed once per proc: procs are immutable, so `analyze`
caches the `Analysis` by the identity of the proc's LoopIR and drops it when
that proc is garbage collected (the Analysis holds no reference to the proc).
`sync_check`, the code generator and the workbench all call `analyze` and get
the cached value.

Errors are `DeviceScopeError`, `CollectiveError`, `TimelineError`,
`DistributedMemoryError` and `SyncError` (all `SporkError`) at the user's line.

Python API (used by the code generator, the sync checker and the workbench)::

    a = analyze(p)                    # p: Procedure (or its LoopIR proc)
    info = a.stmt_info(stmt)          # stmt: a LoopIR statement object of p._loopir_proc
    info.device_scope                 # "cpu" | "cuda"
    info.instr_tl                     # InstrTl (cpu_in_order_instr, cuda_in_order_instr, Sm80_cp_async_instr, ...)
    info.tiling                       # CollTiling of the executing collective; None on the CPU
    info.coll_unit_text               # e.g. "cuda_warp", "16 * cuda_thread"; None on the CPU
    info.iters                        # (IterInfo(name, sym, lo, hi, kind), ...), enclosing loops outermost first;
                                      # kind in "seq" | "par" | "cuda_tasks" | "cuda_threads"; lo/hi are ints
                                      # when constant, else LoopIR expressions
    info.device_function              # the enclosing CudaDeviceFunction, None on the CPU
    info.warp_name                    # name of the enclosing CudaWarps(name=...) block, or None
    info.threads({"m": 2, "n": 0})    # natural thread indices running it: [(start, stop), ...]
    info.iter_values_of(37)           # inverse: {"m": 2, "n": 5}, or None if thread 37 never runs it
    info.path, info.line, info.text   # child indices from the proc body ("else" enters an If's orelse),
                                      # source line, first printed line
    a.ref(stmt)                       # StmtRef(file, line, source text, path): how reports name a statement
    a.device_functions                # (DeviceFunctionInfo(block, ctx, tasks), ...); .body: the task body
    a.barriers                        # {Sym: BarrierInfo}; info.queue_rule(reverse) for the sync engines
    a.dist                            # {alloc Sym: DistAlloc} for device allocations with a native unit:
                                      # .dims distributed dims (0: none), .shard_shape, .owners {shard: threads},
                                      # .owner_threads(shard, outer iterator values)
    a.stmts                           # ((stmt, StmtInfo), ...) in source order
    a.result("name")                  # the value of any pass
    a.to_json()                       # plain JSON-serialisable data

A `with` or loop statement's own StmtInfo describes the scope it appears in
(the `with CudaDeviceFunction` statement itself is CPU code); its body has the
new scope. An instr's body states its effect and is not code that runs:
analysing an instr gives no statements.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping, Optional, Union

from exo.API import Procedure
from exo.core.LoopIR import LoopIR

from .. import dist
from ..core.cache import ProcCache
from ..errors import SporkError, SporkTypeError, user_facing, user_frame
from . import barriers, checks, scopes
from .result import Analysis, DeviceFunctionInfo, IterInfo, Scopes, StmtInfo, StmtRef


@dataclass(frozen=True)
class PassContext:
    """What a pass sees: the proc, the values of the passes before it, and `analyze` for callees."""

    proc: LoopIR.proc
    results: Mapping[str, object]
    analyze: Callable


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[PassContext], object]


PASSES = (
    Pass("scopes", scopes.run),
    Pass("checks", checks.run),
    Pass("proxy", barriers.proxy_run),
    Pass("barriers", barriers.run),
    Pass("dist", dist.run),
)

_cache = ProcCache()


@user_facing
def analyze(p: Union[Procedure, LoopIR.proc]) -> Analysis:
    """The static analysis of a proc (computed once per proc); raises SporkError subclasses on misuse."""
    if not isinstance(p, (Procedure, LoopIR.proc)):
        raise SporkTypeError(f"analyze takes a proc (made with @proc or a scheduling op), not {type(p).__name__}",
                             user_frame())
    return _cache.get(p._loopir_proc if isinstance(p, Procedure) else p, _run_passes)


def _run_passes(proc_ir: LoopIR.proc) -> Analysis:
    results: dict = {}
    if proc_ir.instr is not None:  # an instr's body states its effect; it is not code that runs
        results = {step.name: None for step in PASSES}
        results.update(scopes=Scopes((), ()), checks=(), dist=MappingProxyType({}), barriers=MappingProxyType({}))
    else:
        for step in PASSES:
            results[step.name] = step.run(PassContext(proc_ir, MappingProxyType(dict(results)), analyze))
    return Analysis(str(proc_ir.name), results)


def scope_error(proc_ir: LoopIR.proc) -> Optional[SporkError]:
    """The error the scopes pass raises on `proc_ir` (the structural rules: device scopes, the task nest, the
    collective tilings), or None. A few ms where a scheduling op takes tens to hundreds: the ops that move a loop
    out of another ask it (`spork_lab.scheduling`), so the user hears at their call, not at the next analysis."""
    try:
        scopes.run(PassContext(proc_ir, MappingProxyType({}), analyze))
    except SporkError as e:
        return e
    return None


def distributed_dims(proc_ir: LoopIR.proc) -> dict:
    """Allocation Sym -> the leading distributed dimensions the dist pass deduced (absent: none). Runs the
    passes dist needs (scopes) only: a proc in the middle of its schedule may not pass the others yet (TMA
    loads before the Arrive that closes their phase); one that does not even scope (CUDA blocks before the
    device function around them exists) has nothing distributed so far."""
    try:
        found = scopes.run(PassContext(proc_ir, MappingProxyType({}), analyze))
        deduced = dist.run(PassContext(proc_ir, MappingProxyType({"scopes": found}), analyze))
    except SporkError:
        return {}
    return {sym: d.dims for sym, d in deduced.items() if d is not None}


__all__ = [
    "analyze", "Analysis", "StmtInfo", "StmtRef", "IterInfo", "DeviceFunctionInfo", "PASSES", "Pass", "PassContext",
]  # fmt: skip
