"""The workbench session: a history of scheduling steps over immutable procs, each analysed and checked once.

`Workbench.apply` records a step; the first time a step is shown (or its
`check` asked for) its proc is analysed once (`StepResult`: printed lines,
`sl.analyze`, `sl.sync_check` at the session's sizes, hazard cards, barrier
timelines), so a cell of several steps checks only the one it shows. Each
display of a workbench is its own widget
(`WorkbenchView`) showing the step it was displayed at: a later step does not
rewrite an earlier cell's picture, and every picture can browse to any step.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import linecache
import numbers
import re
import sys
import warnings
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from html import escape
from typing import Callable, Optional

from exo.API import Procedure
from exo.API_cursors import Cursor, InvalidCursorError
from exo.core.LoopIR import LoopIR
from exo.rewrite.LoopIR_scheduling import SchedulingError

from .. import scheduling
from ..codegen import compile_procs_to_strings
from ..core.blocks import CudaDeviceFunction
from ..core.ir import sizes_text
from ..core.loop_modes import CudaThreads, WithBlock
from ..errors import SizesError, SporkError, SporkIndexError, SporkSchedulingError, SporkTypeError
from ..lang.sched_errors import explain, raised_in_exo, user_frame
from ..sync.banks import bank_conflicts
from . import _hazards, _render, _timeline, _tiling
from ._codeview import CodeView, code_view, printed_text
from ._results import Check, Outcome, analyse
from ._source import value_source
from ._widget import WorkbenchView

TABS = (("code", "Code"), ("tiling", "Tiling"), ("timeline", "Barrier timeline"), ("hazards", "Hazards"),
        ("steps", "Steps"), ("banks", "Banks"), ("cuda", "CUDA"))  # fmt: skip
SCRIPT_IMPORTS = (
    "from __future__ import annotations",
    "",
    "from spork_lab import proc",
    "from spork_lab.platforms.cuda import *",
    "from spork_lab.platforms.Sm80 import *",
    "from spork_lab.scheduling import *",
)


class StepFailedWarning(UserWarning):
    """A workbench step failed outside a notebook cell, where no widget may show it; the workbench keeps its proc."""


def notebook_name(obj: object, default: str) -> str:
    """The notebook variable that holds `obj` (the name a hint's code must use), else `default`."""
    try:
        shell = get_ipython()  # noqa: F821 -- defined only inside IPython
    except NameError:
        return default
    return next((k for k, v in shell.user_ns.items() if v is obj and not k.startswith("_")), default)


def running_cell() -> Optional[tuple]:
    """(cell id, execution count) of the notebook cell running now; None outside a notebook, or where the front
    end sends no cell id (JupyterLab and Notebook 7 send one with every execution)."""
    try:
        shell = get_ipython()  # noqa: F821 -- defined only inside IPython
    except NameError:
        return None
    kernel = getattr(shell, "kernel", None)
    parent = kernel.get_parent() if kernel is not None and hasattr(kernel, "get_parent") else None
    cell_id = (parent or {}).get("metadata", {}).get("cellId")
    return (cell_id, shell.execution_count) if cell_id else None


def after_this_cell(callback: Callable[[], None]) -> None:
    """Call `callback` once, when the notebook cell running now has finished (after it displayed its result)."""
    shell = get_ipython()  # noqa: F821 -- called only where running_cell() found a cell, inside IPython

    def once(result=None) -> None:
        shell.events.unregister("post_run_cell", once)
        callback()

    shell.events.register("post_run_cell", once)


@dataclass(frozen=True)
class Step:
    """One scheduling step: the operation, its arguments as Python source, and the proc it produced."""

    op: Callable
    args: tuple[str, ...]
    kwargs: tuple[tuple[str, str], ...]
    proc: Procedure
    diff: tuple[str, ...]
    classes: tuple[type, ...] = ()  # of dataclass arguments (a schedule's Config): a script imports them
    cell: Optional[tuple] = None  # (notebook cell id, execution count) of the cell that applied it

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


class _ReindentMatcher(difflib.SequenceMatcher):
    """difflib's matcher of printed lines, indentation kept (a new `Fence(...)` inside a loop pairs with no old one
    at another depth), each replaced block compared again without indentation: a step that wraps code in a block
    (`CudaDeviceFunction`, a loop) re-indents it without changing it."""

    def get_opcodes(self) -> list:
        out: list = []
        for tag, i1, i2, j1, j2 in super().get_opcodes():
            parts = [(tag, i1, i2, j1, j2)]
            if tag == "replace":
                inner = difflib.SequenceMatcher(None, [x.strip() for x in self.a[i1:i2]],
                                                [x.strip() for x in self.b[j1:j2]], autojunk=False)
                parts = [(t, i1 + p1, i1 + p2, j1 + q1, j1 + q2) for t, p1, p2, q1, q2 in inner.get_opcodes()]
            for part in parts:
                if out and out[-1][0] == part[0] == "equal":  # one run of equal lines, as difflib gives them
                    out[-1] = ("equal", out[-1][1], part[2], out[-1][3], part[4])
                else:
                    out.append(part)
        return out


def _matcher(old: str, new: str) -> tuple[list, list, difflib.SequenceMatcher]:
    """(old lines, new lines, a difflib matcher) of two printed procs: of `_ReindentMatcher` and difflib's on lines
    without indentation, the one that changes fewer lines (on a tie the first: a new Fence inside a loop is not
    paired with the same text further out). Without indentation, a step that restructures the whole proc
    (`map_to_gpu`) is not cut up where some line happens to keep its depth."""
    a, b = old.split("\n"), new.split("\n")
    kept = _ReindentMatcher(None, a, b, autojunk=False)
    stripped = difflib.SequenceMatcher(None, [x.strip() for x in a], [x.strip() for x in b], autojunk=False)
    return a, b, min((kept, stripped), key=_changed_count)


def _changed_count(matcher: difflib.SequenceMatcher) -> int:
    return sum(j2 - j1 for tag, _, _, j1, j2 in matcher.get_opcodes() if tag != "equal")


def _diff(old: str, new: str) -> tuple[str, ...]:
    """The line diff (indentation ignored) between two printed procs: per change a `@@ -l,n +l,n @@` header, a
    line of context (` `) either side, the removed lines (`-`) and the added ones (`+`)."""
    a, b, matcher = _matcher(old, new)
    out: list[str] = []
    for group in matcher.get_grouped_opcodes(1):
        (_, i1, _, j1, _), (_, _, i2, _, j2) = group[0], group[-1]
        out.append(f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@")
        for tag, i1, i2, j1, j2 in group:
            out += [f" {x}" for x in b[j1:j2]] if tag == "equal" else [*(f"-{x}" for x in a[i1:i2]), *(f"+{x}" for x in b[j1:j2])]
    return tuple(out)


def _changed_lines(old: str, new: str) -> frozenset:
    """0-based lines of the printed proc `new` that a step from `old` added or rewrote (not only re-indented)."""
    _, _, matcher = _matcher(old, new)
    return frozenset(j for tag, _, _, j1, j2 in matcher.get_opcodes() if tag in ("replace", "insert") for j in range(j1, j2))


class _Progress:
    """Shows a long check's running time in the notebook (an updated display), and clears it when done."""

    def __init__(self, what: str):
        self.what, self.handle = what, None

    def __call__(self, seconds: float) -> None:
        from IPython import get_ipython
        from IPython.display import HTML, display

        if get_ipython() is None:
            return
        html = HTML(f'<div class="sl-progress" style="color: #57606a">⏳ {escape(self.what)}: {seconds:.1f} s '
                    "(interrupt the kernel ■ to stop it; the step is kept, unchecked)</div>")
        if self.handle is None:
            self.handle = display(html, display_id=True)
        else:
            self.handle.update(html)

    def done(self) -> None:
        if self.handle is not None:
            from IPython.display import HTML

            self.handle.update(HTML(""))


class StepResult:
    """Everything the views show about one proc, computed once: printed lines, analysis, check, cards, timelines.

    The sync check starts (in a worker thread) as soon as the analysis is done; what needs its report (`check`,
    `hazards`, `timelines`, `marks`) waits for it on first use, so a picture draws the views that
    need no check (tiling, highlighted code, steps) while gcc builds the checker.
    """

    def __init__(self, proc: Procedure, text: str, sizes: dict, progress: Optional[_Progress] = None,
                 session_name: str = "wb"):
        self.proc = proc
        self.session_name = session_name  # the workbench's variable, which the hazard hints' calls name
        self.view: CodeView = code_view(proc, text)
        analysis = analyse(proc)
        self._check = Check(proc, sizes, analysis)
        self.analysis: Outcome = self._in_code_lines(analysis, "analysis failed")
        self._progress = progress
        self._sizes = sizes
        self._cuda: Optional[tuple] = None
        self._banks: Optional[tuple] = None

    @cached_property
    def _checked(self) -> Outcome:
        outcome = self._check.outcome(self._progress)
        if self._progress is not None:
            self._progress.done()
        return outcome

    @cached_property
    def check(self) -> Outcome:
        """The sync check; with hazards, its message counts them as the Hazards tab's cards do."""
        if self._checked.error and self._checked.error["kind"] == "SizesError":  # the sizes are wrong, not the proc
            return dataclasses.replace(self._in_code_lines(self._checked, "not checked"), state="unavailable", error=None)
        checked = self._in_code_lines(self._checked, "sync check failed")
        if checked.state == "ok" and not checked.value.ok:
            after = len(self.hazards) - self.hazards_to_fix
            more = f" (and {after} more past the deadlock, which the GPU never reaches)" if after else ""
            return dataclasses.replace(checked, message=f"{self.hazards_to_fix} {checked.message}{more}")
        return checked

    @property
    def _report(self):
        return self._checked.value if self._checked.state == "ok" else None

    @cached_property
    def hazards(self) -> list[dict]:
        analysis = self.analysis.value if self.analysis.state == "ok" else None
        report = self._report
        if report is None:
            return []
        return _hazards.hazard_cards(report, self.view, analysis, self.proc, self.session_name)

    @property
    def hazards_to_fix(self) -> int:
        """The hazard cards but those past a deadlock (what hung threads would do next): the count shown."""
        return sum(not card["after_hang"] for card in self.hazards)

    @cached_property
    def timelines(self) -> list[dict]:
        analysis = self.analysis.value if self.analysis.state == "ok" else None
        report = self._report
        return _timeline.barrier_timelines(report, report.hazards, self.view, analysis) if report is not None else []

    @cached_property
    def marks(self) -> dict[int, list[dict]]:
        """Printed line -> the error and hazard marks shown on it."""
        marks: dict[int, list[dict]] = {}
        for outcome in (self.analysis, self.check):
            if outcome.error and outcome.error.get("line") is not None:
                for n in self._error_lines(outcome.error):
                    marks.setdefault(n, []).append({"kind": "error", "label": "error", "text": outcome.error["message"]})
        for card in self.hazards:
            if card["after_hang"]:  # not something to fix: its threads hang before it
                continue
            for n in sorted(set(card["lines"])):
                marks.setdefault(n, []).append({"kind": "hazard", "label": card["kind"],
                                                "text": f"{card['kind']} hazard: {card['message']}"})
        return marks

    def _in_code_lines(self, outcome: Outcome, failed: str) -> Outcome:
        """A failed outcome whose message numbers lines as the Code view does, as the hazard cards do (the
        error names lines of the user's file or cell, where scheduling has moved and copied statements)."""
        error = outcome.error
        if outcome.state != "error" or not error:
            return outcome
        source = error.get("file") or self.proc._loopir_proc.srcinfo.filename  # a check's thread has no place
        message = self._printed_refs(error["message"].removeprefix("sync_check: "), source)
        lines = self._error_lines(error) if error.get("line") is not None else []
        where = error.get("where")
        if lines:
            message = f"line {lines[0] + 1}: {message}" + (f" (written at {where})" if where else "")
        elif where:  # a line the Code view does not show (another proc's): the place as the error gives it
            message = f"{where}: {message}"
        return dataclasses.replace(outcome, message=f"{failed}: {message}")

    def _printed_refs(self, message: str, filename: Optional[str]) -> str:
        """`line N` of the user's file, where that line's text is printed on exactly one line, as that line."""

        def printed(m: re.Match) -> str:
            source = linecache.getline(filename, int(m[1])).strip() if filename else ""
            hits = [n for n, line in enumerate(self.view.lines) if source and line.text.strip() == source]
            return f"line {hits[0] + 1}" if len(hits) == 1 else m[0]

        return re.sub(r"\bline (\d+)\b", printed, message)

    def _error_lines(self, error: dict) -> list[int]:
        """The printed lines an error is about. Errors name a source line, which scheduling may have copied into
        many statements (every sync statement a step inserts carries its anchor's line): of those, the lines
        showing the code the message quotes (`...`, up to a `(...)`), else all of them."""
        lines = self.view.lines_of_source_line(error["line"])
        quoted = [q.split("(...)")[0] + ("(" if "(...)" in q else "") for q in re.findall(r"`([^`]+)`", error["message"])]
        named = [n for n in lines if any(q and q in self.view.lines[n].text for q in quoted)]
        return named or lines

    @property
    def stale(self) -> bool:
        """An interrupted check: compute again when next shown."""
        return self.check.state == "interrupted"

    def _no_kernel(self, what: str) -> Optional[str]:
        """Why the step has no `what` (CUDA, bank count) to show: its analysis failed, or it has no kernel yet."""
        if self.analysis.state != "ok":
            return f"no {what}: " + self.analysis.message
        if not self.analysis.value.device_functions:
            return f"no {what} yet: the proc has no CudaDeviceFunction"
        return None

    def cuda(self) -> tuple[Optional[str], str]:
        """(the generated .cu text or None, a note), generated on first use."""
        if self._cuda is None:
            why = self._no_kernel("CUDA")
            if why:
                self._cuda = (None, why)
            else:
                try:
                    cu = compile_procs_to_strings([self.proc], self.proc.name())[2]
                    unsound = self.hazards and f"; the sync check found {self.check.message}: on the GPU this code " \
                                               "can race or hang, and compiles all the same"
                    self._cuda = (cu, f"{self.proc.name()}.cu as sl.compile_procs_to_strings writes it "
                                      f"({cu.count(chr(10)) + 1} lines){unsound or ''}")
                except SporkError as e:
                    self._cuda = (None, f"code generation failed: {e}")
        return self._cuda

    def banks(self) -> tuple:
        """(sl.bank_conflicts' report at the workbench's sizes or None, a note), counted on first use."""
        if self._banks is None:
            why = self._no_kernel("bank count")
            if why:
                self._banks = (None, why)
            else:
                try:
                    report = bank_conflicts(self.proc, **self._sizes)
                    call = ", ".join([self.proc.name(), *([sizes_text(self._sizes)] if self._sizes else [])])
                    self._banks = (report, f"sl.bank_conflicts({call}): the wavefronts of each warp's "
                                           "shared-memory requests, per statement")
                except SporkError as e:
                    self._banks = (None, f"no bank count: {e.message}")
        return self._banks

    def default_selection(self) -> Optional[tuple]:
        """The first of the most deeply tiled statements that are not loops or allocations (the interesting
        picture), else None."""
        if self.analysis.state != "ok":
            return None
        best, depth = None, -1
        for i, s in enumerate(self.view.stmts):
            tiling = self.analysis.value.stmt_info(s).tiling
            if not isinstance(s, (LoopIR.For, LoopIR.If, LoopIR.Alloc)) and tiling is not None and len(tiling.iters) > depth:
                best, depth = (self.view.paths[i], type(s)), len(tiling.iters)
        return best

    def index_of(self, selection: Optional[tuple]) -> Optional[int]:
        """The statement a (path, statement class) selection names here, or None if it names another kind."""
        if selection is None:
            return None
        index = self.view.stmt_at_path(selection[0])
        return index if index is not None and type(self.view.stmts[index]) is selection[1] else None


class Workbench:
    """A scheduling session on one proc: `apply` steps, `undo`, replay with `script`; each display is a widget.

    Every step shown re-runs the static analysis and (given `sizes` for the
    proc's size arguments) the sync check. `apply`, `undo` and `select` return
    the workbench, so a cell ending in `wb.apply(...)` shows the new step.
    """

    def __init__(self, proc: Procedure, sizes: Optional[dict] = None):
        if not isinstance(proc, Procedure):
            raise SporkTypeError(f"Workbench needs a proc (made with @proc), got {type(proc).__name__}", user_frame())
        if sizes is not None and not isinstance(sizes, Mapping):
            raise SporkTypeError(f"Workbench(sizes=...) takes a dict of the proc's sizes, e.g. sizes={{'n': 1024}}, "
                                 f"not {sizes!r}", user_frame())
        names = [str(a.name) for a in proc._loopir_proc.args if not a.type.is_numeric()]
        unknown = sorted(set(sizes or {}) - set(names))
        if unknown:
            raise SizesError(f"Workbench(sizes=...): {proc.name()} has no size {', '.join(map(repr, unknown))}; its "
                             f"sizes are {', '.join(names) or '(none)'}", user_frame())
        for name, value in (sizes or {}).items():
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise SporkTypeError(f"Workbench(sizes=...): {name}={value!r}, but a size is an int", user_frame())
        self.initial = proc
        self.sizes = dict(sizes or {})
        self.steps: list[Step] = []
        self.error: Optional[dict] = None  # the last failed step: {"call", "kind", "message", "step", "cell",
        #   "skipped": the calls after it in the same run of its cell, not run}
        self.replaced: Optional[dict] = None  # {"text", "cell"}: what running a cell again replaced, said in its picture
        self._unshown: Optional[str] = None  # the failed step's error text until a picture of its cell shows it
        self._results: dict[int, StepResult] = {}
        self._selection: Optional[tuple] = None  # (path, statement class) chosen with select()
        self._views: weakref.WeakSet = weakref.WeakSet()  # the pictures displayed, told when steps change
        self._texts: dict[int, tuple] = {}  # id(proc) -> (proc, printed_text(proc))

    # ---- the session ----

    @property
    def proc(self) -> Procedure:
        """The current proc (after the last step)."""
        return self.steps[-1].proc if self.steps else self.initial

    def proc_at(self, step: int) -> Procedure:
        """The proc after `step` steps (0: the initial proc)."""
        self._check_step(step, "proc_at")
        return self.steps[step - 1].proc if step else self.initial

    def _check_step(self, step: int, call: str) -> None:
        """`step` is a step of this workbench, or an error at the user's call."""
        if not isinstance(step, numbers.Integral) or isinstance(step, bool):
            raise SporkTypeError(f"{call} takes a step number, an int from 0 (the initial proc) to {len(self.steps)}, "
                                 f"not {step!r}", user_frame())
        if not 0 <= step <= len(self.steps):
            raise SporkIndexError(f"step {step}: this workbench has steps 0 to {len(self.steps)}", user_frame())

    def apply(self, op: Callable, *args, **kwargs) -> "Workbench":
        """Run `op(proc, *args, **kwargs)` as the next step; a failing op shows its error and changes nothing."""
        if not callable(op):
            raise SporkTypeError(f"apply takes a scheduling operation, as in wb.apply(divide_loop, ...), not {op!r}",
                                 user_frame())
        cell = running_cell()
        if cell is not None and self.error and self.error["cell"] == cell:
            # an earlier call of this run of the cell failed: the calls after it were written for its result
            self.error["skipped"].append(f"{getattr(op, '__name__', op)}(...)")
            return self
        if cell is not None:
            if self.replaced and self.replaced["cell"] != cell:
                self.replaced = None  # said once, in the picture of the run that replaced them
            self._replace_steps_of(cell)
        current = self.proc
        call = f"{getattr(op, '__name__', op)}(...)"
        try:
            args = tuple(self._forward(a) for a in args)
            kwargs = {k: self._forward(v) for k, v in kwargs.items()}
            step_args = tuple(value_source(a) for a in args)
            step_kwargs = tuple((k, value_source(v)) for k, v in kwargs.items())
            call = Step(op, step_args, step_kwargs, current, ()).call
            new = op(current, *args, **kwargs)
        except (SchedulingError, SporkError, InvalidCursorError, TypeError, ValueError) as e:
            if isinstance(e, (TypeError, ValueError)) and not raised_in_exo(e):
                raise
            if not isinstance(e, (SporkError, InvalidCursorError)):
                e = explain(e, getattr(op, "__name__", str(op)), current, user_frame())
            message = e.message if isinstance(e, SporkError) else str(e)
            self.error = {"call": call, "kind": type(e).__name__, "message": message, "step": len(self.steps),
                          "cell": cell, "skipped": []}
            if cell is None:  # no notebook cell, so maybe no widget to show it: a script would go on silently
                warnings.warn(f"{call} failed; the workbench stays at step {len(self.steps)}: {e}", StepFailedWarning,
                              stacklevel=2)
            else:
                self._unshown = f"{type(e).__name__}: {e}"
                after_this_cell(self._report_unshown_error)
            return self
        if not isinstance(new, Procedure):
            raise SporkTypeError(f"{call} returned {type(new).__name__}, not a proc; apply takes scheduling operations",
                                 user_frame())
        classes = tuple(type(a) for a in (*args, *kwargs.values()) if dataclasses.is_dataclass(a) and not isinstance(a, type))
        self.steps.append(Step(op, step_args, step_kwargs, new, _diff(self.text(current), self.text(new)), classes, cell))
        self.error = None
        self._steps_changed()
        return self

    def _report_unshown_error(self) -> None:
        """At the end of the cell where a step failed, print its error as a SporkError is printed, unless a picture of
        the workbench in that cell showed it: a cell that printed something else, or ended with `;`, said nothing,
        and the steps after the failed one were skipped silently."""
        if self._unshown is None or self.error is None:
            return
        skipped = self.error["skipped"]
        print(f"{self._unshown}\nThe workbench stays at step {self.error['step']}."
              + (f" Not run after it in this cell: {', '.join(skipped)}." if skipped else ""), file=sys.stderr)
        self._unshown = None

    def _replace_steps_of(self, cell: tuple) -> None:
        """A cell run again replaces the steps its earlier run applied (not add them twice), and the steps after
        them, which were applied to their result."""
        first = next((i for i, s in enumerate(self.steps) if s.cell and s.cell[0] == cell[0] and s.cell != cell), None)
        if first is None:
            return
        later = [s for s in self.steps[first:] if s.cell is None or s.cell[0] != cell[0]]
        text = f"running this cell again replaced steps {first + 1} to {len(self.steps)}" if len(self.steps) > first + 1 \
            else f"running this cell again replaced step {first + 1}"
        if later:
            text += f", {len(later)} of them from later cells: run those again"
        del self.steps[first:]
        self.error = None
        self.replaced = {"text": text, "cell": cell}
        self._steps_changed()

    def undo(self) -> "Workbench":
        """Drop the last step (and any error shown)."""
        if self.steps:
            self.steps.pop()
        self.error = None
        self._steps_changed()
        return self

    def _steps_changed(self) -> None:
        for v in list(self._views):
            v.steps_changed()

    def select(self, pattern: str) -> "Workbench":
        """Select the statement `proc.find(pattern)` finds (what clicking a line does) for the pictures shown next;
        a bare name selects the loop of that iterator, as `find_loop` does. `Name(_)` also finds the first call of an
        instr template as the Code view prints it (`Sm90_mma_async_f16(_)` for the instance
        `Sm90_mma_async_f16_m64n256`)."""
        if not isinstance(pattern, str):
            raise SporkTypeError(f"select takes a pattern, as in wb.select(\"y[_] += _\"), not {pattern!r}",
                                 user_frame())
        r = self.result()
        find = self.proc.find_loop if re.fullmatch(r"\w+( #\d+)?", pattern) else self.proc.find
        try:
            node = find(pattern)._impl._node  # `Name(_)` finds an instr template's calls too
        except (SchedulingError, SyntaxError) as e:
            raise explain(e, "select", self.proc, user_frame()).with_traceback(None) from None
        index = next((i for i, s in enumerate(r.view.stmts) if s is node), None)
        if index is None:
            raise SporkSchedulingError(f"select({pattern!r}) finds a part of an expression, and select takes a "
                                       "statement: a pattern such as \"y[_] += _\", or a loop's iterator name",
                                       user_frame())
        self._selection = (r.view.paths[index], type(r.view.stmts[index]))
        return self

    def script(self) -> str:
        """The session as a runnable Python script that rebuilds `p`, the current proc."""
        lines = ["# Replays a spork_lab workbench session; `p` ends as the session's current proc.", *SCRIPT_IMPORTS]
        imports = dict.fromkeys(f"from {o.__module__} import {o.__name__}" for o in self._script_names())
        lines += list(imports)
        lines += ["", "", "@proc", str(self.initial), "", "", f"p = {self.initial.name()}"]
        lines += [f"p = {step.call}" for step in self.steps]
        return "\n".join(lines) + "\n"

    def _script_names(self) -> list:
        """What the script imports besides SCRIPT_IMPORTS: ops not in spork_lab.scheduling, and the classes of
        dataclass arguments (a schedule's Config)."""
        starred = [importlib.import_module(line.split()[1]) for line in SCRIPT_IMPORTS if line.endswith("import *")]
        names = []
        for step in self.steps:
            if getattr(scheduling, step.op.__name__, None) is not step.op:
                names.append(step.op)
            names += [c for c in step.classes  # those the call writes by name (cursors and tls are written otherwise)
                      if f"{c.__name__}(" in step.call and not any(getattr(m, c.__name__, None) is c for m in starred)]
        return names

    def _forward(self, value):
        if isinstance(value, Cursor) and value.proc() is not self.proc:
            try:
                return self.proc.forward(value)
            except (NotImplementedError, InvalidCursorError):  # exo's forwarding knows only the proc's ancestors
                raise SporkSchedulingError(
                    f"the cursor {value} belongs to a proc that is not an earlier step of this workbench: "
                    f"find it in wb.proc", user_frame()) from None
        if isinstance(value, list):
            return [self._forward(v) for v in value]
        return value

    # ---- results ----

    def text(self, p: Procedure) -> str:
        """`printed_text(p)` (what the Code view shows), printed once per proc of the session."""
        hit = self._texts.get(id(p))
        if hit is None or hit[0] is not p:
            hit = self._texts[id(p)] = (p, printed_text(p))
        return hit[1]

    def _proc_in(self, history: Optional[list], step: int) -> Procedure:
        """The proc after `step` steps of `history` (None: the session's steps)."""
        if history is None:
            return self.proc_at(step)
        return history[step - 1].proc if step else self.initial

    def result(self, step: Optional[int] = None, history: Optional[list] = None) -> StepResult:
        """The analyses of the proc after `step` steps (default: the current one) of `history` (default: the
        session's steps; a picture of replaced steps keeps its own), computed once."""
        p = self.proc if step is None else self._proc_in(history, step)
        r = self._results.get(id(p))
        if r is None or r.stale:
            sizes = sizes_text(self.sizes)
            progress = _Progress(f"sync check of {p.name()} at {sizes}")
            r = self._results[id(p)] = StepResult(p, self.text(p), self.sizes, progress, notebook_name(self, "wb"))
        return r

    @property
    def analysis(self) -> Outcome:
        return self.result().analysis

    @property
    def check(self) -> Outcome:
        return self.result().check

    @property
    def state(self) -> dict:
        """What a picture of the current step shows: views as HTML plus the data they were drawn from."""
        return self.render(len(self.steps), error=self._current_error())

    def _current_error(self) -> Optional[dict]:
        """The last failed step's error, if the session is still at the step where it failed and this is the run of
        the cell where it failed (a picture in a later cell showed an earlier cell's error as if that cell failed)."""
        error = self.error
        return error if error and error["step"] == len(self.steps) and error["cell"] == running_cell() else None

    # ---- pictures ----

    def render(self, step: int, selection: Optional[tuple] = None, level: str = "", pages: Optional[dict] = None,
               opened: str = "", error: Optional[dict] = None, history: Optional[list] = None) -> dict:
        """The views of `step` as HTML plus their data, for a selection ((path, class) or None: the default),
        with the `error` of a step that failed there (a picture shows the error it was displayed with); `history`:
        the steps of a picture whose step the session replaced (None: the session's own); `opened`: the tab
        shown, which an ON_DEMAND tab needs to be computed."""
        r = self.result(step, history)  # its sync check runs in the background: what needs no check is drawn first
        index = r.index_of(selection) if selection is not None else r.index_of(self._selection)
        if index is None:
            index = r.index_of(r.default_selection())
        tiling_html, grid = self._tiling(r, index, level)
        changed = _changed_lines(self.text(self._proc_in(history, step - 1)), self.text(r.proc)) if step else frozenset()
        steps_html, steps_label, steps = self.steps_view(step, history)
        pages = dict(pages or {})
        cuda_text, cuda_note = r.cuda() if opened == "cuda" else (
            None, "the generated CUDA appears here when this tab is opened in a running notebook "
                  "(sl.compile_procs_to_strings)")
        banks, banks_note = r.banks() if opened == "banks" else (
            None, "shared-memory bank conflicts are counted when this tab is opened in a running notebook "
                  "(sl.bank_conflicts at the workbench's sizes)")
        r.view.highlighted  # noqa: B018 -- computed while the check runs; the header below waits for it
        views = {
            "header": self.header(step, error, history),
            "code": _render.code(r.view, r.marks, index, changed),
            "tiling": tiling_html,
            "timeline": _timeline.timeline_view(self._timeline_note(r), r.timelines, pages),
            "hazards": _hazards.render(r.check.message, r.hazards),
            "steps": steps_html,
            "banks": _render.banks(banks, banks_note, r.view),
            "cuda": _render.cuda(cuda_text, cuda_note),
        }
        labels = {"steps": steps_label, "hazards": f"Hazards ({r.hazards_to_fix})"}
        bad = next((b for b in r.timelines if b["bad"] is not None), None)
        return {
            "views": views,
            "tabs": [[key, labels.get(key, label)] for key, label in TABS],
            "first_view": "timeline" if bad else "hazards" if r.hazards else "code",
            "data": {
                "proc": self.initial.name(),
                "step": step,
                "lines": [{"text": l.text, "stmt": l.stmt, "marks": r.marks.get(n, []), "changed": n in changed}
                          for n, l in enumerate(r.view.lines)],
                "selected": index,
                "selection": None if index is None else (list(r.view.paths[index]), type(r.view.stmts[index]).__name__),
                "tiling": grid,
                "steps": steps,
                "hazards": [{k: c[k] for k in ("kind", "buffer", "message", "stmts", "lines", "count", "hint", "witness", "texts",
                                               "after_hang")}
                            for c in r.hazards],
                "timelines": [{"name": b["name"], "bad": b["bad"], "lanes": b["lanes"], "events": b["events"],
                               "page": pages.get(b["name"], _timeline.first_page(b))} for b in r.timelines],
                "analysis": {"state": r.analysis.state, "message": r.analysis.message, "error": r.analysis.error},
                "check": {"state": r.check.state, "message": r.check.message, "error": r.check.error},
                "error": error,
            },
        }

    def header(self, step: int, error: Optional[dict] = None, history: Optional[list] = None) -> str:
        """The header of a picture of `step`: title, step browser, badges, and `error` (of a step that failed);
        a picture of replaced steps (`history`) says so."""
        r = self.result(step, history)
        if history is not None:
            notice = ("this picture shows steps the session no longer has (a cell above ran again, or undo): "
                      "run this cell again to show the session as it is")
        else:
            notice = self.replaced["text"] if self.replaced and step == len(self.steps) else ""
        n_steps = len(self.steps if history is None else history)
        return _render.header(self.initial.name(), step, n_steps, r.analysis, r.check, error, notice)

    def steps_view(self, step: int, history: Optional[list] = None) -> tuple[str, str, list]:
        """The Steps tab of a picture of `step`: its HTML, its label and the records drawn."""
        records = [s.to_json() for s in (self.steps if history is None else history)]
        return _render.steps(self.initial.name(), records, step), self.steps_label(history), records

    def steps_label(self, history: Optional[list] = None) -> str:
        """The Steps tab's label: how many steps `history` (default: the session's) has."""
        return f"Steps ({len(self.steps if history is None else history)})"

    @staticmethod
    def _timeline_note(r: StepResult) -> str:
        if r.check.state != "ok":
            return r.check.message
        return "no barriers (Arrive/Await) in this proc" if not r.timelines else ""

    def _tiling(self, r: StepResult, index: Optional[int], level: str) -> tuple[str, Optional[dict]]:
        if index is None:
            note = r.analysis.message if r.analysis.state != "ok" else "click a statement in the Code view"
            return _tiling.render([], None, None, note), None
        stmt = r.view.stmts[index]
        lines = [r.view.lines[n].text.strip() for n in r.view.lines_of_stmt(index)]
        if r.analysis.state != "ok":
            return _tiling.render(lines, None, None, r.analysis.message), None
        mode = getattr(stmt, "loop_mode", None)
        opens_scope = isinstance(mode, (CudaThreads, WithBlock)) and stmt.body
        info = r.analysis.value.stmt_info(stmt.body[0] if opens_scope else stmt)  # a loop: the collectives it makes
        if info.tiling is None:
            return _tiling.render(lines, None, None, "runs on the CPU: no thread collective"), None
        if not level:
            level = f"iter:{stmt.iter.name()}" if isinstance(mode, CudaThreads) else _tiling.default_level(info.tiling)
        ctx: Optional[CudaDeviceFunction] = info.device_function
        warp_names = {}
        for w in (ctx.warp_config or ()) if ctx else ():
            lo, hi = ctx.warp_range(w.name)
            warp_names.update({k: w.name for k in range(lo, hi)})
        grid = _tiling.tiling_grid(info.tiling, level, warp_names)
        grid["distributed"] = [{**a.to_json(), "name": r.view.alloc_name(sym) or a.name}
                               for sym, a in r.analysis.value.dist.items() if a.is_distributed]
        return _tiling.render(lines, grid, info.coll_unit_text, "", grid["distributed"]), grid

    def view(self, step: Optional[int] = None) -> WorkbenchView:
        """A new widget showing `step` (default: the current step), browsable to every step."""
        step = len(self.steps) if step is None else step
        self._check_step(step, "view")
        error = self._current_error() if step == len(self.steps) else None
        if error is not None:
            self._unshown = None  # this picture shows it
        v = WorkbenchView(self, step, error)
        self._views.add(v)
        return v

    def _repr_mimebundle_(self, **kwargs) -> tuple[dict, dict]:
        """A widget of the current step, plus a static HTML picture of it for viewers without a kernel."""
        v = self.view()
        data, metadata = v._repr_mimebundle_(**kwargs)
        data["text/html"] = _render.static_page(v.state)  # views and tabs: what static_page needs
        data["text/plain"] = f"<Workbench {self.initial.name()}: step {v.step} of {len(self.steps)}>"
        return data, metadata

    def _repr_html_(self) -> str:
        return _render.static_page(self.state)
