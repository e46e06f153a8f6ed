"""Run the static analysis and the sync check for the workbench as Outcomes.

A check that cannot run (the analysis failed, sizes are missing, the user
interrupted it) reports "not checked", never "safe". The check runs in a
worker thread while the caller's thread waits: past a second it reports its
progress (`progress(seconds)`), and an interrupt (Jupyter's stop button, i.e.
KeyboardInterrupt in the waiting thread) stops the worker and leaves the step
unchecked.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

from exo.API import Procedure
from exo.core.LoopIR import LoopIR

from ..analysis import analyze
from ..errors import SporkError
from ..sync.checker import sync_check

PROGRESS_AFTER_S = 1.0


@dataclass(frozen=True)
class Outcome:
    """What one analysis gave: `state` is "ok", "error", "unavailable" or "interrupted"; `value` the result when ok."""

    state: str
    message: str
    value: object = None
    error: Optional[dict] = None  # SporkError.to_json() when state == "error"


def located(e: SporkError) -> str:
    """The error's text with its file relative to the working directory (a notebook's folder) when that is
    near (`../examples/gemm.py:12`), so a stored notebook does not show where it was executed."""
    text = str(e)
    if e.filename and os.path.isabs(e.filename):
        relative = os.path.relpath(e.filename)
        if not relative.startswith(os.path.join(os.pardir, os.pardir)):
            text = text.replace(e.filename, relative, 1)
    return text


def analyse(p: Procedure) -> Outcome:
    """`spork_lab.analysis.analyze(p)` as an Outcome."""
    try:
        return Outcome("ok", "analysed", analyze(p))
    except SporkError as e:
        return Outcome("error", f"analysis failed: {located(e)}", error=e.to_json())


class Interrupted(Exception):
    """The user interrupted a long check; `seconds` it had run."""

    def __init__(self, seconds: float):
        super().__init__(f"interrupted after {seconds:.1f} s")
        self.seconds = seconds


def interruptible(fn: Callable[[], object], progress: Optional[Callable[[float], None]] = None):
    """`fn()` run in a worker thread; `progress(seconds)` every 0.25 s after the first second.

    KeyboardInterrupt in the waiting thread stops the worker (an exception raised into it, which it sees
    at its next Python bytecode) and raises `Interrupted`.
    """
    box: dict = {}

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 -- handed to the waiting thread as is
            box["error"] = e

    worker = threading.Thread(target=work, name="spork_lab-check", daemon=True)
    start = time.perf_counter()
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.25 if progress else 0.5)
            elapsed = time.perf_counter() - start
            if progress is not None and worker.is_alive() and elapsed >= PROGRESS_AFTER_S:
                progress(elapsed)
    except KeyboardInterrupt:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident), ctypes.py_object(KeyboardInterrupt))
        raise Interrupted(time.perf_counter() - start) from None
    if "error" in box:
        raise box["error"]
    return box["value"]


def check(p: Procedure, sizes: dict, analysis: Outcome, progress: Optional[Callable[[float], None]] = None) -> Outcome:
    """`spork_lab.sync.checker.sync_check(p, **sizes)` as an Outcome (skipped when the analysis failed)."""
    if analysis.state == "error":
        return Outcome("unavailable", "not checked: fix the analysis error first")
    missing = [str(a.name) for a in p.INTERNAL_proc().args if isinstance(a.type, LoopIR.Size) and str(a.name) not in sizes]
    if missing:
        return Outcome("unavailable", f"not checked: give sizes for {', '.join(missing)}, e.g. Workbench(p, sizes={{...}})")
    try:
        report = interruptible(lambda: sync_check(p, **sizes), progress)
    except Interrupted as e:
        return Outcome("interrupted", f"not checked: the sync check was interrupted after {e.seconds:.1f} s "
                                      "(display the workbench again to re-run it)")
    except SporkError as e:
        return Outcome("error", f"sync check failed: {located(e)}", error=e.to_json())
    where = ", ".join(f"{k}={v}" for k, v in sizes.items())
    engine = f" (checked by the {report.engine} engine: {report.engine_note})" if report.engine_note else ""
    if report.ok:
        return Outcome("ok", f"no hazards found at {where}{engine}", report)
    return Outcome("ok", f"hazard(s) at {where}{engine}", report)  # the workbench puts the count of its cards first
