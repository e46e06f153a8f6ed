"""`@proc` and `@instr`: exo's decorators, made to understand Exo-GPU syntax."""

from __future__ import annotations

import inspect
import re
import string
import types
from typing import Callable, Optional

from exo.API import Procedure
from exo.core.LoopIR import LoopIR

from ..core.coll import CollUnit, cuda_thread
from ..core.instrs import InstrInfo, register_instr
from ..core.timelines import INSTR_TLS, InstrTl, SyncTl, cuda_in_order_instr
from ..errors import SporkSyntaxError, SporkTypeError, user_facing, user_frame
from .frontend import parse_function


@user_facing
def _parse(func, caller_locals: dict, instr: Optional[tuple]) -> Procedure:
    __tracebackhide__ = True  # IPython and pytest show the user's cell, not this frame
    if not isinstance(func, types.FunctionType):
        what = f"{func.name()}, which is a proc already" if isinstance(func, Procedure) else type(func).__name__
        raise SporkTypeError(f"@proc and @instr decorate a function (a def), not {what}", user_frame())
    try:
        return parse_function(func, caller_locals, instr=instr)
    except OSError:  # inspect finds no source: exec(), python -c, the bare REPL
        code = func.__code__
        raise SporkSyntaxError(f"@proc and @instr read the function's source, and Python has none for {func.__name__}: "
                               "define it in a .py file or a notebook cell (not in exec() or python -c)",
                               types.SimpleNamespace(filename=code.co_filename, lineno=code.co_firstlineno)) from None


def proc(func: Callable) -> Procedure:
    """Parse a function written in Exo-GPU syntax into an exo Procedure."""
    __tracebackhide__ = True
    return _parse(func, inspect.currentframe().f_back.f_locals, None)


def instr(
    c_instr: str,
    c_global: str = "",
    *,
    instr_tl: InstrTl = cuda_in_order_instr,
    coll_unit: CollUnit = cuda_thread,
    usage_tls: Optional[dict] = None,
    cuda_includes: tuple = (),
    convergent: bool = False,
    aligned: tuple = (),
    smem_blocks: tuple = (),
) -> Callable[[Callable], Procedure]:
    """Like exo's @instr, plus the instr-tl and collective unit the instruction needs (and, in `aligned`, the
    (parameter, bytes) whose rows the hardware addresses aligned; in `smem_blocks`, (parameter, block shape):
    a warp instr's shared-memory requests, one per block of the parameter's window, for `sl.bank_conflicts`)."""
    if not isinstance(c_instr, str):
        raise SporkTypeError(f"@instr needs the instruction's C template as a string: @instr(\"...\"), not "
                             f"{c_instr!r}", user_frame())

    def decorate(func: Callable) -> Procedure:
        p = _parse(func, inspect.currentframe().f_back.f_locals, (c_instr, c_global))
        _check_instr(p, c_instr, instr_tl, coll_unit, aligned, smem_blocks)
        register_instr(p.name(), InstrInfo(instr_tl, coll_unit, dict(usage_tls or {}), tuple(cuda_includes), convergent,
                                           aligned=tuple(aligned), smem_blocks=tuple(smem_blocks)))
        return p

    return decorate


@user_facing
def _check_instr(p: Procedure, c_instr: str, instr_tl, coll_unit, aligned: tuple, smem_blocks: tuple) -> None:
    """@instr's own arguments, checked at the definition: otherwise the analyses or the code generator would
    meet them as an AttributeError or a KeyError far from the user's line."""
    where = p._loopir_proc.srcinfo
    params = [str(a.name) for a in p._loopir_proc.args]
    if isinstance(instr_tl, SyncTl):
        meant = INSTR_TLS.get(f"{instr_tl.name}_instr")
        hint = f": write instr_tl={meant.name}" if meant else ""
        raise SporkSyntaxError(f"@instr(instr_tl=...) takes an instr-tl, and {instr_tl.name} is a sync-tl{hint}", where)
    if not isinstance(instr_tl, InstrTl):
        raise SporkSyntaxError(f"@instr(instr_tl=...) takes an instr-tl such as cuda_in_order_instr, got {instr_tl!r}",
                               where)
    if not isinstance(coll_unit, CollUnit):
        raise SporkSyntaxError(f"@instr(coll_unit=...) takes a collective unit such as cuda_thread, cuda_warp or "
                               f"4 * cuda_thread, got {coll_unit!r}", where)
    for option, pairs in (("aligned", aligned), ("smem_blocks", smem_blocks)):
        unknown = [name for name, _ in pairs if name not in params]
        if unknown:
            raise SporkSyntaxError(f"@instr({option}=...) names {', '.join(unknown)}, not a parameter of {p.name()} "
                                   f"({', '.join(params)})", where)
    shapes = {str(a.name): a.type.shape() for a in p._loopir_proc.args if a.type.is_tensor_or_window()}
    for name, block in smem_blocks:
        shape = shapes.get(name, [])
        if not (isinstance(block, tuple) and len(block) == len(shape)
                and all(isinstance(b, int) and b > 0 for b in block)):
            raise SporkSyntaxError(f"@instr(smem_blocks=...) gives {name} the block {block!r}; it takes a tuple of "
                                   f"{len(shape)} positive ints, one per dimension of {name}", where)
        if not all(isinstance(d, LoopIR.Const) for d in shape):
            raise SporkSyntaxError(f"@instr(smem_blocks=...) names {name}, whose shape is not constant: blocks need "
                                   "a window of constant shape", where)
    known = {f"{a}{suffix}" for a in params for suffix in ("", "_data", "_int")}
    try:
        fields = [re.match(r"[^.\[]*", f).group() for _, f, _, _ in string.Formatter().parse(c_instr) if f is not None]
    except ValueError as e:  # an unmatched brace: C braces are written {{ and }}
        raise SporkSyntaxError(f"@instr template of {p.name()}: {e}; write C braces as {{{{ and }}}}", where) from None
    wrong = [f for f in dict.fromkeys(fields) if f not in known]
    if wrong:
        raise SporkSyntaxError(f"@instr template of {p.name()} names {{{wrong[0]}}}, but {p.name()} has no such "
                               f"parameter; it may name {', '.join('{' + k + '}' for k in sorted(known))}", where)
