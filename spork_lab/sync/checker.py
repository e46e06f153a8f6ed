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

from ..analysis import analyze
from ..core.cache import ProcCache
from ..errors import SporkError, SyncError, user_facing
from . import program as P
from .engine import Compiled, Unsupported
from .lower import index_expr, lower
from .reference import Reference, expr_source
from .report import SyncReport, build_report

ENGINES = ("compiled", "python")

_programs = ProcCache()  # proc -> (Program, Reference, Compiled or the reason there is none)


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


@user_facing
def sync_check(p, max_hazards: int = 50, max_events: int = 10000, engine: str = "compiled", **sizes) -> SyncReport:
    """Run the abstract machine on proc `p` with the given size arguments.

    engine="compiled" (default) runs the proc compiled to C; engine="python"
    the reference engine. Both give the same report; `report.engine` says which
    ran and `report.engine_note` why the reference ran when the compiled engine
    was asked for. The barrier timeline keeps the first `max_events` events
    (`timeline_truncated` says when there were more).
    """
    if engine not in ENGINES:
        raise ValueError(f"sync_check(engine={engine!r}): use 'compiled' or 'python'")
    ir = getattr(p, "_loopir_proc", p)
    analysis = analyze(ir)
    values = _size_values(ir, sizes)
    entry = _engines(ir)
    program, runner, note = entry[0], entry[1], ""
    if engine == "compiled":
        compiled = _compiled(entry)
        if isinstance(compiled, str):
            engine, note = "python", f"the compiled engine cannot run this program: {compiled}"
        else:
            runner = compiled
    try:
        run = _run(runner, values, max_hazards, max_events)
    except Unsupported as e:  # the compiled run met a limit of its runtime
        engine, note = "python", f"the compiled engine cannot run this program: {e}"
        run = _run(entry[1], values, max_hazards, max_events)
    return build_report(program, sizes, analysis.barriers, run, engine, note)


def _run(runner, values: tuple, max_hazards: int, max_events: int) -> P.RawRun:
    """One run, and a second one watching the hazards' elements to name the other accesses."""
    run = runner.run(values, max_hazards, max_events, frozenset())
    watch = frozenset((h.ordinal, h.element) for h in run.hazards if h.slot >= 0)
    if watch and run.error is None:
        run = runner.run(values, max_hazards, max_events, watch)
    return run


def _size_values(ir, sizes: dict) -> tuple:
    """The size arguments' values in order, checked: every one given, every assertion true."""
    env, values = {}, []
    for a in ir.args:
        if not a.type.is_numeric():
            name = str(a.name)
            if name not in sizes:
                raise SyncError(f"sync_check needs a value for {name}: sync_check(p, {name}=...)", a.srcinfo)
            env[a.name] = P.Var(len(values))
            values.append(int(sizes[name]))
    for pred in ir.preds:
        if not eval(f"lambda V: {expr_source(index_expr(pred, env))}")(values):  # noqa: S307
            raise SyncError(f"the sizes {sizes} violate the assertion {pred}", pred.srcinfo)
    return tuple(values)


__all__ = ["sync_check", "SyncReport", "program_of", "ENGINES"]
