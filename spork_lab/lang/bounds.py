"""exo's bounds check of a new proc, with its errors at the user's lines.

exo checks a call's effects with the callee's own statements, so an
out-of-bounds window passed to an instr (or a barrier index past the end of
its array, which a sync statement's generated proc writes) is reported at the
instr's body in spork_lab's platform files, or at `<spork_lab sync
statement>:0`. Here the check runs on a copy of the proc whose callee bodies
carry the call's source location. Before it, calls are checked for what exo
1.0 lets through or reports obscurely: an argument whose constant shape
differs from its parameter's (exo dumps its internal shape expressions).
`check_arity` checks the number of arguments earlier, on the parsed proc, and
`check_ranks` their numbers of dimensions as exo's type checker types each call;
`check_distinct_buffers` that no call passes one buffer twice, before exo's
aliasing check.
"""

from __future__ import annotations

import re
from typing import Optional

from asdl_adt.adt import _AsdlAdtBase
from exo.core.LoopIR import UAST, LoopIR
from exo.frontend.boundscheck import CheckBounds

from ..core.instrs import template_call_of
from ..core.ir import interval_width, walk_stmts
from ..core.sync_stmts import is_barrier_alloc, trailing_of
from ..errors import SporkSyntaxError
from .printer import head_text


def check_bounds(ir: LoopIR.proc) -> None:
    """Raise for calls with wrongly shaped arguments (SporkSyntaxError) or out-of-bounds accesses
    (exo's TypeError, its counterexamples cut to the user's names)."""
    _check_calls(ir.body)
    try:
        CheckBounds(ir.update(body=_calls_at_call_sites(ir.body)))
    except TypeError as e:
        raise TypeError(_barriers_named(_user_names(str(e)), ir)) from None


def _barriers_named(message: str, ir: LoopIR.proc) -> str:
    """exo says a barrier indexed past its dimensions "is written out-of-bounds" (a sync statement's generated proc
    writes it): say which barrier and its dimensions."""
    dims = {str(s.name): [str(d) for d in s.type.shape()] for s in walk_stmts(ir.body) if is_barrier_alloc(s)}

    def named(m: re.Match) -> str:
        shape = dims.get(m[1])
        if shape is None:
            return m[0]
        return (f"a sync statement indexes the barrier {m[1]}: barrier[{', '.join(shape)}] out-of-bounds (each index "
                f"runs from 0 to its dimension - 1) when:")

    return re.sub(r"\b(\w+) is (?:written|read) out-of-bounds when:", named, message)


# Names exo's counterexamples add to the user's: strides of every buffer and window, its temporaries, our blocks.
_INTERNAL_NAME = re.compile(r".*_stride_\d+|mod_tmp|div_tmp|_with")


def _user_names(message: str) -> str:
    """exo's bounds message with each counterexample's `name = value` list cut to the sizes and iterators the user
    wrote (`x_stride_0 = 1, mod_tmp = 1, _with = 0, ...` only bury the values that matter)."""
    lines = []
    for line in message.splitlines():
        pairs = [p for p in line.strip().rstrip(".").split(", ") if " = " in p]
        if pairs and len(pairs) == len(line.strip().rstrip(".").split(", ")):
            kept = [p for p in pairs if not _INTERNAL_NAME.fullmatch(p.split(" = ")[0])]
            line = line[: len(line) - len(line.lstrip())] + ", ".join(kept) + "."
        lines.append(line)
    return "\n".join(lines)


def check_arity(stmts: list) -> None:
    """Every call of the parsed proc (UAST) has one argument per parameter. Checked before exo's type checker,
    which pairs them with zip: an extra argument was dropped without a word, and a missing one failed exo's
    compiler with a bare assertion."""
    for s in stmts:
        if isinstance(s, (UAST.For, UAST.If)):
            check_arity(s.body)
            check_arity(getattr(s, "orelse", []))
        elif isinstance(s, UAST.Call) and len(s.args) != len(s.f.args):
            n, params = len(s.f.args), ", ".join(str(a.name) for a in s.f.args)
            raise SporkSyntaxError(f"{_callee(s)} takes {n} argument{'s' * (n != 1)} ({params}), got {len(s.args)}",
                                   s.srcinfo)


def check_ranks(call: LoopIR.Call) -> None:
    """Each data argument of a call exo has just typed has as many dimensions as its parameter. exo's type
    checker refuses one that has not with its window type's repr (`got type 'Window(src_type=f32[128],
    as_tensor=[f32][128], src_buf=s, idx='[0:128]')'`); said here in the shape check's words."""
    for param, arg in zip(call.f.args, call.args):
        if param.type.is_numeric() and arg.type.is_numeric() and len(arg.type.shape()) != len(param.type.shape()):
            raise _shape_error(call, param, arg)


def check_distinct_buffers(ir: LoopIR.proc) -> None:
    """No call passes one buffer for two data arguments, directly or through window statements. exo refuses
    aliased arguments (even disjoint windows of one buffer) with its SchedulingError from inside its own frames,
    naming no line."""
    buffers = {}  # each window statement's name: the buffer under it
    for s in walk_stmts(ir.body):
        if isinstance(s, LoopIR.WindowStmt):
            buffers[s.name] = buffers.get(s.rhs.name, s.rhs.name)
        if not isinstance(s, LoopIR.Call):
            continue
        passed = {}  # each buffer passed so far: the text of its parameter
        for param, arg in zip(s.f.args, s.args):
            if not (param.type.is_numeric() and isinstance(arg, (LoopIR.Read, LoopIR.WindowExpr))):
                continue
            buffer = buffers.get(arg.name, arg.name)
            text = f"{param.name}" if buffer == arg.name else f"{param.name} (through {arg.name})"
            if buffer in passed:
                raise SporkSyntaxError(f"`{head_text(s)}` passes {buffer} for both {passed[buffer]} and {text}: exo "
                                       "refuses aliased arguments (one buffer seen through two parameters, even as "
                                       "disjoint windows); pass distinct buffers", s.srcinfo)
            passed[buffer] = text


def _check_calls(stmts: list) -> None:
    """Each call argument whose shape is constant has its parameter's shape."""
    for s in stmts:
        if isinstance(s, (LoopIR.For, LoopIR.If)):
            _check_calls(s.body)
            _check_calls(getattr(s, "orelse", []))
        elif isinstance(s, LoopIR.Call):
            for param, arg in zip(s.f.args, s.args):
                if not param.type.is_tensor_or_window():
                    continue
                want = [_const(d) for d in param.type.shape()]
                got = _arg_shape(arg)
                if None in want or got is None or None in got or got == want:
                    continue
                raise _shape_error(s, param, arg)


def _shape_error(s: LoopIR.Call, param, arg) -> SporkSyntaxError:
    """`callee takes param of shape [16, 8], but `arg` has shape [128]`, at the call."""
    if isinstance(arg, LoopIR.WindowExpr):
        got = [_width_text(w) for w in arg.idx if isinstance(w, LoopIR.Interval)]
    else:
        got = [str(d) for d in arg.type.shape()]
    return SporkSyntaxError(f"{_callee(s)} takes {param.name} of shape [{', '.join(map(str, param.type.shape()))}], "
                            f"but `{arg}` has shape [{', '.join(got)}]", s.srcinfo)


def _width_text(w: LoopIR.Interval) -> str:
    """A window interval's width as the user reads it: `4` for `4 * i:4 * i + 4`, `n` for `0:n`."""
    width = interval_width(w)
    if width is not None:
        return str(width)
    return str(w.hi) if _const(w.lo) == 0 else f"{w.hi} - {w.lo}"


def _callee(s: LoopIR.Call | UAST.Call) -> str:
    """The callee as the user wrote it, with the keywords that fixed its shapes: `copy with box=(64, 32)`."""
    trailing = trailing_of(s)
    name = str(trailing[0] if trailing else s.f.name)
    template = template_call_of(name)
    if template is None:
        return name
    keywords = ", ".join(f"{k}={v!r}" for k, v in template[1].items())
    return f"{template[0].name} with {keywords}" if keywords else template[0].name


def _const(e) -> Optional[int]:
    return e.val if isinstance(e, LoopIR.Const) else None


def _arg_shape(arg) -> Optional[list]:
    """The shape of a tensor argument where its extents are constants (None entries where they are not)."""
    if isinstance(arg, LoopIR.WindowExpr):
        return [interval_width(w) for w in arg.idx if isinstance(w, LoopIR.Interval)]
    if isinstance(arg, LoopIR.Read) and arg.type.is_tensor_or_window():
        return [_const(d) for d in arg.type.shape()]
    return None


def _calls_at_call_sites(stmts: list) -> list:
    out = []
    for s in stmts:
        if isinstance(s, LoopIR.For):
            s = s.update(body=_calls_at_call_sites(s.body))
        elif isinstance(s, LoopIR.If):
            s = s.update(body=_calls_at_call_sites(s.body), orelse=_calls_at_call_sites(s.orelse))
        elif isinstance(s, LoopIR.Call):
            s = s.update(f=s.f.update(body=[_relocated(b, s.srcinfo) for b in s.f.body]))
        out.append(s)
    return out


def _relocated(node, srcinfo):
    """A copy of an IR node (and of the nodes inside it) with every source location replaced by `srcinfo`."""
    if isinstance(node, list):
        return [_relocated(n, srcinfo) for n in node]
    if not isinstance(node, _AsdlAdtBase):
        return node
    changes = {}
    for field in getattr(type(node), "__match_args__", ()):
        value = getattr(node, field)
        new = srcinfo if field == "srcinfo" else _relocated(value, srcinfo)
        if new is not value:
            changes[field] = new
    return node.update(**changes) if changes else node
