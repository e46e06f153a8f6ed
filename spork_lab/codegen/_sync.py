"""Lowering of synchronization statements in device code.

A Fence lowers according to its executing thread collective (seed 000: the
same Fence text is __syncwarp in a warp and __syncthreads in a CTA), wrapped in
spork_lab.sync.lowering's prologue (waits for L1's async instructions) and
epilogue (proxy / wgmma fences for L2). Split barriers (Arrive/Await and
barrier allocations) are not wired to spork_lab.sync.lowering yet.
"""

from __future__ import annotations

from typing import Optional

from ..errors import CodegenError
from ..lang.sync_stmts import SyncSpec
from ..sync.lowering import fence_epilogue_lines, fence_prologue_lines
from ._collectives import Collective

N_NAMED_BARRIERS = 16  # bar.sync ids 0..15; 0 is __syncthreads


class NamedBarrierIds:
    """Hands out `bar.sync` ids per kernel so that concurrent sub-CTA fences never share one."""

    def __init__(self, block_threads: int):
        self.block_threads = block_threads
        self._base: dict = {}
        self._next = 1

    def base(self, key, count: int, srcinfo) -> int:
        if key not in self._base:
            if self._next + count > N_NAMED_BARRIERS:
                raise CodegenError("this device function's sub-CTA Fences need more than 15 named barriers", srcinfo)
            self._base[key] = self._next
            self._next += count
        return self._base[key]


def lower_fence(spec: SyncSpec, coll: Collective, ids: NamedBarrierIds, cluster_dim: int, srcinfo) -> list:
    """CUDA statements for a Fence executed by the thread collectives `coll`."""
    barrier = _barrier(coll, ids, cluster_dim, srcinfo)
    return [*fence_prologue_lines(spec), *([barrier] if barrier else []), *fence_epilogue_lines(spec)]


def _barrier(coll: Collective, ids: NamedBarrierIds, cluster_dim: int, srcinfo) -> Optional[str]:
    size, block = coll.size, ids.block_threads
    aligned = coll.contiguous and all(s % size == 0 for s in coll.starts)
    if size == 1:
        return None  # one thread: its own in-order accesses are already ordered
    if size == block * cluster_dim and cluster_dim > 1:
        return "cooperative_groups::this_cluster().sync();"
    if size == block and aligned:
        return "__syncthreads();"
    if size < 32 and aligned and 32 % size == 0:
        return f"__syncwarp(((1u << {size}) - 1u) << (exo_thread % 32 / {size} * {size}));"
    if size == 32 and aligned:
        return "__syncwarp();"
    if size % 32 == 0 and size < block and coll.contiguous:
        if aligned:
            base = ids.base(("aligned", size), block // size, srcinfo)
            bar_id = f"{base} + exo_thread % {block} / {size}"
        elif len(coll.starts) == 1:
            bar_id = str(ids.base(("fixed", coll.starts[0] % block, size), 1, srcinfo))
        else:
            bar_id = None
        if bar_id is not None:
            return f'asm volatile("bar.sync %0, %1;" :: "r"({bar_id}), "n"({size}) : "memory");'
    raise CodegenError(
        f"not yet supported: a Fence executed by collectives of {size} threads laid out as "
        f"{[list(r) for r in coll.runs[:2]]}...; use a warp, whole warps of one CTA, a CTA or the cluster",
        srcinfo,
    )


def unsupported_split_barrier(what: str, srcinfo):
    raise CodegenError(f"not yet supported by the CUDA backend: {what} (split barriers)", srcinfo)
