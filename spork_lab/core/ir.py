"""Small helpers over exo's LoopIR shared by the analyses, the scheduling ops and the tools."""

from __future__ import annotations

from typing import Iterator

from exo.core.LoopIR import LoopIR


def walk_stmts(stmts: list) -> Iterator:
    """Every statement of a block and of the blocks inside it, in program order (pre-order)."""
    for s in stmts:
        yield s
        if isinstance(s, LoopIR.For):
            yield from walk_stmts(s.body)
        elif isinstance(s, LoopIR.If):
            yield from walk_stmts(s.body)
            yield from walk_stmts(s.orelse)


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
