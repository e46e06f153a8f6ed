"""The reference engine: the abstract machine of SYNC_MODEL.md executing a `Program`'s ops in Python.

Every element of every buffer keeps its write record and its read records
since that write; a record holds V_A and V_S, sets of (instr-tl, usage-tl,
thread) signatures kept as interval lists (`sigsets`), plus the queues it is
pending on. Reads need their signature in V_S of the write record (RAW);
writes in V_S of the write record (WAW) and of every read record (WAR).
Fences, and awaits through their paired arrives, grow V_A and V_S.

Execution order, apart from the records: an await of a ring queue (an
mbarrier) starts an `_Order`, the threads ordered after that await, grown by
every sync whatever its sync-tls (program order plus arrive -> await edges,
transitively); the arrive that reuses the awaited arrive's ring slot must be
made by threads it holds (else DEADLOCK: the producer can overrun the phase).

Records are hash-consed and shared by every element with equal visibility; a
sync updates each distinct record once, in place, and records that become
equal are merged (later lookups follow `fwd`). Only the records of the
running task are candidates for its syncs. Thread ids are global: a task's
threads are its mask's intervals offset by task * threads per task.

This engine is the reference: it follows the model's wording, not speed. The
compiled engine (`cprint.py`, `_machine.c`) must produce exactly the same
`RawRun`; tests/test_sync_engines.py runs both on every program it has.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, Optional

from ..core import timelines as tl
from . import program as P
from . import sigsets as ss


class _Stop(Exception):
    """The run stops: full (code 0: a hazard past max_hazards), or an error (P.ERR_*) at an access (and,
    for thread errors, a queue)."""

    def __init__(self, code: int, access: Optional[P.RawAccess], queue: int = -1):
        self.code, self.access, self.queue = code, access, queue


class _Record:
    """A visibility record, shared by every element with equal (V_A, V_S, pending) of the same kind of memory
    (`glob`: global memory, whose records a remote arrive leaves out for other CTAs: program.Arrive)."""

    __slots__ = ("va", "vs", "pending", "glob", "key", "fwd", "task", "slo", "shi", "sbits")

    def __init__(self, va, vs, pending, glob, task):
        self.fwd = None
        self.task = task
        self.glob = glob
        self.set(va, vs, pending)

    def set(self, va, vs, pending) -> None:
        self.va, self.vs, self.pending = va, vs, pending
        self.key = (va, vs, pending, self.glob)
        # Fast path of `covers`: V_S as one interval (else an empty one, and the slow path decides).
        if len(vs) == 1:
            self.slo, self.shi, self.sbits = vs[0]
        else:
            self.slo, self.shi, self.sbits = 0, 0, 0


def _find(rec: _Record) -> _Record:
    while rec.fwd is not None:
        rec = rec.fwd
    return rec


@lru_cache(maxsize=None)
def _completion(bits: int) -> int:
    """The V_S pairs on which register accesses on the pairs of `bits` are complete (P.COMPLETION)."""
    return sum({1 << P.COMPLETION[p] for p in range(P.PAIRS) if bits >> p & 1})


def _covers(rec: _Record, threads: tuple, bit: int) -> bool:
    if len(threads) == 1 and rec.slo <= threads[0][0] and threads[0][1] <= rec.shi and rec.sbits & bit:
        return True
    return ss.covers(rec.vs, threads, bit)


class _Buffer:
    """One allocation's elements: a write record and a tuple of read records each; for an allocation (not an
    argument), the set of elements accessed so far (the first access of an element, if a read, is UNINIT)."""

    __slots__ = ("slot", "shape", "n", "owner", "device", "task", "ordinal", "w", "r", "shard_size", "shard_owners",
                 "accessed")

    def __init__(self, slot: int, shape: tuple, owner: int, device: bool, task: int, ordinal: int, shard_size: int,
                 shard_owners: tuple, undefined: bool):
        self.slot, self.shape, self.owner, self.device, self.task, self.ordinal = slot, shape, owner, device, task, ordinal
        self.shard_size, self.shard_owners = shard_size, shard_owners
        n = 1
        for d in shape:
            n *= d
        self.n = n
        self.w = [None] * n
        self.r = [()] * n
        self.accessed = set() if undefined else None


class _QueueState:
    """The state of one queue barrier in its current scope."""

    def __init__(self):
        self.arrives: list = []  # RawAccess per arrive
        self.awaits = 0
        self.upto = 0  # the highest arrive paired with an await
        self.pending: set = set()  # records carrying a pending mark on this queue
        # pairing by lag: the threads of every arrive / await, in every scope (their phase counters outlive it)
        self.arrive_mask: Optional[int] = None
        self.await_mask: Optional[int] = None
        self.tx_expected: list = []  # per arrive: the TMA bytes its phase expects
        self.tx_delivered: dict = {}  # phase (arrive number) -> TMA bytes delivered to it


class _Order:
    """The threads ordered after one await of a ring queue by every thread that made it, and the queues whose
    awaits carry that order: queue -> the earliest arrive carrying it (an await of that arrive or a later one
    joins its threads).

    The threads of a collective wait for a phase each on its own, so a thread of the await is ordered after its
    own wait only: an await by one thread starts the order with it; an await by several starts it empty, with
    those threads as `waiters`, and a sync of threads including every waiter (a Fence, or an arrive that an
    await pairs with) gives it its threads. Starting it with all the await's threads let an arrive reuse the slot
    after one warp of the await but before a slower one had waited: that warp's parity wait then hung on an H200
    (audit of session 27)."""

    __slots__ = ("acc", "marks", "threads", "waiters")

    def __init__(self, acc: P.RawAccess, threads: ss.SigSet, waiters: tuple = ()):
        self.acc, self.threads, self.waiters, self.marks = acc, threads, waiters, {}

    @classmethod
    def of_await(cls, acc: P.RawAccess, threads: tuple) -> "_Order":
        """The order an await by `threads` (intervals) starts."""
        if sum(hi - lo for lo, hi in threads) == 1:
            return cls(acc, ss.product(threads, 1))
        return cls(acc, ss.EMPTY, threads)

    def taken_over_by(self, threads: tuple) -> bool:
        """May an arrive by `threads` (intervals) take over the slot this await waited on? Yes if they are ordered
        after the await by every thread of it, or if they are exactly its threads, none synchronized since: each
        arrives after its own wait, and the phase completes only when all have arrived, so no waiter can fall
        two phases behind (an mbarrier arrived on and awaited by the same threads, as a split barrier)."""
        return ss.covers(self.threads, threads, 1) or self.waiters == threads

    def reached_by(self, threads: tuple) -> bool:
        """Are `threads` (intervals), once they synchronize, ordered after the await by every thread of it?"""
        if self.waiters:
            return ss.covers(ss.product(threads, 1), self.waiters, 1)
        return ss.meets(self.threads, threads, 1)

    def join(self, threads: ss.SigSet) -> None:
        self.threads, self.waiters = ss.union(self.threads, threads), ()

    def carry(self, qid: int, n: int) -> None:
        self.marks[qid] = min(n, self.marks.get(qid, n))


# Expressions as Python source over `V` (variables) and `T` (tables); Python's // and % are floor division.
_PYTHON = {
    "const": "{}", "var": "V[{}]", "neg": "(-{})", "table": "T[{}][{}]", "/": "({} // {})",
    **{op: f"({{}} {op} {{}})" for op in ("+", "-", "*", "%", "<", ">", "<=", ">=", "==", "and", "or")},
}  # fmt: skip


def expr_source(e: P.Expr) -> str:
    return P.render(e, _PYTHON)


def python_function(e: P.Expr, tables: tuple = ()) -> Callable:
    """e as a Python function of the variables V (tables: the Program's, for `Table` lookups)."""
    return eval(f"lambda V: {expr_source(e)}", {"T": tables})  # noqa: S307


class Reference:
    """The reference engine for one Program (stateless between runs)."""

    def __init__(self, program: P.Program):
        self.program = program
        self._fns: dict = {}  # id(e) -> (e, its function): an expression's hash walks its whole tree, every call

    def expr(self, e: P.Expr):
        """e compiled to a Python function of the variables (once per expression object; the entry keeps e alive,
        so its id is not reused)."""
        entry = self._fns.get(id(e))
        if entry is None:
            entry = self._fns[id(e)] = (e, python_function(e, self.program.tables))
        return entry[1]

    def run(self, sizes: tuple, max_hazards: int, max_events: int, watch: frozenset) -> P.RawRun:
        return _Run(self, sizes, max_hazards, max_events, watch).execute()


class _Run:
    def __init__(self, engine: Reference, sizes: tuple, max_hazards: int, max_events: int, watch: frozenset):
        p = engine.program
        self.engine, self.p = engine, p
        self.V = [0] * p.n_vars
        for (_, var), value in zip(p.sizes, sizes):
            self.V[var] = value
        self.max_hazards, self.max_events = max_hazards, max_events
        self.watch = watch  # {(buffer ordinal, element)} whose history is kept, to name the other access
        self.history: dict = {}  # (ordinal, element) -> [write (record, RawAccess) or None, {record: RawAccess}]
        self.hazards: list = []
        self.seen: set = set()  # (kind, buffer name id, statement) already reported
        self.truncated = False
        self.events: list = []
        self.events_total = 0
        self.table: dict = {}  # record key -> live _Record
        self.changed: list = []  # (record, its pending before) changed by the running sync, out of the table
        self.live: dict = {}  # task -> records whose signatures are that task's threads
        self.bufs: list = [None] * len(p.slots)
        self.ordinal = 0
        self.queues = [_QueueState() for _ in p.queues]
        # (ring queue, arrive awaited, variant) -> _Order, until the arrive reusing its slot; variants: the orders a
        # barrier's next scope inherits from every earlier task (see task_end)
        self.orders: dict = {}
        self.carried: dict = {}  # (ring queue, k <= 0) -> {CTA-relative (threads, waiters): the await}, from every task
        self.task, self.base, self.n_tasks = -1, 0, 0
        self.fresh: dict = {}  # (threads, pair, unordered) -> (V_A, V_S) of a new access

    # ---- driver ----

    def execute(self) -> P.RawRun:
        error = None
        try:
            self.ops()
        except _Stop as stop:
            if stop.code:
                error = (stop.code, stop.access, stop.queue)
        return P.RawRun(self.hazards, self.truncated, self.events, self.events_total, error)

    def ev(self, e: P.Expr) -> int:
        try:
            return self.engine.expr(e)(self.V)
        except ZeroDivisionError:
            raise _Stop(P.ERR_DIVISION, None) from None

    def ops(self) -> None:
        handlers = {kind: fn.__get__(self) for kind, fn in self.dispatch.items()}
        P.execute(self.p.ops, self.V, self.ev, handlers)

    # ---- helpers ----

    def threads(self, mask: int) -> tuple:
        """A mask of the running task as global thread intervals."""
        base = self.base
        return tuple((lo + base, hi + base) for lo, hi in self.p.masks[mask]) if base else self.p.masks[mask]

    def access(self, site: int, mask: int) -> P.RawAccess:
        if site < 0:
            return P.RawAccess(site, mask, self.task, (), self.events_total)
        return P.RawAccess(site, mask, self.task if mask else -1, tuple(self.V[v] for _, v in self.p.sites[site].loops),
                           self.events_total)

    def intern(self, va, vs, pending, glob: bool) -> _Record:
        key = (va, vs, pending, glob)
        rec = self.table.get(key)
        if rec is None:
            rec = self.table[key] = _Record(va, vs, pending, glob, self.task)
            self.live.setdefault(self.task, set()).add(rec)
        return rec

    def update(self, rec: _Record, va, vs, pending) -> None:
        """Change a record in place, as part of the running sync: it leaves the table until `settle`."""
        if (va, vs, pending, rec.glob) == rec.key:
            return
        if self.table.get(rec.key) is rec:
            del self.table[rec.key]
            self.changed.append((rec, rec.pending))
        rec.set(va, vs, pending)

    def settle(self) -> None:
        """The end of a sync: re-intern the records it changed, merging each into an equal one if there is one.

        A sync changes every record at once: were a record merged while the sync still ran, it would take
        the sync's change of the record it merged into a second time (an await's retired mark, due again)."""
        for rec, old_pending in self.changed:
            other = self.table.get(rec.key)
            if other is None:
                self.table[rec.key] = rec
                for q, _, _ in rec.pending:
                    self.queues[q].pending.add(rec)
                continue
            rec.fwd = other
            self.live.get(rec.task, set()).discard(rec)
            for q, _, _ in old_pending + rec.pending:
                self.queues[q].pending.discard(rec)
        self.changed.clear()

    # ---- accesses ----

    def access_op(self, op: P.Access) -> None:
        buf = self.bufs[op.slot]
        e = self.ev(op.element)
        mask = self.ev(op.mask)
        if not 0 <= e < buf.n:
            raise _Stop(P.ERR_INDEX, self.access(op.site, mask))
        if op.first_only and buf.accessed is not None and e in buf.accessed:  # sc_first
            return
        threads = self.threads(mask)
        fresh = (threads, op.pair, op.unordered)
        key = self.fresh.get(fresh)
        if key is None:
            ordered = P.PROGRAM_ORDER[op.pair] if not op.unordered else 0
            key = self.fresh[fresh] = (ss.product(threads, 1 << op.pair), ss.product(threads, ordered))
        if buf.accessed is not None and e not in buf.accessed:
            buf.accessed.add(e)
            if op.mode & P.READ:
                self.hazard(P.UNINIT, buf, e, op.site, mask, None, "")
        if op.mode & P.READ:  # an update's own read never conflicts with its write: it is only checked
            self.step(op, buf, e, mask, threads, key, False, record=op.mode == P.READ)
        if op.mode & P.WRITE:
            self.step(op, buf, e, mask, threads, key, True)

    def step(self, op: P.Access, buf: _Buffer, e: int, mask: int, threads: tuple, key: tuple, write: bool,
             record: bool = True) -> None:
        """One read or write: check the element's records, then record the access (unless `record` is False:
        the read of an update, which its write replaces)."""
        bit = 1 << op.pair
        w = buf.w[e]
        if w is not None:
            w = _find(w)
            if not _covers(w, threads, bit):
                self.hazard(P.WAW if write else P.RAW, buf, e, op.site, mask, w, "w")
        if write:
            for r in reversed(buf.r[e]):  # the most recent reader first
                r = _find(r)
                if not _covers(r, threads, bit):
                    self.hazard(P.WAR, buf, e, op.site, mask, r, "r")
                    break
        if not record:
            return
        rec = self.intern(key[0], key[1], (), self.p.slots[op.slot].global_memory)
        if write:
            buf.w[e], buf.r[e] = rec, ()
        elif rec not in buf.r[e]:
            buf.r[e] = buf.r[e] + (rec,)
        if (buf.ordinal, e) in self.watch:
            h = self.history.setdefault((buf.ordinal, e), [None, {}])
            acc = self.access(op.site, mask)
            if write:
                h[0], h[1] = (rec, acc), {}
            else:
                h[1][rec] = acc

    def new_hazard(self, kind: int, name_id: int, site: int) -> bool:
        """Whether to report a hazard: once per (kind, buffer name, statement); past max_hazards the run stops."""
        key = (kind, name_id, self.p.sites[site].stmt)
        if key in self.seen:
            return False
        self.seen.add(key)
        if len(self.hazards) >= self.max_hazards:
            self.truncated = True
            raise _Stop(0, None)
        return True

    def hazard(self, kind: int, buf: _Buffer, e: int, site: int, mask: int, rec: _Record, which: str,
               acc: Optional[P.RawAccess] = None) -> None:
        if not self.new_hazard(kind, self.p.slots[buf.slot].name_id, site):
            return
        other = None
        h = self.history.get((buf.ordinal, e))
        if h is not None:
            if which == "w" and h[0] is not None:
                other = h[0][1]
            elif which == "r":
                other = next((a for r, a in h[1].items() if _find(r) is rec), None)
        acc = acc or self.access(site, mask)
        self.hazards.append(P.RawHazard(kind, buf.slot, buf.ordinal, e, P.index_of(e, buf.shape), acc, other, -1, (),
                                        self.events_total))

    def sync_hazard(self, kind: int, site: int, acc: P.RawAccess, other, queue: int, params: tuple) -> None:
        if self.new_hazard(kind, -1, site):
            self.hazards.append(P.RawHazard(kind, -1, -1, -1, (), acc, other, queue, params, self.events_total))

    # ---- allocations and scopes ----

    def alloc(self, op: P.Alloc) -> None:
        shape = tuple(self.ev(d) for d in op.shape)
        if any(d < 0 for d in shape):
            raise _Stop(P.ERR_SHAPE, None)
        owner = self.ev(op.owner)
        shards = tuple(self.ev(s) for s in op.shard_owners)
        self.bufs[op.slot] = _Buffer(op.slot, shape, owner, op.device, self.task, self.ordinal, op.shard_size, shards,
                                     self.p.slots[op.slot].undefined)
        self.ordinal += 1

    def free(self, op: P.Free) -> None:
        buf = self.bufs[op.slot]
        if buf.device:
            bit = 1 << tl.pair_bit(tl.cuda_in_order_instr)
            shared = self.p.slots[op.slot].shared
            iv = self.access(op.site, 0).iv
            for e in range(buf.n):
                mask = buf.shard_owners[e // buf.shard_size] if buf.shard_size else buf.owner
                if mask < 0:
                    continue  # a shard no statement uses
                owner = self.threads(mask) if buf.task == self.task else ()
                acc = P.RawAccess(op.site, mask, buf.task, iv, self.events_total)
                recs = ([("w", buf.w[e])] if buf.w[e] is not None else []) + [("r", r) for r in reversed(buf.r[e])]
                for which, rec in recs:
                    rec = _find(rec)
                    if shared:  # reused by the next task or block: a write by the whole owning collective
                        ok = ss.covers(rec.vs, owner, bit)
                    else:  # registers: reused by their owners only, once their own (async) accesses completed
                        ok = all(ss.covers(rec.vs, ss.intersect_threads(((lo, hi),), owner), _completion(b))
                                 for lo, hi, b in rec.va)
                    if not ok:
                        self.hazard(P.FREE, buf, e, op.site, buf.owner, rec, which, acc)
                        break
        self.bufs[op.slot] = None

    def task_begin(self, op: P.TaskBegin) -> None:
        self.task = self.n_tasks
        self.base = self.task * op.threads
        self.n_tasks += 1
        for (qid, k), variants in self.carried.items():
            for v, ((threads, waiters), acc) in enumerate(variants.items()):
                self.orders[qid, k, v] = _Order(acc, ss.shift(threads, self.base),
                                                tuple((lo + self.base, hi + self.base) for lo, hi in waiters))

    def task_end(self, op: P.TaskEnd) -> None:
        """The orders left for a barrier's next scope (end_barrier) are the obligations of the CTA's next task,
        which on the GPU is the task a grid's width later, not the checker's next: every later task inherits
        those of every earlier one (kept CTA-relative: the same threads in every task)."""
        self.live.pop(self.task, None)
        for (qid, k, _), order in self.orders.items():
            waiters = tuple((lo - self.base, hi - self.base) for lo, hi in order.waiters)
            self.carried.setdefault((qid, k), {}).setdefault((ss.shift(order.threads, -self.base), waiters), order.acc)
        self.orders.clear()
        self.task, self.base = -1, 0

    def orders_at(self, qid: int, k: int) -> list:
        """The keys of the orders of the await of arrive k on queue qid (several variants where k <= 0)."""
        return [key for key in self.orders if key[0] == qid and key[1] == k]

    def device_boundary(self, op: P.DeviceBoundary) -> None:
        """A full barrier: every live buffer forgets its records (and the next launch initialises its barriers)."""
        self.orders.clear()
        self.carried.clear()
        for buf in self.bufs:
            if buf is not None:
                buf.w = [None] * buf.n
                buf.r = [()] * buf.n
        self.table.clear()
        self.live.clear()

    def check(self, op: P.Check) -> None:
        if not self.ev(op.cond):
            raise _Stop(op.error, self.access(op.site, 0))

    # ---- synchronization ----

    def fence(self, op: P.Fence) -> None:
        threads = self.threads(self.ev(op.mask))
        v2a, v2s = ss.product(threads, op.m2a), ss.product(threads, op.m2s)
        for rec in list(self.live.get(self.task, ())):
            if rec.fwd is None and ss.meets(rec.va, threads, op.m1):
                self.update(rec, ss.union(rec.va, v2a), ss.union(rec.vs, v2s), rec.pending)
        self.settle()
        if op.barrier:
            self.join(threads)

    def join(self, threads: tuple) -> None:
        """Execution order: `threads` have waited for each other, so each is ordered after what any one was."""
        for order in self.orders.values():
            if order.reached_by(threads):
                order.join(ss.product(threads, 1))

    def same_threads(self, qid: int, attr: str, mask: int, code: int, acc: P.RawAccess) -> None:
        q = self.queues[qid]
        if not self.p.queues[qid].rule.same_threads or not mask:
            return
        first = getattr(q, attr)
        if first is None:
            setattr(q, attr, mask)
        elif first != mask:
            raise _Stop(code, acc, qid)

    def arrive(self, op: P.Arrive) -> None:
        qid, mask = self.ev(op.queue), self.ev(op.mask)
        q, rule = self.queues[qid], self.p.queues[qid].rule
        acc = self.access(op.site, mask)
        self.same_threads(qid, "arrive_mask", mask, P.ERR_ARRIVE_THREADS, acc)
        q.arrives.append(acc)
        q.tx_expected.append(op.tx)
        n = len(q.arrives)
        slot = parity = -1
        if rule.depth:
            slot, parity = (n - 1) % rule.depth, ((n - 1) // rule.depth) & 1
            reuse = n - rule.depth  # the arrive whose ring slot this one takes over (<= 0: the previous scope's)
            orders = [self.orders.pop(key) for key in self.orders_at(qid, reuse)]
            if reuse >= 1 and not orders:  # not awaited yet
                self.sync_hazard(P.DEADLOCK, op.site, acc, q.arrives[reuse - 1], qid, (0, n, slot, rule.depth, reuse))
            late = [o for o in orders if not o.taken_over_by(self.threads(mask))]
            if late:
                code = 2 if reuse >= 1 else 4
                self.sync_hazard(P.DEADLOCK, op.site, acc, late[0].acc, qid, (code, n, slot, rule.depth, reuse))
        self.event(qid, n, slot, parity, acc)
        if not mask:
            return  # CPU code: nothing to mark
        threads = self.threads(mask)
        if not rule.scope:  # a commit group orders its own threads' async instructions only
            for order in self.orders.values():
                if order.reached_by(threads):
                    order.carry(qid, n)
        own = self.ev(op.own)
        for rec in list(self.live.get(self.task, ())):
            if rec.fwd is None and (own or not rec.glob) and ss.meets(rec.va, threads, op.m1):
                mark_threads = ss.threads_with(rec.va, op.m1, threads) if rule.scope else ()
                self.update(rec, rec.va, rec.vs, _add_mark(rec.pending, qid, n, mark_threads))
                q.pending.add(rec)
        self.settle()

    def await_(self, op: P.Await) -> None:
        qid, mask = self.ev(op.queue), self.ev(op.mask)
        q, rule = self.queues[qid], self.p.queues[qid].rule
        acc = self.access(op.site, mask)
        self.same_threads(qid, "await_mask", mask, P.ERR_AWAIT_THREADS, acc)
        q.awaits += 1
        k = q.awaits - rule.lag if rule.lag is not None else len(q.arrives) - op.n
        slot = parity = -1
        if rule.depth and k >= 1:
            slot, parity = (k - 1) % rule.depth, ((k - 1) // rule.depth) & 1
        self.event(qid, k, slot, parity, acc)
        if k > len(q.arrives):
            self.sync_hazard(P.DEADLOCK, op.site, acc, None, qid, (1, k, len(q.arrives)))
            return
        if k < 1:
            return
        self.check_tx(qid, k, op.site, acc)
        q.upto = max(q.upto, k)
        threads = self.threads(mask)
        self.awaited(qid, k, threads, acc)
        if not mask:
            return
        floor = q.awaits + 1 - rule.lag if rule.lag is not None else len(q.arrives) - rule.max_wait_n
        for rec in list(q.pending):
            rec = _find(rec)
            mark = _mark_of(rec.pending, qid)
            if mark is None:
                continue
            va, vs, pending = rec.va, rec.vs, rec.pending
            if mark[1] == 0 and not rule.scope and ss.covers(vs, threads, op.m2a):
                continue  # already visible to this collective, and due for every future await
            if mark[1] <= k:
                c2 = threads if not rule.scope else ss.intersect_threads(_widen(mark[2], rule.scope, self.base), threads)
                va = ss.union(va, ss.product(c2, op.m2a))
                vs = ss.union(vs, ss.product(c2, op.m2s))
            if 0 < mark[1] <= floor:
                pending = _add_mark(tuple(m for m in pending if m[0] != qid), qid, 0, mark[2])
            self.update(rec, va, vs, pending)
        self.settle()

    def check_tx(self, qid: int, n: int, site: int, acc: P.RawAccess) -> None:
        """Phase n of a queue must receive exactly the TMA bytes its arrive expects (else a TX hazard)."""
        q = self.queues[qid]
        expected = q.tx_expected[n - 1] if n <= len(q.arrives) else 0
        delivered = q.tx_delivered.get(n, 0)
        if expected != delivered:
            self.sync_hazard(P.TX, site, acc, q.arrives[n - 1] if n <= len(q.arrives) else None, qid,
                             (n, expected, delivered))

    def trail(self, op: P.Trail) -> None:
        """A TMA load completes on the phase its issuer's next arrive closes (program.Trail)."""
        mask = self.ev(op.mask)
        n = len(self.queues[self.ev(op.own)].arrives) + 1
        qids = [self.ev(q) for q in op.queues]
        for qid in qids:
            self.check_landing_slot(qid, n, mask, op.site)
        for qid in qids:
            got = self.queues[qid].tx_delivered
            got[n] = got.get(n, 0) + op.tx
        threads = self.threads(mask)
        for order in self.orders.values():  # the phase completes only once the load issued now completes
            if order.reached_by(threads):
                for qid in qids:
                    order.carry(qid, n)
        for glob in (False, True):  # the load's shared memory writes and global memory reads
            rec = self.table.get((ss.product(threads, 1 << op.pair), ss.product(threads, 0), (), glob))
            if rec is None:
                continue
            pending = rec.pending
            for qid in qids:
                pending = _add_mark(pending, qid, n, ())
            self.update(rec, rec.va, rec.vs, pending)
        self.settle()

    def check_landing_slot(self, qid: int, n: int, mask: int, site: int) -> None:
        """A TMA load signals the slot of phase n of each queue it completes on as soon as it lands, whatever
        phase that slot is in then: unless the queue's arrive n came already, its issuing threads must be ordered
        after the await of arrive n - depth (the slot's previous phase), like an arrive taking the slot over."""
        q, depth = self.queues[qid], self.p.queues[qid].rule.depth
        reuse = n - depth
        if not depth or len(q.arrives) >= n:
            return
        orders = [self.orders[key] for key in self.orders_at(qid, reuse)]
        late = [o for o in orders if not ss.covers(o.threads, self.threads(mask), 1)]
        if late or (reuse >= 1 and not orders):
            other = late[0].acc if late else q.arrives[reuse - 1] if reuse <= len(q.arrives) else None
            self.sync_hazard(P.DEADLOCK, site, self.access(site, mask), other, qid, (5, n, (n - 1) % depth, depth, reuse))

    def drain(self, qid: int, site: int) -> None:
        """The generated scope end: the awaiting threads wait for the phases their first `lag` awaits skipped
        (of the arrives no await paired with), which orders them after those arrives as awaits would."""
        q, rule = self.queues[qid], self.p.queues[qid].rule
        if not rule.lag or q.await_mask is None:
            return
        threads = self.threads(q.await_mask)
        for k in range(q.upto + 1, len(q.arrives) + 1):
            self.awaited(qid, k, threads, self.access(site, 0))

    def awaited(self, qid: int, k: int, threads: tuple, acc: P.RawAccess) -> None:
        """`threads` waited for phase k of queue qid: each order carried to an arrive up to k now holds them, and
        on a ring their await starts the order that arrive k + depth (or a TMA load on its slot) checks."""
        for order in self.orders.values():
            if order.marks.get(qid, k + 1) <= k:
                order.join(ss.product(threads, 1))
        if self.p.queues[qid].rule.depth:
            self.orders[qid, k, 0] = _Order.of_await(acc, threads)

    def event(self, qid: int, index: int, slot: int, parity: int, acc: P.RawAccess) -> None:
        self.events_total += 1
        if len(self.events) < self.max_events:
            self.events.append(P.RawEvent(qid, index, slot, parity, acc))

    def end_barrier(self, op: P.EndBarrier) -> None:
        """Every arrive must have been awaited (but a ring's last `lag`), and on a ring paired by lag the awaits
        and the arrives must be as many (the generated code drains the phases the first `lag` awaits skipped, so
        that the next task starts even: an await without its arrive waits forever, an arrive without its await
        leaves the awaiting threads' count behind, and their next awaits pair with old phases); the queues start
        again, but for the threads that arrive and await on each (their phase counters live on)."""
        ended = range(op.q0, op.q0 + op.count)
        for qid in ended:
            self.drain(qid, op.site)
        # The next scope reuses the mbarriers, counting on: its arrive j takes over the slot of arrive
        # narr + j - depth of this one. The awaits of this scope's last `depth` arrives stay as orders j - depth
        # (<= 0), checked by the arrive (or TMA load) that takes their slot over (see arrive).
        kept = {}
        for (qid, k, v), order in self.orders.items():
            if qid in ended:
                k -= len(self.queues[qid].arrives)
                if k > -self.p.queues[qid].rule.depth:
                    kept[qid, k, v] = order
            else:
                kept[qid, k, v] = order
        self.orders = kept
        for order in self.orders.values():
            order.marks = {qid: n for qid, n in order.marks.items() if qid not in ended}
        for qid in ended:
            q, rule = self.queues[qid], self.p.queues[qid].rule
            slack = rule.lag or 0
            unawaited = len(q.arrives) - q.upto
            if unawaited > slack:
                self.sync_hazard(P.COUNT, op.site, q.arrives[q.upto], None, qid, (unawaited, slack))
            elif rule.lag and q.awaits < len(q.arrives):  # the generated scope end waits for the awaits' phases only
                self.sync_hazard(P.COUNT, op.site, q.arrives[q.awaits], None, qid, (len(q.arrives), q.awaits, rule.lag))
            if rule.lag and q.awaits > len(q.arrives):  # the generated scope end waits for the phases of every await
                self.sync_hazard(P.DEADLOCK, op.site, self.access(op.site, 0), None, qid,
                                 (3, q.awaits, len(q.arrives), rule.lag))
            last = max([len(q.arrives), *q.tx_delivered])
            for n in range(q.upto + 1, last + 1):  # phases no await checked (a ring's last lag; loads no arrive closes)
                self.check_tx(qid, n, op.site, self.access(op.site, 0))
            for rec in list(q.pending):
                rec = _find(rec)
                if _mark_of(rec.pending, qid) is not None:
                    self.update(rec, rec.va, rec.vs, tuple(m for m in rec.pending if m[0] != qid))
            self.queues[qid] = _QueueState()
            self.queues[qid].arrive_mask, self.queues[qid].await_mask = q.arrive_mask, q.await_mask
        self.settle()

    dispatch = {
        P.Access: access_op,
        P.Alloc: alloc,
        P.Free: free,
        P.TaskBegin: task_begin,
        P.TaskEnd: task_end,
        P.DeviceBoundary: device_boundary,
        P.Check: check,
        P.Fence: fence,
        P.Arrive: arrive,
        P.Trail: trail,
        P.Await: await_,
        P.EndBarrier: end_barrier,
    }


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
