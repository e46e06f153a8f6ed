"""Scope assignment: device scope, instr-tl and thread collective of every statement.

One walk over the proc in source order. Loops and `with` blocks change the
scope of their bodies: a CudaDeviceFunction opens CUDA code whose task body is
run by the top-level collective, `cuda_threads` loops and `CudaWarps` blocks
narrow the collective (through the collective algebra), `CudaAsync` changes the
instr-tl. Misplaced constructs are reported here, at the user's line, because
the scope of everything below them would be meaningless.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Optional

from exo.core.LoopIR import LoopIR

from ..core.blocks import CudaAsync, CudaDeviceFunction, CudaWarps
from ..core.coll import (
    CollTiling,
    cuda_cluster,
    cuda_cta_in_cluster,
    cuda_thread,
    cuda_warp,
    cuda_warpgroup,
)
from ..core.ir import constant_value
from ..core.loop_modes import CudaTasks, CudaThreads, WithBlock
from ..core.timelines import InstrTl, cpu_in_order_instr, cuda_in_order_instr
from ..errors import CollectiveError, DeviceScopeError, TimelineError
from ..lang.printer import head_text
from .config import check_device_function
from .result import DeviceFunctionInfo, IterInfo, Path, Scopes, StmtInfo


@dataclass(frozen=True)
class _Scope:
    """What the statements of one block share."""

    device_scope: str
    instr_tl: InstrTl
    tiling: Optional[CollTiling]
    iters: tuple
    device_function: Optional[CudaDeviceFunction]
    warp_name: Optional[str]

    def add_iter(self, s: LoopIR.For, kind: str) -> _Scope:
        it = IterInfo(s.iter.name(), s.iter, _bound(s.lo), _bound(s.hi), kind)
        return replace(self, iters=self.iters + (it,))


_CPU = _Scope("cpu", cpu_in_order_instr, None, (), None, None)


CLUSTER_UNIT_TEXT = "cuda_cluster (the whole cluster)"  # cuda_cluster has no exported name (core/coll.py)


@lru_cache(maxsize=4096)
def coll_unit_text(tiling: CollTiling) -> str:
    """The name users would write for the collectives of a tiling, e.g. `cuda_warp` or `16 * cuda_thread` (once
    per tiling: the statements of a scope share theirs)."""
    n = tiling.thread_count
    candidates = [cuda_thread, cuda_warp, cuda_cta_in_cluster, cuda_cluster, cuda_warpgroup]
    for base, size in ((cuda_warpgroup, 128), (cuda_warp, 32), (cuda_thread, 1)):
        if n > size and n % size == 0:
            candidates.append((n // size) * base)
    for unit in candidates:
        if tiling.matches(unit):
            return CLUSTER_UNIT_TEXT if unit == cuda_cluster else str(unit)  # else it prints as a CollUnit(...)
    return f"{n} threads (box {list(tiling.box)} of domain {list(tiling.domain)})"


def _bound(e: LoopIR.expr):
    return e.val if isinstance(e, LoopIR.Const) else e


def run(ctx) -> Scopes:
    """The `scopes` pass: every statement's StmtInfo and the device functions with their task nests."""
    walker = ScopeWalker()
    walker.block(ctx.proc.body, _CPU, ())
    return Scopes(tuple(walker.stmts), tuple(walker.device_functions))


class ScopeWalker:
    """Builds the StmtInfo of every statement; raises SporkErrors for misplaced constructs."""

    def __init__(self):
        self.stmts: list = []  # [(stmt, StmtInfo)] in source order
        self.device_functions: list = []  # [DeviceFunctionInfo]

    def record(self, s: LoopIR.stmt, scope: _Scope, path: Path) -> None:
        tiling = scope.tiling
        info = StmtInfo(
            path=path,
            line=getattr(s.srcinfo, "lineno", None),
            text=head_text(s),
            device_scope=scope.device_scope,
            instr_tl=scope.instr_tl,
            tiling=tiling,
            coll_unit_text=None if tiling is None else coll_unit_text(tiling),
            iters=scope.iters,
            device_function=scope.device_function,
            warp_name=scope.warp_name,
        )
        self.stmts.append((s, info))

    def block(self, stmts: list, scope: _Scope, prefix: Path) -> None:
        for i, s in enumerate(stmts):
            path = prefix + (i,)
            self.record(s, scope, path)
            if isinstance(s, LoopIR.If):
                self.block(s.body, scope, path)
                self.block(s.orelse, scope, path + ("else",))
            elif isinstance(s, LoopIR.For):
                self.loop(s, scope, path)

    def loop(self, s: LoopIR.For, scope: _Scope, path: Path) -> None:
        mode = s.loop_mode
        if isinstance(mode, WithBlock):
            if not (isinstance(s.lo, LoopIR.Const) and s.lo.val == 0 and isinstance(s.hi, LoopIR.Const) and s.hi.val == 1):
                raise DeviceScopeError(f"`{head_text(s)}` became a loop from {s.lo} to {s.hi} (an exo loop operation "
                                       f"was given this block); a block runs once", s.srcinfo)
            self.with_block(s, mode.ctx, scope, path)
        elif isinstance(mode, CudaTasks):
            if scope.device_scope == "cuda":
                where = "is not in the perfectly nested cuda_tasks loop nest, the only child of the device function"
            else:
                where = "is CPU code: cuda_tasks loops appear only as the nest directly inside a CudaDeviceFunction"
            raise DeviceScopeError(f"`{head_text(s)}` {where}", s.srcinfo)
        elif isinstance(mode, CudaThreads):
            self.threads_loop(s, mode, scope, path)
        elif isinstance(mode, LoopIR.Par):
            if scope.device_scope == "cuda":
                raise DeviceScopeError(
                    f"`{head_text(s)}`: par loops are OpenMP loops of CPU code; inside a CudaDeviceFunction "
                    f"use cuda_threads",
                    s.srcinfo,
                )
            self.block(s.body, scope.add_iter(s, "par"), path)
        else:
            self.block(s.body, scope.add_iter(s, "seq"), path)

    # -- with blocks ----------------------------------------------------------

    def with_block(self, s: LoopIR.For, ctx, scope: _Scope, path: Path) -> None:
        if isinstance(ctx, CudaDeviceFunction):
            self.device_function(s, ctx, scope, path)
            return
        if scope.device_scope != "cuda":
            raise DeviceScopeError(
                f"`{head_text(s)}` is CPU code: {type(ctx).__name__} blocks appear only inside a CudaDeviceFunction",
                s.srcinfo,
            )
        if isinstance(ctx, CudaAsync):
            if ctx.instr_tl == cpu_in_order_instr:
                raise TimelineError(f"`{head_text(s)}`: {ctx.instr_tl.name} is not a CUDA instr-tl", s.srcinfo)
            self.block(s.body, replace(scope, instr_tl=ctx.instr_tl), path)
        elif isinstance(ctx, CudaWarps):
            self.block(s.body, self.warps_scope(s, ctx, scope), path)

    def device_function(self, s: LoopIR.For, ctx: CudaDeviceFunction, scope: _Scope, path: Path) -> None:
        if scope.device_scope == "cuda":
            outer = scope.device_function
            raise DeviceScopeError(
                f"`{head_text(s)}` is inside another device function ({outer}); device functions do not nest",
                s.srcinfo,
            )
        check_device_function(ctx, s.srcinfo)
        body = s.body
        first_bad = next((c for c in body if not _is_tasks_loop(c)), body[1] if len(body) > 1 else None)
        if first_bad is not None:
            raise DeviceScopeError(
                f"the only child of `{head_text(s)}` (line {s.srcinfo.lineno}) must be a nest of cuda_tasks loops "
                f"with everything else inside the innermost one, but it holds `{head_text(first_bad)}`",
                first_bad.srcinfo,
            )
        top = CollTiling.top(ctx.threads_per_cta, ctx.clusterDim)
        inner = _Scope("cuda", cuda_in_order_instr, top, scope.iters, ctx, None)
        loop, path, tasks = body[0], path + (0,), []
        while True:
            self.record(loop, inner, path)
            tasks.append(loop)
            inner = inner.add_iter(loop, "cuda_tasks")
            if len(loop.body) == 1 and _is_tasks_loop(loop.body[0]):
                loop, path = loop.body[0], path + (0,)
                continue
            self.device_functions.append(DeviceFunctionInfo(s, ctx, tuple(tasks)))
            self.block(loop.body, inner, path)
            return

    def warps_scope(self, s: LoopIR.For, ctx: CudaWarps, scope: _Scope) -> _Scope:
        fn = scope.device_function
        tiling, name = scope.tiling, scope.warp_name
        what = f"`{head_text(s)}`"
        try:
            if ctx.name is not None:
                warps = self.named_warps(ctx, scope)
                if name != ctx.name:
                    tiling = tiling.select_cta_warps(*warps)
                name = ctx.name
                if ctx.lo is not None and ctx.hi > warps[1] - warps[0]:
                    raise CollectiveError(
                        f"selects warps [{ctx.lo}, {ctx.hi}) of the {warps[1] - warps[0]} warps named {ctx.name!r}"
                    )
            elif fn.warp_config is not None and name is None:
                raise CollectiveError(
                    f"in a device function with warp_config, numbered CudaWarps blocks go inside a named "
                    f"one, e.g. `with CudaWarps(name={fn.warp_config[0].name!r}):`"
                )
            if ctx.lo is not None:
                tiling = tiling.select_warps(ctx.lo, ctx.hi)
        except (CollectiveError, ValueError) as e:
            raise CollectiveError(f"{what}: {getattr(e, 'message', e)}", s.srcinfo) from None
        return replace(scope, tiling=tiling, warp_name=name)

    def named_warps(self, ctx: CudaWarps, scope: _Scope) -> tuple:
        """The [lo, hi) CTA warps of a name, checking the name exists and does not change an enclosing one."""
        fn = scope.device_function
        if fn.warp_config is None:
            raise CollectiveError(
                f"warp names come from CudaDeviceFunction(warp_config=[CudaWarpConfig(name, count), ...]), "
                f"and this device function has blockDim={fn.blockDim} instead"
            )
        warps = fn.warp_range(ctx.name)
        if warps is None:
            names = ", ".join(repr(w.name) for w in fn.warp_config)
            raise CollectiveError(f"no warps are named {ctx.name!r}; the warp_config names {names}")
        if scope.warp_name is not None and scope.warp_name != ctx.name:
            raise CollectiveError(
                f"it is inside CudaWarps(name={scope.warp_name!r}): nested blocks cannot change the warp name"
            )
        return warps

    # -- cuda_threads loops ---------------------------------------------------

    def threads_loop(self, s: LoopIR.For, mode: CudaThreads, scope: _Scope, path: Path) -> None:
        what = f"`{head_text(s)}`"
        if scope.device_scope != "cuda":
            raise DeviceScopeError(
                f"{what} is CPU code: cuda_threads loops appear only inside a CudaDeviceFunction", s.srcinfo
            )
        if not (isinstance(s.lo, LoopIR.Const) and s.lo.val == 0):
            raise CollectiveError(f"{what}: a cuda_threads loop starts at 0, not at {s.lo}", s.srcinfo)
        if not isinstance(s.hi, LoopIR.Const):
            value = constant_value(s.hi)  # of `128 - 0`, which exo's stage_mem or a cut divide_loop leave
            hint = f" (it is {value}: simplify(p) folds it)" if value is not None else ""
            raise CollectiveError(
                f"{what}: a cuda_threads loop needs a compile-time constant bound, not {s.hi}{hint}", s.srcinfo
            )
        try:
            tiling = scope.tiling.tile(s.iter.name(), s.hi.val, mode.unit)
        except CollectiveError as e:  # the whole CTA's is named by the message (its blockDim)
            here = "" if scope.tiling.thread_count == scope.tiling.blockDim else f" (the enclosing collective is {coll_unit_text(scope.tiling)})"
            raise CollectiveError(f"{e.message}{here}", s.srcinfo) from None
        except ValueError as e:
            raise CollectiveError(f"{what}: {e}", s.srcinfo) from None
        self.block(s.body, replace(scope.add_iter(s, "cuda_threads"), tiling=tiling), path)


def _is_tasks_loop(s: LoopIR.stmt) -> bool:
    return isinstance(s, LoopIR.For) and isinstance(s.loop_mode, CudaTasks)
