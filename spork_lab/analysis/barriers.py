"""The `barriers` pass: which sync statements use each barrier, checked against its mechanism's rules.

Runs after `scopes` (the collective of each use comes from there) and needs no
sizes. Its value maps each barrier allocation's Sym to a `BarrierInfo`;
`SyncError` at the user's line for:
- a Fence in CPU code (CPU code is in order; device functions end with a full barrier);
- a barrier allocated where its memory does not live (`BarrierMemory.lives_on_device`);
- a queue with arrives but no awaits, or awaits but no arrives;
- mixed sync-tls on one queue (every arrive must order the same first sync-tl,
  every await the same second sync-tl);
- reverse statements on a memory without reverse queues, arrive counts other than 1;
- whatever the memory's own rules reject (`BarrierMemory.check_queue`: sync-tls,
  N, collective units the mechanism cannot implement).

The info also carries what lowering and the sync engines need: ring depths
(pairing by lag), arrival counts, the commit-group flavour, and per queue its
`QueueRule`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Optional

from exo.core.LoopIR import LoopIR

from ..core.ir import walk_stmts
from ..core.sync_stmts import QueueFacts, SyncSpec, is_barrier_alloc, sync_spec_of
from ..errors import SyncError


@dataclass(frozen=True)
class BarrierUse:
    """One sync statement on a barrier, with the thread count of its collective (None on the CPU)."""

    stmt: LoopIR.Call
    spec: SyncSpec
    thread_count: Optional[int]


@dataclass(frozen=True)
class QueueRule:
    """How the sync engines run one queue of a barrier (its forward or its reverse statements)."""

    lag: Optional[int]  # pairing by lag: an await pairs with arrive (awaits - lag); None: by count (N-th most recent)
    depth: int  # ring slots of the arrives (pairing by lag), 0 if none
    max_wait_n: int  # pairing by count: the largest N of the awaits
    scope: int  # threads sharing one hardware queue (commit groups); 0: the queue is the barrier's
    same_threads: bool  # every arrive (await) must be made by the same threads


@dataclass(frozen=True)
class BarrierInfo:
    """A barrier allocation, its uses, and the parameters derived from them."""

    name: str
    sym: object
    mem: type
    dims: tuple
    alloc: LoopIR.Alloc
    uses: tuple = ()
    forward_lag: int = 0  # pairing by lag: ~N of the awaits (0 if none)
    reverse_lag: int = 0
    forward_depth: int = 1  # pairing by lag: ring depths
    reverse_depth: int = 0  # 0: no reverse queue
    forward_arrivals: int = 0  # threads that arrive per phase
    reverse_arrivals: int = 0
    max_wait_n: int = 0  # pairing by count: the largest N of the awaits
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

    def queue_rule(self, reverse: bool) -> QueueRule:
        by_lag = self.mem.pairs_by_lag
        return QueueRule(
            lag=(self.reverse_lag if reverse else self.forward_lag) if by_lag else None,
            depth=(self.reverse_depth if reverse else self.forward_depth) if by_lag else 0,
            max_wait_n=self.max_wait_n,
            scope=self.scope_threads if self.flavour else 0,
            same_threads=by_lag,
        )

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


def run(ctx) -> Mapping:
    """Barrier Sym -> BarrierInfo for every barrier allocated in the proc (checked)."""
    scopes = ctx.results["scopes"]
    allocs: dict = {}
    uses: dict = {}
    for s in walk_stmts(ctx.proc.body):
        if is_barrier_alloc(s):
            allocs[s.name] = _alloc(s, scopes.info(s).device_scope == "cuda")
            uses[s.name] = []
        spec = sync_spec_of(s)
        if spec is not None and spec.kind == "Fence" and scopes.info(s).device_scope != "cuda":
            raise SyncError(
                f"{spec.source()} is CPU code: CPU code runs in order and a device function ends with a full "
                "barrier, so a Fence belongs inside a CudaDeviceFunction (order CPU work and streams with a "
                "CudaEvent)",
                s.srcinfo,
            )
        if spec is not None and spec.barrier_mem is not None:
            sym = s.args[0].name
            if sym not in allocs:
                raise SyncError(f"{spec.kind} uses barrier {sym}, which is not allocated in this proc", s.srcinfo)
            tiling = scopes.info(s).tiling
            uses[sym].append(BarrierUse(s, spec, None if tiling is None else tiling.thread_count))
    return MappingProxyType({sym: _checked(info, tuple(uses[sym])) for sym, info in allocs.items()})


def _alloc(s: LoopIR.Alloc, on_device: bool) -> BarrierInfo:
    dims = tuple(d.val if isinstance(d, LoopIR.Const) else None for d in (s.type.shape() if s.type.is_tensor_or_window() else []))
    if any(d is None for d in dims):
        raise SyncError(f"barrier {s.name} needs constant dimensions", s.srcinfo)
    mem = s.mem
    if mem.lives_on_device and not on_device:
        raise SyncError(
            f"barrier {s.name} @ {mem.name()} lives on the GPU (shared memory or registers): allocate it inside a "
            "CudaDeviceFunction (inside the cuda_tasks loop)",
            s.srcinfo,
        )
    if on_device and not mem.lives_on_device:
        raise SyncError(f"barrier {s.name} @ {mem.name()} is a host object: allocate it in CPU code", s.srcinfo)
    return BarrierInfo(str(s.name), s.name, mem, dims, s)


def _err(use: BarrierUse, msg: str) -> SyncError:
    return SyncError(msg, use.stmt.srcinfo)


def _checked(info: BarrierInfo, uses: tuple) -> BarrierInfo:
    """The info with its uses and the parameters the memory's rules derive from them."""
    mem = info.mem
    for use in uses:
        if use.spec.is_reverse and not mem.allows_reverse:
            raise _err(use, f"{use.spec.kind} needs a CudaMbarrier; {info.name} is a {mem.name()}")
        if use.spec.is_arrive and use.spec.N != 1:
            raise _err(use, f"{use.spec.kind}(..., {use.spec.N}): the arrive count must be 1")
    facts = {}
    for reverse in (False, True):
        queue = [u for u in uses if u.spec.is_reverse == reverse]
        if queue:
            facts[reverse] = mem.check_queue(info.name, info.positions, *_paired(info, queue, reverse), reverse)
    forward, backward = facts.get(False, QueueFacts()), facts.get(True)
    shared = forward if False in facts else backward or QueueFacts()
    derived = dict(
        uses=uses,
        forward_lag=forward.lag,
        forward_arrivals=forward.arrivals,
        max_wait_n=shared.max_wait_n,
        flavour=shared.flavour,
        scope_threads=shared.scope_threads or 1,
    )
    if backward is not None:
        derived.update(reverse_lag=backward.lag, reverse_arrivals=backward.arrivals)
    if mem.pairs_by_lag and uses:
        # Ring depths: an arrive may reuse a slot only once the phase it overwrites was awaited.
        # Self-synchronizing threads get there with lag + 1 slots; a producer throttled by
        # reverse awaits of lag Lr with Lr slots; the reverse ring needs Lf + Lr.
        lf, lr = forward.lag, backward.lag if backward is not None else 0
        derived["forward_depth"] = max(lf + 1, lr if backward is not None else 0)
        derived["reverse_depth"] = max(lr + 1, lf + lr) if backward is not None else 0
    return BarrierInfo(info.name, info.sym, mem, info.dims, info.alloc, **derived)


def _paired(info: BarrierInfo, uses: list, reverse: bool) -> tuple:
    """(arrives, awaits) of one queue, checked: both present, one sync-tl per side."""
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
    return arrives, awaits
