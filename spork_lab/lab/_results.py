"""Run the static analysis and the sync check for the workbench as Outcomes.

A check that cannot run (the analysis failed, sizes are missing, the user
interrupted it) reports "not checked", never "safe". The check runs in a
worker thread, started as soon as the analysis is done: the caller draws what
needs no check meanwhile (the checker's gcc build and its runs release the
GIL), then waits. Past a second the wait reports its progress
(`progress(seconds)`), and an interrupt (Jupyter's stop button, i.e.
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
from ..core.ir import sizes_text
from ..errors import SporkError
from ..sync.checker import sync_check

PROGRESS_AFTER_S = 1.0


@dataclass(frozen=True)
class Outcome:
    """What one analysis gave: `state` is "ok", "error", "unavailable" or "interrupted"; `value` the result when ok."""

    state: str
    message: str
    value: object = None
    error: Optional[dict] = None  # SporkError.to_json() and "where" (see failure) when state == "error"


def failure(what: str, e: SporkError) -> Outcome:
    """An error outcome: `what` failed, with the error's text; its `error` adds "where", the error's place with
    its file relative to the working directory (a notebook's folder) when that is near (`../examples/gemm.py:12`),
    so a stored notebook does not show where it was executed."""
    text, place = str(e), e.place
    if e.filename and os.path.isabs(e.filename):
        relative = os.path.relpath(e.filename)
        if not relative.startswith(os.path.join(os.pardir, os.pardir)):
            text, place = text.replace(e.filename, relative, 1), place.replace(e.filename, relative, 1)
    return Outcome("error", f"{what}: {text}", error={**e.to_json(), "where": place})


def analyse(p: Procedure) -> Outcome:
    """`spork_lab.analysis.analyze(p)` as an Outcome."""
    try:
        return Outcome("ok", "analysed", analyze(p))
    except SporkError as e:
        return failure("analysis failed", e)


class Interrupted(Exception):
    """The user interrupted a long check; `seconds` it had run."""

    def __init__(self, seconds: float):
        super().__init__(f"interrupted after {seconds:.1f} s")
        self.seconds = seconds


class Background:
    """`fn()` running in a worker thread from construction on, so the caller can do other work meanwhile (the
    workbench draws the views that need no check while gcc builds the checker); `result` waits for it."""

    def __init__(self, fn: Callable[[], object]):
        self._box: dict = {}
        self._start = time.perf_counter()
        self._worker = threading.Thread(target=self._work, args=(fn,), name="spork_lab-check", daemon=True)
        self._worker.start()

    def _work(self, fn: Callable[[], object]) -> None:
        try:
            self._box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 -- handed to the waiting thread as is
            self._box["error"] = e

    def result(self, progress: Optional[Callable[[float], None]] = None):
        """fn's value (its exception is raised here); `progress(seconds)` every 0.25 s once it has run a second.

        KeyboardInterrupt in the waiting thread stops the worker (an exception raised into it, which it sees
        at its next Python bytecode) and raises `Interrupted`.
        """
        worker = self._worker
        try:
            while worker.is_alive():
                worker.join(0.25 if progress else 0.5)
                elapsed = time.perf_counter() - self._start
                if progress is not None and worker.is_alive() and elapsed >= PROGRESS_AFTER_S:
                    progress(elapsed)
        except KeyboardInterrupt:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident), ctypes.py_object(KeyboardInterrupt))
            raise Interrupted(time.perf_counter() - self._start) from None
        if "error" in self._box:
            raise self._box["error"]
        return self._box["value"]


class Check:
    """`spork_lab.sync.checker.sync_check(p, **sizes)`, started at construction (skipped when the analysis
    failed or sizes are missing); `outcome` waits for it and gives it as an Outcome."""

    def __init__(self, p: Procedure, sizes: dict, analysis: Outcome):
        self.sizes = sizes
        self._skipped: Optional[Outcome] = None
        self._running: Optional[Background] = None
        missing = [str(a.name) for a in p.INTERNAL_proc().args if isinstance(a.type, LoopIR.Size) and str(a.name) not in sizes]
        if analysis.state == "error":
            self._skipped = Outcome("unavailable", "not checked: fix the analysis error first")
        elif missing:
            self._skipped = Outcome("unavailable", f"not checked: give sizes for {', '.join(missing)}, "
                                                   "e.g. Workbench(p, sizes={...})")
        else:
            self._running = Background(lambda: sync_check(p, **sizes))

    def outcome(self, progress: Optional[Callable[[float], None]] = None) -> Outcome:
        if self._running is None:
            return self._skipped
        try:
            report = self._running.result(progress)
        except Interrupted as e:
            return Outcome("interrupted", f"not checked: the sync check was interrupted after {e.seconds:.1f} s "
                                          "(display the workbench again to re-run it)")
        except SporkError as e:
            return failure("sync check failed", e)
        where = f" at {sizes_text(self.sizes)}" if self.sizes else ""  # a proc of constant sizes has none
        engine = f" (checked by the {report.engine} engine: {report.engine_note})" if report.engine_note else ""
        if report.ok:
            return Outcome("ok", f"no hazards found{where}{engine}", report)
        return Outcome("ok", f"hazard(s){where}{engine}", report)  # the workbench puts the count of its cards first
