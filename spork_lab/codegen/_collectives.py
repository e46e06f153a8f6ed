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
from ..core.ir import walk_stmts


def iter_key(sym) -> str:
    """Name of a cuda_threads iterator inside tilings (the analysis tiles by the user's names)."""
    return str(sym.name())


def scope_tilings(kernel_proc: LoopIR.proc, analysis: Analysis) -> dict:
    """id(stmt) -> CollTiling for every statement of the proc's device function (its body[0]).

    For a loop or `with` block the entry is the tiling its body runs with.
    """
    return {
        id(s): analysis.stmt_info(s.body[0] if isinstance(s, LoopIR.For) else s).tiling
        for s in walk_stmts(kernel_proc.body[0].body)
    }


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
