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
- for barriers in shared memory (mbarriers), an allocation inside a loop over warps or threads; for
  barriers that pair by lag, a use made by several collectives on one barrier (`_check_one_collective`);
- whatever the memory's own rules reject (`BarrierMemory.check_queue`: sync-tls,
  N, collective units the mechanism cannot implement).

The info also carries what lowering and the sync engines need: ring depths
(pairing by lag), arrival counts, the commit-group flavour, and per queue its
`QueueRule`.

Arrivals (`BarrierUse.arrivals`): a collective of whole warps arrives once per
warp (the lowering elects lane 0 after `__syncwarp`), other collectives once
per thread, cp.async arrives once per thread (each thread's copies are
tracked). A multicast arrive `>> bar[:]` lands on every barrier of the slice,
each of which receives it from every CTA that runs it: its count is multiplied
by the slice's size.

Clusters: a barrier dimension indexed by the CTA's rank (the iterator of
`cuda_threads(0, clusterDim, unit=cuda_cta_in_cluster)`) or sliced (multicast)
is a CTA dimension: each CTA keeps its own barriers (`BarrierInfo.cta_dims`).

TMA loads complete on an mbarrier (`copy(...) >> bar[i]`, `BarrierInfo.trailing`):
their bytes are expected by the next Arrive on that barrier in the same block
(`CudaAsync` blocks are transparent; an Arrive on `bar[1]` leaves the loads on
`bar[0]` to a later Arrive: constant indices that differ), which lowers to
`mbarrier.arrive.expect_tx` (`BarrierUse.tx_bytes`). A multicast load
`>> bar[:]` is run by every CTA of the slice, so each barrier receives its bytes
that many times.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Mapping, Optional

from exo.core.LoopIR import LoopIR

from ..core import timelines as tl
from ..core.blocks import CudaAsync
from ..core.coll import cuda_cta_in_cluster
from ..core.instrs import instr_info
from ..core.ir import constant_value, expr_vars, interval_width, numeric_reads, walk_stmts
from ..core.loop_modes import CudaThreads, WithBlock
from ..core.sync_stmts import (
    ARRIVE_COUNT,
    QueueFacts,
    SyncSpec,
    barrier_window_indices,
    is_barrier_alloc,
    is_point_interval,
    sync_spec_of,
    trailing_barrier,
    trailing_of,
)
from ..core.tensor_maps import tensor_map_spec
from ..errors import SyncError


@dataclass(frozen=True)
class BarrierUse:
    """One sync statement on a barrier, with the thread count of its collective (None on the CPU)."""

    stmt: LoopIR.Call
    spec: Optional[SyncSpec]  # None: an instr completing on the barrier (`copy(...) >> bar[...]`)
    thread_count: Optional[int]
    tx_bytes: int = 0  # Arrive: the TMA bytes its phase expects; trailing instr: the bytes it delivers per barrier
    whole_warps: bool = False  # its collective is made of whole warps (CollTiling.made_of_whole_warps)

    @property
    def arrivals(self) -> int:
        """mbarrier arrivals this statement makes on each barrier it reaches (see the module docstring)."""
        n = self.thread_count or 1
        per = n // 32 if self.whole_warps and tl.Sm80_cp_async_instr not in self.spec.first_tl.instr_tls else n
        fan_in = 1
        for d in self.spec.window_shape:
            fan_in *= d
        return per * fan_in


@dataclass(frozen=True)
class QueueRule:
    """How the sync engines run one queue of a barrier (its forward or its reverse statements)."""

    lag: Optional[int]  # pairing by lag: an await pairs with arrive (awaits - lag); None: by count (N-th most recent)
    depth: int  # ring slots of the arrives (pairing by lag), 0 if none
    max_wait_n: int  # pairing by count: the largest N of the awaits
    scope: int  # threads sharing one hardware queue (commit groups); 0: the queue is the barrier's
    same_threads: bool  # every arrive (await) must be made by the same threads


FULL_PROXY_FENCE = "fence.proxy.async;"  # a proxy fence over every state space


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
    trailing: tuple = ()  # BarrierUse of instrs completing on the barrier (TMA loads), spec None
    generic_async: tuple = (True, True)  # per queue (forward, reverse): do its arriving threads ever access memory
    #   the async proxy accesses (shared, or global under a tensor map) through the generic proxy (in-order or
    #   cp.async)? If not, its awaits need no proxy fence
    proxy_fence: str = FULL_PROXY_FENCE  # the proxy fence its awaits take where they need one (ProxyFacts.fence)
    cta_dims: tuple = ()  # dimensions indexed by the CTA's rank (or sliced): each CTA keeps its own barriers
    cluster_dim: int = 1  # of the device function it lives in

    @property
    def positions(self) -> int:
        """Barriers each CTA keeps (the dimensions that are not CTA dimensions)."""
        n = 1
        for k, d in enumerate(self.dims):
            if k not in self.cta_dims:
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

    def __repr__(self) -> str:
        """What the analysis decided, as docs/language.md names it (the allocation and uses are IR)."""
        fields = ", ".join(f"{k}={v!r}" for k, v in self.to_json().items() if k != "name")
        return f"BarrierInfo({self.name}: {fields})"

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
    walk = _Walk(scopes, {s.iter for s in walk_stmts(ctx.proc.body)
                          if isinstance(s, LoopIR.For) and isinstance(s.loop_mode, CudaThreads)
                          and s.loop_mode.unit == cuda_cta_in_cluster})
    walk.block(ctx.proc.body)
    proxy = ctx.results["proxy"]
    return MappingProxyType({
        sym: _checked(replace(info, trailing=tuple(walk.trailing[sym]), cta_dims=walk.cta_dims.get(sym) or (),
                              generic_async=tuple(_arrivers(walk.uses[sym], r, scopes) & proxy.generic_threads != set()
                                                  for r in (False, True)),
                              proxy_fence=proxy.fence(info.cluster_dim)),
                      tuple(walk.uses[sym]))
        for sym, info in walk.allocs.items()
    })


@dataclass(frozen=True)
class ProxyFacts:
    """Where a proc's generic-proxy accesses meet the async proxy's memory (seed 003): which arrives a proxy fence
    must follow, and what state spaces it must cover."""

    generic_threads: frozenset  # threads that access, through the generic proxy, memory the async proxy accesses
    tensor_map_gmem: bool  # do any of those accesses reach global memory under a tensor map?

    def fence(self, cluster_dim: int) -> str:
        """The proxy fence of a device function: over shared memory only (the CTA's, or the cluster's) unless generic
        accesses reach global memory that TMA also accesses. A fence over every state space waits like a GPU-scope
        membar (MEMBAR.ALL.GPU in SASS): in a producer's K loop it cost a GEMM 15% (sm90_gemm_notes.md, run 25)."""
        if self.tensor_map_gmem:
            return FULL_PROXY_FENCE
        return "fence.proxy.async.shared::cluster;" if cluster_dim > 1 else "fence.proxy.async.shared::cta;"


def proxy_run(ctx) -> ProxyFacts:
    """The `proxy` pass: ProxyFacts of the proc."""
    return _generic_async(ctx.proc, ctx.results["scopes"])


def _all_threads(tiling) -> set:
    """Every natural thread index a tiling's collectives hold (over all its iterator values)."""
    names = [n for n, _ in tiling.iters]
    out = set()
    for values in itertools.product(*(range(c) for _, c in tiling.iters)):
        for lo, hi in tiling.threads(dict(zip(names, values))):
            out.update(range(lo, hi))
    return out


def _arrivers(uses: list, reverse: bool, scopes) -> set:
    """Threads that arrive on one queue of a barrier."""
    out = set()
    for u in uses:
        if u.spec.is_arrive and u.spec.is_reverse == reverse:
            tiling = scopes.info(u.stmt).tiling
            out |= _all_threads(tiling) if tiling is not None else {-1}
    return out


def _generic_async(proc, scopes) -> ProxyFacts:
    """Threads that access, through the generic proxy (in-order or cp.async), memory the async proxy also
    accesses: shared memory, and global memory that TMA reads or writes through a tensor map, anywhere in `proc`;
    and whether any of them reaches such global memory.

    What an arrive on an mbarrier can order before an await whose side continues in the async proxy
    (TMA, wgmma): only if some arriving thread is among them does the await need fence.proxy.async.
    Window aliases of such memory count as it (a GEMM's consumers store C, which no tensor map reads: the
    producer's awaits need no proxy fence).
    """
    stmts = list(walk_stmts(proc.body))
    smem = {s.name for s in stmts if isinstance(s, LoopIR.Alloc) and getattr(s.mem, "native_unit", None) == cuda_cta_in_cluster}
    gmem = {s.rhs.name for s in stmts if isinstance(s, LoopIR.WindowStmt) and tensor_map_spec(s.name) is not None}
    out, reaches_gmem = set(), False
    for s in stmts:
        for mem in (smem, gmem):
            if isinstance(s, LoopIR.WindowStmt) and s.rhs.name in mem:
                mem.add(s.name)
        info = scopes.info(s)
        if info.tiling is None or info.instr_tl not in _GENERIC_TLS:
            continue
        if isinstance(s, LoopIR.Call):
            gpu = instr_info(s)
            if sync_spec_of(s) is not None or (gpu is not None and gpu.instr_tl not in _GENERIC_TLS):
                continue
        touched = _buffers(s)
        if (smem | gmem) & touched:
            out |= _all_threads(info.tiling)
            reaches_gmem = reaches_gmem or bool(gmem & touched)
    return ProxyFacts(frozenset(out), reaches_gmem)


_GENERIC_TLS = (tl.cuda_in_order_instr, tl.Sm80_cp_async_instr)


def _buffers(s) -> set:
    """Buffers a statement reads or writes (its own accesses and its arguments)."""
    if isinstance(s, (LoopIR.Assign, LoopIR.Reduce)):
        reads: list = []
        numeric_reads(s.rhs, reads)
        return {s.name} | {r.name for r in reads}
    if isinstance(s, LoopIR.Call):
        return {a.name for a in s.args if isinstance(a, (LoopIR.Read, LoopIR.WindowExpr))}
    return set()


def _other_barrier(a, b) -> bool:
    """Two uses of one barrier array that name different barriers for certain: constant indices that differ
    (`bar[0]` and `bar[1]`). Any other pair may be the same barrier."""
    def index(w) -> Optional[int]:  # a barrier index is a point, or an interval of width 1 (`bar[0:0 + 1]`)
        if isinstance(w, LoopIR.Point):
            return constant_value(w.pt)
        return constant_value(w.lo) if is_point_interval(w) else None

    for wa, wb in zip(getattr(a, "idx", []), getattr(b, "idx", [])):
        va, vb = index(wa), index(wb)
        if va is not None and vb is not None and va != vb:
            return True
    return False


class _Walk:
    """One walk in program order: allocations, uses, trailing TMA loads and the bytes each Arrive expects."""

    def __init__(self, scopes, cta_iters: set):
        self.scopes, self.cta_iters = scopes, cta_iters
        self.allocs: dict = {}
        self.uses: dict = {}
        self.trailing: dict = {}
        self.cta_dims: dict = {}
        self.cta_dims_line: dict = {}  # barrier -> the line of the use that set its cta_dims
        self.first_threads: dict = {}  # (barrier, reverse, arrive, index text) -> (threads, line) of the first use

    def block(self, stmts: list, pending: Optional[dict] = None) -> None:
        """`pending`: barrier Sym -> trailing loads of the enclosing block not yet closed by an Arrive."""
        own = pending is None
        pending = {} if own else pending
        for s in stmts:
            self.stmt(s, pending)
        if own:
            for uses in pending.values():
                bar = uses[0].stmt.args[-1].name
                raise SyncError(
                    f"{trailing_of(uses[0].stmt)[0]} >> {bar}: no Arrive on {bar} follows it in this block, so no "
                    f"phase expects its bytes; close the phase with `Arrive(tma_to_smem_async, 1) >> {bar}[...]` "
                    "after the loads",
                    uses[0].stmt.srcinfo,
                )

    def stmt(self, s, pending: dict) -> None:
        info = self.scopes.info(s)
        if is_barrier_alloc(s):
            fn = info.device_function
            self.allocs[s.name] = replace(_alloc(s, info.device_scope == "cuda"), cluster_dim=fn.clusterDim if fn else 1)
            self.uses[s.name], self.trailing[s.name] = [], []
            self._check_alloc_scope(s, info)
        spec = sync_spec_of(s)
        if spec is not None and spec.kind == "Fence" and info.device_scope != "cuda":
            raise SyncError(
                f"{spec.source()} is CPU code: CPU code runs in order and a device function ends with a full "
                "barrier, so a Fence belongs inside a CudaDeviceFunction (order CPU work and streams with a "
                "CudaEvent)",
                s.srcinfo,
            )
        if spec is not None and info.device_scope == "cuda" and tl.cpu_in_order in (spec.first_tl, spec.second_tl):
            raise SyncError(f"{spec.source()} is inside a CudaDeviceFunction: cpu_in_order names CPU work, which "
                            f"device code does not do; write cuda_in_order", s.srcinfo)
        if spec is not None and spec.barrier_mem is not None:
            sym = s.args[0].name
            if sym not in self.allocs:
                raise SyncError(f"{spec.kind} uses barrier {sym}, which is not allocated in this proc", s.srcinfo)
            tx = 0
            if spec.kind == "Arrive":  # its phase expects the loads before it on this barrier (all but other bar[c]s)
                mine, others = [], []
                for u in pending.pop(sym, []):
                    (others if _other_barrier(trailing_barrier(u.stmt), s.args[0]) else mine).append(u)
                tx = sum(u.tx_bytes for u in mine)
                if others:
                    pending[sym] = others
            if (spec.kind.endswith("Arrive") and self.allocs[sym].cluster_dim == 1
                    and not all(is_point_interval(w) for w in s.args[0].idx)):
                raise SyncError(f"`{spec.source(str(s.args[0]))}` arrives on a slice of barriers, which multicasts to "
                                "the CTAs of a cluster, but this device function has none (clusterDim=1): arrive on "
                                f"one barrier, `{sym}[...]` with an index", s.srcinfo)
            tiling = info.tiling
            self.uses[sym].append(BarrierUse(s, spec, None if tiling is None else tiling.thread_count, tx,
                                             tiling is not None and tiling.made_of_whole_warps()))
            self._note_cta_dims(sym, s.args[0], s.srcinfo)
            self._check_one_collective(s, spec, info)
            self._check_within_one_cta(s, spec, info)
        trailing = trailing_of(s)
        if trailing is not None:
            bar = s.args[trailing[1]]
            if bar.name not in self.allocs:
                raise SyncError(f"{trailing[0]} completes on barrier {bar.name}, which is not allocated here", s.srcinfo)
            fan_in = 1
            for w in getattr(bar, "idx", []):
                if not is_point_interval(w):
                    width = interval_width(w)
                    if width is None:
                        raise SyncError(f"{trailing[0]} completes on {bar.name}[{w.lo}:{w.hi}], whose width is not "
                                        "a constant", s.srcinfo)
                    fan_in *= width
            use = BarrierUse(s, None, info.tiling.thread_count, instr_info(s).tx_bytes * fan_in)
            self.trailing[bar.name].append(use)
            pending.setdefault(bar.name, []).append(use)
            self._note_cta_dims(bar.name, bar, s.srcinfo)
        if isinstance(s, LoopIR.For):
            transparent = isinstance(s.loop_mode, WithBlock) and isinstance(s.loop_mode.ctx, CudaAsync)
            self.block(s.body, pending if transparent else None)
        elif isinstance(s, LoopIR.If):
            self.block(s.body)
            self.block(s.orelse)

    def _thread_loops(self, info) -> list:
        """The cuda_threads loops around a statement that split a CTA (not the loops over a cluster's CTAs)."""
        return [it for it in info.iters if it.kind == "cuda_threads" and it.sym not in self.cta_iters]

    def _check_alloc_scope(self, s: LoopIR.Alloc, info) -> None:
        """A barrier in shared memory is one per CTA: allocated inside a loop over warps or threads, the
        program would give each its own barrier while the CTA has one."""
        loops = self._thread_loops(info)
        if s.mem.in_shared_memory and loops and info.tiling.thread_count < info.tiling.blockDim:
            raise SyncError(
                f"barrier {s.name} @ {s.mem.name()} lives in shared memory, one per CTA, but it is allocated inside "
                f"`for {loops[-1].name} in cuda_threads(...)` ({info.coll_unit_text}); allocate it where the whole "
                "CTA runs, before the cuda_threads loops",
                s.srcinfo,
            )

    def _check_one_collective(self, s: LoopIR.Call, spec: SyncSpec, info) -> None:
        """Barriers that pair by lag count phases per thread, so one collective makes every arrive (await)
        of a queue on a barrier: two statements on the same barrier expression by different threads are an
        error, and so is a use inside a cuda_threads loop whose iterator does not index the barrier (every
        iteration's collective would use that barrier: an mbarrier phase would complete at the first
        collective's arrive, its arrival count being one collective's). The run (sync_check) finds the
        cases these miss, e.g. `bar[w / 2]`."""
        alloc = self.allocs[s.args[0].name]
        if not alloc.mem.pairs_by_lag:
            return
        indices = barrier_window_indices(s.args[0])
        indexed = set().union(*map(expr_vars, indices))
        around_alloc = {it.sym for it in self.scopes.info(alloc.alloc).iters}
        if info.tiling is not None and not indexed & {it.sym for it in info.iters if it.kind == "cuda_threads"}:
            # the same barriers whichever collective runs it: every such use of this side of the queue by the same threads
            key = (alloc.sym, spec.is_reverse, spec.is_arrive, tuple(str(e) for e in indices))
            threads = frozenset(_all_threads(info.tiling))
            first, line = self.first_threads.setdefault(key, (threads, s.srcinfo.lineno))
            if threads != first:
                raise SyncError(
                    f"every {spec.kind} on mbarrier {alloc.name} must be made by the same threads (each thread counts "
                    f"the phases it sees): `{spec.source(alloc.name + ('[...]' if alloc.dims else ''))}` is made by "
                    f"threads {_ranges(threads)}, the {spec.kind} at line {line} by threads {_ranges(first)}",
                    s.srcinfo,
                )
        for it in self._thread_loops(info):
            if it.sym in around_alloc or it.sym in indexed or it.hi - it.lo == 1:
                continue
            loop = f"for {it.name} in cuda_threads({it.lo}, {it.hi}, ...)"
            if spec.is_arrive:
                what = (f"arrives on the one barrier {alloc.name}: its phase would complete at the first one's "
                        "arrival. Move the arrive after the loop (the whole collective arrives)")
            else:
                what = (f"awaits the one barrier {alloc.name}, whose awaits are counted per thread as one "
                        "collective's. Move the await before the loop (the whole collective awaits)")
            raise SyncError(
                f"`{spec.source(alloc.name + ('[...]' if alloc.dims else ''))}` is inside `{loop}`, so each of its "
                f"{it.hi - it.lo} collectives ({info.coll_unit_text}) {what}, or index the barrier by `{it.name}` "
                "(a barrier per collective)",
                s.srcinfo,
            )

    def _check_within_one_cta(self, s: LoopIR.Call, spec: SyncSpec, info) -> None:
        """A barrier in shared memory is one per CTA: a collective whose threads lie in several CTAs of a cluster
        would have each CTA's threads arrive on (or wait for) their own CTA's barrier, which expects the arrivals of
        the whole collective (the phase never completes) and orders nothing between the CTAs."""
        alloc = self.allocs[s.args[0].name]
        tiling = info.tiling
        if not alloc.mem.in_shared_memory or tiling is None or tiling.clusterDim == 1:
            return
        names = [n for n, _ in tiling.iters]
        for values in itertools.product(*(range(c) for _, c in tiling.iters)):
            runs = tiling.threads(dict(zip(names, values)))
            first, last = runs[0][0] // tiling.blockDim, (runs[-1][1] - 1) // tiling.blockDim
            if first == last:
                continue
            threads = frozenset(t for lo, hi in runs for t in range(lo, hi))
            raise SyncError(
                f"`{spec.source(alloc.name + ('[...]' if alloc.dims else ''))}` is made by a collective of threads "
                f"{_ranges(threads)}, which lie in CTAs {first} to {last} of the cluster (blockDim={tiling.blockDim}); "
                f"mbarrier {alloc.name} lives in shared memory, one per CTA, so each CTA's threads would use their own "
                "CTA's barrier, which counts the arrivals of the whole collective (the phase never completes) and "
                "orders nothing between the CTAs. Make it per CTA: inside `for cta in cuda_threads(0, clusterDim, "
                f"unit=cuda_cta_in_cluster)`, on a barrier of each CTA (`{alloc.name}[cta]`; `{alloc.name}[:]` arrives "
                "on every CTA's)",
                s.srcinfo,
            )

    def _note_cta_dims(self, sym, arg, srcinfo) -> None:
        """Record which dimensions a use indexes by CTA rank (or slices, multicast); every use must agree."""
        if not isinstance(arg, LoopIR.WindowExpr):
            return
        dims = tuple(
            k for k, w in enumerate(arg.idx)
            if not is_point_interval(w) or (isinstance(w.lo, LoopIR.Read) and w.lo.name in self.cta_iters)
        )
        seen = self.cta_dims.setdefault(sym, dims)
        line = self.cta_dims_line.setdefault(sym, srcinfo.lineno)
        if seen != dims:
            ones = [k for k in sorted(set(dims) ^ set(seen)) if self.allocs[sym].dims[k] == 1]
            hint = (f"; dimension {ones[0]} has extent 1, so a slice `:` of it is the one point 0, not a multicast: "
                    "index it by the CTA's iterator in every use") if ones else ""
            raise SyncError(
                f"barrier {sym}: a dimension indexed by the CTA's rank (the iterator of cuda_threads(0, clusterDim, "
                "unit=cuda_cta_in_cluster)) or sliced for multicast must be indexed so by every use; this use "
                f"indexes so dimensions {list(dims)}, the use at line {line} dimensions {list(seen)}{hint}",
                srcinfo,
            )


def _ranges(threads: frozenset) -> str:
    """Thread indices as half-open ranges: `[0, 32), [64, 96)`."""
    out, run = [], None
    for t in sorted(threads):
        if run is not None and t == run[1]:
            run[1] += 1
        else:
            run = [t, t + 1]
            out.append(run)
    return ", ".join(f"[{lo}, {hi})" for lo, hi in out)


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
    if info.trailing and not mem.takes_trailing_loads:
        raise _err(info.trailing[0], f"TMA loads complete on a barrier @ CudaMbarrier, not @ {mem.name()}")
    for use in uses:
        if use.spec.is_reverse and not mem.allows_reverse:
            raise _err(use, f"{use.spec.kind} needs a CudaMbarrier; {info.name} is a {mem.name()}")
        if use.spec.is_arrive and use.spec.N != ARRIVE_COUNT:
            raise _err(use, f"{use.spec.kind}(..., {use.spec.N}): the arrive count must be {ARRIVE_COUNT}")
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
        # Self-synchronizing threads get there with lag + 1 slots. A producer throttled by reverse
        # awaits of lag Lr knows, before its arrive i, that the consumers finished turn i - Lr, whose
        # await took arrive i - Lr - Lf: Lf + Lr slots hold the arrives not yet awaited. The reverse
        # ring needs Lf + Lr by the same count from the consumers' side.
        lf, lr = forward.lag, backward.lag if backward is not None else 0
        derived["forward_depth"] = max(lf + 1, lf + lr)  # lr = 0 without a reverse queue
        derived["reverse_depth"] = max(lr + 1, lf + lr) if backward is not None else 0
    return replace(info, **derived)


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
