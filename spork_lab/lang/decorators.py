"""`@proc` and `@instr`: exo's decorators, made to understand Exo-GPU syntax."""

from __future__ import annotations

import inspect
import types
from typing import Callable, Optional

from exo.API import Procedure
from exo.frontend.pyparser import ParseError

from ..core.coll import CollUnit, cuda_thread
from ..core.instrs import InstrInfo, register_instr
from ..core.timelines import InstrTl, cuda_in_order_instr
from ..errors import SporkSyntaxError, user_facing
from .frontend import parse_function


@user_facing
def _parse(func, caller_locals: dict, instr: Optional[tuple]) -> Procedure:
    if not isinstance(func, types.FunctionType):
        raise TypeError("@proc and @instr must decorate a function")
    try:
        return parse_function(func, caller_locals, instr=instr)
    except (ParseError, TypeError) as e:
        source = inspect.getsourcefile(func)
        if not source or source not in str(e):
            raise  # not about the user's source: our bug or exo's, keep the traceback
        error = e
    # exo's parse, type and bounds errors name the user's file and line; exo's frames would only bury them
    raise error.with_traceback(None)


def proc(func: Callable) -> Procedure:
    """Parse a function written in Exo-GPU syntax into an exo Procedure."""
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
) -> Callable[[Callable], Procedure]:
    """Like exo's @instr, plus the instr-tl and collective unit the instruction needs (and, in `aligned`, the
    (parameter, bytes) whose rows the hardware addresses aligned)."""
    if not isinstance(c_instr, str):
        raise TypeError("@instr needs the instruction's C template: @instr(\"...\")")

    def decorate(func: Callable) -> Procedure:
        p = _parse(func, inspect.currentframe().f_back.f_locals, (c_instr, c_global))
        params = [str(a.name) for a in p._loopir_proc.args]
        unknown = [name for name, _ in aligned if name not in params]
        if unknown:
            raise SporkSyntaxError(f"@instr(aligned=...) names {', '.join(unknown)}, not a parameter of {p.name()} "
                                   f"({', '.join(params)})", p._loopir_proc.srcinfo)
        register_instr(p.name(), InstrInfo(instr_tl, coll_unit, dict(usage_tls or {}), tuple(cuda_includes), convergent,
                                           aligned=tuple(aligned)))
        return p

    return decorate
