"""Distributed memory (seed 000, rules 1-4): which threads own which shard of an allocation.

The `dist` pass of `sl.analyze` (`run`, after ``scopes``, ``checks`` and ``barriers``):
`deduce(stmts)` gives every device allocation whose memory has a native unit
a `DistAlloc`: its leading distributed dimensions, the shard shape, the
tiling chain and the owner threads of each shard. The code generator strips
the distributed dimensions and indices (rule 4) and the sync checker gives
each shard its owner; both read the result from the `Analysis`
(`analysis.dist[sym]`).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from .deduction import DistAlloc, Link, Use, deduce


def run(ctx) -> Mapping:
    """The pass: {allocation Sym: DistAlloc}, from the `scopes` pass' statements (ctx: analysis.PassContext)."""
    return MappingProxyType(deduce(ctx.results["scopes"].stmts))


__all__ = ["run", "deduce", "DistAlloc", "Link", "Use"]
