"""Lowering of synchronization statements: where each piece of spork_lab.codegen.barrier_text goes.

A Fence lowers according to its executing thread collective (seed 000: the
same Fence text is __syncwarp in a warp and __syncthreads in a CTA), wrapped in
spork_lab.codegen.barrier_text's prologue (waits for L1's async instructions) and
epilogue (proxy / wgmma fences for L2). Split barriers take all their CUDA text
from the `BarrierText` their memory names; the device code generator decides
where it goes: kernel scope, the allocation's scope (begin/end), and the
statement itself (arrive/await at barrier position p, here).
"""

from __future__ import annotations

from typing import Optional

from exo.core.LoopIR import LoopIR, T

from ..analysis.barriers import FULL_PROXY_FENCE, BarrierInfo
from ..core import timelines as tl
from ..core.sync_stmts import SyncSpec, barrier_window_indices, is_point_interval, sync_spec_of
from ..errors import CodegenError
from ._collectives import Collective
from .barrier_text import fence_epilogue_lines, fence_prologue_lines, lowering

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


def lower_fence(
    spec: SyncSpec, coll: Collective, ids: NamedBarrierIds, cluster_dim: int, split_paths: bool, srcinfo,
    proxy_fence: str = FULL_PROXY_FENCE,
) -> list:
    """CUDA statements for a Fence executed by the thread collectives `coll`; `proxy_fence` is the device function's
    (analysis.barriers.ProxyFacts.fence).

    `split_paths`: the kernel has one code path per warp name, so the warps of one barrier reach
    it at different instructions; PTX allows that only for the non-`.aligned` barrier forms.
    """
    if tl.is_bare_wgmma_fence(spec.first_tl, spec.second_tl):
        # wgmma.fence: orders the warpgroup's register accesses (and its earlier wgmma) before its next wgmma
        if coll.size != 128 or not coll.contiguous or any(s % 128 for s in coll.starts):
            raise CodegenError(f"Fence(wgmma_fence_1, wgmma_fence_2) is wgmma.fence: a warpgroup executes it, not "
                               f"collectives of {coll.size} threads", srcinfo)
        return ['asm volatile("wgmma.fence.sync.aligned;" ::: "memory");']
    barrier = _barrier(coll, ids, cluster_dim, split_paths, srcinfo)
    return [*fence_prologue_lines(spec), *([barrier] if barrier else []), *fence_epilogue_lines(spec, proxy_fence)]


def _barrier(coll: Collective, ids: NamedBarrierIds, cluster_dim: int, split_paths: bool, srcinfo) -> Optional[str]:
    size, block = coll.size, ids.block_threads
    aligned = coll.contiguous and all(s % size == 0 for s in coll.starts)
    if size == 1:
        return None  # one thread: its own in-order accesses are already ordered
    if size == block * cluster_dim and cluster_dim > 1:
        if split_paths:
            return 'asm volatile("barrier.cluster.arrive.release;\\n\\tbarrier.cluster.wait.acquire;" ::: "memory");'
        return "cooperative_groups::this_cluster().sync();"
    if size == block and aligned:
        return 'asm volatile("barrier.sync 0;" ::: "memory");' if split_paths else "__syncthreads();"
    if size < 32 and aligned and 32 % size == 0:
        return f"__syncwarp(((1u << {size}) - 1u) << (exo_thread % 32 / {size} * {size}));"
    if size == 32 and aligned:
        return "__syncwarp();"
    if size % 32 == 0 and size < block and coll.contiguous:
        if aligned:
            base = ids.base(("aligned", size), block // size, srcinfo)
            bar_id = f"{base} + exo_thread % {block} / {size}"
        elif len({start % block for start in coll.starts}) == 1:  # one collective per CTA, at the same threads
            bar_id = str(ids.base(("fixed", coll.starts[0] % block, size), 1, srcinfo))
        else:
            bar_id = None
        if bar_id is not None:
            op = "barrier.sync" if split_paths else "bar.sync"
            return f'asm volatile("{op} %0, %1;" :: "r"({bar_id}), "n"({size}) : "memory");'
    raise CodegenError(
        f"not yet supported: a Fence executed by collectives of {size} threads laid out as "
        f"{[list(r) for r in coll.runs[:2]]}...; use a warp, whole warps of one CTA, a CTA or the cluster",
        srcinfo,
    )


def position_expr(info: BarrierInfo, arg, srcinfo) -> Optional[LoopIR.expr]:
    """Row-major flat position of the window `bar[i:i+1, j:j+1]` in its CTA's barrier array (None: scalar).

    CTA dimensions (indexed by the CTA's rank) are not part of it: each CTA keeps its own barriers.
    """
    flat = None
    for k, (idx, dim) in enumerate(zip(barrier_window_indices(arg), info.dims)):
        if k in info.cta_dims:
            continue
        if flat is None:
            flat = idx
        else:
            scaled = LoopIR.BinOp("*", flat, LoopIR.Const(dim, T.int, srcinfo), T.index, srcinfo)
            flat = LoopIR.BinOp("+", scaled, idx, T.index, srcinfo)
    return flat


def multicast_ranks(info: BarrierInfo, arg) -> Optional[tuple]:
    """(lo, hi): the CTA ranks a multicast arrive `>> bar[lo:hi]` lands on; None for a point index."""
    for k, w in enumerate(getattr(arg, "idx", [])):
        if k in info.cta_dims and not is_point_interval(w):
            return (w.lo.val, w.hi.val)
    return None


def split_sync_lines(info: BarrierInfo, stmt, p: str) -> list:
    """Arrive/Await (or Reverse) statement `stmt` (the analysed statement) on barrier position `p`.

    The mbarrier arrival counts come from the same BarrierUses as the lowering's
    arrival election (`analysis.barriers`), so every phase completes.
    """
    spec = sync_spec_of(stmt)
    text = lowering(info.mem)
    if spec.is_arrive:
        use = next((u for u in info.uses if u.stmt is stmt), None)
        return text.arrive_lines(info, spec, p, use=use, ranks=multicast_ranks(info, stmt.args[0]))
    return text.await_lines(info, spec, p)
