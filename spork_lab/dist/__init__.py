"""Distributed memory (seed 000, rules 1-4): which threads own which shard of an allocation.

The `dist` pass of `sl.analyze` (after ``scopes`` and ``checks``):
`deduce(stmts)` gives every device allocation whose memory has a native unit
a `DistAlloc`: its leading distributed dimensions, the shard shape, the
tiling chain and the owner threads of each shard. The code generator strips
the distributed dimensions and indices (rule 4) and the sync checker gives
each shard its owner; both read the result from the `Analysis`
(`analysis.dist[sym]`).
"""

from .deduction import DistAlloc, Link, Use, deduce

__all__ = ["deduce", "DistAlloc", "Link", "Use"]
