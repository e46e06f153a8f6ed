"""The workbench session: a history of scheduling steps over an immutable proc, re-analysed at every step."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from exo.API import Procedure
from exo.API_cursors import Cursor, InvalidCursorError
from exo.core.LoopIR import LoopIR
from exo.rewrite.LoopIR_scheduling import SchedulingError

from .. import scheduling
from ..errors import SporkError
from . import _render
from ._codeview import CodeView, code_view
from ._results import Outcome, analyse, check
from ._source import value_source
from ._tiling import tiling_cells
from ._widget import WorkbenchWidget

TABS = (("code", "Code"), ("tiling", "Tiling"), ("steps", "Steps"), ("hazards", "Hazards"))
SCRIPT_IMPORTS = (
    "from __future__ import annotations",
    "",
    "from spork_lab import proc",
    "from spork_lab.platforms.cuda import *",
    "from spork_lab.platforms.Sm80 import *",
    "from spork_lab.scheduling import *",
)


@dataclass(frozen=True)
class Step:
    """One scheduling step: the operation, its arguments as Python source, and the proc it produced."""

    op: Callable
    args: tuple[str, ...]
    kwargs: tuple[tuple[str, str], ...]
    proc: Procedure
    diff: tuple[str, ...]

    @property
    def call(self) -> str:
        """The step as Python, applied to the proc variable `p`."""
        parts = ["p", *self.args, *(f"{k}={v}" for k, v in self.kwargs)]
        return f"{self.op.__name__}({', '.join(parts)})"

    def to_json(self) -> dict:
        return {
            "op": self.op.__name__,
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "call": self.call,
            "diff": list(self.diff),
            "added": sum(1 for d in self.diff if d.startswith("+")),
            "removed": sum(1 for d in self.diff if d.startswith("-")),
        }


def _diff(old: Procedure, new: Procedure) -> tuple[str, ...]:
    lines = difflib.unified_diff(str(old).split("\n"), str(new).split("\n"), lineterm="", n=0)
    return tuple(d for d in lines if not d.startswith(("---", "+++")))


def _locations(obj) -> Iterator[tuple[str, object]]:
    """("path", path) or ("line", lineno) for every place a hazard's JSON names (paths preferred)."""
    if isinstance(obj, dict):
        if isinstance(obj.get("path"), (list, tuple)):
            yield "path", tuple(obj["path"])
        elif isinstance(obj.get("line"), int):
            yield "line", obj["line"]
        for v in obj.values():
            yield from _locations(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _locations(v)


class Workbench:
    """A scheduling session on one proc: `apply` steps, `undo`, replay with `script`; shown as a widget.

    Every step re-runs the static analysis and (given `sizes` for the proc's
    size arguments) the sync check, and redraws every view of the widget.
    """

    def __init__(self, proc: Procedure, sizes: Optional[dict] = None):
        if not isinstance(proc, Procedure):
            raise TypeError(f"Workbench needs a proc (made with @proc), got {type(proc).__name__}")
        self.initial = proc
        self.sizes = dict(sizes or {})
        self.steps: list[Step] = []
        self.error: Optional[dict] = None  # the last failed step: {"call", "kind", "message"}
        self.widget = WorkbenchWidget()
        self._selected_path: Optional[tuple] = None
        self._selected_type: Optional[type] = None  # kept across steps only while the path holds the same kind of statement
        self._analyse()
        self.widget.observe(self._on_select, names="selected")

    # ---- the session ----

    @property
    def proc(self) -> Procedure:
        """The current proc (after the last step)."""
        return self.steps[-1].proc if self.steps else self.initial

    def apply(self, op: Callable, *args, **kwargs) -> None:
        """Run `op(proc, *args, **kwargs)` as the next step; a failing op shows its error and changes nothing."""
        current = self.proc
        call = f"{getattr(op, '__name__', op)}(...)"
        try:
            args = tuple(self._forward(a) for a in args)
            kwargs = {k: self._forward(v) for k, v in kwargs.items()}
            step_args = tuple(value_source(a) for a in args)
            step_kwargs = tuple((k, value_source(v)) for k, v in kwargs.items())
            call = Step(op, step_args, step_kwargs, current, ()).call
            new = op(current, *args, **kwargs)
        except (SchedulingError, SporkError, InvalidCursorError) as e:
            message = e.message if isinstance(e, SporkError) else str(e)
            self.error = {"call": call, "kind": type(e).__name__, "message": message}
            self._publish()
            return
        if not isinstance(new, Procedure):
            raise TypeError(f"{call} returned {type(new).__name__}, not a proc; apply takes scheduling operations")
        self.steps.append(Step(op, step_args, step_kwargs, new, _diff(current, new)))
        self.error = None
        self._analyse()

    def undo(self) -> None:
        """Drop the last step (and any error shown)."""
        if self.steps:
            self.steps.pop()
        self.error = None
        self._analyse()

    def select(self, pattern: str) -> None:
        """Select the statement that `proc.find(pattern)` finds (what clicking a line does), for the Tiling view."""
        node = self.proc.find(pattern)._impl._node
        index = next(i for i, s in enumerate(self._view.stmts) if s is node)
        self.widget.selected = index

    def script(self) -> str:
        """The session as a runnable Python script that rebuilds `p`, the current proc."""
        lines = ["# Replays a spork_lab workbench session; `p` ends as the session's current proc.", *SCRIPT_IMPORTS]
        for step in self.steps:
            if getattr(scheduling, step.op.__name__, None) is not step.op:
                lines.append(f"from {step.op.__module__} import {step.op.__name__}")
        lines += ["", "", "@proc", str(self.initial), "", "", f"p = {self.initial.name()}"]
        lines += [f"p = {step.call}" for step in self.steps]
        return "\n".join(lines) + "\n"

    def _forward(self, value):
        if isinstance(value, Cursor) and value.proc() is not self.proc:
            return self.proc.forward(value)
        if isinstance(value, list):
            return [self._forward(v) for v in value]
        return value

    # ---- analyses and views ----

    @property
    def state(self) -> dict:
        """What the widget shows: views as HTML plus the data they were drawn from."""
        return self.widget.state

    @property
    def analysis(self) -> Outcome:
        return self._analysis

    @property
    def check(self) -> Outcome:
        return self._check

    def _analyse(self) -> None:
        """Re-run everything that depends on the proc, then redraw."""
        p = self.proc
        self._view: CodeView = code_view(p)
        self._analysis = analyse(p)
        self._check = check(p, self.sizes, self._analysis)
        self._marks: dict[int, list[dict]] = {}
        for outcome in (self._analysis, self._check):
            if outcome.error and outcome.error.get("line") is not None:
                for n in self._view.lines_of_source_line(outcome.error["line"]):
                    self._mark(n, "error", "error", outcome.error["message"])
        self._hazards = self._hazard_cards()
        kept = self._view.stmt_at_path(self._selected_path) if self._selected_path is not None else None
        if kept is None or type(self._view.stmts[kept]) is not self._selected_type:
            self._selected_path = self._default_selection()
        index = self._view.stmt_at_path(self._selected_path) if self._selected_path is not None else None
        self._selected_type = None if index is None else type(self._view.stmts[index])
        self.widget.selected = -1 if index is None else index  # _on_select sees no change of path
        self._publish()

    def _mark(self, line: int, kind: str, label: str, text: str) -> None:
        self._marks.setdefault(line, []).append({"kind": kind, "label": label, "text": text})

    def _hazard_cards(self) -> list[dict]:
        if self._check.state != "ok":
            return []
        cards = []
        for h in self._check.value.hazards:
            fields = h.to_json()
            kind = str(fields.get("kind", "hazard"))
            lines: list[int] = []
            for what, where in _locations(fields):
                if what == "path":
                    index = self._view.stmt_at_path(where)
                    found = self._view.lines_of_stmt(index)[:1] if index is not None else []
                else:
                    found = self._view.lines_of_source_line(where)
                lines += [n for n in found if n not in lines]
            same = next((c for c in cards if c["kind"] == kind and c["lines"] == lines), None)
            if same is not None:  # the same pair of statements at other threads/iterations: one card, counted
                same["count"] += 1
                continue
            for n in lines:
                self._mark(n, "hazard", kind, f"{kind} hazard: {fields.get('message', '')}")
            cards.append({"kind": kind, "lines": lines, "fields": fields, "count": 1})
        return cards

    def _stmt_info(self, index: int):
        if self._analysis.state != "ok":
            return None
        return self._analysis.value.stmt_info(self._view.stmts[index])

    def _default_selection(self) -> Optional[tuple]:
        """The first of the most deeply tiled statements that are not loops (the interesting picture), else None."""
        if self._analysis.state != "ok":
            return None
        best, depth = None, -1
        for i, s in enumerate(self._view.stmts):
            tiling = self._stmt_info(i).tiling
            if not isinstance(s, (LoopIR.For, LoopIR.If)) and tiling is not None and len(tiling.iters) > depth:
                best, depth = self._view.paths[i], len(tiling.iters)
        return best

    def _on_select(self, change) -> None:
        index = change["new"]
        if 0 <= index < len(self._view.stmts) and self._view.paths[index] != self._selected_path:
            self._selected_path = self._view.paths[index]
            self._selected_type = type(self._view.stmts[index])
            self._publish()

    def _tiling_view(self, index: Optional[int]) -> tuple[str, Optional[dict]]:
        if index is None:
            note = self._analysis.message if self._analysis.state != "ok" else "click a statement in the Code view"
            return _render.tiling(None, None, None, note), None
        text = self._view.lines[self._view.lines_of_stmt(index)[0]].text.strip()
        info = self._stmt_info(index)
        if info is None:
            return _render.tiling(text, None, None, self._analysis.message), None
        if info.tiling is None:
            return _render.tiling(text, None, None, "runs on the CPU: no thread collective"), None
        grid = tiling_cells(info.tiling)
        return _render.tiling(text, grid, info.coll_unit_text, ""), grid

    def _publish(self) -> None:
        index = self._view.stmt_at_path(self._selected_path) if self._selected_path is not None else None
        tiling_html, grid = self._tiling_view(index)
        steps = [s.to_json() for s in self.steps]
        hazard_note = self._check.message
        views = {
            "header": _render.header(
                self.initial.name(), len(self.steps), self._analysis, self._check, len(self._hazards), self.error
            ),
            "code": _render.code(self._view, self._marks, index),
            "tiling": tiling_html,
            "steps": _render.steps(self.initial.name(), steps),
            "hazards": _render.hazards(hazard_note, self._hazards),
        }
        labels = {"steps": f"Steps ({len(steps)})", "hazards": f"Hazards ({len(self._hazards)})"}
        self.widget.state = {
            "views": views,
            "tabs": [[key, labels.get(key, label)] for key, label in TABS],
            "data": {
                "proc": self.initial.name(),
                "lines": [{"text": l.text, "stmt": l.stmt, "marks": self._marks.get(n, [])} for n, l in enumerate(self._view.lines)],
                "selected": index,
                "tiling": grid,
                "steps": steps,
                "hazards": [{"kind": c["kind"], "lines": c["lines"], "count": c["count"]} for c in self._hazards],
                "analysis": {"state": self._analysis.state, "message": self._analysis.message, "error": self._analysis.error},
                "check": {"state": self._check.state, "message": self._check.message, "error": self._check.error},
                "error": self.error,
            },
        }

    # ---- display ----

    def _repr_mimebundle_(self, **kwargs) -> tuple[dict, dict]:
        """The live widget, plus a static HTML picture of the current state for viewers without a kernel."""
        data, metadata = self.widget._repr_mimebundle_(**kwargs)
        data["text/html"] = _render.static_page(self.widget.state)
        data["text/plain"] = f"<Workbench {self.initial.name()}: {len(self.steps)} step(s)>"
        return data, metadata

    def _repr_html_(self) -> str:
        return _render.static_page(self.widget.state)
