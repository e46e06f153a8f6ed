"""Small helpers over exo's LoopIR shared by the analyses, the scheduling ops and the tools."""

from __future__ import annotations

import itertools
from typing import Iterator, Optional

from exo.API import Procedure
from exo.API_cursors import StmtCursor
from exo.core.LoopIR import LoopIR, T
from exo.core.prelude import Sym

# Device code indexes with 32-bit ints (task, thread and loop iterators): larger sizes and arrays are refused.
INDEX_LIMIT = 2**31


def walk_stmts(stmts: list) -> Iterator:
    """Every statement of a block and of the blocks inside it, in program order (pre-order)."""
    for s in stmts:
        yield s
        if isinstance(s, LoopIR.For):
            yield from walk_stmts(s.body)
        elif isinstance(s, LoopIR.If):
            yield from walk_stmts(s.body)
            yield from walk_stmts(s.orelse)


def stmt_cursors(p: Procedure) -> list[StmtCursor]:
    """Cursors of every statement of p, in program order."""
    found = []

    def walk(cursors):
        for c in cursors:
            found.append(c)
            node = c._impl._node
            if isinstance(node, (LoopIR.For, LoopIR.If)):
                walk(c.body())
                if isinstance(node, LoopIR.If) and node.orelse:
                    walk(c.orelse())

    walk(p.body())
    return found


def numeric_reads(e, out: list) -> None:
    """The buffer reads of a data expression, in evaluation order (index reads are not buffer reads)."""
    if isinstance(e, LoopIR.Read):
        if e.type.is_numeric():
            out.append(e)
        return
    for child in ("lhs", "rhs", "arg"):
        if hasattr(e, child):
            numeric_reads(getattr(e, child), out)
    if isinstance(e, LoopIR.Extern):
        for a in e.args:
            numeric_reads(a, out)


def interval_width(w) -> Optional[int]:
    """`hi - lo` of a window interval when it is a constant: `i:i + 1` and `i:1 + i` (as exo's simplify
    writes it) alike; None when it depends on a variable."""
    diff = polynomial(LoopIR.BinOp("-", w.hi, w.lo, w.hi.type, w.srcinfo))
    return None if diff.keys() - {()} else diff.get((), 0)


def fold(op: str, a: int, b: int) -> int:
    """The language's meaning of `a op b` on integers (floor division and modulo)."""
    return {"+": a + b, "-": a - b, "*": a * b}[op] if op in "+-*" else (a // b if op == "/" else a % b)


def constant_value(e) -> Optional[int]:
    """The value of an index expression made of integer constants only (`320 / 160`, as exo leaves the
    arithmetic of substituted constants), else None."""
    if isinstance(e, LoopIR.Const):
        return e.val if isinstance(e.val, int) and not isinstance(e.val, bool) else None
    if isinstance(e, LoopIR.USub):
        arg = constant_value(e.arg)
        return None if arg is None else -arg
    if isinstance(e, LoopIR.BinOp) and e.op in ("+", "-", "*", "/", "%"):
        lhs, rhs = constant_value(e.lhs), constant_value(e.rhs)
        if lhs is None or rhs is None or (e.op in "/%" and rhs == 0):
            return None
        return fold(e.op, lhs, rhs)
    return None


def whole_interval(w, extent) -> bool:
    """Whether window index `w` is the interval `0:extent`, covering its buffer dimension entirely (compared as
    constants, folded: `0:320 / 160` covers a dimension of 2)."""
    return (isinstance(w, LoopIR.Interval) and constant_value(w.lo) == 0
            and constant_value(w.hi) == constant_value(extent) is not None)


def constant_remainder(e, modulus: int) -> Optional[int]:
    """`e % modulus` when it is the same whatever the values of e's variables (the coefficient of each product of
    them is a multiple of `modulus`), else None."""
    return remainder(polynomial(e), modulus)


def remainder(form: dict, modulus: int) -> Optional[int]:
    """`constant_remainder` of an expression's `polynomial`."""
    if any(c % modulus for monomial, c in form.items() if monomial):
        return None
    return form.get((), 0) % modulus


def polynomial(e) -> dict:
    """An index expression as {monomial: coefficient}, a monomial being the sorted tuple of the variables it
    multiplies (Syms, and any other subexpression, such as `t / 8`, as an opaque variable by its expr_key); ()
    is the constant term, and no coefficient is 0. Exact over the integers: what is decided from it holds for
    every value of the variables."""
    if isinstance(e, LoopIR.USub):
        return {m: -c for m, c in polynomial(e.arg).items()}
    if isinstance(e, LoopIR.BinOp) and e.op in ("+", "-", "*"):
        lhs, rhs = polynomial(e.lhs), polynomial(e.rhs)
        out: dict = {}
        if e.op == "*":
            for (m1, c1), (m2, c2) in itertools.product(lhs.items(), rhs.items()):
                m = tuple(sorted(m1 + m2, key=repr))
                out[m] = out.get(m, 0) + c1 * c2
        else:
            sign = 1 if e.op == "+" else -1
            out = dict(lhs)
            for m, c in rhs.items():
                out[m] = out.get(m, 0) + sign * c
        return {m: c for m, c in out.items() if c}
    value = constant_value(e)  # a constant, or constants folded (`320 / 160`)
    if value is not None:
        return {(): value} if value else {}
    return {(expr_key(e),): 1}


def expr_vars(e) -> set:
    """The Syms an index expression reads."""
    if isinstance(e, LoopIR.Read):
        return {e.name}.union(*(expr_vars(i) for i in e.idx))
    if isinstance(e, LoopIR.BinOp):
        return expr_vars(e.lhs) | expr_vars(e.rhs)
    if isinstance(e, LoopIR.USub):
        return expr_vars(e.arg)
    return set()


def expr_syms(e, out: list) -> None:
    """Append every Sym an expression mentions, in order."""
    if isinstance(e, (LoopIR.Read, LoopIR.WindowExpr, LoopIR.StrideExpr)):
        out.append(e.name)
    if isinstance(e, LoopIR.Read):
        for i in e.idx:
            expr_syms(i, out)
    elif isinstance(e, LoopIR.WindowExpr):
        for w in e.idx:
            for x in (w.lo, w.hi) if isinstance(w, LoopIR.Interval) else (w.pt,):
                expr_syms(x, out)
    elif isinstance(e, LoopIR.BinOp):
        expr_syms(e.lhs, out)
        expr_syms(e.rhs, out)
    elif isinstance(e, LoopIR.USub):
        expr_syms(e.arg, out)
    elif isinstance(e, LoopIR.Extern):
        for a in e.args:
            expr_syms(a, out)


def type_syms(typ, out: list) -> None:
    """Append the Syms a tensor or window type's sizes mention."""
    if isinstance(typ, T.Window):
        typ = typ.as_tensor
    if isinstance(typ, T.Tensor):
        for h in typ.hi:
            expr_syms(h, out)


def own_syms(s, out: list) -> None:
    """Append the Syms statement `s` itself uses (not those of the statements nested in it), in order."""
    if isinstance(s, (LoopIR.Assign, LoopIR.Reduce)):
        out.append(s.name)
        for i in s.idx:
            expr_syms(i, out)
        expr_syms(s.rhs, out)
    elif isinstance(s, LoopIR.For):
        expr_syms(s.lo, out)
        expr_syms(s.hi, out)
    elif isinstance(s, LoopIR.If):
        expr_syms(s.cond, out)
    elif isinstance(s, LoopIR.Alloc):
        type_syms(s.type, out)
    elif isinstance(s, LoopIR.WindowStmt):
        expr_syms(s.rhs, out)
    elif isinstance(s, LoopIR.Call):
        for a in s.args:
            expr_syms(a, out)


def bound_sym(s) -> Optional[Sym]:
    """The Sym a statement binds for what follows it (an allocation, a window) or for its body (a loop)."""
    if isinstance(s, (LoopIR.Alloc, LoopIR.WindowStmt)):
        return s.name
    return s.iter if isinstance(s, LoopIR.For) else None


def free_syms(stmts) -> list:
    """Syms used by `stmts` and bound outside them, in order of first use."""
    used, bound = [], set()

    def walk(ss):
        for s in ss:
            own_syms(s, used)
            if bound_sym(s) is not None:
                bound.add(bound_sym(s))
            if isinstance(s, LoopIR.For):
                walk(s.body)
            elif isinstance(s, LoopIR.If):
                walk(s.body)
                walk(s.orelse)

    walk(stmts)
    seen, out = set(), []
    for sym in used:
        if sym not in bound and sym not in seen:
            seen.add(sym)
            out.append(sym)
    return out


def expr_key(e) -> object:
    """A hashable key of an index expression, equal for the same expression (the same variables, not only the
    same names). Cheaper than str(): exo formats an expression's text with yapf, about a millisecond each."""
    if isinstance(e, LoopIR.Read) and not e.idx:
        return e.name
    if isinstance(e, LoopIR.Const):
        return e.val
    if isinstance(e, LoopIR.BinOp):
        return (e.op, expr_key(e.lhs), expr_key(e.rhs))
    if isinstance(e, LoopIR.USub):
        return ("-", expr_key(e.arg))
    return str(e)


def evaluate(e, env: dict):
    """Value of an index/size expression or assertion (or of an int, already a value), or None if it needs more
    than sizes."""
    if isinstance(e, int):
        return e
    if isinstance(e, LoopIR.Const):
        return e.val
    if isinstance(e, LoopIR.Read) and not e.idx:
        return env.get(str(e.name))
    if isinstance(e, LoopIR.USub):
        v = evaluate(e.arg, env)
        return None if v is None else -v
    if isinstance(e, LoopIR.BinOp):
        lhs, rhs = evaluate(e.lhs, env), evaluate(e.rhs, env)
        if lhs is None or rhs is None:
            return None
        return INDEX_OPS[e.op](lhs, rhs) if e.op in INDEX_OPS else None
    return None


# exo's index arithmetic on values: floor division and modulo (Python's, not C's)
INDEX_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
             "/": lambda a, b: a // b, "%": lambda a, b: a % b, "==": lambda a, b: a == b,
             "<": lambda a, b: a < b, ">": lambda a, b: a > b, "<=": lambda a, b: a <= b,
             ">=": lambda a, b: a >= b, "and": lambda a, b: a and b, "or": lambda a, b: a or b}  # fmt: skip


def operation_count(stmts: list, env: dict) -> int:
    """The assignments and calls the statements make at these sizes (`env`: size name -> value); a loop bound that
    depends on another loop's iterator counts one trip: an estimate from below, for run_cpu's and sync_check's
    guards against runs that would take hours (a running C call cannot be interrupted)."""
    total = 0
    for s in stmts:
        if isinstance(s, (LoopIR.Assign, LoopIR.Reduce, LoopIR.Call)):
            total += 1
        elif isinstance(s, LoopIR.For):
            lo, hi = evaluate(s.lo, env), evaluate(s.hi, env)
            trips = hi - lo if lo is not None and hi is not None else 1
            total += max(trips, 0) * operation_count(s.body, env)
        elif isinstance(s, LoopIR.If):
            total += operation_count(s.body, env) + operation_count(s.orelse, env)
    return total


def sizes_text(sizes: dict) -> str:
    """Named values as a call gives them, `n=1024, m=2`: how messages and the workbench name sizes and
    iterator values."""
    return ", ".join(f"{name}={value}" for name, value in sizes.items())


def unshared(proc_ir: LoopIR.proc) -> Optional[LoopIR.proc]:
    """`proc_ir` with every statement a distinct object, or None if it is already. exo's ops keep a statement they
    copy unchanged (a Fence, an instr call with constant arguments) as one object at each place, and what the
    analysis knows of a statement (which threads run it) is looked up by the object: the last place's answer
    served every place (a loop cut by divide_loop ran the tail's thread mapping; audit of session 31)."""
    seen: set = set()
    body, changed = _unshared_stmts(proc_ir.body, seen)
    return proc_ir.update(body=body) if changed else None


def own_index_lists(proc_ir: LoopIR.proc) -> LoopIR.proc:
    """`proc_ir` with a new index list in every access (read, assignment, reduction; the same nodes otherwise).
    exo 1.0's mult_dim rewrites the index lists of the proc it is given in place, so the user's proc (and every
    earlier step of a schedule) came to read `buf[32 * w + l]` of a `buf: f32[4, 32]` (audit of session 32)."""
    return proc_ir.update(body=[_own_lists_stmt(s) for s in proc_ir.body])


def _own_lists_stmt(s):
    if isinstance(s, (LoopIR.Assign, LoopIR.Reduce)):
        return s.update(idx=[_own_lists_expr(i) for i in s.idx], rhs=_own_lists_expr(s.rhs))
    if isinstance(s, LoopIR.For):
        return s.update(body=[_own_lists_stmt(b) for b in s.body])
    if isinstance(s, LoopIR.If):
        return s.update(body=[_own_lists_stmt(b) for b in s.body], orelse=[_own_lists_stmt(b) for b in s.orelse])
    if isinstance(s, LoopIR.Call):
        return s.update(args=[_own_lists_expr(a) for a in s.args])
    return s


def _own_lists_expr(e):
    if isinstance(e, LoopIR.Read):
        return e.update(idx=[_own_lists_expr(i) for i in e.idx])
    if isinstance(e, LoopIR.BinOp):
        return e.update(lhs=_own_lists_expr(e.lhs), rhs=_own_lists_expr(e.rhs))
    if isinstance(e, LoopIR.USub):
        return e.update(arg=_own_lists_expr(e.arg))
    if isinstance(e, LoopIR.Extern):
        return e.update(args=[_own_lists_expr(a) for a in e.args])
    return e


def _unshared_stmts(stmts: list, seen: set) -> tuple:
    out, changed = [], False
    for s in stmts:
        new = s
        if isinstance(s, LoopIR.For):
            body, inner = _unshared_stmts(s.body, seen)
            new = s.update(body=body) if inner else s
        elif isinstance(s, LoopIR.If):
            body, in_body = _unshared_stmts(s.body, seen)
            orelse, in_orelse = _unshared_stmts(s.orelse, seen)
            new = s.update(body=body, orelse=orelse) if in_body or in_orelse else s
        if id(new) in seen:
            new = new.update()  # a copy of its own
        seen.add(id(new))
        changed |= new is not s
        out.append(new)
    return out, changed
