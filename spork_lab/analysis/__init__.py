"""`sl.analyze(p)`: device scopes, instr-tls and thread collectives of a proc, with their checks.

The analysis is a short list of named steps over the proc's LoopIR:

1. ``scopes``: one walk in source order gives every statement its device scope
   ("cpu" | "cuda"), instr-tl, collective tiling and enclosing loops, and
   rejects misplaced constructs (cuda_tasks outside the task nest of a device
   function, cuda_threads/CudaAsync/CudaWarps on the CPU, par loops or nested
   device functions in CUDA code, cuda_threads tilings that do not fit, bad
   CudaWarps names and ranges, and, through ``config``, launch configurations
   CUDA cannot run).
2. ``checks``: per statement, instrs run with their declared collective unit
   and instr-tl, scalar writes are made by single threads, and every
   allocation/read/write is allowed on the statement's instr-tl by its memory.
3. ``barriers``: every barrier's arrives and awaits follow its kind's pairing
   rules (``barriers.py``: Await counts, sync-tls, collectives); the
   `BarrierInfo`s are ``Analysis.barriers``.

Errors are `DeviceScopeError`, `CollectiveError`, `TimelineError` and
`SyncError` (all `SporkError`) at the user's line.

Python API (used by the code generator and the sync checker)::

    a = analyze(p)                    # p: Procedure (or its LoopIR proc)
    info = a.stmt_info(stmt)          # stmt: a LoopIR statement object of p._loopir_proc
    info.device_scope                 # "cpu" | "cuda"
    info.instr_tl                     # InstrTl (cpu_in_order_instr, cuda_in_order_instr, Sm80_cp_async_instr, ...)
    info.tiling                       # CollTiling of the executing collective; None on the CPU
    info.coll_unit_text               # e.g. "cuda_warp", "16 * cuda_thread"; None on the CPU
    info.iters                        # [IterInfo(name, sym, lo, hi, kind)], enclosing loops outermost first;
                                      # kind in "seq" | "par" | "cuda_tasks" | "cuda_threads"; lo/hi are ints
                                      # when constant, else LoopIR expressions
    info.device_function              # the enclosing CudaDeviceFunction, None on the CPU
    info.warp_name                    # name of the enclosing CudaWarps(name=...) block, or None
    info.threads({"m": 2, "n": 0})    # natural thread indices running it: [(start, stop), ...]
    info.iter_values_of(37)           # inverse: {"m": 2, "n": 5}, or None if thread 37 never runs it
    info.path, info.line, info.text   # child indices from the proc body ("else" enters an If's orelse),
                                      # source line, first printed line
    a.device_functions                # [(LoopIR.For of the `with` block, CudaDeviceFunction)]
    a.barriers                        # barrier Sym -> BarrierInfo (uses, ring depths, arrival counts)
    a.stmts                           # [(stmt, StmtInfo)] in source order
    a.to_json()                       # plain JSON-serialisable data

A `with` or loop statement's own StmtInfo describes the scope it appears in
(the `with CudaDeviceFunction` statement itself is CPU code); its body has the
new scope. Stmt identity is `id()`, valid while the Analysis holds the proc.
An instr's body states its effect and is not code that runs: analysing an
instr gives no statements.
"""

from __future__ import annotations

from typing import Union

from exo.API import Procedure
from exo.core.LoopIR import LoopIR

from ..errors import user_facing
from .barriers import barrier_infos
from .checks import check_statements
from .result import Analysis, IterInfo, StmtInfo
from .scopes import ScopeWalker


@user_facing
def analyze(p: Union[Procedure, LoopIR.proc]) -> Analysis:
    """The static analysis of a proc; raises SporkError subclasses on misuse."""
    proc_ir = p._loopir_proc if isinstance(p, Procedure) else p
    if proc_ir.instr is not None:
        return Analysis(proc_ir, [], [])  # an instr's body states its effect; it is not code that runs
    walker = ScopeWalker()
    walker.run(proc_ir)
    check_statements(proc_ir, walker.stmts, analyze)
    analysis = Analysis(proc_ir, walker.stmts, walker.device_functions)
    analysis.barriers = barrier_infos(proc_ir, analysis)
    return analysis


def barrier_usage(p: Union[Procedure, LoopIR.proc]) -> dict:
    """Barrier Sym -> BarrierInfo for every barrier allocated in proc `p` (checked, as `analyze` checks them)."""
    return analyze(p).barriers


__all__ = ["analyze", "barrier_usage", "Analysis", "StmtInfo", "IterInfo"]
