"""Run the static analysis and the sync check for the workbench, saying plainly when either is missing.

The analyses are written by other parts of spork_lab and may not exist yet in
a given checkout; then the workbench reports "not analysed" / "not checked",
never "safe".
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Optional

from exo.API import Procedure
from exo.core.LoopIR import LoopIR

from ..errors import SporkError


@dataclass(frozen=True)
class Outcome:
    """What one analysis gave: `state` is "ok", "error" or "unavailable"; `value` the result when ok."""

    state: str
    message: str
    value: object = None
    error: Optional[dict] = None  # SporkError.to_json() when state == "error"


def _find(module: str, name: str) -> Optional[Callable]:
    """The function `module.name`, or None while that part of spork_lab is not written yet."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is not None and module.startswith(e.name):
            return None
        raise
    return getattr(mod, name, None)


def analyse(p: Procedure) -> Outcome:
    """`spork_lab.analysis.analyze(p)` as an Outcome."""
    analyze = _find("spork_lab.analysis", "analyze")
    if analyze is None:
        return Outcome("unavailable", "not analysed: spork_lab.analysis.analyze is not available in this checkout")
    try:
        return Outcome("ok", "analysed", analyze(p))
    except SporkError as e:
        return Outcome("error", f"analysis failed: {e}", error=e.to_json())


def check(p: Procedure, sizes: dict, analysis: Outcome) -> Outcome:
    """`spork_lab.sync.checker.sync_check(p, **sizes)` as an Outcome (skipped when the analysis failed)."""
    if analysis.state == "error":
        return Outcome("unavailable", "not checked: fix the analysis error first")
    sync_check = _find("spork_lab.sync.checker", "sync_check")
    if sync_check is None:
        return Outcome("unavailable", "not checked: spork_lab.sync.checker.sync_check is not available in this checkout")
    missing = [str(a.name) for a in p.INTERNAL_proc().args if isinstance(a.type, LoopIR.Size) and str(a.name) not in sizes]
    if missing:
        return Outcome("unavailable", f"not checked: give sizes for {', '.join(missing)}, e.g. Workbench(p, sizes={{...}})")
    try:
        report = sync_check(p, **sizes)
    except SporkError as e:
        return Outcome("error", f"sync check failed: {e}", error=e.to_json())
    where = ", ".join(f"{k}={v}" for k, v in sizes.items())
    if report.ok:
        return Outcome("ok", f"no hazards found at {where}", report)
    return Outcome("ok", f"{len(report.hazards)} hazard(s) at {where}", report)
