"""`sync_check`: the abstract machine of seed 000 ("Abstract Machine") run at concrete sizes.

The proc is lowered once (`lower.py`) to a `Program`: a flat list of
synchronization operations that both engines run, so they cover the same
constructs by construction:

- the compiled engine (default): the Program printed as C (`cprint.py`) and
  linked with the runtime `_machine.c`, built with gcc (`engine.py`);
- the reference engine (engine="python"): `reference.py` executes the ops.

Both return the same `RawRun`, which `report.py` turns into the SyncReport.
A run that finds hazards on buffer elements runs a second time, watching
those elements' access history, to name the other access of each hazard. If
the compiled engine cannot run a program (no gcc, a limit of the runtime),
the reference engine runs it and the report says so (`engine`,
`engine_note`); nothing falls back silently.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional

from exo.API import Procedure
from exo.core.LoopIR import LoopIR, T

from ..analysis import analyze
from ..analysis.checks import misaligned_need
from ..core.cache import ProcCache
from ..core.ir import INDEX_LIMIT, operation_count, sizes_text
from ..errors import SizesError, SporkError, SporkTypeError, SyncError, user_facing, user_frame
from ..lang.printer import proc_lines
from . import program as P
from .engine import Compiled, Unsupported
from .lower import index_expr, lower
from .reference import Reference, python_function
from .report import SyncReport, build_report

ENGINES = ("compiled", "python")

_programs = ProcCache()  # proc -> (Program, Reference, Compiled or the reason there is none)
# A proc's text -> (sizes, hazards found) of its latest sync_check in this process, the newest last; by text, so
# that a cell run again (a new proc of the same text) keeps its proc's verdict.
_last_checks: dict = {}
_LAST_CHECKS_KEPT = 256


def _proc_text(proc_ir) -> str:
    return "\n".join(proc_lines(proc_ir))  # unformatted: exo's formatting of str(p) takes tenths of a second


def last_check(p) -> Optional[tuple]:
    """(sizes, number of hazards found) of the latest `sync_check` of proc `p` (or of a proc of the same text) in
    this process, or None: what `%%spork_bench` says about the kernel it times (a build runs the analysis only)."""
    return _last_checks.get(_proc_text(getattr(p, "_loopir_proc", p)))


def _remember(proc_ir, sizes: dict, hazards: int) -> None:
    key = _proc_text(proc_ir)
    _last_checks.pop(key, None)
    _last_checks[key] = (dict(sizes), hazards)
    if len(_last_checks) > _LAST_CHECKS_KEPT:
        del _last_checks[next(iter(_last_checks))]


def program_of(proc_ir) -> P.Program:
    """The proc's Program (lowered once per proc)."""
    return _engines(proc_ir)[0]


def _engines(proc_ir) -> tuple:
    return _programs.get(proc_ir, _build_engines)


def _build_engines(proc_ir) -> list:
    program = lower(proc_ir)
    return [program, Reference(program), None]


def _compiled(entry: list):
    """The entry's compiled engine, built on first use; or why there is none (a string)."""
    if entry[2] is None:
        try:
            entry[2] = Compiled(entry[0])
        except Unsupported as e:
            entry[2] = str(e)
        except SporkError as e:  # no gcc, or gcc failed
            entry[2] = e.message
    return entry[2]


# Elements of the arguments one run may track: each holds access state (a few hundred bytes once accessed),
# and a size typed for the GPU (n = 1 << 28) would take the process's memory, and a notebook's kernel with it.
MAX_ELEMENTS = 1 << 22
# Statements one run may make, thread by thread: about a minute of the compiled machine (it runs 5-10 million
# a second on a 2-core VM). A running check cannot be interrupted (in a notebook, only a kernel restart stops it).
MAX_OPS = 5 * 10**8


@user_facing
def sync_check(p, max_hazards: int = 50, max_events: int = 10000, engine: str = "compiled",
               max_elements: int = MAX_ELEMENTS, max_ops: int = MAX_OPS, **sizes) -> SyncReport:
    """Run the abstract machine on proc `p` with the given size arguments.

    engine="compiled" (default) runs the proc compiled to C; engine="python"
    the reference engine. Both give the same report; `report.engine` says which
    ran and `report.engine_note` why the reference ran when the compiled engine
    was asked for. The barrier timeline keeps the first `max_events` events
    (`timeline_truncated` says when there were more). Sizes whose arguments
    hold more than `max_elements` elements are refused: hazards show at small sizes. So are sizes at which
    the program would run more than `max_ops` statements (thread by thread): a running check cannot be
    interrupted.
    """
    call = user_frame()  # argument errors name the user's call, as the sizes' do
    if not isinstance(p, (Procedure, LoopIR.proc)):
        raise SporkTypeError(f"sync_check takes a proc (made with @proc or a scheduling op), not {type(p).__name__}",
                             call)
    if engine not in ENGINES:
        raise SyncError(f"sync_check(engine={engine!r}): use 'compiled' or 'python'", call)
    if isinstance(max_hazards, dict):  # sync_check(p, {"n": 1024}): the sizes landed in the first positional parameter
        given = ", ".join(f"{k}={v!r}" for k, v in max_hazards.items())
        raise SporkTypeError(f"sync_check takes the sizes as keywords: write sync_check(p, {given}) or "
                             "sync_check(p, **sizes)", call)
    for name, limit in (("max_hazards", max_hazards), ("max_events", max_events), ("max_elements", max_elements),
                        ("max_ops", max_ops)):
        if not _is_int(limit) or limit < 0:
            raise SporkTypeError(f"sync_check({name}={limit!r}): give an int >= 0", call)
    ir = getattr(p, "_loopir_proc", p)
    analysis = analyze(ir)
    values = size_values(ir, sizes, max_elements)
    misaligned = misaligned_need(analysis.result("checks"), sizes)
    if misaligned is not None:  # said as a built proc's call says it, at the instr's line
        need, why = misaligned
        raise SyncError(f"sync_check: at {sizes_text(sizes)}, `{need.stmt}`: {why}", need.srcinfo)
    ops = operation_count(ir.body, sizes)
    if ops > max_ops:
        raise SizesError(f"sync_check: at {sizes_text(sizes)} the program runs about {ops:.1e} statements (thread by "
                         f"thread), more than max_ops={max_ops:.0e}: minutes or more, and a running check cannot be "
                         "interrupted; hazards show at small sizes: use smaller ones (or pass a larger max_ops=)", call)
    entry = _engines(ir)
    program, runner, note = entry[0], entry[1], ""
    if engine == "compiled":
        compiled = _compiled(entry)
        if isinstance(compiled, str):
            engine, note = "python", f"the compiled engine cannot run this program: {compiled}"
        else:
            compiled.optimize_if_slow()
            runner = compiled
    try:
        run = _run(runner, values, max_hazards, max_events)
    except Unsupported as e:  # the compiled run met a limit of its runtime
        engine, note = "python", f"the compiled engine cannot run this program: {e}"
        run = _run(entry[1], values, max_hazards, max_events)
    report = build_report(program, sizes, analysis.barriers, run, engine, note)
    _remember(ir, sizes, len(report.hazards))
    return report


def _run(runner, values: tuple, max_hazards: int, max_events: int) -> P.RawRun:
    """One run, and a second one watching the hazards' elements to name the other accesses."""
    run = runner.run(values, max_hazards, max_events, frozenset())
    watch = frozenset((h.ordinal, h.element) for h in run.hazards if h.slot >= 0)
    if watch and run.error is None:
        run = runner.run(values, max_hazards, max_events, watch)
    return run


def _is_int(value) -> bool:
    """An int the machine can take as is: a float is not silently truncated, nor a bool taken for 0 or 1."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def size_values(ir, sizes: dict, max_elements: int = MAX_ELEMENTS, caller: str = "sync_check") -> tuple:
    """The size arguments' values in order, checked: every one given and positive, no other name given,
    every assertion true, and at most `max_elements` argument elements. Errors name the caller's line (the
    user's `caller` call: sync_check, bank_conflicts), and the proc's line where it helps."""
    call = user_frame()
    env, values = {}, []
    names = [str(a.name) for a in ir.args if not a.type.is_numeric()]
    unknown = sorted(set(sizes) - set(names))
    if unknown:
        raise SizesError(f"{caller}: {ir.name} has no size {', '.join(map(repr, unknown))}; its sizes are "
                        f"{', '.join(names) or '(none)'}", call)
    for a in ir.args:
        if not a.type.is_numeric():
            name = str(a.name)
            if name not in sizes:
                raise SizesError(f"{caller} needs a value for {name}: {caller}(p, {name}=...)", call)
            env[a.name] = P.Var(len(values))
            given, is_bool = sizes[name], isinstance(a.type, T.Bool)
            if not (isinstance(given, bool) if is_bool else _is_int(given)):
                raise SizesError(f"{caller}: {name}={given!r}, but {name} is {a.type}: give "
                                 f"{'True or False' if is_bool else 'an int'}", call)
            values.append(int(given))
            if values[-1] < 1 and isinstance(a.type, T.Size):
                raise SizesError(f"{caller}: {name}={values[-1]}, but a size is positive", call)
            if abs(values[-1]) >= INDEX_LIMIT:  # the machine's ints would wrap (2**64 ran as 0: an empty check)
                raise SizesError(f"{caller}: {name}={values[-1]}, but device code indexes with 32-bit ints: give "
                                 f"less than {INDEX_LIMIT}", call)

    def value(e) -> int:
        return python_function(index_expr(e, env))(values)

    for pred in ir.preds:
        if not value(pred):
            raise SizesError(f"{caller}: the sizes {sizes} violate the assertion `{pred}` of {ir.name} (line "
                            f"{pred.srcinfo.lineno}): choose sizes it holds for", call)
    elements = sum(math.prod(value(d) for d in a.type.shape()) for a in ir.args if a.type.is_tensor_or_window())
    if elements > max_elements:
        raise SizesError(
            f"{caller}: at {sizes} the arguments hold {elements} elements, more than max_elements={max_elements}; "
            "the machine tracks every element, and hazards show at small sizes: use smaller ones (or raise "
            "max_elements, at a few hundred bytes per element)",
            call,
        )
    return tuple(values)


__all__ = ["sync_check", "SyncReport", "program_of", "ENGINES"]
