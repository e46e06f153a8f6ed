"""Barrier usage analysis: which sync statements use each barrier, and the rules per mechanism.

`barrier_infos(proc_ir, analysis)` walks a proc once (no sizes needed) and
returns a `BarrierInfo` per barrier allocation, raising `SyncError` at the
user's line for:
- a queue with arrives but no awaits, or awaits but no arrives;
- mixed sync-tls on one queue (every arrive must order the same first sync-tl,
  every await the same second sync-tl);
- sync-tls or N the mechanism cannot implement;
- the wrong collective unit for the mechanism;
- reverse statements on anything but CudaMbarrier;
- an Await count of the wrong form for the barrier's kind (mbarriers ~lag,
  commit groups N >= 0, events N = 0).

`sl.analyze` runs it as its last step (`Analysis.barriers`), so every user of
the analysis sees these errors; `spork_lab.analysis.barrier_usage(p)` is the
same dict.

The info also carries what lowering needs: ring depths (from the await lags),
arrival counts (threads of the arriving collective) and the commit-group flavour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from exo.core.LoopIR import LoopIR

from ..core import timelines as tl
from ..core.blocks import CudaDeviceFunction
from ..core.loop_modes import WithBlock
from ..core.sync_stmts import SyncSpec, is_barrier_alloc, sync_spec_of
from ..errors import SyncError
from ..platforms.cuda import CudaCommitGroup, CudaEvent, CudaMbarrier

# Commit-group flavours: the first sync-tl of the arrive picks the hardware queue.
COMMIT_GROUP_FLAVOURS = {
    "Sm80_cp_async": ("cp.async", tl.Sm80_cp_async_instr, 1),
    "wgmma_async": ("wgmma", tl.wgmma_async_instr, 128),
    "tma_to_gmem_async": ("cp.async.bulk", tl.tma_to_gmem_async_instr, 1),
}
_GENERIC = frozenset({tl.cuda_in_order_instr, tl.Sm80_cp_async_instr})
_CUDA_TLS = frozenset(tl.INSTR_TLS.values()) - {tl.cpu_in_order_instr}
_HOST_TLS = frozenset({tl.cpu_in_order_instr, tl.cuda_in_order_instr})


@dataclass
class BarrierUse:
    """One sync statement on a barrier, with the thread count of its collective (None on the CPU)."""

    stmt: LoopIR.Call
    spec: SyncSpec
    thread_count: Optional[int]


@dataclass
class BarrierInfo:
    """A barrier allocation, its uses, and the lowering parameters derived from them."""

    name: str
    sym: object
    mem: type
    dims: tuple
    alloc: LoopIR.Alloc
    uses: list = field(default_factory=list)
    forward_lag: int = 0  # mbarriers: ~N of the awaits (0 if none)
    reverse_lag: int = 0
    forward_depth: int = 1  # mbarrier ring depths
    reverse_depth: int = 0  # 0: no reverse barrier array
    forward_arrivals: int = 0  # threads that arrive per phase
    reverse_arrivals: int = 0
    max_wait_n: int = 0  # commit groups: the largest N of wait_group N
    flavour: Optional[str] = None  # commit groups: "cp.async", "wgmma", "cp.async.bulk"
    scope_threads: int = 1  # commit groups: threads sharing one hardware queue

    @property
    def positions(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    def queue_uses(self, reverse: bool) -> list:
        return [u for u in self.uses if u.spec.is_reverse == reverse]

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "memory": self.mem.name(),
            "dims": list(self.dims),
            "forward_lag": self.forward_lag,
            "reverse_lag": self.reverse_lag,
            "forward_depth": self.forward_depth,
            "reverse_depth": self.reverse_depth,
            "forward_arrivals": self.forward_arrivals,
            "reverse_arrivals": self.reverse_arrivals,
            "flavour": self.flavour,
        }


def barrier_infos(proc_ir: LoopIR.proc, analysis) -> dict:
    """Barrier Sym -> BarrierInfo for every barrier allocated in `proc_ir` (checked); `analysis` gives each use's collective."""
    infos: dict = {}
    _walk(proc_ir.body, None, analysis, infos)
    for info in infos.values():
        _check(info)
    return infos


def _const(e) -> Optional[int]:
    return e.val if isinstance(e, LoopIR.Const) else None


def _walk(stmts, dev, analysis, infos) -> None:
    """Collect barrier allocations and their uses; the collective of each use comes from the analysis."""
    for s in stmts:
        if is_barrier_alloc(s):
            dims = tuple(_const(d) for d in (s.type.shape() if s.type.is_tensor_or_window() else []))
            if any(d is None for d in dims):
                raise SyncError(f"barrier {s.name} needs constant dimensions", s.srcinfo)
            infos[s.name] = BarrierInfo(str(s.name), s.name, s.mem, dims, s)
            if s.mem in (CudaMbarrier, CudaCommitGroup) and dev is None:
                raise SyncError(
                    f"barrier {s.name} @ {s.mem.name()} lives in shared memory or registers: allocate it inside a "
                    "CudaDeviceFunction (inside the cuda_tasks loop)",
                    s.srcinfo,
                )
            if s.mem is CudaEvent and dev is not None:
                raise SyncError(f"barrier {s.name} @ CudaEvent is a host object: allocate it in CPU code", s.srcinfo)
        spec = sync_spec_of(s)
        if spec is not None and spec.barrier_mem is not None:
            sym = s.args[0].name
            if sym not in infos:
                raise SyncError(f"{spec.kind} uses barrier {sym}, which is not allocated in this proc", s.srcinfo)
            tiling = analysis.stmt_info(s).tiling if dev is not None else None
            infos[sym].uses.append(BarrierUse(s, spec, None if tiling is None else tiling.thread_count))
        if isinstance(s, LoopIR.For):
            ctx = s.loop_mode.ctx if isinstance(s.loop_mode, WithBlock) else None
            _walk(s.body, ctx if isinstance(ctx, CudaDeviceFunction) else dev, analysis, infos)
        elif isinstance(s, LoopIR.If):
            _walk(s.body, dev, analysis, infos)
            _walk(s.orelse, dev, analysis, infos)


def _err(use: BarrierUse, msg: str) -> SyncError:
    return SyncError(msg, use.stmt.srcinfo)


def _check(info: BarrierInfo) -> None:
    if not info.uses:
        return
    for use in info.uses:
        if use.spec.is_reverse and not info.mem.allows_reverse:
            raise _err(use, f"{use.spec.kind} needs a CudaMbarrier; {info.name} is a {info.mem.name()}")
        if use.spec.is_arrive and use.spec.N != 1:
            raise _err(use, f"{use.spec.kind}(..., {use.spec.N}): the arrive count must be 1")
    for reverse in (False, True):
        uses = info.queue_uses(reverse)
        if not uses:
            continue
        arrives = [u for u in uses if u.spec.is_arrive]
        awaits = [u for u in uses if u.spec.is_await]
        prefix = "Reverse" if reverse else ""
        if not arrives:
            raise _err(awaits[0], f"{prefix}Await on {info.name} has no {prefix}Arrive to pair with")
        if not awaits:
            raise _err(arrives[0], f"{prefix}Arrive on {info.name} is never awaited: add a {prefix}Await")
        for group, attr in ((arrives, "first_tl"), (awaits, "second_tl")):
            first = getattr(group[0].spec, attr)
            for u in group[1:]:
                if getattr(u.spec, attr) != first:
                    raise _err(
                        u,
                        f"mixed sync-tls on barrier {info.name}: {getattr(u.spec, attr)} here, {first} at line "
                        f"{group[0].stmt.srcinfo.lineno}; one queue orders one sync-tl",
                    )
        if info.mem is CudaMbarrier:
            _check_mbarrier(info, arrives, awaits, reverse)
        elif info.mem is CudaCommitGroup:
            _check_commit_group(info, arrives, awaits)
        elif info.mem is CudaEvent:
            _check_event(info, arrives, awaits)
    if info.mem is CudaMbarrier:
        # Ring depths: an arrive may reuse a slot only once the phase it overwrites was awaited.
        # Self-synchronizing threads get there with lag + 1 slots; a producer throttled by
        # reverse awaits of lag Lr with Lr slots; the reverse ring needs Lf + Lr.
        has_reverse = bool(info.queue_uses(True))
        info.forward_depth = max(info.forward_lag + 1, info.reverse_lag if has_reverse else 0)
        info.reverse_depth = max(info.reverse_lag + 1, info.forward_lag + info.reverse_lag) if has_reverse else 0


def _check_mbarrier(info: BarrierInfo, arrives, awaits, reverse: bool) -> None:
    ns = {u.spec.N for u in awaits}
    for u in awaits:
        if u.spec.N >= 0:
            raise _err(u, f"{u.spec.kind} on CudaMbarrier {info.name} needs N = ~lag (< 0): mbarriers pair by lag")
    if len(ns) > 1:
        raise _err(awaits[-1], f"every {awaits[0].spec.kind} on {info.name} must use the same N (~lag)")
    counts = {u.thread_count for u in arrives}
    if len(counts) > 1:
        raise _err(arrives[-1], f"every arrive on mbarrier {info.name} must be by collectives of one size (got {sorted(counts)} threads)")
    for u in arrives:
        if not u.spec.first_tl.instr_tls <= _GENERIC or not u.spec.first_tl.instr_tls:
            raise _err(u, f"an mbarrier arrive orders in-order CUDA or cp.async accesses, not {u.spec.first_tl}")
    for u in awaits:
        if not u.spec.second_tl.instr_tls <= _CUDA_TLS:
            raise _err(u, f"an mbarrier await orders CUDA accesses, not {u.spec.second_tl}")
    lag = ~awaits[0].spec.N
    if reverse:
        info.reverse_lag, info.reverse_arrivals = lag, counts.pop()
    else:
        info.forward_lag, info.forward_arrivals = lag, counts.pop()


def _check_commit_group(info: BarrierInfo, arrives, awaits) -> None:
    first = arrives[0].spec.first_tl
    if first.name not in COMMIT_GROUP_FLAVOURS:
        raise _err(
            arrives[0],
            f"commit groups order {', '.join(COMMIT_GROUP_FLAVOURS)} accesses, not {first}; use a CudaMbarrier",
        )
    flavour, instr_tl, scope = COMMIT_GROUP_FLAVOURS[first.name]
    if info.positions != 1:
        raise _err(arrives[0], f"{info.name} @ CudaCommitGroup: each thread has one {flavour} commit queue; use a scalar barrier")
    for u in awaits:
        if u.spec.N < 0:
            raise _err(u, f"Await on commit group {info.name} needs N >= 0 (wait_group N), not ~{~u.spec.N}")
        if not u.spec.second_tl.instr_tls <= {tl.cuda_in_order_instr, instr_tl} | tl.ASYNC_PROXY_INSTR_TLS:
            raise _err(u, f"{flavour}.wait_group cannot order {u.spec.second_tl}")
    counts = {u.thread_count for u in arrives + awaits}
    for u in arrives + awaits:
        if u.thread_count is None or u.thread_count % scope:
            raise _err(u, f"{flavour} commit groups are per {'warpgroup' if scope > 1 else 'thread'}: run this "
                          f"statement with whole {'warpgroups' if scope > 1 else 'threads'}")
    if len(counts) > 1:
        raise _err(awaits[0], f"Arrive and Await on commit group {info.name} must be executed by the same collective unit "
                              f"(the hardware queue is per {'warpgroup' if scope > 1 else 'thread'})")
    info.flavour, info.scope_threads = flavour, scope
    info.max_wait_n = max(u.spec.N for u in awaits)


def _check_event(info: BarrierInfo, arrives, awaits) -> None:
    for u in arrives + awaits:
        if u.thread_count is not None:
            raise _err(u, f"CudaEvent {info.name} is recorded and awaited by CPU code, outside device functions")
    for u in arrives:
        if not u.spec.first_tl.instr_tls <= _HOST_TLS:
            raise _err(u, f"cudaEventRecord orders CPU and stream (in-order CUDA) work, not {u.spec.first_tl}")
    for u in awaits:
        if u.spec.N != 0:
            raise _err(u, f"Await on CudaEvent {info.name} needs N = 0: an event remembers only its latest record")
        if not u.spec.second_tl.instr_tls <= _HOST_TLS:
            raise _err(u, f"an event wait orders CPU or stream work, not {u.spec.second_tl}")
