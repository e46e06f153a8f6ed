"""A checked proc as one flat list of synchronization operations: what both sync engines run.

`lower.py` makes a `Program` from a proc (and its `Analysis`) once; the
reference engine (`reference.py`, Python) executes its ops one by one, and the
fast engine (`cprint.py` + `_machine.c`) prints them as C. Neither engine
looks at LoopIR, so both cover every construct the lowering produces, and
every op type has exactly one meaning, given here.

State the ops act on (SYNC_MODEL.md): integer variables `V[0..n_vars)`
(sizes, loop iterators, window offsets); buffers (one per `slot`, re-created
by each `Alloc`) whose elements hold a write record and read records; queue
barriers (one per `queue` id: a barrier position, forward or reverse); the
running task. A thread set is a `mask` id: an index into `Program.masks`,
thread intervals relative to the running task's first thread (mask 0: no
threads, i.e. CPU code). Which collective runs a statement is usually a
`Table` lookup: a tiling's collectives indexed by its cuda_threads iterators.

Expressions are integers with Python's floor division and modulo; a division
by zero stops the run with an error.

Reports name things through `sites`: each op that can be reported (accesses,
syncs, frees, scope ends) carries a site id: the statement, the loops whose
values the report shows, the instr-tl, and the threads per task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional, Union

from ..analysis.barriers import QueueRule
from ..analysis.result import StmtRef
from ..core import timelines as tl

# ---- expressions ----


@dataclass(frozen=True)
class Const:
    value: int


@dataclass(frozen=True)
class Var:
    var: int


@dataclass(frozen=True)
class Bin:
    """lhs op rhs; op in + - * / % < > <= >= == and or (/ and % floor, as Python's // and %)."""

    op: str
    lhs: "Expr"
    rhs: "Expr"


@dataclass(frozen=True)
class Neg:
    arg: "Expr"


@dataclass(frozen=True)
class Table:
    """Element `index` of table `table` (a tiling's mask ids, row-major over its cuda_threads iterators)."""

    table: int
    index: "Expr"


Expr = Union[Const, Var, Bin, Neg, Table]
BIN_OPS = ("+", "-", "*", "/", "%", "<", ">", "<=", ">=", "==", "and", "or")


def render(e: Expr, dialect: dict) -> str:
    """An expression as source text: `dialect` gives the format of "const", "var", "table" and "neg" and
    of each binary operator (both engines print expressions with it: Python source, C source)."""
    if isinstance(e, Const):
        return dialect["const"].format(e.value)
    if isinstance(e, Var):
        return dialect["var"].format(e.var)
    if isinstance(e, Neg):
        return dialect["neg"].format(render(e.arg, dialect))
    if isinstance(e, Table):
        return dialect["table"].format(e.table, render(e.index, dialect))
    return dialect[e.op].format(render(e.lhs, dialect), render(e.rhs, dialect))


def add(a: Expr, b: Expr) -> Expr:
    """a + b, folding constants (both engines then see the simplest form)."""
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value + b.value)
    if isinstance(a, Const) and a.value == 0:
        return b
    if isinstance(b, Const) and b.value == 0:
        return a
    return Bin("+", a, b)


def mul(a: Expr, b: Expr) -> Expr:
    """a * b, folding constants."""
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value * b.value)
    if isinstance(a, Const) and a.value == 1:
        return b
    if isinstance(b, Const) and b.value == 1:
        return a
    if (isinstance(a, Const) and a.value == 0) or (isinstance(b, Const) and b.value == 0):
        return Const(0)
    return Bin("*", a, b)


# ---- operations ----


@dataclass(frozen=True)
class Let:
    """V[var] = value."""

    var: int
    value: Expr


@dataclass(frozen=True)
class For:
    """for V[var] in [lo, hi) (both evaluated once, on entry): the ops up to `end` (its EndFor)."""

    var: int
    lo: Expr
    hi: Expr
    end: int


@dataclass(frozen=True)
class EndFor:
    start: int  # the index of its For


@dataclass(frozen=True)
class If:
    """If cond is 0, continue after `orelse` (an Else, or the EndIf when there is no else branch)."""

    cond: Expr
    orelse: int


@dataclass(frozen=True)
class Else:
    end: int  # the index of its EndIf


@dataclass(frozen=True)
class EndIf:
    pass


@dataclass(frozen=True)
class TaskBegin:
    """A new task: its own top-level collective of `threads` threads (signatures of different tasks never
    match). Tasks are numbered from 0 in execution order; task k's threads are k * threads + its masks."""

    threads: int


@dataclass(frozen=True)
class TaskEnd:
    """The task's records take part in no more syncs."""


@dataclass(frozen=True)
class DeviceBoundary:
    """A device function starts or ends: a full barrier, so every live buffer forgets its records."""


@dataclass(frozen=True)
class Alloc:
    """A fresh buffer in `slot` (a proc argument, or an allocation) with no records.

    `owner`: the mask of the allocating collective (0 on the CPU); `device`: allocated in device code.
    Distributed shared memory (seed 000; e.g. shared memory of a cluster split per CTA) is split into
    shards of `shard_size` consecutive elements, and each shard is reused after the free by its own
    owners only: `shard_owners` holds each shard's owner mask (-1: a shard no statement uses).
    """

    slot: int
    shape: tuple  # of Expr
    owner: Expr
    device: bool
    shard_size: int = 0  # 0: not split; the whole buffer is the owner's
    shard_owners: tuple = ()  # of Expr


@dataclass(frozen=True)
class Free:
    """The end of slot's scope. In device code the free is a write by the owners (of the element's
    shard, for distributed shared memory): every record must be visible to them (shared memory: to the
    whole owning collective; registers: each owner's own accesses complete, on `COMPLETION`), else a
    FREE hazard; then the buffer is gone."""

    slot: int
    site: int


READ, WRITE, UPDATE = 1, 2, 3  # Access modes: bit 1 reads, bit 2 writes (an update reads, then writes)


@dataclass(frozen=True)
class Access:
    """Element `element` of `slot` accessed by the threads of `mask` on pair bit `pair` ((instr-tl,
    usage-tl)): a read, a write, or an update (a read, then a write: a Reduce's target). A read needs the
    writer's record visible to every reader (else RAW) and joins the element's read records; a write
    needs it too (WAW) and every read record visible (WAR), and replaces them all. The new record is
    visible to its own threads on the pair's program order (`PROGRAM_ORDER`), or to none when the
    instr-tl is asynchronous or `unordered` (sync/access.py). CPU code makes no accesses.
    `first_only`: a private register access (lower.py, `private_accesses`), which can be part of no hazard:
    only the element's first access since its allocation is made (a read is UNINIT); later ones do nothing."""

    slot: int
    element: Expr
    mask: Expr
    pair: int
    mode: int  # READ, WRITE or UPDATE
    unordered: bool
    site: int
    first_only: bool = False


@dataclass(frozen=True)
class Fence:
    """Records whose V_A meets m1 x C get V_A |= m2a x C and V_S |= m2s x C (C: the threads of mask).
    `barrier`: the threads of C wait for each other (every Fence but a bare wgmma.fence), which orders
    them in execution (see Arrive)."""

    mask: Expr
    m1: int
    m2a: int
    m2s: int
    barrier: bool


@dataclass(frozen=True)
class Arrive:
    """Arrive on queue `queue`: the records meeting m1 x C become pending on this arrive. `tx`: the bytes
    of TMA loads its phase expects (mbarrier.arrive.expect_tx; 0 for a plain arrive): the await that pairs
    with it checks them against the bytes delivered to the phase (see `Trail`). `own` zero: the queue is
    another CTA's barrier (a multicast arrive's remote part), which the CUDA signals at the default .cta
    scope: records of global memory do not become pending there (another CTA's threads are not ordered
    after this CTA's global accesses by it; shared memory the arriving CTA has finished with is).

    On a ring (QueueRule.depth D), arrive n reuses the slot of arrive n - D: every thread of C must be
    ordered after the await of arrive n - D in execution order (program order, Fences with `barrier`,
    and arrive -> await edges of every queue but commit groups, TMA loads included, whatever the sync-tls),
    else a DEADLOCK (the arrive could complete a phase the consumer has not waited for)."""

    queue: Expr
    mask: Expr
    m1: int
    site: int
    tx: int = 0
    own: Expr = Const(1)


@dataclass(frozen=True)
class Trail:
    """A TMA load by the threads of `mask` completes on mbarriers (`copy(...) >> bar[...]`): the record its
    accesses just made (V_A = pair x C, V_S empty, no pending marks: the fresh record of an asynchronous
    access) becomes pending on each queue of `queues` at arrive n = (arrives so far on queue `own`) + 1,
    the phase that the issuing threads' next Arrive closes (the code generator picks the mbarrier slot
    from the issuer's own arrive count), and `tx` bytes are delivered to phase n of each of `queues`.
    Nothing else completes a TMA load: arrives and fences never order the TMA-load pair (lower.py drops it
    from their first sync-tl). In execution order (see Arrive), the awaits of phase n are ordered after the
    issuing threads, as after an arrive on each of `queues`."""

    mask: Expr
    pair: int
    queues: tuple  # of Expr
    own: Expr
    tx: int
    site: int


@dataclass(frozen=True)
class Await:
    """Await on queue `queue` with N = n (the queue's rule pairs it with an arrive): records pending on
    that arrive or an earlier one get V_A |= m2a x C, V_S |= m2s x C."""

    queue: Expr
    mask: Expr
    m2a: int
    m2s: int
    n: int
    site: int


@dataclass(frozen=True)
class EndBarrier:
    """The end of a barrier's scope: queues q0 .. q0 + count - 1 must have every arrive awaited (but a
    ring's last `lag`), else a COUNT hazard; their pending marks go, and they start again empty."""

    q0: int
    count: int
    site: int


@dataclass(frozen=True)
class Check:
    """Stop the run with error `error` at `site` unless cond holds (a barrier index in range)."""

    cond: Expr
    error: int
    site: int


def index_of(e: int, shape: tuple) -> tuple:
    """Element `e` of a row-major buffer of `shape` as its index (a dimension of extent 0 takes e whole)."""
    out = []
    for d in reversed(shape):
        out.append(e % d if d else e)
        e = e // d if d else 0
    return tuple(reversed(out))


def execute(ops: tuple, V: list, ev: Callable, handlers: dict) -> None:
    """Run `ops` on the variables `V`: loops, Lets and Ifs here (`ev` evaluates an Expr), every other op by
    `handlers[type(op)](op)` (an op type it lacks is skipped). The one interpreter of control flow in Python."""
    ends: list = []  # loop bounds (hi) of the enclosing For ops
    pc, n = 0, len(ops)
    while pc < n:
        op = ops[pc]
        kind = type(op)
        if kind is For:
            lo, hi = ev(op.lo), ev(op.hi)
            if lo >= hi:
                pc = op.end + 1
                continue
            V[op.var] = lo
            ends.append(hi)
        elif kind is EndFor:
            var = ops[op.start].var
            V[var] += 1
            if V[var] < ends[-1]:
                pc = op.start + 1
                continue
            ends.pop()
        elif kind is Let:
            V[op.var] = ev(op.value)
        elif kind is If:
            if not ev(op.cond):
                pc = op.orelse + 1
                continue
        elif kind is Else:
            pc = op.end + 1
            continue
        elif kind is not EndIf:
            handler = handlers.get(kind)
            if handler is not None:
                handler(op)
        pc += 1


OPS = (Let, For, EndFor, If, Else, EndIf, TaskBegin, TaskEnd, DeviceBoundary, Alloc, Free, Access, Fence, Arrive,
       Trail, Await, EndBarrier, Check)  # fmt: skip

# Run errors (a SyncError at the site's statement; sync/report.py words them).
ERR_INDEX, ERR_BARRIER_INDEX, ERR_DIVISION, ERR_SHAPE, ERR_ARRIVE_THREADS, ERR_AWAIT_THREADS, ERR_CTA, ERR_ALIGN, ERR_BOX = (
    range(1, 10))

# Hazard kinds, in the order of the report's names.
HAZARD_KINDS = ("RAW", "WAR", "WAW", "FREE", "DEADLOCK", "COUNT", "TX", "UNINIT")
RAW, WAR, WAW, FREE, DEADLOCK, COUNT, TX, UNINIT = range(8)

# V_S pairs of a new ordered access per pair bit (0 for asynchronous instr-tls, but wgmma's accumulator).
PROGRAM_ORDER = tuple(tl.program_order_mask(i, u) for i, u in tl.ALL_PAIRS)
# Per pair bit, the V_S pair bit on which a register access is complete for its owners (Free).
COMPLETION = tuple(tl.completion_pair(i, u) for i, u in tl.ALL_PAIRS)
PAIRS = len(tl.ALL_PAIRS)


# ---- tables ----


@dataclass(frozen=True)
class Site:
    """What a report says about an op: its statement, the loops it shows, the instr-tl of the access."""

    stmt: int  # index into Program.stmts
    loops: tuple  # ((iterator name, var), ...) outermost first
    instr_tl: tl.InstrTl
    task_threads: int  # threads per task: thread ids in reports are mask + task * task_threads
    sync_kind: str  # the sync statement's kind (Arrive, Await, ...), "" for other statements
    thread_loops: frozenset = frozenset()  # the vars of `loops` that are cuda_threads loops (iterations run at once)


@dataclass(frozen=True)
class Slot:
    """A buffer: an argument or an allocation statement."""

    name: str
    name_id: int  # hazards are reported once per (kind, name id, statement)
    shared: bool  # its memory is used by several collectives (freed memory is reused by others)
    remote: bool = False  # other CTAs of the cluster write it (a multicast destination): its free waits for them
    global_memory: bool = False  # its records are kept apart: a remote arrive leaves them out (see `Arrive`); set
    #   only in programs that have remote arrives
    undefined: bool = False  # an allocation: an element holds no value until written, so a read before is UNINIT


@dataclass(frozen=True)
class Queue:
    """One queue barrier: a position of a barrier, forward or reverse."""

    barrier: str
    position: tuple
    reverse: bool
    rule: QueueRule
    kind_prefix: str  # "Reverse" or ""
    source: int = -1  # multicast arrives (`>> bar[:]`): the CTA (its rank in the slice) whose arrives this
    #   queue counts, a phase of the barrier completing once every source made its arrive; with `group`: the
    #   group of threads whose own queue this is (-1: neither)
    group: int = 0  # a commit group's queue per group of this many threads (per thread, per warpgroup), or 0


@dataclass(frozen=True)
class Program:
    """A proc lowered for the sync engines (see the module docstring)."""

    proc: str
    ops: tuple
    n_vars: int
    sizes: tuple  # ((size name, var), ...): the variables set from sync_check's sizes
    masks: tuple  # mask id -> ((lo, hi), ...) thread intervals within a task; 0: no threads
    tables: tuple  # table id -> (mask id, ...)
    slots: tuple  # of Slot
    queues: tuple  # of Queue
    sites: tuple  # of Site
    stmts: tuple  # of StmtRef
    max_threads: int  # threads per task, at most

    def threads(self, mask: int, task: int, site: int) -> tuple:
        """A mask of a task as global thread intervals (what reports show)."""
        base = task * self.sites[site].task_threads if mask else 0
        return tuple((lo + base, hi + base) for lo, hi in self.masks[mask])

    def stmt_of(self, site: int) -> StmtRef:
        return self.stmts[self.sites[site].stmt]


# ---- what an engine returns (both the same; sync/report.py turns it into a SyncReport) ----


class RawAccess(NamedTuple):
    """Who did something: the site, the collective (mask of a task) and the site's loop values."""

    site: int
    mask: int
    task: int
    iv: tuple
    seq: int  # barrier events (arrives and awaits) the run had made before it: where it falls among them


class RawHazard(NamedTuple):
    kind: int  # index into HAZARD_KINDS
    slot: int  # the buffer's slot, -1 for barrier hazards
    ordinal: int  # the buffer's allocation number in the run (the second run watches (ordinal, element))
    element: int
    index: tuple  # the element's index in its buffer
    access: RawAccess  # where the hazard is detected (COUNT: the first arrive never awaited)
    other: Optional[RawAccess]  # the conflicting earlier access, when the run watched this element
    queue: int  # barrier hazards: the queue, else -1
    params: tuple  # numbers the message needs (see sync/report.py)
    events_before: int  # barrier events (arrives and awaits) the run had made when it found the hazard


class RawEvent(NamedTuple):
    """An arrive or await: `index` is the arrive's number (awaits: the arrive they pair with)."""

    queue: int
    index: int
    slot: int  # ring slot, -1 if none
    parity: int  # phase parity, -1 if none
    access: RawAccess


@dataclass
class RawRun:
    hazards: list  # of RawHazard, in the order found
    truncated: bool  # more hazards than max_hazards
    events: list  # of RawEvent, the first max_events
    events_total: int
    error: Optional[tuple] = None  # (ERR_*, RawAccess or None, queue or -1) if the run stopped on an error


def mask_of_intervals(masks: list, index: dict, intervals: tuple) -> int:
    """The mask id of a thread set, adding it to `masks` the first time."""
    found: Optional[int] = index.get(intervals)
    if found is None:
        found = index[intervals] = len(masks)
        masks.append(intervals)
    return found
