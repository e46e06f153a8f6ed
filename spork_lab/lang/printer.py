"""Printer: LoopIR -> Exo-GPU source text.

Stock exo prints every non-`par` loop as `seq(...)`, `with` blocks as
1-iteration loops and sync statements as calls of generated procs. This
printer shows the Exo-GPU syntax instead and prints plain exo procs exactly as
exo does (tests compare the two). It is installed as `str()` of exo's LoopIR
proc and stmt nodes, the same hook exo's own printer uses, so `str(p)` and
notebook display of any Procedure show Exo-GPU syntax.
"""

from __future__ import annotations

import re

from exo import API_cursors as exo_api_cursors
from exo.core import LoopIR_pprint as exo_pprint
from exo.core import internal_cursors as ic
from exo.core.LoopIR import LoopIR, T

from ..core.dtypes import is_bf16
from ..core.instrs import template_call_of
from ..core.loop_modes import WithBlock, mode_source
from ..core.sync_stmts import is_barrier_alloc, is_point_interval, sync_spec_of, trailing_of
from ..core.tensor_maps import tensor_map_spec

_print_expr = exo_pprint._print_expr
_print_type = exo_pprint._print_type
_print_fnarg = exo_pprint._print_fnarg

EXO_PROC_STR = LoopIR.proc.__str__
EXO_PRINT_CURSOR = exo_pprint._print_cursor


def proc_lines(p, env=None, marks: CursorMarks = None) -> list:
    """The unformatted source lines of a proc (with a cursor's marks, if given)."""
    env = env or exo_pprint.PrintEnv()
    args = [_arg_text(a, env) for a in p.args]
    lines = [f"def {p.name}({', '.join(args)}):"]
    indent = "  "
    if p.instr:
        for i, line in enumerate(p.instr.c_instr.split("\n")):
            lines.append(f"{indent}{'# @instr ' if i == 0 else '#        '}{line}")
    lines.extend(f"{indent}assert {_print_expr(pred, env)}" for pred in p.preds)
    lines.extend(block_lines(p.body, env, indent, marks))
    return lines


class CursorMarks:
    """Where a cursor points, for printing it the way exo does (`# <-- NODE`, gaps, blocks)."""

    def __init__(self, cursor):
        self.node = self.block_first = self.block_last = self.gap_anchor = self.gap_type = None
        if isinstance(cursor, ic.Node):
            self.node = cursor._node
        elif isinstance(cursor, ic.Block):
            nodes = [c._node for c in cursor]
            self.block_first, self.block_last = nodes[0], nodes[-1]
        elif isinstance(cursor, ic.Gap):
            self.gap_anchor, self.gap_type = cursor.anchor()._node, cursor.type()


def block_lines(stmts, env, indent: str, marks: CursorMarks = None) -> list:
    lines = []
    for s in stmts:
        if marks is None:
            lines.extend(stmt_lines(s, env, indent))
            continue
        if s is marks.gap_anchor and marks.gap_type == ic.GapType.Before:
            lines.append(f"{indent}[GAP - Before]")
        if s is marks.block_first:
            lines.append(f"{indent}# BLOCK START")
        own = stmt_lines(s, env, indent, marks)
        if s is marks.node:
            own[0] += "  # <-- NODE"
        lines.extend(own)
        if s is marks.block_last:
            lines.append(f"{indent}# BLOCK END")
        if s is marks.gap_anchor and marks.gap_type == ic.GapType.After:
            lines.append(f"{indent}[GAP - After]")
    return lines


def head_line(s, env, indent: str = "") -> str:
    """The first printed line of a statement; a loop's or an if's without printing its body."""
    if isinstance(s, LoopIR.For):
        return _for_head(s, env, env.push(), indent)
    if isinstance(s, LoopIR.If):
        return f"{indent}if {_print_expr(s.cond, env)}:"
    return stmt_lines(s, env, indent)[0]


def head_text(s: LoopIR.stmt) -> str:
    """The first printed line of a statement, e.g. `for m in cuda_threads(0, 8, unit=16 * cuda_thread):`."""
    return head_line(s, exo_pprint.PrintEnv()).strip()


def _for_head(s, env, body_env, indent: str) -> str:
    if isinstance(s.loop_mode, WithBlock):
        return f"{indent}with {s.loop_mode.ctx}:"
    lo, hi = _print_expr(s.lo, env), _print_expr(s.hi, env)
    return f"{indent}for {body_env.get_name(s.iter)} in {mode_source(s.loop_mode, lo, hi)}:"


def stmt_lines(s, env, indent: str, marks: CursorMarks = None) -> list:
    if isinstance(s, LoopIR.For):
        body_env = env.push()
        return [_for_head(s, env, body_env, indent), *block_lines(s.body, body_env, indent + "  ", marks)]
    if isinstance(s, LoopIR.If):
        lines = [head_line(s, env, indent), *block_lines(s.body, env.push(), indent + "  ", marks)]
        if s.orelse:
            lines += [f"{indent}else:", *block_lines(s.orelse, env.push(), indent + "  ", marks)]
        return lines
    spec = sync_spec_of(s)
    if spec is not None:
        return [f"{indent}{spec.source(_barrier_text(s, env))}"]
    trailing = trailing_of(s)
    if trailing is not None:
        name, n = trailing
        return [f"{indent}{_call_text(name, s.args[:n], env)} >> {_barrier_text(s.args[n], env)}"]
    if isinstance(s, LoopIR.Call) and template_call_of(s.f.name) is not None:
        return [f"{indent}{_call_text(s.f.name, s.args, env)}"]
    if isinstance(s, LoopIR.WindowStmt) and tensor_map_spec(s.name) is not None:
        return [f"{indent}{env.get_name(s.name)} = {_print_expr(s.rhs, env)} @ {tensor_map_spec(s.name).source()}"]
    if is_barrier_alloc(s):
        dims = s.type.shape() if isinstance(s.type, LoopIR.Tensor) else []
        shape = f"[{', '.join(_print_expr(d, env) for d in dims)}]" if dims else ""
        return [f"{indent}{env.get_name(s.name)}: barrier{shape} @ {s.mem.name()}"]
    lines = exo_pprint._print_stmt(s, env, indent)
    if isinstance(s, LoopIR.Alloc):
        lines = [_spell_bf16(lines[0], s.type), *lines[1:]]
    return lines


def _arg_text(a, env) -> str:
    """exo prints a bool parameter `flag : bool @DRAM`, which its parser refuses ("size types should not be
    annotated with memory locations"): printed as written, `flag : bool`."""
    if a.type == T.bool:
        return f"{env.get_name(a.name)} : bool"
    return _spell_bf16(_print_fnarg(a, env), a.type)


def _spell_bf16(text: str, typ) -> str:
    """exo prints bf16 (a subclass of its f16) as f16 in `name: f16[...]` / `name: [f16][...]`: respell it."""
    return re.sub(r"^(\s*[\w]+\s*:\s*\[?)f16", r"\1bf16", text, count=1) if is_bf16(typ) else text


def _call_text(proc_name: str, args, env) -> str:
    """A call as the user writes it: a templated instr by its family name and keywords."""
    template = template_call_of(proc_name)
    texts = [_print_expr(a, env) for a in args]
    if template is None:
        return f"{proc_name}({', '.join(texts)})"
    tmpl, params = template
    texts += [f"{k}={v!r}" for k, v in params.items() if v != tmpl.defaults[k]]
    return f"{tmpl.name}({', '.join(texts)})"


def _barrier_text(arg, env) -> str:
    """`bar`, `bar[i, j]`, or with slices `bar[:, j]` (multicast arrives and trailing barriers)."""
    if isinstance(arg, LoopIR.Call):
        if not arg.args:
            return ""
        arg = arg.args[0]
    name = env.get_name(arg.name)
    if not isinstance(arg, LoopIR.WindowExpr):
        return name
    dims = arg.type.src_type.shape()
    parts = []
    for w, dim in zip(arg.idx, dims):
        if is_point_interval(w):
            parts.append(_print_expr(w.pt if isinstance(w, LoopIR.Point) else w.lo, env))
        elif isinstance(w.lo, LoopIR.Const) and w.lo.val == 0 and str(w.hi) == str(dim):
            parts.append(":")
        else:
            parts.append(f"{_print_expr(w.lo, env)}:{_print_expr(w.hi, env)}")
    return f"{name}[{', '.join(parts)}]"


def print_proc(p) -> str:
    """Exo-GPU source text of a LoopIR proc (formatted like exo's printer)."""
    return exo_pprint._format_code("\n".join(proc_lines(p)))


def print_stmt(s) -> str:
    return exo_pprint._format_code("\n".join(stmt_lines(s, exo_pprint.PrintEnv(), "")))


def print_cursor(cursor) -> str:
    """Exo-GPU text of the proc a cursor points into, marked like exo's cursor printout."""
    if isinstance(cursor, ic.Node) and isinstance(cursor._node, LoopIR.expr):  # exo prints no expression cursor
        stmt = cursor.parent()
        while not isinstance(stmt._node, LoopIR.stmt):
            stmt = stmt.parent()
        return f"# the expression `{cursor._node}` of the statement marked below\n" + print_cursor(stmt)
    if cursor is None or (isinstance(cursor, ic.Node) and not isinstance(cursor._node, (LoopIR.proc, LoopIR.stmt))):
        return EXO_PRINT_CURSOR(cursor)  # exo's own message for invalid cursors
    root = cursor.root()._node
    lines = proc_lines(root, marks=CursorMarks(cursor))
    if isinstance(cursor, ic.Node) and cursor._node is root:
        lines[0] += "  # <-- NODE"
    return exo_pprint._format_code("\n".join(lines))


def install() -> None:
    """Make str() of exo LoopIR procs, statements and cursors print Exo-GPU syntax."""
    LoopIR.proc.__str__ = print_proc
    LoopIR.stmt.__str__ = print_stmt
    exo_api_cursors._print_cursor = print_cursor
