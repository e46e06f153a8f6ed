"""Which threads execute a statement: the one place the sync code asks the collective algebra.

`spork_lab.analysis` (per-statement tilings) may replace the walk done here;
everything else in spork_lab/sync only calls these functions.
"""

from __future__ import annotations

from exo.core.LoopIR import LoopIR

from ..coll.algebra import CollTiling
from ..errors import SyncError
from ..lang.blocks import CudaDeviceFunction, CudaWarps
from ..lang.loop_modes import CudaThreads

Threads = tuple  # sorted half-open intervals ((lo, hi), ...)


def top_tiling(dev: CudaDeviceFunction) -> CollTiling:
    """The tiling of a device function's task body: one cluster."""
    return CollTiling.top(dev.threads_per_cta, dev.clusterDim)


def iter_key(sym) -> str:
    """The name a cuda_threads iterator has in tilings (unique per Sym)."""
    return repr(sym)


def child_tiling(tiling: CollTiling, loop: LoopIR.For, dev: CudaDeviceFunction, count: int) -> CollTiling:
    """The tiling of the body of a cuda_threads loop or CudaWarps block (others keep the tiling)."""
    mode = loop.loop_mode
    if isinstance(mode, CudaThreads):
        return tiling.tile(iter_key(loop.iter), count, mode.unit)
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


def collective(tiling: CollTiling, iter_values: dict, base: int = 0) -> Threads:
    """The threads (natural index + `base`, the task's offset) executing for these iterator values."""
    return tuple((lo + base, hi + base) for lo, hi in tiling.threads(iter_values))
