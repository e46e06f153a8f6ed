"""The printed proc as lines, each knowing which statement it shows.

Statements keep the source line of the code they came from after scheduling,
so `srcinfo.lineno` cannot place them in the current proc's text. Instead we
walk the LoopIR in print order alongside the printer's unformatted lines, then
align those with the text shown (which may wrap long lines).

The workbench shows `printed_text(p)`, the printer's lines with a long
signature wrapped, rather than `str(p)`: exo formats `str(p)` with yapf, which
takes 0.3-0.8 s for the tutorial GEMM, more than a whole step should.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Optional

from exo.API import Procedure
from exo.core import LoopIR_pprint as exo_pprint
from exo.core.LoopIR import LoopIR

from ..lang import printer


@dataclass(frozen=True)
class CodeLine:
    """One line of the printed proc; `stmt` is the index (print order) of the statement it shows, or None."""

    text: str
    stmt: Optional[int]


@dataclass(frozen=True)
class CodeView:
    """The printed proc, its lines, and its statements in print order."""

    lines: tuple[CodeLine, ...]
    stmts: tuple  # LoopIR statements, indexed by CodeLine.stmt
    paths: tuple  # per statement its path: child indices from the proc body, "else" into an orelse

    @cached_property
    def highlighted(self) -> tuple[str, ...]:
        """Each line as syntax-highlighted HTML (`highlight`), computed once."""
        return tuple(highlight(line.text) for line in self.lines)

    def stmt_at_path(self, path) -> Optional[int]:
        """Index of the statement at `path` (as the analyses write paths), or None."""
        path = tuple(path)
        return next((i for i, q in enumerate(self.paths) if q == path), None)

    def lines_of_stmt(self, index: int) -> list[int]:
        """0-based line numbers showing statement `index`."""
        return [n for n, line in enumerate(self.lines) if line.stmt == index]

    def stmt_text(self, index: int) -> str:
        """Statement `index` as printed, on one line (the printer may wrap it over several)."""
        return " ".join(" ".join(self.lines[n].text.split()) for n in self.lines_of_stmt(index)).replace(
            "[ ", "[").replace("( ", "(")

    def alloc_name(self, sym) -> Optional[str]:
        """The name the printed proc gives the allocation of `sym`: the printer tells apart two allocations of one
        name (`A_r`, then `A_r_1`), which `str(sym)` does not."""
        index = next((i for i, s in enumerate(self.stmts) if isinstance(s, LoopIR.Alloc) and s.name == sym), None)
        if index is None:
            return None
        return self.lines[self.lines_of_stmt(index)[0]].text.split(":", 1)[0].strip()

    def lines_of_source_line(self, lineno: int) -> list[int]:
        """0-based printed lines of every statement whose source line (srcinfo) is `lineno`."""
        hits = {i for i, s in enumerate(self.stmts) if s.srcinfo.lineno == lineno}
        return [n for n, line in enumerate(self.lines) if line.stmt in hits]


def _walk(stmts, prefix: tuple, env, indent: str, out_stmts: list, out_paths: list, out_rows: list) -> None:
    """Append, per unformatted printed line, the index of its statement (mirrors printer.stmt_lines)."""
    for i, s in enumerate(stmts):
        index, path = len(out_stmts), prefix + (i,)
        out_stmts.append(s)
        out_paths.append(path)
        if isinstance(s, LoopIR.For):
            out_rows.append(index)
            _walk(s.body, path, env, indent + "  ", out_stmts, out_paths, out_rows)
        elif isinstance(s, LoopIR.If):
            out_rows.append(index)
            _walk(s.body, path, env, indent + "  ", out_stmts, out_paths, out_rows)
            if s.orelse:
                out_rows.append(index)
                _walk(s.orelse, path + ("else",), env, indent + "  ", out_stmts, out_paths, out_rows)
        else:
            out_rows.extend([index] * len(printer.stmt_lines(s, env, indent)))


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _align(raw: list[str], rows: list[Optional[int]], formatted: list[str]) -> Optional[list[CodeLine]]:
    """Give each formatted line the statement of the raw line it continues; None if the texts differ."""
    out: list[CodeLine] = []
    f = 0
    for text, stmt in zip(raw, rows):
        want, got = _squash(text), ""
        while len(got) < len(want) and f < len(formatted):
            got += _squash(formatted[f])
            out.append(CodeLine(formatted[f], stmt))
            f += 1
        if got != want:
            return None
    return out if f == len(formatted) else None


def printed_text(p: Procedure, width: int = 100) -> str:
    """The proc as the workbench prints it: the printer's lines as exo's formatter would space them (4-space
    indents, `x: f32[n] @ Mem`), a signature longer than `width` broken after its top-level commas and
    continued under its first argument; other lines are not wrapped."""
    lines = []
    for line in printer.proc_lines(p.INTERNAL_proc()):
        body = line.lstrip(" ")
        indent = len(line) - len(body)  # the printer indents by 2
        body = re.sub(r" @(\w)", r" @ \1", re.sub(r"^(\w+) : ", r"\1: ", body))
        lines.append(" " * (2 * indent) + body)
    head = re.sub(r"(\w) : ", r"\1: ", lines[0])
    if len(head) > width:
        indent = " " * (head.index("(") + 1)
        wrapped = [""]
        for part in _top_level_parts(head):
            if wrapped[-1].strip() and len(wrapped[-1]) + 1 + len(part) > width:
                wrapped.append(indent)
            wrapped[-1] += part if not wrapped[-1].strip() else " " + part
        lines[:1] = wrapped
    else:
        lines[0] = head
    return "\n".join(lines)


def _top_level_parts(head: str) -> list[str]:
    """`def f(a: x, b: y[m, n]):` split after each comma that is not inside brackets."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(head):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(head[start : k + 1].strip())
            start = k + 1
    return parts + [head[start:].strip()]


def code_view(p: Procedure, text: Optional[str] = None) -> CodeView:
    """The lines of `text` (default: `printed_text(p)`; `str(p)` works too) with their statements (falls back
    to unwrapped lines if alignment fails)."""
    ir = p.INTERNAL_proc()
    raw = printer.proc_lines(ir)
    stmts: list = []
    paths: list = []
    body_rows: list[int] = []
    _walk(ir.body, (), exo_pprint.PrintEnv(), "  ", stmts, paths, body_rows)
    rows: list[Optional[int]] = [None] * (len(raw) - len(body_rows)) + body_rows
    lines = _align(raw, rows, (printed_text(p) if text is None else text).split("\n"))
    if lines is None:
        lines = [CodeLine(text, stmt) for text, stmt in zip(raw, rows)]
    return CodeView(tuple(lines), tuple(stmts), tuple(paths))


_KEYWORDS = {"def", "for", "in", "with", "if", "else", "assert", "pass", "and", "or", "not"}
_LOOPS = {"seq", "par", "cuda_tasks", "cuda_threads"}
_TYPES = {"size", "index", "bool", "stride", "f16", "f32", "f64", "bf16", "i8", "ui8", "ui16", "i32", "barrier"}
_SYNC = {"Fence", "Arrive", "Await", "ReverseArrive", "ReverseAwait"}
_TOKEN = re.compile(r"(?P<comment>#.*)|(?P<string>'[^']*'|\"[^\"]*\")|(?P<number>\b\d+\b)|(?P<name>[A-Za-z_]\w*)|(?P<other>.)")


def _name_class(word: str, prev: str) -> Optional[str]:
    if word in _KEYWORDS:
        return "kw"
    if word in _LOOPS:
        return "loop"
    if word in _TYPES:
        return "ty"
    if word in _SYNC:
        return "sync"
    if prev == "@" or word.startswith("Cuda") or word.startswith("Sm80_") or word.startswith("Sm90_"):
        return "gpu"
    return None


def highlight(line: str) -> str:
    """HTML of one code line with `<span class="sl-tok-...">` around keywords, loops, types, GPU names."""
    out, prev = [], ""
    for m in _TOKEN.finditer(line):
        kind, text = m.lastgroup, m.group()
        cls = _name_class(text, prev) if kind == "name" else None if kind == "other" else kind
        out.append(f'<span class="sl-tok-{cls}">{html.escape(text)}</span>' if cls else html.escape(text))
        if not text.isspace():
            prev = text
    return "".join(out)


def show_in_code(index: Optional[int]) -> str:
    """HTML attributes that make an element, when clicked, select statement `index` and open the Code tab
    (workbench.js); "" where there is no statement to show."""
    return f' data-set="selected:{index}" data-goto="code" title="show in Code"' if index is not None else ""
