"""Scheduling errors a user can act on: the user's line, the operation, and what the proc does have.

exo reports a pattern that matches nothing as `find: failed to find matches`,
prefixes errors raised outside a Procedure method with `<<<unknown
directive>>>`, lets the TypeErrors and ValueErrors of its argument
processing escape from its own frames, asserts some facts about the
arguments (stage_mem's buffer exists) inside the op, and fails to forward
a cursor of an unrelated proc with a NotImplementedError, and lets its solver's (z3's) exceptions through, and
its "unknown result from z3" when z3 can neither prove nor refute what a check asks.
`explain` turns such an exception into
a `SporkSchedulingError` at the user's file and line (also exo's
`SchedulingError`, so `except SchedulingError` keeps working). For a
pattern that matches nothing it lists the loops or statements that exist, with
the closest ones first ("did you mean").
"""

from __future__ import annotations

import difflib
import functools
import re
import sys
from typing import Callable, Optional

import exo
from exo import API_scheduling
from exo.API import Procedure
from exo.API_cursors import BlockCursor
from exo.core.internal_cursors import GapType
from exo.core.LoopIR import LoopIR

from ..core.ir import walk_stmts
from ..core.loop_modes import WithBlock
from ..core.sync_stmts import (is_barrier_alloc, sync_cursors, sync_spec_of, trailing_barrier, trailing_of,
                               written_name)
from ..errors import LIBRARIES, SporkSchedulingError, user_frame
from .printer import head_text, print_stmt

_EXO_PREFIXES = ("<<<unknown directive>>>: ", "find: ")
# What a cursor of a proc that neither is this one nor was scheduled into it is, and what to do (exo cannot forward it).
_OTHER_PROC = "neither this one nor one it was scheduled from; find it in this proc (e.g. p.find_loop(...))"

# The analysis' scopes pass, a layer above; spork_lab/__init__.py registers it here (`register_scope_error`).
_SCOPE_ERROR: list = [lambda proc_ir: None]


def register_scope_error(fn) -> None:
    """fn(proc LoopIR) -> the SporkError the analysis' scopes pass raises on it, or None; called by spork_lab."""
    _SCOPE_ERROR[0] = fn


def scope_error(proc: Procedure) -> Optional[Exception]:
    """The error the analysis' structural rules (device scopes, the task nest, collective tilings) find in `proc`."""
    return _SCOPE_ERROR[0](proc._loopir_proc)


def _frames_in_exo(e: BaseException) -> list:
    """For each frame of `e`'s traceback, outermost first: whether it is exo's code."""
    frames, tb = [], e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename.startswith(LIBRARIES[1]))
        tb = tb.tb_next
    return frames


def raised_in_exo(e: BaseException) -> bool:
    """Whether `e` was raised by exo's own code (its innermost frame is inside the exo package)."""
    return _frames_in_exo(e)[-1:] == [True]


def passed_through_exo(e: BaseException) -> bool:
    """Whether any frame of `e`'s traceback is exo's (an exception from a library exo calls, e.g. its SMT solver)."""
    return any(_frames_in_exo(e))


def loop_patterns(proc: Procedure) -> list[str]:
    """The find_loop pattern of every loop (not `with` blocks), in program order: "i", "tid", "tid #1"."""
    seen: dict[str, int] = {}
    out = []
    for s in _loops(proc._loopir_proc.body):
        name = str(s.iter.name())
        k = seen.get(name, 0)
        seen[name] = k + 1
        out.append(name if k == 0 else f"{name} #{k}")
    return out


def _loops(stmts):
    """The loops (not `with` blocks) of a block and of the blocks inside it, in program order."""
    return (s for s in walk_stmts(stmts) if isinstance(s, LoopIR.For) and not isinstance(s.loop_mode, WithBlock))


def _nested_pairs(proc: Procedure) -> list[str]:
    """'outer inner' for every loop whose body is exactly one loop (what reorder_loops accepts)."""
    return [
        f"{s.iter.name()} {s.body[0].iter.name()}"
        for s in _loops(proc._loopir_proc.body)
        if len(s.body) == 1 and isinstance(s.body[0], LoopIR.For) and not isinstance(s.body[0].loop_mode, WithBlock)
    ]


def statement_patterns(proc: Procedure) -> list[str]:
    """A pattern per distinct kind of statement: 'y[_] += _', 'tile[_] = _', 'tile : _', 'Sm80_mma_tf32(_)'."""
    out: list[str] = []
    for s in walk_stmts(proc._loopir_proc.body):
        if isinstance(s, (LoopIR.Assign, LoopIR.Reduce)):
            op = "+=" if isinstance(s, LoopIR.Reduce) else "="
            pattern = f"{s.name}[_] {op} _" if s.idx else f"{s.name} {op} _"
        elif isinstance(s, LoopIR.Alloc) and not is_barrier_alloc(s):
            pattern = f"{s.name} : _"
        elif isinstance(s, LoopIR.Call) and sync_spec_of(s) is None:
            pattern = f"{written_name(s)}(_)"  # as printed (find takes it: _template_instances)
        else:
            continue
        if pattern not in out:
            out.append(pattern)
    return out


def _buffers(proc: Procedure) -> list[str]:
    ir = proc._loopir_proc
    names = [str(a.name) for a in ir.args if a.type.is_numeric()]
    names += [str(s.name) for s in walk_stmts(ir.body) if isinstance(s, LoopIR.Alloc) and not is_barrier_alloc(s)]
    return list(dict.fromkeys(names))


def _choices(wanted: str, existing: list[str], what: str, likely: tuple = ()) -> str:
    """'did you mean 'x'? ' (the `likely` ones that exist, then the closest spellings) and the list of what exists."""
    close = [c for c in likely if c in existing]
    close += [c for c in difflib.get_close_matches(wanted, existing, n=3, cutoff=0.5) if c not in close]
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    shown = existing if len(existing) <= 24 else existing[:24] + [f"... ({len(existing) - 24} more)"]
    return f"{hint}{what}: {', '.join(shown) if shown else '(none)'}"


def _not_found(pattern: str, proc: Procedure) -> str:
    loop = re.fullmatch(r"for (\w+) in _: _(?:\s*(#)\s*(\d+))?", pattern)  # find_loop("tid #1"): "... _: _#1"
    pair = re.fullmatch(r"for (\w+) in _:\s*for (\w+) in _: _", pattern, re.S)
    buffer = re.fullmatch(r"(\w+)\s*:\s*_", pattern)
    if buffer:
        return f"no buffer named {buffer.group(1)!r}; " + _choices(buffer.group(1), _buffers(proc), "its buffers are")
    if loop:
        wanted = f"{loop.group(1)} #{loop.group(3)}" if loop.group(2) else loop.group(1)
        return f"no loop matches {wanted!r}; " + _choices(wanted, loop_patterns(proc), "its loops are")
    if pair:
        outer, inner = pair.groups()
        return (f"no loop {inner!r} directly inside a loop {outer!r} (nothing else in between); "
                + _choices(f"{outer} {inner}", _nested_pairs(proc), "directly nested loops", (f"{inner} {outer}",)))
    pattern = " ".join(pattern.split())
    return f"no statement matches {pattern!r}; " + _choices(pattern, statement_patterns(proc), "its statements are")


def explain(
    e: BaseException, op: str, proc: Optional[Procedure], where: Optional[object], given: Optional[dict] = None
) -> SporkSchedulingError:
    """`e` (raised by scheduling op `op` on `proc`, called with the arguments `given` by name) as a
    SporkSchedulingError at `where` (the user's line)."""
    if isinstance(e, SporkSchedulingError):
        return e
    if isinstance(e, AssertionError):
        return SporkSchedulingError(f"{op}: {_failed_assertion(e, proc, given or {})}", where)
    if isinstance(e, SyntaxError):  # exo parses a pattern as Python
        return SporkSchedulingError(f"{op}: exo cannot parse the pattern {(e.text or '').strip()!r} ({e.msg}); patterns "
                                    "read like code with _ for any part: 'for i in _: _', 'y[_] += _'", where)
    if isinstance(e, NotImplementedError) and "forwarding" in str(e):  # exo could not move a cursor to this proc
        return SporkSchedulingError(f"{op}: a cursor argument is a cursor of another proc, {_OTHER_PROC}", where)
    unknown = re.fullmatch(r"(\w+) not found in the current environment", str(e))
    if type(e).__name__ == "ParseFragmentError" and unknown:  # an expression argument names what is not in scope
        return SporkSchedulingError(f"{op}: unknown name '{unknown.group(1)}' in an expression argument: it may use "
                                    "the proc's sizes and arguments and the iterators of the loops around the place "
                                    "it goes", where)
    undecided = _undecided(e, op)
    if undecided:
        return SporkSchedulingError(f"{op}: {undecided}", where)
    if type(e).__name__ == "InvalidCursorError":  # exo's cursor of a statement an earlier op replaced
        return SporkSchedulingError(f"{op}: a cursor argument points at a statement that an earlier op changed or "
                                    f"removed (exo: {e}); find it again in the proc that op returned", where)
    if type(e).__name__ == "UnificationError":  # replace's: the instr's semantics do not match the statements
        return SporkSchedulingError(f"{op}: the statements do not compute what the instr's body computes, so it "
                                    "cannot replace them (check the instr, its keywords such as box= or size=, and "
                                    "that the block covers exactly the loop nest its body is; exo: "
                                    f"{' '.join(str(e).split())[:300]})", where)
    if not isinstance(e, (exo.SchedulingError, TypeError, ValueError)):  # exo's op itself broke (e.g. its solver)
        return SporkSchedulingError(f"{op}: exo failed inside this op ({type(e).__name__}: {e}), a limit of exo's "
                                    "implementation; the proc is unchanged: reach the schedule another way (e.g. "
                                    "another cut point or op)", where)
    text = str(e)
    for prefix in _EXO_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix) :]
    block = re.search(r"'(\w+)' to \w+: expected pattern to match a BlockCursor, not <class '[\w.]*\.(\w+)Cursor'>", text)
    if block:  # exo names its cursor classes: say what to pass
        text = (f"{block.group(1)} takes a block of statements, not a {block.group(2).lower()} cursor: a loop "
                "(p.find_loop(...)), or a statement's cursor .as_block() or .expand(...)")
    cursor = re.search(r"'(\w+)' to \w+: expected an? (Gap|For|Call)Cursor(?:, not <class '[\w.]*\.(\w+)Cursor'>)?$", text)
    if cursor:  # likewise for a gap, a loop or a call; exo names the class given only for some
        param, wanted, got = cursor.groups()
        got = (got or type((given or {}).get(param)).__name__.removesuffix("Cursor")).lower()
        text = {"Gap": f"{param} takes a gap between statements, not a {got} cursor: a statement's cursor .before() "
                       "or .after(), e.g. p.find_loop(\"i\").before()",
                "For": f"{param} takes a loop, not a {got} cursor: p.find_loop(\"i\"), or a loop's name \"i\"",
                "Call": f"{param} takes the cursor of an instr's call, not a {got} cursor: p.find(\"name(_)\")"}[wanted]
    argument = re.fullmatch(r"argument (\d+), '(\w+)' to \w+: (.*)", text, re.S)
    if argument and not block and not cursor:  # exo names the op again: the parameter, and what was given
        number, param, reason = argument.groups()
        given_value = (given or {}).get(param)
        said = not reason.startswith("expected") or "not <" in reason  # the reason names what was given
        text = f"{param} (argument {number}): {reason}" + ("" if said or given_value is None else f", not {given_value!r}")
    if op == "fission" and text.startswith("Cannot fission loop"):
        text += _fission_hint((given or {}).get("gap_cursor"))
    used = re.fullmatch(r"Cannot remove loop, (\w+) is not free in the loop body\.", text)  # exo means "is used"
    if used:
        text = f"the loop's body uses its iterator {used.group(1)}; {_NEEDS['remove_loop']}"
    found = re.match(r"failed to find matches\s*Pattern:\s*(.*)", text, re.S)
    missing_buffer = re.search(r"could not find a cursor matching (\w+) : _", text)
    if proc is not None and found:
        text = _not_found(found.group(1).strip(), proc)
    elif proc is not None and missing_buffer:
        text = f"no buffer named {missing_buffer.group(1)!r}; " + _choices(missing_buffer.group(1), _buffers(proc), "its buffers are")
    return SporkSchedulingError(f"{op}: {text}", where)


def _fission_hint(gap) -> str:
    """Why exo could not split the loop around `gap`: the barriers synchronized on both sides of it, if any (exo
    keeps the order of sync statements on one barrier: each writes the barrier), else what exo had to prove."""
    try:
        loop, anchor = gap.parent(), gap.anchor()
        body = list(loop.body())
        k = body.index(anchor) + (gap.type() == GapType.After)
    except (AttributeError, ValueError, TypeError):  # not a gap in a loop body: exo's message says it all
        return ""
    sides = [{_barrier_of(st) for c in half for st in walk_stmts([c._impl._node])} - {None} for half in (body[:k], body[k:])]
    shared = sorted(str(b) for b in sides[0] & sides[1])
    if shared:
        return (f" Both halves synchronize on {', '.join(shared)}: exo keeps the order of sync statements on one "
                "barrier, and the split would run every iteration's later ones after all the earlier ones. Split at a "
                "gap that leaves each barrier's statements on one side")
    return (" exo could not prove that the statements after the gap, run after all iterations of those before it, "
            "compute the same (each iteration's second half may use what a later iteration's first half changes)")


def _barrier_of(s) -> object:
    """The barrier a sync statement, or a load completing on a barrier (`>> bar`), uses; None for others."""
    if not isinstance(s, LoopIR.Call):
        return None
    spec = sync_spec_of(s)
    if spec is not None and spec.barrier_mem is not None:
        return s.args[0].name
    bar = trailing_barrier(s)
    return bar.name if bar is not None else None


# What an op must prove, where exo's own message does not say (its solver gave up; remove_loop's inverted "not free").
_NEEDS = {"remove_loop": "remove_loop needs a body that does not use the loop's iterator and that is idempotent "
                         "(running it twice leaves what running it once leaves)"}


def _undecided(e: BaseException, op: str) -> Optional[str]:
    """For exo's TypeError "unknown result from z3" (its solver could neither prove nor refute what the op's
    safety check asked): that fact, read from the check (the innermost `Check_*` frame of `e`'s traceback) and
    the statements it was given; what the op needs; and the op's parameter that skips the proof, if it has one."""
    if str(e) != "unknown result from z3":
        return None
    check, tb = None, e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name.startswith("Check_"):
            check = tb.tb_frame
        tb = tb.tb_next
    args = check.f_locals if check else {}
    stmts = args.get("stmts")
    at = f"`{head_text(stmts[0])}` (line {stmts[0].srcinfo.lineno})" if stmts else "the statements it changes"
    if check and check.f_code.co_name == "Check_IsIdempotent":
        fact = f"whether {at} is idempotent"
    elif check and check.f_code.co_name == "Check_ExprBound":
        fact = f"whether {args['expr']} {args['op']} {args['value']} at {at}"
    else:
        fact = f"a fact about {at} that {op} must prove"
    sig = getattr(getattr(API_scheduling, op, None), "sig", None)
    skip = next((p for p in sig.parameters if p.startswith("unsafe_disable_check")), None) if sig else None
    return "; ".join(part for part in (
        f"exo's solver (z3) could not decide {fact}", _NEEDS.get(op),
        skip and f"if you know it holds, {op}(..., {skip}=True) skips the proof") if part)


SYNC_PATTERN = re.compile(r"\s*(?:Reverse)?(?:Fence|Arrive|Await)\s*\(")


def sync_text(stmt) -> str:
    """A sync statement as one line of the text the user reads: what `find_syncs` matches and lists."""
    return " ".join(print_stmt(stmt).split())


def find_syncs(proc: Procedure, pattern: str, many: bool = False):
    """The sync statements whose text matches `pattern` ("Fence(cuda_in_order, cuda_in_order)", "Await(cg, _, 0)":
    `_` for any part, "#k" for the k-th match; without `>>` the trailing barrier may be anything), as exo's find
    returns them. exo's own patterns match a call by its proc's name, and a sync statement calls a generated one
    (`spork_Fence_...`), so exo cannot find them by the text the user reads."""
    pattern, _, nth = pattern.partition("#")
    pieces = re.split(r"(?<!\w)_(?!\w)", "".join(pattern.split()))
    wanted = re.compile(".*?".join(map(re.escape, pieces)))
    cursors = sync_cursors(proc)
    printed = [sync_text(c._impl._node) for c in cursors]
    texts = [text.replace(" ", "") if ">>" in pattern else text.replace(" ", "").split(">>")[0] for text in printed]
    found = [c for c, text in zip(cursors, texts) if wanted.fullmatch(text)]
    nth = nth.strip()
    if nth:
        found = found[int(nth):int(nth) + 1]
    if not found:
        text = f"no sync statement matches {' '.join(pattern.split())!r}{' #' + nth if nth else ''}; "
        shown = list(dict.fromkeys(printed))
        raise SporkSchedulingError("find: " + text + _choices(pattern, shown, "its sync statements are"),
                                   user_frame()).with_traceback(None) from None
    return found if many else found[0]


def install() -> None:
    """Make exo's `Procedure.find` (and so `find_loop`, `find_alloc_or_arg`) report a pattern that matches nothing
    as the scheduling ops do: `p.find_loop("j")` raised `find: failed to find matches` from exo's frames; and find
    sync statements by their text (`find_syncs`)."""
    exo_find = Procedure.find

    def find(self, pattern, many=False, call_depth=1):
        _check_pattern("find", pattern)
        if SYNC_PATTERN.match(pattern):
            return find_syncs(self, pattern, many)
        try:
            return exo_find(self, pattern, many, call_depth=call_depth + 1)  # exo reads the caller's frame
        except (exo.SchedulingError, SyntaxError) as e:
            instances = _template_instances(self, pattern)
            if instances and not many:  # `Sm80_cp_async_f32(_)` as printed: the calls of the template's instances
                return exo_find(self, f"{instances[0]}(_)", many, call_depth=call_depth + 1)
            if instances:
                found = []
                for name in instances:  # a loop, not a comprehension: exo counts the frames to its caller's
                    found += exo_find(self, f"{name}(_)", many, call_depth=call_depth + 1)
                return found
            caller = sys._getframe(1)
            method = caller.f_code.co_name
            method = method if method in _FINDERS else "find"
            user = caller
            while user.f_code.co_name in _FINDERS or user.f_code is _CHECKED_CODE:  # exo's, and ours
                user = user.f_back
            if user.f_code.co_filename.startswith(LIBRARIES):
                raise  # a scheduling op looking for something: the op explains its failure
            raise explain(e, method, self, user_frame()).with_traceback(None) from None  # as the notebook shows it

    Procedure.find = functools.wraps(exo_find)(find)
    for name in ("find_loop", "find_alloc_or_arg"):
        setattr(Procedure, name, _pattern_checked(getattr(Procedure, name)))
    Procedure.forward = _explained(Procedure.forward, NotImplementedError, _forward_message)
    BlockCursor.__getitem__ = _explained(BlockCursor.__getitem__, IndexError, _past_the_end_message)


_FINDERS = ("find_loop", "find_alloc_or_arg", "find_all")


def _check_pattern(method: str, pattern) -> None:
    """exo's find_loop(0) raised a bare TypeError from its frames, and find_loop("") exo's pattern-matcher error."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise SporkSchedulingError(f"{method} takes a pattern string such as 'i' or 'i #1' (the second loop named "
                                   f"i), got {pattern!r}", user_frame()).with_traceback(None)


def _pattern_checked(exo_method):
    """exo's finder with its pattern checked first; find_loop also checks that it found loops: exo's falls back to
    a plain `find` for what is not a loop name ("y[_] += _", "task #x") and finds `with` blocks by their internal
    iterator ("_with")."""

    def method(self, pattern, *args, **kwargs):
        _check_pattern(exo_method.__name__, pattern)
        found = exo_method(self, pattern, *args, **kwargs)
        if exo_method.__name__ == "find_loop":
            for cursor in found if isinstance(found, list) else [found]:
                _check_is_loop(self, pattern, cursor)
        return found

    return functools.wraps(exo_method)(method)


def _check_is_loop(proc: Procedure, pattern: str, cursor) -> None:
    node = getattr(cursor._impl, "_node", None)
    if isinstance(node, LoopIR.For) and not isinstance(node.loop_mode, WithBlock):
        return
    if isinstance(node, LoopIR.For):  # a `with` block, encoded as a loop named "_with"
        text = (f"`{head_text(node)}` (line {node.srcinfo.lineno}) is a block, not a loop: find blocks with "
                f"find_blocks(p, {type(node.loop_mode.ctx).__name__})")
    else:
        what = f"`{head_text(node)}` (line {node.srcinfo.lineno})" if isinstance(node, LoopIR.stmt) else "an expression"
        text = (f"{pattern!r} found {what}, which is not a loop: find_loop takes a loop's name, 'name #k' for its "
                "k-th match counting from 0, or a loop pattern 'for i in _: _'")
    raise SporkSchedulingError(f"find_loop: {text}; " + _choices(pattern, loop_patterns(proc), "its loops are"),
                               user_frame()).with_traceback(None)


def _called_by_user() -> bool:
    """Whether the caller of the function calling this one is outside spork_lab and exo."""
    return not sys._getframe(2).f_code.co_filename.startswith(LIBRARIES)


def _explained(exo_method, error: type, message: Callable[[object, object], str]):
    """exo's one-argument method, where `error` raised for the user's own call becomes a SporkSchedulingError at
    their line saying `message(self, argument)`."""

    def method(self, argument):
        try:
            return exo_method(self, argument)
        except error:
            if not _called_by_user():
                raise
            raise SporkSchedulingError(message(self, argument), user_frame()).with_traceback(None) from None

    return functools.wraps(exo_method)(method)


def _forward_message(proc: Procedure, cursor) -> str:
    """exo's forward of a cursor from a later proc (or an unrelated one) raised NotImplementedError."""
    return (f"forward: the cursor is of a proc that is {_OTHER_PROC}; forward moves cursors only from a proc to the "
            "procs scheduled from it")


def _past_the_end_message(block: BlockCursor, i) -> str:
    """`p.body()[5]` on a body of two statements raised exo's IndexError from its internal cursors."""
    stmts = [f"[{k}] `{head_text(c._impl._node)}`" for k, c in enumerate(block)]
    return f"index {i} is past the end of a block of {len(stmts)} statement(s): " + ", ".join(stmts)


_CHECKED_CODE = _pattern_checked(Procedure.find).__code__  # the code every method _pattern_checked makes runs


def _template_instances(proc: Procedure, pattern) -> list[str]:
    """For a pattern `Name(_)` naming an instr as the printer writes its calls (a template's name:
    `Sm90_mma_async_f16(_)`) or as an instance's name, the names of the procs those calls call: the template's
    instances (`Sm90_mma_async_f16_m64n256`), and a TMA load's wrapper once it completes on a barrier
    (`..._128x32__trail_CudaMbarrier_1`, complete_on's), in order of first call."""
    named = re.fullmatch(r"\s*(\w+)\(_\)\s*", pattern) if isinstance(pattern, str) else None
    if named is None:
        return []
    calls = [s for s in walk_stmts(proc.INTERNAL_proc().body) if isinstance(s, LoopIR.Call)]
    return list(dict.fromkeys(str(c.f.name) for c in calls if named[1] in _written_names(c)))


def _written_names(call: LoopIR.Call) -> tuple:
    """The names a call's instr goes by in the user's code: as printed (its template's), and as instantiated."""
    trailing = trailing_of(call)
    return written_name(call), str(call.f.name) if trailing is None else trailing[0]


def _failed_assertion(e: AssertionError, proc: Optional[Procedure], given: dict) -> str:
    """What an assertion inside exo's op means for its arguments: exo asserts, for instance, that the buffer
    `stage_mem` windows exists."""
    window = re.match(r"\s*(\w+)", str(given.get("win_expr", "")))
    if "Must find the symbol" in str(e) and window and proc is not None:
        name = window.group(1)
        return f"no buffer named {name!r} where the block is; " + _choices(name, _buffers(proc), "its buffers are")
    return f"the arguments failed a check inside exo ({str(e) or 'an assertion, without a message'})"
