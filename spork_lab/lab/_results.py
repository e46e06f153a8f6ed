"""Run the static analysis and the sync check for the workbench as Outcomes.

A check that cannot run (the analysis failed, sizes are missing) reports
"not checked", never "safe".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from exo.API import Procedure
from exo.core.LoopIR import LoopIR

from ..analysis import analyze
from ..errors import SporkError
from ..sync.checker import sync_check


@dataclass(frozen=True)
class Outcome:
    """What one analysis gave: `state` is "ok", "error" or "unavailable"; `value` the result when ok."""

    state: str
    message: str
    value: object = None
    error: Optional[dict] = None  # SporkError.to_json() when state == "error"


def analyse(p: Procedure) -> Outcome:
    """`spork_lab.analysis.analyze(p)` as an Outcome."""
    try:
        return Outcome("ok", "analysed", analyze(p))
    except SporkError as e:
        return Outcome("error", f"analysis failed: {e}", error=e.to_json())


def check(p: Procedure, sizes: dict, analysis: Outcome) -> Outcome:
    """`spork_lab.sync.checker.sync_check(p, **sizes)` as an Outcome (skipped when the analysis failed)."""
    if analysis.state == "error":
        return Outcome("unavailable", "not checked: fix the analysis error first")
    missing = [str(a.name) for a in p.INTERNAL_proc().args if isinstance(a.type, LoopIR.Size) and str(a.name) not in sizes]
    if missing:
        return Outcome("unavailable", f"not checked: give sizes for {', '.join(missing)}, e.g. Workbench(p, sizes={{...}})")
    try:
        report = sync_check(p, **sizes)
    except SporkError as e:
        return Outcome("error", f"sync check failed: {e}", error=e.to_json())
    where = ", ".join(f"{k}={v}" for k, v in sizes.items())
    engine = f" (checked by the {report.engine} engine: {report.engine_note})" if report.engine_note else ""
    if report.ok:
        return Outcome("ok", f"no hazards found at {where}{engine}", report)
    return Outcome("ok", f"{len(report.hazards)} hazard(s) at {where}{engine}", report)
