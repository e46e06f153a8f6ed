"""The abstract machine of seed 000 ("Abstract Machine"), run at concrete sizes: `sync_check`.

The scheduled proc is interpreted sequentially. Every element of every buffer
touched by CUDA code keeps its write record and its read records since that
write; a record holds V_A and V_S, sets of (instr-tl, usage-tl, thread)
signatures kept as interval lists (`sigsets`). Reads need their signature in
V_S of the write record (RAW); writes in V_S of the write record (WAW) and of
every read record (WAR). Fences, and awaits through their paired arrives, grow
V_A and V_S (docs: SYNC_MODEL.md, "Synchronization").

Speed: records are hash-consed and shared by every element with equal
visibility; a sync updates each distinct record once, in place, and records
that become equal are merged (later lookups follow `fwd`). Only the records of
the running task are candidates for its syncs. Hazards are found in one run;
a second run logs the history of the few failing elements, to name the
statement, threads and iterator values of the conflicting access.

This interpreter is the reference. `sync_check` first runs the same machine
compiled to C (`_emit.py`, `_machine.c`, `engine.py`): a hazard-free program
never reaches the interpreter; a failing one is re-run here once, watching the
elements the compiled run names.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional

from exo.core.LoopIR import LoopIR

from ..analysis import analyze
from ..analysis.result import StmtRef
from ..core import timelines as tl
from ..core.blocks import CudaAsync, CudaDeviceFunction, CudaWarps
from ..core.instrs import instr_info
from ..core.ir import numeric_reads
from ..core.loop_modes import CudaThreads, WithBlock
from ..core.sync_stmts import barrier_window_indices, is_barrier_alloc, sync_spec_of
from ..errors import SyncError, user_facing
from . import sigsets as ss
from .access import distributed_shared, is_shared_memory, unordered_access
from .threads import ThreadMap

HAZARD_KINDS = ("RAW", "WAR", "WAW", "FREE", "DEADLOCK", "COUNT")


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


@dataclass
class Access:
    """One side of a hazard: the statement, its collective's threads and the loop iterator values."""

    stmt: Optional[StmtRef]
    threads: tuple = ()
    iters: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "stmt": self.stmt.to_json() if self.stmt else None,
            "threads": [list(t) for t in self.threads],
            "iters": dict(self.iters),
        }


@dataclass
class Hazard:
    """A violation of the abstract machine's correct-usage rules."""

    kind: str  # one of HAZARD_KINDS
    buffer: Optional[str]
    index: Optional[tuple]
    access: Access  # the access (or sync statement) where the hazard is detected
    other: Optional[Access]  # the conflicting earlier access, if any
    message: str

    def __str__(self) -> str:
        where = f"{self.buffer}[{', '.join(map(str, self.index))}]" if self.buffer is not None else ""
        s = f"{self.kind} {where}: {self.message}\n  at {self.access.stmt} threads {ss.thread_text(self.access.threads)} {self.access.iters}"
        if self.other is not None:
            s += f"\n  after {self.other.stmt} threads {ss.thread_text(self.other.threads)} {self.other.iters}"
        return s

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "buffer": self.buffer,
            "index": list(self.index) if self.index is not None else None,
            "access": self.access.to_json(),
            "other": self.other.to_json() if self.other else None,
            "message": self.message,
        }


@dataclass
class BarrierEvent:
    """An arrive or await on one queue barrier, in execution order."""

    barrier: str
    position: tuple
    queue: str  # "forward" or "reverse"
    kind: str  # the sync statement kind
    stmt: StmtRef
    threads: tuple
    iters: dict
    index: int  # arrives: this arrive's number (1-based); awaits: the arrive it pairs with (<= 0: none yet)
    slot: Optional[int]  # mbarriers: ring slot of that arrive
    parity: Optional[int]  # mbarriers: phase parity of that arrive

    def to_json(self) -> dict:
        return {
            "barrier": self.barrier,
            "position": list(self.position),
            "queue": self.queue,
            "kind": self.kind,
            "stmt": self.stmt.to_json(),
            "threads": [list(t) for t in self.threads],
            "iters": dict(self.iters),
            "index": self.index,
            "slot": self.slot,
            "parity": self.parity,
        }


@dataclass
class SyncReport:
    """Result of `sync_check`: hazards (empty when the program is correctly synchronized) and barrier events."""

    proc: str
    sizes: dict
    hazards: list
    barrier_timeline: list
    barriers: dict  # barrier name -> BarrierInfo.to_json()
    truncated: bool = False  # hazards past `max_hazards` were dropped
    timeline_truncated: bool = False  # barrier events past `max_events` were dropped

    @property
    def ok(self) -> bool:
        return not self.hazards

    def __str__(self) -> str:
        if self.ok:
            return f"sync_check({self.proc}, {self.sizes}): ok"
        return f"sync_check({self.proc}, {self.sizes}): {len(self.hazards)} hazard(s)\n" + "\n".join(
            str(h) for h in self.hazards
        )

    def to_json(self) -> dict:
        return {
            "proc": self.proc,
            "sizes": dict(self.sizes),
            "ok": self.ok,
            "hazards": [h.to_json() for h in self.hazards],
            "barrier_timeline": [e.to_json() for e in self.barrier_timeline],
            "barriers": self.barriers,
            "truncated": self.truncated,
            "timeline_truncated": self.timeline_truncated,
        }


@user_facing
def sync_check(p, max_hazards: int = 50, max_events: int = 10000, engine: str = "compiled", **sizes) -> SyncReport:
    """Run the abstract machine on proc `p` with the given size arguments.

    engine="compiled" (default) runs the proc translated to C (`engine.py`); a
    program it finds hazards in, or one it cannot translate, is run by this
    module's interpreter (engine="python"), the reference, which names both
    accesses of each hazard. The barrier timeline keeps the first `max_events`
    events (`timeline_truncated` says when there were more).
    """
    if engine not in ("compiled", "python"):
        raise ValueError(f"sync_check(engine={engine!r}): use 'compiled' or 'python'")
    ir = getattr(p, "_loopir_proc", p)
    infos = analyze(ir).barriers
    tmap = ThreadMap(ir)
    watch = None
    if engine == "compiled":
        _size_env(ir, sizes)  # missing sizes and violated assertions: the interpreter's errors
        from .engine import SC_FULL, SC_OK, engine_for

        compiled = engine_for(ir, infos, tmap)
        if not isinstance(compiled, Exception):
            run = compiled.run(sizes, max_hazards, max_events)
            if run.status == SC_OK and not run.hazards:
                return _compiled_report(ir, sizes, infos, compiled.program, run)
            if run.status in (SC_OK, SC_FULL):
                watch = {(ordinal, e) for _, ordinal, e, _ in run.hazards if ordinal >= 0}
    if watch is None:
        first = _Machine(ir, sizes, infos, tmap, watch=None, max_hazards=max_hazards)
        first.run()
        if not first.hazards:
            return _report(ir, sizes, infos, first, max_events)
        watch = {(id_, e) for id_, e in first.hazard_elements}
    # Log the history of the failing elements to name the other access.
    result = _Machine(ir, sizes, infos, tmap, watch=watch, max_hazards=max_hazards)
    result.run()
    return _report(ir, sizes, infos, result, max_events)


def _report(ir, sizes: dict, infos: dict, m: "_Machine", max_events: int) -> SyncReport:
    return SyncReport(
        proc=ir.name,
        sizes=dict(sizes),
        hazards=m.hazards,
        barrier_timeline=m.events[:max_events],
        barriers={i.name: i.to_json() for i in infos.values()},
        truncated=m.truncated,
        timeline_truncated=len(m.events) > max_events,
    )


def _compiled_report(ir, sizes: dict, infos: dict, program, run) -> SyncReport:
    """The report of a hazard-free compiled run: its barrier events, as the interpreter builds them."""
    events, refs, collectives = [], {}, {}
    iters = run.iters
    for site, q, index, slot, parity, mask, task, off, count in run.events:
        es, qs = program.events[site], program.queues[q]
        ref = refs.get(site)
        if ref is None:
            ref = refs[site] = es.ref
        base = task * es.task_threads
        threads = collectives.get((mask, base))
        if threads is None:
            threads = collectives[(mask, base)] = tuple((lo + base, hi + base) for lo, hi in program.masks[mask])
        events.append(
            BarrierEvent(qs.info.name, qs.position, "reverse" if qs.reverse else "forward", es.kind, ref, threads,
                         dict(zip(es.loop_names, iters[off : off + count])), index,
                         None if slot < 0 else slot, None if parity < 0 else parity)
        )
    return SyncReport(
        proc=ir.name,
        sizes=dict(sizes),
        hazards=[],
        barrier_timeline=events,
        barriers={i.name: i.to_json() for i in infos.values()},
        timeline_truncated=run.events_total > len(events),
    )


def _size_env(ir, sizes: dict) -> dict:
    """The size arguments' values, checked: every one given, every assertion true."""
    env = {}
    for a in ir.args:
        if not a.type.is_numeric():
            name = str(a.name)
            if name not in sizes:
                raise SyncError(f"sync_check needs a value for {name}: sync_check(p, {name}=...)", a.srcinfo)
            env[a.name] = int(sizes[name])
    for pred in ir.preds:
        if not _evaluate(pred, env):
            raise SyncError(f"the sizes {sizes} violate the assertion {pred}", pred.srcinfo)
    return env


# --------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------


class _Record:
    """A visibility record, shared by every element with equal (V_A, V_S, pending)."""

    __slots__ = ("va", "vs", "pending", "key", "fwd", "task", "slo", "shi", "sbits")

    def __init__(self, va, vs, pending, task):
        self.fwd = None
        self.task = task
        self._set(va, vs, pending)

    def _set(self, va, vs, pending) -> None:
        self.va, self.vs, self.pending = va, vs, pending
        self.key = (va, vs, pending)
        # Fast path of `covers`: V_S as one interval (else an empty one, and the slow path decides).
        if len(vs) == 1:
            self.slo, self.shi, self.sbits = vs[0]
        else:
            self.slo, self.shi, self.sbits = 0, 0, 0


def _find(rec: _Record) -> _Record:
    while rec.fwd is not None:
        rec = rec.fwd
    return rec


class _Buffer:
    """The records of one allocation's elements."""

    __slots__ = ("name", "shape", "strides", "mem", "w", "r", "id")

    def __init__(self, name: str, shape: list, mem, id_: int):
        self.name, self.shape, self.mem, self.id = name, shape, mem, id_
        n, strides = 1, []
        for d in reversed(shape):
            strides.append(n)
            n *= d
        self.strides = tuple(reversed(strides))
        self.w = [None] * n
        self.r = [()] * n

    def index_of(self, e: int) -> tuple:
        return tuple((e // s) % d for s, d in zip(self.strides, self.shape))

    def clear(self) -> None:
        n = len(self.w)
        self.w = [None] * n
        self.r = [()] * n


@dataclass(frozen=True)
class _View:
    """A buffer seen through a window: element = base + sum(i_k * strides[k])."""

    buf: _Buffer
    base: int
    strides: tuple
    usage: Optional[tl.UsageTl] = None
    unordered: bool = False  # accessed by an instr whose lanes act independently (sync/access.py)


class _Queue:
    """The state of one queue barrier (a barrier position, forward or reverse)."""

    def __init__(self, qid: int, info, position: tuple, reverse: bool):
        self.id, self.info, self.position, self.reverse = qid, info, position, reverse
        self.arrives: list = []  # (Access) per arrive
        self.awaits = 0
        self.awaited_upto = 0  # highest arrive paired with an await
        self.pending: set = set()  # records carrying a pending mark on this queue
        self.arrive_threads = None  # mbarriers: every arrive must be by the same threads
        self.await_threads = None
        self.rule = info.queue_rule(reverse)
        self.lag = self.rule.lag
        self.depth = self.rule.depth or None

    def floor(self) -> int:
        """The lowest arrive number a future await can pair with."""
        if self.lag is not None:
            return self.awaits + 1 - self.lag
        return len(self.arrives) - self.info.max_wait_n


@dataclass
class _Ctx:
    """Where a statement runs: device function, collective tiling, instr-tl, task offset."""

    dev: Optional[CudaDeviceFunction] = None
    tiling: object = None
    instr_tl: tl.InstrTl = tl.cpu_in_order_instr
    cuda_syms: tuple = ()  # cuda_threads iterators in scope (their values pick the collective)
    cuda_names: tuple = ()  # their names in the analysis' tilings
    task: int = -1
    base: int = 0  # thread-id offset of the task's top-level collective


# --------------------------------------------------------------------------
# The machine
# --------------------------------------------------------------------------


class _Machine:
    def __init__(self, ir, sizes: dict, infos: dict, tmap: ThreadMap, watch, max_hazards: int):
        self.ir, self.sizes, self.infos, self.tmap = ir, sizes, infos, tmap
        self.watch = watch  # {(buffer id, element)} whose history is logged, or None
        self.history: dict = {}  # (buffer id, element) -> {"w": Access, "r": {record: Access}}
        self.max_hazards = max_hazards
        self.hazards: list = []
        self.hazard_elements: list = []
        self.truncated = False
        self.events: list = []
        self.table: dict = {}  # record key -> live _Record
        self.live: dict = {}  # task -> set of records whose signatures are that task's threads
        self.buffers: list = []  # the proc's argument buffers (allocations clear themselves when freed)
        self.n_buffers = 0  # buffer ids count allocations in execution order: equal in both runs
        self.queues: dict = {}  # (barrier Sym, position, reverse) -> _Queue
        self.env: dict = {}
        self.iters: dict = {}  # loop iterator name -> value, for reports
        self.plans: dict = {}  # id(Assign/Reduce) -> its accesses as (buffer Sym, compiled element function, write)
        self.bits: dict = {}  # (instr-tl, usage-tl) -> pair bit
        self.n_tasks = 0
        self.seen: set = set()  # (kind, buffer, stmt) already reported
        self.queue_by_id: dict = {}
        self.in_instr = None  # the call statement while interpreting an instr's body
        self.fresh_keys: dict = {}  # (threads, bit, instr-tl, usage-tl) -> (V_A, V_S) of a new access

    # ---- driver ----

    def run(self) -> None:
        self.env.update(_size_env(self.ir, self.sizes))
        for a in self.ir.args:
            if a.type.is_numeric():
                self.env[a.name] = self._new_view(a, [self._eval(d) for d in a.type.shape()])
        self._block(self.ir.body, _Ctx())

    def _new_view(self, decl, shape: list) -> _View:
        buf = _Buffer(str(decl.name), shape, decl.mem, self.n_buffers)
        self.n_buffers += 1
        if isinstance(decl, LoopIR.fnarg):
            self.buffers.append(buf)
        return _View(buf, 0, buf.strides)

    # ---- expressions ----

    def _eval(self, e):
        return _evaluate(e, self.env)

    # ---- statements ----

    def _block(self, stmts, ctx: _Ctx) -> None:
        allocs = []
        for s in stmts:
            self._stmt(s, ctx, allocs)
        for s, value in reversed(allocs):
            self._free(s, value, ctx)

    def _stmt(self, s, ctx: _Ctx, allocs: list) -> None:
        if isinstance(s, (LoopIR.Assign, LoopIR.Reduce)):
            if ctx.dev is None:
                return
            plan = self.plans.get(id(s))
            if plan is None:
                plan = self.plans[id(s)] = _plan(s)
            env = self.env
            for sym, element, write in plan:
                view = env[sym]
                self._access(view, element(env, view), s, ctx, write)
        elif isinstance(s, LoopIR.For):
            self._loop(s, ctx)
        elif isinstance(s, LoopIR.If):
            self._block(s.body if self._eval(s.cond) else s.orelse, ctx)
        elif isinstance(s, LoopIR.Alloc):
            if is_barrier_alloc(s):
                allocs.append((s, None))
            else:
                shape = [self._eval(d) for d in s.type.shape()] if s.type.is_tensor_or_window() else []
                self.env[s.name] = self._new_view(s, shape)
                allocs.append((s, (self.env[s.name], self._threads(ctx), self._shard_owners(s, shape, ctx))))
        elif isinstance(s, LoopIR.WindowStmt):
            self.env[s.name] = self._window(s.rhs)
        elif isinstance(s, LoopIR.Call):
            self._call(s, ctx)
        elif isinstance(s, (LoopIR.Pass, LoopIR.Free)):
            pass
        else:
            raise SyncError(f"sync_check does not interpret {type(s).__name__} statements", s.srcinfo)

    def _loop(self, s, ctx: _Ctx) -> None:
        mode = s.loop_mode
        lo, hi = self._eval(s.lo), self._eval(s.hi)
        name = str(s.iter)
        if isinstance(mode, WithBlock):
            block = mode.ctx
            if isinstance(block, CudaDeviceFunction):
                self._device_boundary()
                self._block(s.body, _Ctx(block, self.tmap.body_tiling(s.body), tl.cuda_in_order_instr))
                self._device_boundary()
            elif isinstance(block, CudaAsync):
                self._block(s.body, _Ctx(ctx.dev, ctx.tiling, block.instr_tl, ctx.cuda_syms, ctx.cuda_names, ctx.task, ctx.base))
            elif isinstance(block, CudaWarps):
                tiling = self.tmap.body_tiling(s.body)
                self._block(s.body, _Ctx(ctx.dev, tiling, ctx.instr_tl, ctx.cuda_syms, ctx.cuda_names, ctx.task, ctx.base))
            else:
                self._block(s.body, ctx)
            return
        if isinstance(mode, CudaThreads):
            tiling = self.tmap.body_tiling(s.body)
            inner = _Ctx(ctx.dev, tiling, ctx.instr_tl, ctx.cuda_syms + (s.iter,), ctx.cuda_names + (s.iter.name(),),
                         ctx.task, ctx.base)
        elif self.tmap.is_task_loop(s):
            inner = None  # innermost task loop: a new top-level collective per iteration
        else:
            inner = ctx
        report = self.in_instr is None
        for v in range(lo, hi):
            self.env[s.iter] = v
            if report:
                self.iters[name] = v
            if inner is None:
                n = ctx.tiling.thread_count if ctx.tiling is not None else 0
                task_ctx = _Ctx(ctx.dev, ctx.tiling, ctx.instr_tl, (), (), self.n_tasks, self.n_tasks * n)
                self.n_tasks += 1
                self._block(s.body, task_ctx)
                self.live.pop(task_ctx.task, None)
            else:
                self._block(s.body, inner)
        if report:
            self.iters.pop(name, None)

    def _threads(self, ctx: _Ctx) -> tuple:
        """The threads of the collective executing the current statement."""
        if ctx.dev is None:
            return ()
        env = self.env
        return self.tmap.collective(ctx.tiling, ctx.cuda_names, tuple([env[s] for s in ctx.cuda_syms]), ctx.base)

    def _shard_owners(self, s, shape: list, ctx: _Ctx) -> Optional[tuple]:
        """For distributed shared memory, (elements per shard, each shard's owner threads): each shard is
        reused after the free by its own owner only (seed 000, distributed memory). None otherwise."""
        if not distributed_shared(self.tmap.analysis, s.name):
            return None
        a = self.tmap.analysis.dist[s.name]
        outer = {name: self.env[sym] for name, sym in zip(ctx.cuda_names, ctx.cuda_syms)}
        owners = []
        for shard in itertools.product(*(range(n) for n in shape[: a.dims])):
            runs = a.owner_threads(shard, outer)
            owners.append(None if runs is None else tuple((lo + ctx.base, hi + ctx.base) for lo, hi in runs))
        return math.prod(shape[a.dims :]), tuple(owners)

    def _window(self, w) -> _View:
        view = self.env[w.name]
        base, strides = view.base, []
        for i, s in zip(w.idx, view.strides):
            if isinstance(i, LoopIR.Interval):
                base += self._eval(i.lo) * s
                strides.append(s)
            else:
                base += self._eval(i.pt) * s
        return _View(view.buf, base, tuple(strides), view.usage, view.unordered)

    def _call(self, s, ctx: _Ctx) -> None:
        spec = sync_spec_of(s)
        if spec is not None:
            self._sync(s, spec, ctx)
            return
        info = instr_info(s)
        callee_env = {}
        for a, formal in zip(s.args, s.f.args):
            if formal.type.is_numeric():
                view = self._window(a) if isinstance(a, LoopIR.WindowExpr) else self.env[a.name]
                usage = info.usage_tls.get(str(formal.name)) if info else None
                unordered = view.unordered or (
                    info is not None
                    and ctx.tiling is not None
                    and unordered_access(str(s.f.name), ctx.tiling.thread_count, view.buf.mem)
                )
                callee_env[formal.name] = _View(view.buf, view.base, view.strides, usage or view.usage, unordered)
            else:
                callee_env[formal.name] = self._eval(a)
        saved, saved_instr = self.env, self.in_instr
        self.env = {**saved, **callee_env}
        inner = ctx
        if info is not None and ctx.dev is not None:
            inner = _Ctx(ctx.dev, ctx.tiling, info.instr_tl, ctx.cuda_syms, ctx.cuda_names, ctx.task, ctx.base)
            self.in_instr = saved_instr or s
        self._block(s.f.body, inner)
        self.env, self.in_instr = saved, saved_instr

    # ---- accesses ----

    def _access(self, view: _View, e: int, s, ctx: _Ctx, write: bool) -> None:
        buf = view.buf
        s = self.in_instr or s  # accesses inside an instr are reported at its call
        threads = self._threads(ctx)
        bit = self.bits.get((ctx.instr_tl, view.usage))
        if bit is None:
            bit = self.bits[(ctx.instr_tl, view.usage)] = 1 << tl.pair_bit(ctx.instr_tl, view.usage)
        w = buf.w[e]
        if w is not None:
            w = _find(w)
            if not _fast_covers(w, threads, bit) and not ss.covers(w.vs, threads, bit):
                self._hazard("WAW" if write else "RAW", buf, e, s, threads, ctx, w, "w")
        if write:
            for r in buf.r[e]:
                r = _find(r)
                if not _fast_covers(r, threads, bit) and not ss.covers(r.vs, threads, bit):
                    self._hazard("WAR", buf, e, s, threads, ctx, r, "r")
        unordered = view.unordered
        fresh = (threads, bit, ctx.instr_tl, view.usage, unordered)
        key = self.fresh_keys.get(fresh)
        if key is None:
            ordered = not (ctx.instr_tl.is_async or unordered)
            vs = ss.product(threads, tl.program_order_mask(ctx.instr_tl, view.usage)) if ordered else ss.EMPTY
            key = self.fresh_keys[fresh] = (ss.product(threads, bit), vs)
        rec = self._intern(key[0], key[1], (), ctx.task)
        if write:
            buf.w[e], buf.r[e] = rec, ()
        else:
            reads = buf.r[e]
            if rec not in reads:
                buf.r[e] = reads + (rec,)
        if self.watch is not None and (buf.id, e) in self.watch:
            h = self.history.setdefault((buf.id, e), {"w": None, "r": {}})
            acc = self._access_info(s, threads)
            if write:
                h["w"], h["r"] = (rec, acc), {}
            else:
                h["r"][rec] = acc

    def _intern(self, va, vs, pending, task) -> _Record:
        key = (va, vs, pending)
        rec = self.table.get(key)
        if rec is None:
            rec = self.table[key] = _Record(va, vs, pending, task)
            self.live.setdefault(task, set()).add(rec)
        return rec

    def _update(self, rec: _Record, va, vs, pending) -> None:
        """Change a record in place; merge it into an equal one if there is one."""
        if (va, vs, pending) == rec.key:
            return
        if self.table.get(rec.key) is rec:
            del self.table[rec.key]
        old_pending = rec.pending
        rec._set(va, vs, pending)
        other = self.table.get(rec.key)
        if other is None:
            self.table[rec.key] = rec
            for qid, _, _ in pending:
                self.queue_by_id[qid].pending.add(rec)
            return
        rec.fwd = other
        self.live.get(rec.task, set()).discard(rec)
        for qid, _, _ in old_pending + pending:
            q = self.queue_by_id.get(qid)
            if q is not None:
                q.pending.discard(rec)

    # ---- synchronization ----

    def _sync(self, s, spec, ctx: _Ctx) -> None:
        threads = self._threads(ctx)
        if spec.kind == "Fence":
            if ctx.dev is None:
                return
            m1, m2 = _mask(spec.first_tl), _mask(spec.second_tl)
            v2a, v2s = ss.product(threads, m2), ss.product(threads, tl.program_order_closure(m2))
            for rec in list(self.live.get(ctx.task, ())):
                if rec.fwd is None and ss.meets(rec.va, threads, m1):
                    self._update(rec, ss.union(rec.va, v2a), ss.union(rec.vs, v2s), rec.pending)
            return
        q = self._queue(s, spec)
        acc = self._access_info(s, threads)
        if spec.is_arrive:
            self._arrive(q, s, spec, ctx, threads, acc)
        else:
            self._await(q, s, spec, ctx, threads, acc)

    def _queue(self, s, spec) -> _Queue:
        sym = s.args[0].name
        pos = tuple(self._eval(i) for i in barrier_window_indices(s.args[0]))
        key = (sym, pos, spec.is_reverse)
        q = self.queues.get(key)
        if q is None:
            qid = len(self.queue_by_id) + 1
            q = self.queues[key] = _Queue(qid, self.infos[sym], pos, spec.is_reverse)
            self.queue_by_id[qid] = q
        return q

    def _check_same_threads(self, q: _Queue, attr: str, threads: tuple, base: int, s) -> None:
        if not q.rule.same_threads or not threads:
            return
        rel = tuple((lo - base, hi - base) for lo, hi in threads)
        first = getattr(q, attr)
        if first is None:
            setattr(q, attr, rel)
        elif first != rel:
            what = "arrives" if attr == "arrive_threads" else "awaits"
            raise SyncError(
                f"every {what} on mbarrier {q.info.name} must be executed by the same threads (each thread "
                f"counts the phases it sees); this one has other threads than the first",
                s.srcinfo,
            )

    def _arrive(self, q: _Queue, s, spec, ctx, threads, acc) -> None:
        self._check_same_threads(q, "arrive_threads", threads, ctx.base, s)
        q.arrives.append(acc)
        n = len(q.arrives)
        slot = parity = None
        if q.depth:
            slot, parity = (n - 1) % q.depth, ((n - 1) // q.depth) & 1
            reuse = n - q.depth  # the arrive whose ring slot this one takes over
            if reuse >= 1 and q.awaited_upto < reuse:
                self._sync_hazard(
                    "DEADLOCK", s, acc, q.arrives[reuse - 1],
                    f"arrive #{n} on {q.info.name} reuses ring slot {slot} (depth {q.depth}) before arrive #{reuse} "
                    f"was awaited: more {'Reverse' if q.reverse else ''}Await lag than the ring allows",
                )
        self._event(q, spec, acc, n, slot, parity)
        if ctx.dev is None:
            return
        m1 = _mask(spec.first_tl)
        scoped = q.rule.scope or None
        for rec in list(self.live.get(ctx.task, ())):
            if rec.fwd is None and ss.meets(rec.va, threads, m1):
                mark_threads = ss.threads_with(rec.va, m1, threads) if scoped else ()
                pending = _add_mark(rec.pending, q.id, n, mark_threads)
                self._update(rec, rec.va, rec.vs, pending)
                q.pending.add(_find(rec))

    def _await(self, q: _Queue, s, spec, ctx, threads, acc) -> None:
        self._check_same_threads(q, "await_threads", threads, ctx.base, s)
        q.awaits += 1
        k = q.awaits - q.lag if q.lag is not None else len(q.arrives) - spec.N
        slot = parity = None
        if q.depth and k >= 1:
            slot, parity = (k - 1) % q.depth, ((k - 1) // q.depth) & 1
        self._event(q, spec, acc, k, slot, parity)
        if k > len(q.arrives):
            self._sync_hazard(
                "DEADLOCK", s, acc, None,
                f"{spec.kind} on {q.info.name}{list(q.position) if q.position else ''} pairs with arrive #{k}, "
                f"but only {len(q.arrives)} arrive(s) happened before it: the GPU would wait forever",
            )
            return
        if k < 1:
            return
        q.awaited_upto = max(q.awaited_upto, k)
        if ctx.dev is None:
            return
        m2 = _mask(spec.second_tl)
        scope = q.rule.scope or None
        floor = q.floor()
        for rec in list(q.pending):
            rec = _find(rec)
            mark = _mark_of(rec.pending, q.id)
            if mark is None:
                continue
            va, vs, pending = rec.va, rec.vs, rec.pending
            if mark[1] == 0 and ss.covers(vs, threads, m2) and scope is None:
                continue  # already visible to this collective, and due for every future await
            if mark[1] <= k:
                c2 = threads if scope is None else ss.intersect_threads(_widen(mark[2], scope, ctx.base), threads)
                va = ss.union(va, ss.product(c2, m2))
                vs = ss.union(vs, ss.product(c2, tl.program_order_closure(m2)))
            if 0 < mark[1] <= floor:
                pending = _add_mark(tuple(m for m in pending if m[0] != q.id), q.id, 0, mark[2])
            self._update(rec, va, vs, pending)

    def _event(self, q: _Queue, spec, acc: Access, index: int, slot, parity) -> None:
        self.events.append(
            BarrierEvent(q.info.name, q.position, "reverse" if q.reverse else "forward", spec.kind, acc.stmt,
                         acc.threads, acc.iters, index, slot, parity)
        )

    def _end_queues(self, sym, s) -> None:
        """End of a barrier's scope: every arrive must have been awaited (but a ring's last `lag`)."""
        for key in [k for k in self.queues if k[0] == sym]:
            q = self.queues.pop(key)
            slack = q.lag or 0
            unawaited = len(q.arrives) - q.awaited_upto
            if unawaited > slack:
                first = q.arrives[q.awaited_upto]
                self._sync_hazard(
                    "COUNT", s, first, None,
                    f"{unawaited} {'Reverse' if q.reverse else ''}Arrive(s) on {q.info.name}"
                    f"{list(q.position) if q.position else ''} never awaited (allowed: {slack}); the first is "
                    f"line {first.stmt.line}",
                )
            for rec in list(q.pending):
                rec = _find(rec)
                if _mark_of(rec.pending, q.id) is not None:
                    self._update(rec, rec.va, rec.vs, tuple(m for m in rec.pending if m[0] != q.id))

    # ---- scopes ----

    def _free(self, s, value, ctx: _Ctx) -> None:
        if value is None:
            self._end_queues(s.name, s)
            return
        view, owner, shards = value
        buf = view.buf
        if ctx.dev is not None:
            bit = 1 << tl.pair_bit(tl.cuda_in_order_instr)
            shared = is_shared_memory(buf.mem)
            for e in range(len(buf.w)):
                if shards is not None:
                    owner = shards[1][e // shards[0]]
                    if owner is None:  # a shard no statement uses
                        continue
                recs = ([("w", buf.w[e])] if buf.w[e] is not None else []) + [("r", r) for r in buf.r[e]]
                for which, rec in recs:
                    rec = _find(rec)
                    if shared:  # reused by the next task or block: a write by the whole owning collective
                        ok = ss.covers(rec.vs, owner, bit)
                    else:  # registers: reused by their owners only, once their own (async) accesses completed
                        ok = all(ss.covers(rec.vs, ss.intersect_threads(((lo, hi),), owner), b) for lo, hi, b in rec.va)
                    if not ok:
                        self._hazard("FREE", buf, e, s, owner, ctx, rec, which, free=True)
                        break
        buf.clear()

    def _device_boundary(self) -> None:
        """A device function boundary is a full barrier: every record becomes visible to everyone."""
        for buf in self.buffers:
            buf.clear()
        self.table.clear()
        self.live.clear()

    # ---- reports ----

    def _access_info(self, s, threads) -> Access:
        return Access(self.tmap.analysis.ref(s), threads, dict(self.iters))

    def _hazard(self, kind, buf, e, s, threads, ctx, rec, which, free: bool = False) -> None:
        other = None
        h = self.history.get((buf.id, e))
        if h is not None:
            if which == "w" and h["w"] is not None:
                other = h["w"][1]
            elif which == "r":
                other = next((a for r, a in h["r"].items() if _find(r) is rec), None)
        key = (kind, buf.name, id(s))
        if key in self.seen:
            return
        self.seen.add(key)
        if len(self.hazards) >= self.max_hazards:
            self.truncated = True
            return
        self.hazard_elements.append((buf.id, e))
        stmt = self.tmap.analysis.ref(s)
        if free:
            msg = (f"{buf.name} is freed at the end of its scope (line {stmt.line}) while the last access to this "
                   f"element is not visible to every owning thread: fence before the scope ends")
        else:
            verb = {"RAW": "read after write", "WAR": "write after read", "WAW": "write after write"}[kind]
            msg = f"{verb} without synchronization: the earlier access is not visible to these threads on {ctx.instr_tl}"
        acc = Access(stmt, threads, dict(self.iters))
        self.hazards.append(Hazard(kind, buf.name, buf.index_of(e), acc, other, msg))

    def _sync_hazard(self, kind, s, acc: Access, other, message: str) -> None:
        key = (kind, id(s))
        if key in self.seen:
            return
        self.seen.add(key)
        if len(self.hazards) >= self.max_hazards:
            self.truncated = True
            return
        self.hazards.append(Hazard(kind, None, None, acc, other, message))


@lru_cache(maxsize=None)
def _mask(sync_tl: tl.SyncTl) -> int:
    """A sync-tl's pair bits (the property recomputes them at every sync)."""
    return sync_tl.mask


def _fast_covers(rec: _Record, threads: tuple, bit: int) -> bool:
    return len(threads) == 1 and rec.slo <= threads[0][0] and threads[0][1] <= rec.shi and bool(rec.sbits & bit)


def _mark_of(pending: tuple, qid: int):
    for m in pending:
        if m[0] == qid:
            return m
    return None


def _add_mark(pending: tuple, qid: int, n: int, threads: tuple) -> tuple:
    """Pending on arrive #n of queue qid (keeping the earliest arrive, and every marked thread)."""
    old = _mark_of(pending, qid)
    if old is not None:
        n, threads = min(old[1], n), ss.merge_threads(old[2] + threads)
        if (qid, n, threads) == old:
            return pending
    return tuple(sorted([m for m in pending if m[0] != qid] + [(qid, n, threads)]))


def _widen(threads: tuple, scope: int, base: int) -> tuple:
    """Grow thread intervals to whole aligned groups of `scope` threads (a warpgroup's commit queue)."""
    if scope == 1:
        return threads
    return ss.merge_threads(
        (base + (lo - base) // scope * scope, base + -(-(hi - base) // scope) * scope) for lo, hi in threads
    )


def _evaluate(e, env: dict):
    """An integer index expression's value; env maps Syms to ints (and buffers to _Views, for strides)."""
    if isinstance(e, LoopIR.Const):
        return e.val
    if isinstance(e, LoopIR.Read):
        return env[e.name]
    if isinstance(e, LoopIR.USub):
        return -_evaluate(e.arg, env)
    if isinstance(e, LoopIR.BinOp):
        return _BINOPS[e.op](_evaluate(e.lhs, env), _evaluate(e.rhs, env))
    if isinstance(e, LoopIR.StrideExpr):
        return env[e.name].strides[e.dim]
    raise SyncError(f"sync_check cannot evaluate {e} (only integer index expressions)", e.srcinfo)


_BINOPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a // b,
    "%": lambda a, b: a % b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "and": lambda a, b: a and b,
    "or": lambda a, b: a or b,
}


# --------------------------------------------------------------------------
# Compiled accesses: an Assign/Reduce's index arithmetic is turned into Python once per statement,
# so that the per-thread interpretation does not walk LoopIR expressions.
# --------------------------------------------------------------------------

_PY_OPS = {"/": "//", "and": "and", "or": "or"}


def _plan(s) -> tuple:
    """The accesses of an Assign/Reduce in execution order: (buffer Sym, element(env, view), write)."""
    reads: list = []
    numeric_reads(s.rhs, reads)
    out = [(r.name, _element_fn(r.idx), False) for r in reads]
    target = _element_fn(s.idx)
    if isinstance(s, LoopIR.Reduce):
        out.append((s.name, target, False))
    out.append((s.name, target, True))
    return tuple(out)


def _element_fn(idx):
    """element(env, view) = view.base + sum(idx_k * view.strides[k]), compiled to Python."""
    consts: dict = {}
    terms = ["v.base"] + [f"({_py_expr(i, consts)}) * v.strides[{k}]" for k, i in enumerate(idx)]
    src = f"def element(env, v):\n    return {' + '.join(terms)}\n"
    scope = dict(consts)
    exec(src, scope)  # noqa: S102 - source built above from LoopIR index expressions only
    return scope["element"]


def _py_expr(e, consts: dict) -> str:
    if isinstance(e, LoopIR.Const):
        return repr(e.val)
    if isinstance(e, LoopIR.Read):
        key = f"_s{len(consts)}"
        consts[key] = e.name
        return f"env[{key}]"
    if isinstance(e, LoopIR.USub):
        return f"(-{_py_expr(e.arg, consts)})"
    if isinstance(e, LoopIR.BinOp):
        op = _PY_OPS.get(e.op, e.op)
        return f"({_py_expr(e.lhs, consts)} {op} {_py_expr(e.rhs, consts)})"
    if isinstance(e, LoopIR.StrideExpr):
        key = f"_s{len(consts)}"
        consts[key] = e.name
        return f"env[{key}].strides[{e.dim}]"
    raise SyncError(f"sync_check cannot evaluate {e} (only integer index expressions)", e.srcinfo)
