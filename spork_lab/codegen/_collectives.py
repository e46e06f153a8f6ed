"""Thread-collective facts the CUDA backend needs, read from the collective analysis.

The backend never builds tilings itself: `spork_lab.analysis` is the one place
that knows which threads run a statement.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional

from exo.core.LoopIR import LoopIR

from ..analysis import Analysis
from ..core.coll import CollTiling
from ..errors import CodegenError


def iter_key(sym) -> str:
    """Name of a cuda_threads iterator inside tilings (the analysis tiles by the user's names)."""
    return str(sym.name())


def scope_tilings(analysis: Analysis, original: LoopIR.For, compiled: LoopIR.For) -> dict:
    """id(stmt) -> CollTiling for every statement of `compiled`, read from the analysis of `original`'s proc.

    `compiled` is the device function block `original` after exo's backend
    passes, which rebuild statements and add Frees but change nothing else.
    For a loop or `with` block the entry is the tiling its body runs with.
    """
    pairs: list = []
    _align(original.body, compiled.body, pairs)
    return {id(new): analysis.stmt_info(old.body[0] if isinstance(old, LoopIR.For) else old).tiling for new, old in pairs}


def stmt_pairs(original: LoopIR.For, compiled: LoopIR.For) -> dict:
    """id(statement of `compiled`) -> the statement of `original` it was made from (see scope_tilings)."""
    pairs: list = []
    _align(original.body, compiled.body, pairs)
    return {id(new): old for new, old in pairs}


def _align(original: list, compiled: list, out: list) -> None:
    rest = iter(original)
    for s in compiled:
        if isinstance(s, LoopIR.Free):
            continue
        old = next(rest, None)
        if type(old) is not type(s):
            raise CodegenError(f"internal: exo's backend passes changed the statement `{old}` into `{s}`", s.srcinfo)
        out.append((s, old))
        if isinstance(s, LoopIR.For):
            _align(old.body, s.body, out)
        elif isinstance(s, LoopIR.If):
            _align(old.body, s.body, out)
            _align(old.orelse, s.orelse, out)


def new_op(parent: CollTiling, body: CollTiling) -> Optional[tuple]:
    """(dim index, ops before it in that dim, the op) added by the step parent -> body, or None."""
    for m, dim in enumerate(body.dims):
        for k, op in enumerate(dim.ops):
            if op.treeDepth == parent.depth:
                return m, dim.ops[:k], op
    return None


@dataclass(frozen=True)
class Collective:
    """The thread collectives executing a statement: `size` threads each, and their [start, stop) runs."""

    size: int
    runs: tuple  # one tuple of (start, stop) runs per collective

    @property
    def contiguous(self) -> bool:
        return all(len(r) == 1 for r in self.runs)

    @property
    def starts(self) -> list:
        return [r[0][0] for r in self.runs]


def executing_collectives(tiling: CollTiling) -> Collective:
    """Every thread collective a tiling yields (one per combination of iterator values)."""
    names = [n for n, _ in tiling.iters]
    runs = set()
    for values in itertools.product(*(range(c) for _, c in tiling.iters)):
        runs.add(tuple(tiling.threads(dict(zip(names, values)))))
    return Collective(tiling.thread_count, tuple(sorted(runs)))
