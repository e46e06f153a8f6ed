"""Printer: LoopIR -> Exo-GPU source text.

Stock exo prints every non-`par` loop as `seq(...)`, `with` blocks as
1-iteration loops and sync statements as calls of generated procs. This
printer shows the Exo-GPU syntax instead and prints plain exo procs exactly as
exo does (tests compare the two). It is installed as `str()` of exo's LoopIR
proc and stmt nodes, the same hook exo's own printer uses, so `str(p)` and
notebook display of any Procedure show Exo-GPU syntax.
"""

from __future__ import annotations

from exo.core import LoopIR_pprint as exo_pprint
from exo.core.LoopIR import LoopIR

from .instrs import template_call_of
from .loop_modes import WithBlock, mode_source
from .sync_stmts import barrier_window_indices, is_barrier_alloc, sync_spec_of

_print_expr = exo_pprint._print_expr
_print_type = exo_pprint._print_type
_print_fnarg = exo_pprint._print_fnarg

EXO_PROC_STR = LoopIR.proc.__str__
EXO_STMT_STR = LoopIR.stmt.__str__


def proc_lines(p, env=None) -> list:
    """The unformatted source lines of a proc."""
    env = env or exo_pprint.PrintEnv()
    args = [_print_fnarg(a, env) for a in p.args]
    lines = [f"def {p.name}({', '.join(args)}):"]
    indent = "  "
    if p.instr:
        for i, line in enumerate(p.instr.c_instr.split("\n")):
            lines.append(f"{indent}{'# @instr ' if i == 0 else '#        '}{line}")
    lines.extend(f"{indent}assert {_print_expr(pred, env)}" for pred in p.preds)
    lines.extend(block_lines(p.body, env, indent))
    return lines


def block_lines(stmts, env, indent: str) -> list:
    return [line for s in stmts for line in stmt_lines(s, env, indent)]


def stmt_lines(s, env, indent: str) -> list:
    if isinstance(s, LoopIR.For):
        body_env = env.push()
        if isinstance(s.loop_mode, WithBlock):
            head = f"{indent}with {s.loop_mode.ctx}:"
        else:
            lo, hi = _print_expr(s.lo, env), _print_expr(s.hi, env)
            head = f"{indent}for {body_env.get_name(s.iter)} in {mode_source(s.loop_mode, lo, hi)}:"
        return [head, *block_lines(s.body, body_env, indent + "  ")]
    if isinstance(s, LoopIR.If):
        lines = [f"{indent}if {_print_expr(s.cond, env)}:", *block_lines(s.body, env.push(), indent + "  ")]
        if s.orelse:
            lines += [f"{indent}else:", *block_lines(s.orelse, env.push(), indent + "  ")]
        return lines
    spec = sync_spec_of(s)
    if spec is not None:
        return [f"{indent}{spec.source(_barrier_text(s, env))}"]
    template = template_call_of(s.f.name) if isinstance(s, LoopIR.Call) else None
    if template is not None:
        tmpl, params = template
        args = [_print_expr(a, env) for a in s.args]
        args += [f"{k}={v!r}" for k, v in params.items() if v != tmpl.defaults[k]]
        return [f"{indent}{tmpl.name}({', '.join(args)})"]
    if is_barrier_alloc(s):
        dims = s.type.shape() if isinstance(s.type, LoopIR.Tensor) else []
        shape = f"[{', '.join(_print_expr(d, env) for d in dims)}]" if dims else ""
        return [f"{indent}{env.get_name(s.name)}: barrier{shape} @ {s.mem.name()}"]
    return exo_pprint._print_stmt(s, env, indent)


def _barrier_text(call, env) -> str:
    if not call.args:
        return ""
    arg = call.args[0]
    idx = barrier_window_indices(arg)
    name = env.get_name(arg.name)
    return f"{name}[{', '.join(_print_expr(i, env) for i in idx)}]" if idx else name


def print_proc(p) -> str:
    """Exo-GPU source text of a LoopIR proc (formatted like exo's printer)."""
    return exo_pprint._format_code("\n".join(proc_lines(p)))


def print_stmt(s) -> str:
    return exo_pprint._format_code("\n".join(stmt_lines(s, exo_pprint.PrintEnv(), "")))


def install() -> None:
    """Make str() of exo LoopIR procs and statements print Exo-GPU syntax."""
    LoopIR.proc.__str__ = print_proc
    LoopIR.stmt.__str__ = print_stmt
