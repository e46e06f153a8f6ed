"""Mutants of a proc's synchronization: sync statements deleted or moved, or an Await's N changed.

One home for the mutation test (benchmarks/mutation_test.py) and the sync tests
(tests/procs_sync.py derives its broken variants here). Sync statements are
numbered from 0 in program order. A mutant keeps the original's source
locations, so its hazards name lines of the original's source file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from exo.API import Procedure

from ..core.sync_stmts import sync_cursors, sync_proc, sync_spec_of


def without_syncs(p: Procedure, indices: Iterable[int]) -> Procedure:
    """p with its sync statements number `indices` deleted."""
    for i in sorted(set(indices), reverse=True):  # the last first, so the others keep their numbers
        ir, _ = sync_cursors(p)[i]._impl._delete()
        p = Procedure(ir)
    return p


def with_await_n(p: Procedure, index: int, n: int) -> Procedure:
    """p with the N of its sync statement number `index` (an Await or ReverseAwait) set to n (~k for lag k)."""
    cursor = sync_cursors(p)[index]
    node = cursor._impl._node
    spec = sync_spec_of(node)
    if not spec.is_await:
        raise ValueError(f"sync statement #{index} of {p.name()} is a {spec.kind}, not an Await")
    call = node.update(f=sync_proc(dataclasses.replace(spec, N=n))._loopir_proc)
    ir, _ = cursor._impl._replace([call])
    return Procedure(ir)


def with_sync_moved(p: Procedure, index: int, step: int) -> Procedure | None:
    """p with its sync statement number `index` swapped with the statement just before it (step -1) or just
    after it (step 1) in its block; None when it has no neighbour on that side (a move never leaves the block)."""
    if step not in (-1, 1):
        raise ValueError(f"a sync statement moves by one statement (step -1 or 1), not {step}")
    cursor = sync_cursors(p)[index]._impl
    attr, i = cursor._path[-1]
    if not 0 <= i + step < len(getattr(cursor.parent()._node, attr)):
        return None
    neighbour = cursor.next(step)
    ir, _ = cursor._move(neighbour.after() if step == 1 else neighbour.before())
    return Procedure(ir)
