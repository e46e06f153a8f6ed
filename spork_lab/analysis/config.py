"""Checks of a CudaDeviceFunction's launch configuration (blockDim, clusterDim, warp_config).

They run before the body is analysed, since the tilings of the body are built
from these numbers.
"""

from __future__ import annotations

import re

from ..core.blocks import CudaDeviceFunction
from ..errors import CollectiveError

MAX_BLOCK_DIM = 1024  # threads per block, every architecture since sm_20
MAX_CLUSTER_DIM = 8  # CTAs per cluster without cudaFuncAttributeNonPortableClusterSizeAllowed
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def check_device_function(ctx: CudaDeviceFunction, srcinfo) -> None:
    """Raise CollectiveError, at the `with` line, for a configuration CUDA cannot launch."""
    if ctx.warp_config is not None:
        _check_warp_config(ctx, srcinfo)
    n = ctx.threads_per_cta
    if n <= 0 or n % 32:
        raise CollectiveError(f"CudaDeviceFunction: blockDim={n} must be a positive multiple of 32", srcinfo)
    if n > MAX_BLOCK_DIM:
        raise CollectiveError(f"CudaDeviceFunction: blockDim={n} is more than the {MAX_BLOCK_DIM} threads a CUDA "
                              "block may have", srcinfo)
    if ctx.warp_config is not None and any(w.setmaxnreg is not None for w in ctx.warp_config):
        _check_register_budgets(ctx, srcinfo)  # after blockDim's checks: a budget of too many threads says less
    c = ctx.clusterDim
    if c < 1 or c & (c - 1):
        raise CollectiveError(f"CudaDeviceFunction: clusterDim={c} must be a power of 2 (1, 2, 4, ...)", srcinfo)
    if c > MAX_CLUSTER_DIM:
        raise CollectiveError(f"CudaDeviceFunction: clusterDim={c} is more than the {MAX_CLUSTER_DIM} CTAs of a "
                              "portable cluster, the most the launcher asks for", srcinfo)
    if ctx.blocks_per_sm < 1:
        raise CollectiveError(f"CudaDeviceFunction: blocks_per_sm={ctx.blocks_per_sm} must be at least 1", srcinfo)


def _check_warp_config(ctx: CudaDeviceFunction, srcinfo) -> None:
    seen = set()
    for w in ctx.warp_config:
        if not _C_IDENTIFIER.match(w.name):
            raise CollectiveError(
                f"warp_config: name {w.name!r} must be a C identifier (it names the generated code path)", srcinfo
            )
        if w.name in seen:
            raise CollectiveError(f"warp_config: name {w.name!r} is used twice; warp names must be unique", srcinfo)
        seen.add(w.name)
        if w.count < 1:
            raise CollectiveError(f"warp_config: CudaWarpConfig({w.name!r}, {w.count}) needs at least 1 warp", srcinfo)
        r = w.setmaxnreg
        if r is not None and not (24 <= r <= 256 and r % 8 == 0):
            raise CollectiveError(
                f"warp_config: setmaxnreg={r} for {w.name!r} must be a multiple of 8 in [24, 256]", srcinfo
            )


def _check_register_budgets(ctx: CudaDeviceFunction, srcinfo) -> None:
    """setmaxnreg moves registers between whole warpgroups of one pool: uniform per warpgroup, and within it."""
    n = ctx.threads_per_cta
    if n % 128:
        raise CollectiveError(
            f"warp_config: setmaxnreg applies to whole warpgroups, so blockDim must be a multiple of 128; "
            f"the warp_config gives {n // 32} warps ({n} threads)",
            srcinfo,
        )
    per_warp = [w for w in ctx.warp_config for _ in range(w.count)]
    for g in range(n // 128):
        group = per_warp[4 * g : 4 * g + 4]
        if len({w.setmaxnreg for w in group}) > 1:
            regs = ", ".join(f"{w.name}={w.setmaxnreg}" for w in dict.fromkeys(group))
            raise CollectiveError(
                f"warp_config: setmaxnreg must be the same for all warps of a warpgroup, but warpgroup {g} "
                f"(warps {4 * g}-{4 * g + 3}) mixes {regs}",
                srcinfo,
            )
    # At launch every thread holds the register cap of __launch_bounds__(blockDim, blocks_per_sm) (ptxas gives a
    # kernel with setmaxnreg all of it), allocated in steps of 8; setmaxnreg moves registers between the CTA's
    # warpgroups within that pool, and setmaxnreg.inc waits until the pool has them: the budgets must fit the pool.
    cap = ctx.register_cap
    pool = n * -(-cap // 8) * 8
    total = sum(128 * (per_warp[4 * g].setmaxnreg or cap) for g in range(n // 128))
    if total > pool:
        budget = ", ".join(f"{w.name}={w.setmaxnreg or cap}" for w in ctx.warp_config)
        raise CollectiveError(
            f"warp_config: the setmaxnreg budgets ({budget} registers per thread) need {total} registers, more than "
            f"the {pool} the CTA holds at launch ({n} threads, {cap} registers each under __launch_bounds__({n}, "
            f"{ctx.blocks_per_sm})): a setmaxnreg.inc would wait forever for registers no warp frees",
            srcinfo,
        )
