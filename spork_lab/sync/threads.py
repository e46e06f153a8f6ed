"""Which threads execute a statement: the sync code asks `spork_lab.analysis`, the one home of collective tilings.

The analysis gives every statement of a device function its `CollTiling`; the
checker only evaluates it for concrete cuda_threads iterator values.
"""

from __future__ import annotations

from exo.core.LoopIR import LoopIR

from ..analysis import analyze
from ..coll.algebra import CollTiling
from ..errors import SyncError
from ..lang.blocks import CudaDeviceFunction, CudaWarps
from ..lang.loop_modes import CudaThreads

Threads = tuple  # sorted half-open intervals ((lo, hi), ...)


class ThreadMap:
    """The collective tilings of one proc's statements, with a cache of their concrete thread sets."""

    def __init__(self, proc_ir):
        self.analysis = analyze(proc_ir)
        self._cache: dict = {}

    def body_tiling(self, stmts) -> CollTiling:
        """The tiling of a block's statements (a cuda_threads/CudaWarps/device-function body)."""
        return self.analysis.stmt_info(stmts[0]).tiling

    def collective(self, tiling: CollTiling, names: tuple, values: tuple, base: int) -> Threads:
        """The threads (natural index + `base`, the task's offset) executing for these iterator values."""
        key = (id(tiling), values, base)
        t = self._cache.get(key)
        if t is None:
            runs = tiling.threads(dict(zip(names, values)))
            t = self._cache[key] = tuple((lo + base, hi + base) for lo, hi in runs)
        return t


# ---- the walk barriers.py still does (it is not the checker's to change; see ThreadMap for the checker) ----


def top_tiling(dev: CudaDeviceFunction) -> CollTiling:
    """The tiling of a device function's task body: one cluster."""
    return CollTiling.top(dev.threads_per_cta, dev.clusterDim)


def child_tiling(tiling: CollTiling, loop: LoopIR.For, dev: CudaDeviceFunction, count: int) -> CollTiling:
    """The tiling of the body of a cuda_threads loop or CudaWarps block (others keep the tiling)."""
    mode = loop.loop_mode
    if isinstance(mode, CudaThreads):
        return tiling.tile(loop.iter.name(), count, mode.unit)
    ctx = getattr(mode, "ctx", None)
    if isinstance(ctx, CudaWarps):
        if ctx.name is not None:
            rng = dev.warp_range(ctx.name)
            if rng is None:
                raise SyncError(f"CudaWarps(name={ctx.name!r}): no such name in warp_config", loop.srcinfo)
            tiling = tiling.select_cta_warps(*rng)
        if ctx.lo is not None:
            tiling = tiling.select_warps(ctx.lo, ctx.hi)
    return tiling
