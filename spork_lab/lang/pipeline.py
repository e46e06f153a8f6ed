"""Asynchronous software pipelining of a sequential loop: the scheduling op `pipeline_loop` (issue 13).

The user gives a `seq` loop, a stage for each statement of its body, the
asynchronous stages and a barrier memory. Stage s of the pipelined loop works
on tile `t` at time step `t + s`, so a statement runs `s` tiles behind stage 0
(TVM's software pipeline, seed 002). The op

1. finds each buffer written by one stage p and read by a later stage c (a
   *ring*) and gives it a leading ring dimension of depth `max(c) - p + 1`,
   indexed by the tile modulo the depth;
2. inserts the synchronization, one new barrier per queue:
   - commit groups (a memory that pairs by count, `CudaCommitGroup`): one
     queue per stage that writes asynchronously (cp.async, wgmma), for the
     buffers it writes so: an Arrive after its last write, at every time step
     (an empty group where the stage has no tile keeps the counts constant),
     and before each stage that reads them an Await whose N is the producer
     head minus the consumer head (the groups committed after the one the
     reader needs); a final `Await(..., 0)` after the loops when some N > 0;
   - mbarrier rings (a memory that pairs by lag, `CudaMbarrier`): one queue
     per handoff (a producing stage and the stages reading what it writes,
     synchronously or not): Arrive after the producer's writes and Await (lag
     0) before the first reading stage, and for slot reuse a ReverseArrive
     after the last reading stage and a ReverseAwait (lag = ring depth)
     before the producer; these travel with their stage's statements;
3. skews the loop: a prologue loop (time steps before the last stage has a
   tile), the steady-state loop (the original loop, every stage busy) and an
   epilogue loop; or, with `keep_loop=True`, one loop over every time step
   whose statements are guarded by their stage's tile range.

When every statement of the body is a `with CudaWarps` block (warp
specialization), the stages already run concurrently on their own warps: the
loop is not skewed, and the ring lets the producer run up to depth - 1 tiles
ahead. On an mbarrier, a side of a queue whose statements are one `with
CudaWarps` block or one `cuda_threads` loop gets its barrier statements inside
it (run by those threads), otherwise around it; commit-group statements are
always run by the loop's collective.

The op changes the schedule, not what is computed: it refuses (SchedulingError
naming the statements) loops it cannot pipeline without changing the result.
Ordering between different threads of one collective (a Fence after an Await,
or before a slot is overwritten) is not derived: such Fences are statements of
the body like any other, and `sl.sync_check` says where one is missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from exo.API import Procedure
from exo.API_scheduling import ArgumentProcessor, BoolA, ForCursorA, sched_op
from exo.core import internal_cursors as ic
from exo.core.LoopIR import Alpha_Rename, LoopIR, SubstArgs, T
from exo.core.prelude import Sym
from exo.rewrite.LoopIR_scheduling import (
    Check_CompareExprs,
    DoLiftAllocSimple,
    SchedulingError,
    _compose,
    _replace_reads,
    _replace_writes,
)

from ..core.blocks import CudaAsync, CudaDeviceFunction, CudaWarps
from ..core.coll import cuda_cta_in_cluster
from ..core.instrs import instr_info
from ..core.ir import constant_value, interval_width, walk_stmts
from ..core.loop_modes import CudaThreads, WithBlock
from ..core.memories import SMEM_PER_CTA, CudaMemory, elem_bytes
from ..core.sync_stmts import (
    BARRIER_CARRIER,
    BarrierMemory,
    SyncSpec,
    is_barrier_alloc,
    is_point_interval,
    sync_proc,
    sync_spec_of,
    trailing_barrier,
)
from ..core.timelines import SYNC_TLS, InstrTl, SyncTl, cuda_in_order, cuda_in_order_instr, default_usage

# pipeline_loop's default budget: the most shared memory one CTA may use on sm_90 (227 KiB); pass smem_budget=
# for other targets.
SMEM_BUDGET = SMEM_PER_CTA[90]


# ---------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------


def _is_stage(s) -> bool:
    return isinstance(s, int) and not isinstance(s, bool) and s >= 0


class _StagesA(ArgumentProcessor):
    """A stage per body statement (list of ints), or a rule: {buffer name: stage, "*": stage of the rest}."""

    def __call__(self, stages, all_args):
        if isinstance(stages, (list, tuple)):
            if not stages or not all(map(_is_stage, stages)):
                self.err(f"expected a list of stages (ints >= 0), one per statement of the loop body, got {stages!r}")
            return list(stages)
        if isinstance(stages, dict):
            if not all(isinstance(k, str) and _is_stage(v) for k, v in stages.items()):
                self.err(f'expected {{buffer name: stage, "*": stage}} with stages >= 0, got {stages!r}')
            return dict(stages)
        self.err(f'expected a list of stages or a rule {{"buffer": stage, "*": stage}}, got {stages!r}')


class _StageListA(ArgumentProcessor):
    def __call__(self, stages, all_args):
        if not isinstance(stages, (list, tuple)) or not all(map(_is_stage, stages)):
            self.err(f"expected a list of stage numbers, e.g. [0], got {stages!r}")
        return sorted(set(stages))


class _PipelineBarrierA(ArgumentProcessor):
    """A barrier memory (a new barrier is allocated) or the name of a barrier the proc allocates."""

    def __call__(self, barrier, all_args):
        if isinstance(barrier, str):
            return barrier
        if isinstance(barrier, type) and issubclass(barrier, BarrierMemory):
            if not barrier.lives_on_device:
                self.err(f"{barrier.name()} barriers live in CPU code; pipeline with CudaCommitGroup or CudaMbarrier")
            return barrier
        self.err(f"expected a barrier memory (CudaCommitGroup, CudaMbarrier) or the name of a barrier, got {barrier!r}")


class _OptSyncTlA(ArgumentProcessor):
    def __call__(self, tl, all_args):
        if tl is not None and not isinstance(tl, SyncTl):
            self.err(f"expected a sync-tl such as cuda_in_order (or None for the default), got {tl!r}")
        return tl


class _OptNameA(ArgumentProcessor):
    def __call__(self, name, all_args):
        if name is not None and (not isinstance(name, str) or not name.isidentifier()):
            self.err(f"expected a barrier name (or None for a fresh one), got {name!r}")
        return name


class _ReleaseWithA(ArgumentProcessor):
    def __call__(self, mem, all_args):
        if mem is None:
            return None
        if not (isinstance(mem, type) and issubclass(mem, BarrierMemory) and mem.lives_on_device and not mem.pairs_by_lag):
            self.err(f"expected a commit-group barrier memory (CudaCommitGroup) or None, got {mem!r}")
        return mem


class _CountA(ArgumentProcessor):
    def __call__(self, n, all_args):
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            self.err(f"expected a number >= 0, got {n!r}")
        return n


class _OrderA(ArgumentProcessor):
    def __call__(self, order, all_args):
        if order is None:
            return None
        if not isinstance(order, (list, tuple)) or not all(map(_is_stage, order)):
            self.err(f"expected the body's statement numbers in the order a time step runs them, got {order!r}")
        return list(order)


class _PosIntA(ArgumentProcessor):
    def __call__(self, n, all_args):
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            self.err(f"expected a positive number of bytes, got {n!r}")
        return n


# ---------------------------------------------------------------------------
# What the body does: stages, buffer accesses, rings and barrier queues
# ---------------------------------------------------------------------------

# How many leading dimensions of an allocation are distributed (seed 000, distributed memory). The dist
# analysis knows; it sits above this layer, and spork_lab/__init__.py registers it here (`register_distributed_dims`).
_DISTRIBUTED_DIMS: list = [lambda proc_ir: {}]


def register_distributed_dims(fn) -> None:
    """fn(proc LoopIR) -> {allocation Sym: number of leading distributed dimensions}; called by spork_lab."""
    _DISTRIBUTED_DIMS[0] = fn


def _where(s) -> str:
    """`file.py:12 `text`` for a statement named in an error; a loop or block whose body is one statement shows
    that statement too (`for t in cuda_threads(0, 128): dst[t] = buf[t]`), so the reader sees what it does."""
    src, lines = s.srcinfo, [_first_line(s)]
    while isinstance(s, LoopIR.For) and len(s.body) == 1:
        s = s.body[0]
        lines.append(_first_line(s))
    if isinstance(s, LoopIR.For) and s.body:
        lines.append(_first_line(s.body[0]) + " ...")
    return f"{Path(src.filename).name}:{src.lineno} `{' '.join(lines)}`"


def _first_line(s) -> str:
    return str(s).strip().split("\n")[0]


@dataclass
class _Stmt:
    """One statement of the loop body: its stage and the buffers it reads and writes (by Sym)."""

    index: int
    node: LoopIR.stmt
    stage: int
    reads: set
    writes: set
    async_writes: set  # the writes made inside `with CudaAsync(...)` blocks
    seq: int = -1  # its position in the loop body the user wrote (`index`: in the pipelined time step)

    def __post_init__(self):
        if self.seq < 0:
            self.seq = self.index


@dataclass
class _Ring:
    """A buffer written by stage `producer` and read by later stages: it gets a ring dimension, the first
    after its distributed dimensions (`position`), so every thread keeps its shard and the slot is outermost
    in the shard."""

    sym: Sym
    alloc: LoopIR.Alloc
    producer: int
    depth: int
    position: int = 0


@dataclass
class _Queue:
    """A barrier between a producing stage and the stages that read what it writes."""

    producer: int
    consumers: list  # stages that read its buffers (>= producer)
    buffers: set  # Syms written by the producer and read by the consumers
    instr_tl: InstrTl | None  # the producer's asynchronous instr-tl, None if it is synchronous
    bar: Sym | None = None
    bar_type: object = BARRIER_CARRIER  # the barrier's type: a scalar, or one barrier per CTA of the cluster
    inserted_alloc: LoopIR.Alloc | None = None
    multicast: bool = False  # the producer's loads land in every CTA of the cluster (`>> bar[:]`)
    read_tl: SyncTl = cuda_in_order  # how the first reading stage reads the buffers (what its Await orders)
    release: Optional["_Release"] = None


@dataclass
class _Release:
    """The last reading stage reads the ring asynchronously (wgmma reading shared memory): it commits those
    reads to a commit group of its own after the `with CudaAsync` block at `path` (body indices from the
    statement `index` down), waits until at most `in_flight` groups are pending, and only then releases a
    slot, which the release so frees `in_flight` tiles late; a drain `Await(bar, ..., 0)` follows the loop."""

    index: int
    path: tuple
    instr_tl: InstrTl
    in_flight: int
    bar: Sym | None = None
    inserted_alloc: LoopIR.Alloc | None = None


_EFFECTS_CACHE: dict = {}


def _callee_effects(f: LoopIR.proc) -> tuple:
    """(formals read, formals written) of a called proc (an instr's semantics body)."""
    key = id(f)
    if key not in _EFFECTS_CACHE:
        reads, writes = set(), set()
        _collect(f.body, {}, reads, writes)
        formals = {a.name for a in f.args}
        _EFFECTS_CACHE[key] = (f, reads & formals, writes & formals)
    return _EFFECTS_CACHE[key][1:]


def _collect(stmts: list, alias: dict, reads: set, writes: set) -> None:
    """Add the buffers (Syms, through window aliases) that `stmts` read and write."""
    for s in stmts:
        if isinstance(s, (LoopIR.Assign, LoopIR.Reduce)):
            name = alias.get(s.name, s.name)
            writes.add(name)
            if isinstance(s, LoopIR.Reduce):
                reads.add(name)
            _expr_reads(s.rhs, alias, reads)
        elif isinstance(s, LoopIR.Call):
            if sync_spec_of(s) is not None:
                continue
            f_reads, f_writes = _callee_effects(s.f)
            for a, formal in zip(s.args, s.f.args):
                if isinstance(formal.mem, type) and issubclass(formal.mem, BarrierMemory):
                    continue  # a barrier an instr completes on (a TMA load's `>> bar`) is not data
                if isinstance(a, (LoopIR.Read, LoopIR.WindowExpr)) and formal.type.is_numeric():
                    name = alias.get(a.name, a.name)
                    if formal.name in f_reads:
                        reads.add(name)
                    if formal.name in f_writes:
                        writes.add(name)
                else:
                    _expr_reads(a, alias, reads)
        elif isinstance(s, LoopIR.WindowStmt):
            alias[s.name] = alias.get(s.rhs.name, s.rhs.name)
        elif isinstance(s, LoopIR.For):
            _collect(s.body, alias, reads, writes)
        elif isinstance(s, LoopIR.If):
            _collect(s.body, alias, reads, writes)
            _collect(s.orelse, alias, reads, writes)


def _expr_reads(e, alias: dict, reads: set) -> None:
    if isinstance(e, (LoopIR.Read, LoopIR.WindowExpr)) and e.type.is_numeric():
        reads.add(alias.get(e.name, e.name))
    for child in ("lhs", "rhs", "arg"):
        if hasattr(e, child):
            _expr_reads(getattr(e, child), alias, reads)
    if isinstance(e, LoopIR.Extern):
        for a in e.args:
            _expr_reads(a, alias, reads)


def _stmt_effects(s) -> tuple:
    """(reads, writes, asynchronous writes) of a body statement, without the buffers it allocates itself."""
    reads, writes, async_writes = set(), set(), set()
    _collect([s], {}, reads, writes)
    for block in walk_stmts([s]):
        if _is_block(block, CudaAsync):
            _collect(block.body, {}, set(), async_writes)
    local = {t.name for t in walk_stmts([s]) if isinstance(t, (LoopIR.Alloc, LoopIR.WindowStmt))}
    return reads - local, writes - local, async_writes - local


def _is_block(s, ctx_type) -> bool:
    """Whether s is a `with ctx:` block whose context is a ctx_type."""
    return isinstance(s, LoopIR.For) and isinstance(s.loop_mode, WithBlock) and isinstance(s.loop_mode.ctx, ctx_type)


def _assign_stages(body: list, stages, names: dict) -> list:
    """The stage of each body statement, from the list or the rule."""
    if isinstance(stages, list):
        if len(stages) != len(body):
            listing = "\n".join(f"  {i}: {_where(s)}" for i, s in enumerate(body))
            raise SchedulingError(
                f"{len(stages)} stages for a loop body of {len(body)} statements; give one per "
                f"statement:\n{listing}"
            )
        return stages
    written = {names[w] for s in body for w in _stmt_effects(s)[1] if w in names}
    unknown = sorted(k for k in stages if k != "*" and k not in written)
    if unknown:
        raise SchedulingError(f"the stage rule names {', '.join(unknown)}, which no statement of the loop body "
                              f"writes; the body writes {', '.join(sorted(written)) or 'nothing'}")
    out = []
    for s in body:
        _, writes, _ = _stmt_effects(s)
        found = {stages[names[w]] for w in writes if names.get(w) in stages}
        if len(found) > 1:
            raise SchedulingError(f"{_where(s)} writes buffers of different stages {sorted(found)}")
        if not found and "*" not in stages:
            raise SchedulingError(
                f'{_where(s)} writes none of {sorted(k for k in stages if k != "*")}; '
                'give the other statements a stage with "*": stage'
            )
        out.append(found.pop() if found else stages["*"])
    return out


def _async_tls(s) -> set:
    """The instr-tls of the `with CudaAsync(...)` blocks inside a statement."""
    return {t.loop_mode.ctx.instr_tl for t in walk_stmts([s]) if _is_block(t, CudaAsync)}


def _plan(distributed: dict, stmts: list, by_lag: bool, warp_specialized: bool, allocs: dict) -> tuple:
    """The rings and queues of the pipeline; SchedulingError where pipelining would change the result.

    A buffer used by one stage keeps its order and needs nothing, unless the
    stage writes it asynchronously or (warp specialization) writes it in one
    warp block and reads it in another: then a queue orders the write before
    the read. A buffer read by a later stage gets a ring, and on an mbarrier
    (which orders any accesses between any threads) a queue.
    """
    by_sym: dict = {}
    for st in stmts:
        for sym in st.reads | st.writes:
            by_sym.setdefault(sym, []).append(st)
    rings, queues = {}, {}
    for sym, users in by_sym.items():
        writers = [u for u in users if sym in u.writes]
        is_async = any(sym in w.async_writes for w in writers)
        if len({u.stage for u in users}) == 1 and not (is_async or warp_specialized):
            continue
        name = allocs[sym].name if sym in allocs else sym
        if len({w.stage for w in writers}) > 1:
            a, b = writers[0], next(w for w in writers if w.stage != writers[0].stage)
            raise SchedulingError(
                f"{name} is written by stage {a.stage} ({_where(a.node)}) and by stage {b.stage} "
                f"({_where(b.node)}); a buffer may be written by one stage only"
            )
        if not writers:
            continue  # read-only: any order of the reads is the same
        p = writers[0].stage
        last_write = max(w.seq for w in writers)
        for u in users:
            if sym in u.reads and u.stage < p:
                raise SchedulingError(
                    f"a later stage feeds an earlier one: {_where(u.node)} (stage {u.stage}) reads "
                    f"{name}, which {_where(writers[0].node)} (stage {p}) writes"
                )
        readers = [u for u in users if sym in u.reads and u not in writers]
        if not readers:
            continue  # written (and maybe read back, as an accumulator) by its own stage only: order kept
        for u in users:
            if sym in u.reads and ((u.stage == p and sym in u.writes) or u.seq < last_write):
                raise SchedulingError(
                    f"{_where(u.node)} (stage {u.stage}) reads {name} before stage {p} is done writing it "
                    f"({_where(writers[-1].node)}): the value comes from an earlier iteration, and pipelining would "
                    "change which"
                )
        depth = _ring_depth(p, writers, readers, by_lag)
        if depth > 1:
            if sym not in allocs:
                raise SchedulingError(
                    f"{name} is an argument of the proc, written by stage {p} "
                    f"({_where(writers[0].node)}) and read by stage {readers[-1].stage} ({_where(readers[-1].node)}): "
                    f"it needs a ring of {depth} copies; stage it through a buffer allocated in the proc"
                )
            rings[sym] = _Ring(sym, allocs[sym], p, depth, distributed.get(sym, 0))
        if is_async or (by_lag and (depth > 1 or warp_specialized)):
            stages = sorted({u.stage for u in readers})
            # Commit groups: one queue per producing stage (a thread has one queue per instr-tl). mbarriers:
            # one per handoff, as the reverse barrier releases a slot after its last reader.
            key = (p, stages[0], stages[-1]) if by_lag else (p,)
            q = queues.setdefault(key, _Queue(p, [], set(), None))
            q.buffers.add(sym)
            q.consumers = sorted(set(q.consumers) | set(stages))
    return rings, queues


def _ring_depth(p: int, writers: list, readers: list, by_lag: bool) -> int:
    """Slots for a buffer written by stage p: tile t's slot is next written for tile t + depth, at time step
    t + depth + p, after every read of tile t (at time step t + c for a reader of stage c). A reader that runs
    before the writers in the time step (`order=`) is done with the slot in the step that refills it; on
    mbarriers the reverse lag is the depth of the stages: the last reading stage - p + 1."""
    if by_lag:
        return max(u.stage for u in readers) - p + 1
    first_write = min(w.index for w in writers)
    return max(u.stage - p + (1 if u.index > first_write else 0) for u in readers)


def _check_async(stmts: list, async_stages: list, queues: dict, by_lag: bool) -> None:
    """The declared async stages are the ones that write asynchronously, each on one instr-tl, for a later
    statement; on commit groups, one stage per hardware queue."""
    handed: dict = {}  # stage -> the buffers it hands to later statements through a queue
    for q in queues.values():
        handed.setdefault(q.producer, set()).update(q.buffers)
    feeding = {st.stage for st in stmts if st.async_writes & handed.get(st.stage, set())}
    for p in sorted(set(async_stages) | feeding):
        members = [st for st in stmts if st.stage == p]
        if not members:
            raise SchedulingError(f"async stage {p} has no statements")
        writers = [st for st in members if st.async_writes]
        if p not in async_stages:
            buffers = writers[0].async_writes & handed[p]
            raise SchedulingError(
                f"stage {p} writes {_names(buffers)} with asynchronous instructions "
                f"({_where(writers[0].node)}) for a later statement: add {p} to async_stages"
            )
        if not writers:
            raise SchedulingError(
                f"stage {p} is in async_stages, but none of its statements writes with asynchronous "
                f"instructions (no `with CudaAsync(...)` in {_where(members[0].node)})"
            )
        writers = [st for st in writers if st.async_writes & handed.get(p, set())] or writers
        tls = set().union(*(_async_tls(st.node) for st in writers))
        if len(tls) > 1:
            raise SchedulingError(
                f"stage {p} runs instructions of {sorted(map(str, tls))}; one queue orders one "
                "asynchronous instr-tl"
            )
        written = set().union(*(w.async_writes for w in writers))
        fed = [q for q in queues.values() if q.producer == p and q.buffers & written]
        if not fed:
            raise SchedulingError(
                f"async stage {p} ({_where(writers[0].node)}) writes nothing that a later statement of "
                "the loop reads, so nothing would wait for it"
            )
        tl = tls.pop()
        for q in fed:
            q.instr_tl = tl
    if not by_lag:
        flavours: dict = {}
        for q in queues.values():
            if q.instr_tl in flavours:
                raise SchedulingError(
                    f"stages {flavours[q.instr_tl]} and {q.producer} both commit {q.instr_tl} groups, "
                    "and each thread has one such commit queue; put both in one stage"
                )
            flavours[q.instr_tl] = q.producer


def _names(syms) -> str:
    return ", ".join(sorted(str(s) for s in syms))


# ---------------------------------------------------------------------------
# The pipelined loop
# ---------------------------------------------------------------------------


def _binop(op: str, lhs, rhs, srcinfo, typ=T.index):
    return LoopIR.BinOp(op, lhs, rhs, typ, srcinfo)


def _plus(e, k: int, srcinfo):
    """e + k (e - |k|), or e when k is 0."""
    if k == 0:
        return e
    if isinstance(e, LoopIR.Const):
        return LoopIR.Const(e.val + k, e.type, srcinfo)
    typ = e.type if e.type in (T.size, T.index) else T.index  # as exo's type checker types `e + k`
    return _binop("+" if k > 0 else "-", e, LoopIR.Const(abs(k), T.int, srcinfo), srcinfo, typ)


def _read(sym: Sym, srcinfo):
    return LoopIR.Read(sym, [], T.index, srcinfo)


@dataclass
class _Entry:
    """A statement of the pipelined body: an original one (index) or an inserted sync, with its stage.

    `stage` None: the statement runs at every time step (a commit-group Arrive:
    an empty group where the producer has no tile keeps every wait count the same).
    `inner`: sync statements that go inside the statement, as (path, "before" or "after", node): `path`
    holds the body indices from the statement down to the statement they go next to.
    """

    node: LoopIR.stmt
    stage: int | None
    index: int | None = None
    inner: list = field(default_factory=list)


def _block_like(s) -> bool:
    """A statement run by one sub-collective: a `with CudaWarps` block, or a `cuda_threads` loop of one
    iteration (the thread that issues a TMA load). An mbarrier's arrives (awaits) go inside it."""
    if not isinstance(s, LoopIR.For):
        return False
    mode = s.loop_mode
    if isinstance(mode, WithBlock):
        return _is_block(s, CudaWarps)
    one = isinstance(s.lo, LoopIR.Const) and isinstance(s.hi, LoopIR.Const) and s.hi.val - s.lo.val == 1
    return isinstance(mode, CudaThreads) and one


def _innermost_block(s) -> tuple:
    """(path, block): a block-like statement, or the block-like statement that is the only statement of its
    body, and so on down (`with CudaWarps(name="producer"): for t in cuda_threads(0, 1): ...`: the loop of
    the one thread that issues the TMA loads)."""
    path = ()
    while len(s.body) == 1 and (_block_like(s.body[0]) or _is_cta_loop(s.body[0])):
        path, s = path + (0,), s.body[0]
    return path, s


def _nested(stmts: list, prefix: tuple = ()):
    """(path, statement) of every statement in `stmts` and in the loops and blocks inside them."""
    for i, t in enumerate(stmts):
        yield prefix + (i,), t
        if isinstance(t, LoopIR.For):
            yield from _nested(t.body, prefix + (i,))


def _read_tl(members: list, buffers: set) -> SyncTl:
    """The smallest sync-tl that covers how `members` read `buffers` (cuda_in_order for in-order reads;
    wgmma_async_smem for wgmma's shared-memory operands): an Await before them orders exactly that."""
    pairs: set = set()

    def visit(stmts: list, tl: InstrTl) -> None:
        for t in stmts:
            if _is_block(t, CudaAsync):
                visit(t.body, t.loop_mode.ctx.instr_tl)
            elif isinstance(t, (LoopIR.For, LoopIR.If)):
                visit(t.body, tl)
                visit(getattr(t, "orelse", []), tl)
            elif isinstance(t, LoopIR.Call) and sync_spec_of(t) is None:
                info = instr_info(t)
                f_reads, _ = _callee_effects(t.f)
                for arg, formal in zip(t.args, t.f.args):
                    if getattr(arg, "name", None) in buffers and formal.name in f_reads:
                        usage = info.usage_tls.get(str(formal.name), default_usage) if info else default_usage
                        pairs.add((tl, usage))
            elif isinstance(t, (LoopIR.Assign, LoopIR.Reduce)):
                reads: set = set()
                _expr_reads(t.rhs, {}, reads)
                if reads & buffers:
                    pairs.add((cuda_in_order_instr, default_usage))

    visit([st.node for st in members], cuda_in_order_instr)
    if pairs <= cuda_in_order.pairs:
        return cuda_in_order
    return min((t for t in SYNC_TLS.values() if pairs <= t.pairs), key=lambda t: len(t.pairs))


class _Syncs:
    """Builds the sync statements of one pipeline (one barrier per queue)."""

    def __init__(self, mem: type, tls: dict, cta_loop, release_mem: type | None):
        self.mem, self.tls, self.release_mem = mem, tls, release_mem
        self.cta = None if cta_loop is None else cta_loop.iter  # the per-CTA loop around the whole body

    def cta_of(self, st: _Stmt):
        """The CTA iterator a statement's barrier statements index by: its own per-CTA loop's, or the body's."""
        return st.node.iter if _is_cta_loop(st.node) else self.cta

    def stmt(self, kind: str, q: _Queue, n: int, srcinfo, cta=None, multicast: bool = False) -> LoopIR.stmt:
        """A sync statement on the queue's barrier: `bar`, or in a per-CTA loop (iterator `cta`) the CTA's own
        `bar[cta]`, or every CTA's `bar[:]` (multicast)."""
        spec_fields = dict(**self._fields(kind, q), N=n, barrier_mem=self.mem)
        if not q.bar_type.is_tensor_or_window():
            spec = SyncSpec(kind, **spec_fields, barrier_ndim=0)
            return _sync_call(spec, LoopIR.Read(q.bar, [], BARRIER_CARRIER, srcinfo), srcinfo)
        (ctas,) = q.bar_type.shape()
        if multicast:
            idx = [LoopIR.Interval(LoopIR.Const(0, T.int, srcinfo), ctas, srcinfo)]
            window_shape = (ctas.val,)
        else:
            at = _read(cta, srcinfo)
            idx = [LoopIR.Interval(at, _plus(at, 1, srcinfo), srcinfo)]
            window_shape = ()
        spec = SyncSpec(kind, **spec_fields, barrier_ndim=1, window_shape=window_shape)
        return _sync_call(spec, LoopIR.WindowExpr(q.bar, idx, _window_type(q.bar_type, q.bar, idx), srcinfo), srcinfo)

    def _fields(self, kind: str, q: _Queue) -> dict:
        produced = SYNC_TLS[q.instr_tl.sync_tl_name] if q.instr_tl is not None else cuda_in_order
        if kind == "Arrive":
            return {"first_tl": self._tl(kind, "arrive_tl", produced, q)}
        if kind == "Await":
            return {"second_tl": self._tl(kind, "await_tl", q.read_tl, q)}
        if kind == "ReverseArrive":
            return {"first_tl": self._tl(kind, "reverse_arrive_tl", cuda_in_order, q)}
        return {"second_tl": self._tl(kind, "reverse_await_tl", produced, q)}

    def _tl(self, kind: str, argument: str, derived: SyncTl, q: _Queue) -> SyncTl:
        """The sync-tl `argument` gives, which must order at least what the derived one does: a narrower one
        would leave the ring's accesses unordered, found only later by sync_check at the loop's lines."""
        given = self.tls[argument]
        if given is None:
            return derived
        if not derived.pairs <= given.pairs:
            buffers = ", ".join(sorted(b.name() for b in q.buffers))
            raise SchedulingError(
                f"{argument}={given.name}: the pipeline's {kind}s on the ring of {buffers} must order what "
                f"{derived.name} orders, which {given.name} does not cover; pass {derived.name} or a sync-tl "
                f"that includes it, or leave {argument} out"
            )
        return given


def _release_stmt(kind: str, r: _Release, mem: type, n: int, srcinfo) -> LoopIR.stmt:
    """Arrive (the asynchronous reads' instr-tl) or Await (cuda_in_order) on a release commit group."""
    tl = {"first_tl": SYNC_TLS[r.instr_tl.sync_tl_name]} if kind == "Arrive" else {"second_tl": cuda_in_order}
    spec = SyncSpec(kind, **tl, N=n, barrier_mem=mem, barrier_ndim=0)
    return _sync_call(spec, LoopIR.Read(r.bar, [], BARRIER_CARRIER, srcinfo), srcinfo)


def _sync_call(spec: SyncSpec, bar, srcinfo) -> LoopIR.stmt:
    return LoopIR.Call(sync_proc(spec)._loopir_proc, [bar], srcinfo)


def _releases(stmts: list, queues: dict, release_mem, in_flight: int) -> None:
    """Find, for each mbarrier queue, whether its last reading stage reads its buffers asynchronously (in one
    `with CudaAsync` block): then its release waits for those reads (`_Release`)."""
    for key in sorted(queues):
        q = queues[key]
        last = q.consumers[-1]
        found = []
        for st in stmts:
            if st.stage != last or not isinstance(st.node, LoopIR.For):
                continue
            for path, t in _nested(st.node.body):
                reads: set = set()
                if _is_block(t, CudaAsync):
                    _collect(t.body, {}, reads, set())
                if reads & q.buffers:
                    found.append((st, path, t))
        if not found:
            continue
        st, path, block = found[-1]
        where = f"{_where(block)} (stage {last}) reads {_names(q.buffers)} asynchronously"
        if len(found) > 1:
            raise SchedulingError(f"{where}, and so does {_where(found[0][2])}: put the asynchronous reads of a "
                                  "ring in one `with CudaAsync` block, whose commit group releases the slot")
        if release_mem is None:
            raise SchedulingError(
                f"{where}: a slot may be refilled only once those reads are complete; pass "
                "release_with=CudaCommitGroup (and reads_in_flight=N to keep N groups of them in flight)"
            )
        depth = last - q.producer + 1
        if not 0 <= in_flight < depth:
            raise SchedulingError(
                f"reads_in_flight={in_flight}: {where} from a ring of {depth} slots, so at most {depth - 1} "
                "groups of them may stay in flight (the producer needs a free slot)"
            )
        q.release = _Release(st.index, path, block.loop_mode.ctx.instr_tl, in_flight)


def _layout(stmts: list, queues: dict, by_lag: bool, syncs: _Syncs) -> list:
    """The body as entries: the original statements with the queues' sync statements in place.

    Arrive after the producer's last write; Await before the consuming
    stage's first statement (after the Arrive when they share a stage); on
    mbarriers also ReverseAwait before the producer's first write and
    ReverseArrive after the consumer's last statement, inside the producer's
    (consumer's) statement when it is one `with CudaWarps` block or
    `cuda_threads` loop (inside the innermost of such blocks nested alone);
    with a release group (`_Release`) its Arrive and Await right after the
    asynchronous reads, and the reverse lag shortened by its reads in flight.
    """
    entries = [_Entry(st.node, st.stage, st.index) for st in stmts]
    before: dict = {}  # original index -> entries to insert before it
    after: dict = {}

    def place(group: list, stage: int | None, wait, signal) -> None:
        """`wait` before the group of statements and `signal` after it (inside it: one block on an mbarrier)."""
        if by_lag and len(group) == 1 and (_block_like(group[0].node) or _is_cta_loop(group[0].node)):
            path, block = _innermost_block(group[0].node)
            inner = entries[group[0].index].inner
            if wait is not None:
                inner.append((path + (0,), "before", wait))
            if signal is not None:
                inner.append((path + (len(block.body) - 1,), "after", signal))
            return
        if wait is not None:
            before.setdefault(group[0].index, []).append(_Entry(wait, stage))
        if signal is not None:
            after.setdefault(group[-1].index, []).append(_Entry(signal, stage))

    for key in sorted(queues):
        q, p = queues[key], key[0]
        writers = [st for st in stmts if st.stage == p and st.writes & q.buffers]
        src, last_w = writers[-1].node.srcinfo, writers[-1].index

        def consumer(c: int) -> list:
            return [st for st in stmts if st.stage == c and (c > p or st.index > last_w)]

        q.read_tl = _read_tl(consumer(q.consumers[0]), q.buffers)
        if by_lag:
            first, last = consumer(q.consumers[0]), consumer(q.consumers[-1])
            lag = q.consumers[-1] - p + 1 - (q.release.in_flight if q.release else 0)
            wcta, fcta, lcta = syncs.cta_of(writers[0]), syncs.cta_of(first[0]), syncs.cta_of(last[-1])
            place(writers, p, syncs.stmt("ReverseAwait", q, ~lag, src, wcta), syncs.stmt("Arrive", q, 1, src, wcta))
            wait = syncs.stmt("Await", q, ~0, first[0].node.srcinfo, fcta)
            release = syncs.stmt("ReverseArrive", q, 1, last[-1].node.srcinfo, lcta, multicast=q.multicast)
            if q.consumers[0] == q.consumers[-1]:  # one reading stage
                place(first, q.consumers[0], wait, release)
            else:
                place(first, q.consumers[0], wait, None)
                place(last, q.consumers[-1], None, release)
            if q.release:
                r, rsrc = q.release, stmts[q.release.index].node.srcinfo
                arrive = _release_stmt("Arrive", r, syncs.release_mem, 1, rsrc)
                done = _release_stmt("Await", r, syncs.release_mem, r.in_flight, rsrc)
                entries[r.index].inner += [(r.path, "after", arrive), (r.path, "after", done)]
        else:
            for c in q.consumers:
                members = consumer(c)
                # N: the commit groups made after the one this stage's tile needs (one group per time step).
                n = c - p - 1 + (1 if last_w < members[0].index else 0)
                place(members, c, syncs.stmt("Await", q, n, members[0].node.srcinfo), None)
            place(writers, None, None, syncs.stmt("Arrive", q, 1, src))
    out = []
    for e in entries:
        out += before.get(e.index, [])
        out.append(e)
        out += after.get(e.index, [])
    return out


# ---------------------------------------------------------------------------
# The scheduling op
# ---------------------------------------------------------------------------


@sched_op([
    ForCursorA, _StagesA, _StageListA, _PipelineBarrierA, BoolA,
    _OptSyncTlA, _OptSyncTlA, _OptSyncTlA, _OptSyncTlA, _OptNameA, _PosIntA, _ReleaseWithA, _CountA, _OrderA,
])  # fmt: skip
def pipeline_loop(
    proc: Procedure,
    loop,
    stages,
    async_stages,
    barrier,
    keep_loop: bool = False,
    arrive_tl: SyncTl | None = None,
    await_tl: SyncTl | None = None,
    reverse_arrive_tl: SyncTl | None = None,
    reverse_await_tl: SyncTl | None = None,
    barrier_name: str | None = None,
    smem_budget: int = SMEM_BUDGET,
    release_with: type | None = None,
    reads_in_flight: int = 0,
    order: list | None = None,
) -> Procedure:
    """Software-pipeline a `seq` loop: stage s of the body works s tiles behind stage 0.

    `stages`: a stage (int >= 0) per body statement, or a rule {buffer: stage,
    "*": stage} (a statement gets the stage of the buffers it writes). A body
    that is one `cuda_threads(0, CL, unit=cuda_cta_in_cluster)` loop of
    `with CudaWarps` blocks is pipelined in every CTA: the stages are that
    loop's statements; so is a body of such per-CTA loops (one stage each).
    `async_stages`: the stages whose writes are asynchronous (cp.async, TMA).
    `barrier`: CudaCommitGroup or CudaMbarrier (a new barrier per queue,
    named `barrier_name` or a fresh name), or the name of a barrier the proc
    allocates before the loop (TMA loads completing on it): a scalar, or in a
    per-CTA loop an array of one barrier per CTA.
    Buffers written by stage p and read by stage c get a ring of depth c - p + 1;
    the sync statements and their counts are derived (see the module
    docstring); `*_tl` override their sync-tls. `keep_loop=True` gives one
    guarded loop instead of prologue, steady state and epilogue. Rings must
    fit in `smem_budget` bytes of shared memory with the device function's
    other allocations. When the last reading stage reads a ring
    asynchronously (wgmma), `release_with=CudaCommitGroup` gives those reads a
    commit group that the slot's release waits for, leaving `reads_in_flight`
    groups in flight. `order`: the body's statements (their numbers in the
    body) in the order each time step runs them, default the body's order; a
    stage's statements keep theirs (commit groups only).
    """
    if not isinstance(loop._impl._node.loop_mode, LoopIR.Seq):
        raise SchedulingError(f"{_where(loop._impl._node)} is not a seq loop; pipeline a seq loop")
    if reads_in_flight and release_with is None:  # else it counts nothing: the same pipeline as without it
        raise SchedulingError(f"reads_in_flight={reads_in_flight} counts the commit groups of release_with="
                              "CudaCommitGroup, which releases the slots of a ring read asynchronously (wgmma); "
                              "pass both, or neither")
    cta_loop = _per_cta_loop(loop._impl._node)
    n_body = len(loop._impl._node.body)
    if cta_loop is None:
        proc, loop, stage_of, kept = _lift_allocs(proc, loop, stages)
    seq = list(range(len(loop._impl._node.body if cta_loop is None else cta_loop.body)))
    if order is not None:
        if cta_loop is not None:
            raise SchedulingError(f"{_where(cta_loop)}: order= is for loops that are skewed, not per-CTA loops")
        proc, loop, stage_of, seq = _reorder(proc, loop, stage_of, order, kept, n_body)
    ir = proc._loopir_proc
    loop_c = loop._impl
    s = loop_c._node
    holder = s if cta_loop is None else cta_loop
    allocs = {a.name: a for a in walk_stmts(ir.body) if isinstance(a, LoopIR.Alloc)}
    if cta_loop is not None:
        names = {a.name: a.name.name() for a in allocs.values()} | {a.name: a.name.name() for a in ir.args}
        stage_of = _assign_stages(holder.body, stages, names)
    stmts = [_Stmt(i, b, stage_of[i], *_stmt_effects(b), seq=seq[i]) for i, b in enumerate(holder.body)]
    S = max(stage_of)
    warp_specialized = len(holder.body) > 1 and all(_warp_block(b) for b in holder.body)
    if cta_loop is not None and not warp_specialized:
        raise SchedulingError(
            f"{_where(cta_loop)}: in a per-CTA loop pipeline_loop pipelines warp-specialized bodies only (every "
            "statement a `with CudaWarps` block)"
        )
    cta_loops = [cta_loop] if cta_loop is not None else [b for b in s.body if _is_cta_loop(b)]
    if cta_loop is None and cta_loops and not warp_specialized:
        raise SchedulingError(
            f"{_where(cta_loops[0])}: pipeline_loop pipelines per-CTA loops in warp-specialized bodies only (every "
            "statement a `with CudaWarps` block, or a per-CTA loop of them)"
        )
    mem, bar_alloc = _barrier_memory(ir, s, barrier, cta_loops)
    by_lag = mem.pairs_by_lag
    if order is not None and (by_lag or warp_specialized):
        raise SchedulingError(
            f"order= reorders the time steps of a commit-group pipeline; {_where(s)} is pipelined "
            f"{'on ' + mem.name() if by_lag else 'by warp specialization'}"
        )
    if warp_specialized and not by_lag:
        raise SchedulingError(
            f"every statement of {_where(holder)} is a `with CudaWarps` block: warps hand tiles to other "
            f"warps through an mbarrier ring, and {mem.name()} queues are per thread; use CudaMbarrier"
        )
    _check_body(stmts)
    distributed = _DISTRIBUTED_DIMS[0](ir)
    rings, queues = _plan(distributed, stmts, by_lag, warp_specialized, allocs)
    _check_async(stmts, async_stages, queues, by_lag)
    if not rings and not queues:
        raise SchedulingError(
            f"nothing to pipeline in {_where(s)}: no buffer is written by one stage and read by a "
            "later one, and no stage writes asynchronously"
        )
    _check_escapes(ir, s, rings)
    _check_budget(ir, s, rings, distributed, smem_budget)
    if by_lag:
        _releases(stmts, queues, release_with, reads_in_flight)
    _name_barriers(ir, s, queues, mem, bar_alloc, barrier_name, cta_loops, release_with)
    _note_multicast(stmts, queues)
    tls = dict(arrive_tl=arrive_tl, await_tl=await_tl, reverse_arrive_tl=reverse_arrive_tl, reverse_await_tl=reverse_await_tl)
    syncs = _Syncs(mem, tls, cta_loop, release_with)
    entries = _layout(stmts, queues, by_lag, syncs)
    skew = 0 if warp_specialized else S
    if skew and not keep_loop:
        trips = _binop("-", s.hi, s.lo, s.srcinfo) if not (isinstance(s.lo, LoopIR.Const) and s.lo.val == 0) else s.hi
        try:
            Check_CompareExprs(ir, [s], trips, ">=", LoopIR.Const(skew, T.int, s.srcinfo))
        except SchedulingError:
            needs = f"which the prologue of a {skew + 1}-stage pipeline needs"
            count = constant_value(trips)
            if count is not None:  # no assertion can help: fewer stages, or the loop kept
                raise SchedulingError(f"{_where(s)} runs {count} iterations, fewer than the {skew} {needs}: pipeline "
                                      "it with fewer stages, or pass keep_loop=True") from None
            raise SchedulingError(
                f"{_where(s)} may run fewer than {skew} iterations, {needs}: add `assert {trips} >= {skew}` to the "
                "proc, or pass keep_loop=True"
            ) from None

    edit = _Edit(ir)
    for ring in rings.values():
        _expand_ring(edit, loop_c, ring, s.iter)
    body_c = loop_c if cta_loop is None else loop_c.body()[0]
    _insert_syncs(edit, body_c, entries)
    canonical = edit.at(body_c)._node.body
    for e, node in zip(entries, canonical):
        e.node = node
    if skew:
        _skew(edit, loop_c, s, entries, skew, keep_loop)
    new_allocs = [q.inserted_alloc for q in queues.values() if q.inserted_alloc is not None]
    new_allocs += [q.release.inserted_alloc for q in queues.values() if q.release is not None]
    if new_allocs:
        edit.apply(edit.at(loop_c).before()._insert, new_allocs)
    if skew and not keep_loop:
        edit.apply(edit.at(loop_c).before()._insert, [_side_loop(s, entries, skew, "prologue")])
        edit.apply(edit.at(loop_c).after()._insert, [_side_loop(s, entries, skew, "epilogue")])
    drains = [] if by_lag else [_drain(q, entries, syncs) for q in queues.values()]
    drains = [d for d in drains if d is not None]
    drains += [_release_drain(q, holder, cta_loop, release_with) for q in queues.values() if q.release is not None]
    if drains:
        last = edit.at(loop_c).next() if skew and not keep_loop else edit.at(loop_c)
        edit.apply(last.after()._insert, drains)
    for ring in rings.values():
        edit.apply(edit.at(_path_cursor(ir, ring.alloc))._child_node("type")._replace, _ring_type(ring))
    return Procedure(edit.ir, _provenance_eq_Procedure=proc, _forward=edit.fwd)


def _is_cta_loop(t) -> bool:
    """A `cuda_threads(..., unit=cuda_cta_in_cluster)` loop: each CTA of the cluster runs its iteration."""
    return isinstance(t, LoopIR.For) and isinstance(t.loop_mode, CudaThreads) and t.loop_mode.unit == cuda_cta_in_cluster


def _warp_block(t) -> bool:
    """A `with CudaWarps` block, or a per-CTA loop of such blocks (every CTA's producers, then every CTA's
    consumers: the sequential program reads what every CTA loaded, multicast included)."""
    return _is_block(t, CudaWarps) or (_is_cta_loop(t) and all(_is_block(b, CudaWarps) for b in t.body))


def _per_cta_loop(s):
    """The loop's body as one `cuda_threads(0, CL, unit=cuda_cta_in_cluster)` loop (every CTA of the cluster
    runs the stages on its own shard): that loop, else None."""
    if len(s.body) != 1:
        return None
    t = s.body[0]
    if not _is_cta_loop(t):
        return None
    if not (isinstance(t.lo, LoopIR.Const) and t.lo.val == 0 and isinstance(t.hi, LoopIR.Const)):
        raise SchedulingError(f"{_where(t)}: a per-CTA loop pipelined by pipeline_loop runs over cuda_threads(0, CL) "
                              "with a constant CL")
    return t


def _note_multicast(stmts: list, queues: dict) -> None:
    """A queue whose producer's loads complete on a slice of the barrier array (`>> bar[:]`, multicast) fills
    the ring of every CTA of the slice: its consumers release the slot to every CTA's producer."""
    for q in queues.values():
        for st in stmts:
            if st.stage != q.producer:
                continue
            for t in walk_stmts([st.node]):
                bar = trailing_barrier(t)
                if bar is not None and bar.name == q.bar:
                    q.multicast |= any(not is_point_interval(w) for w in getattr(bar, "idx", []))


def _release_drain(q: _Queue, holder, cta_loop, mem: type):
    """After the loop, the last release group's reads and writes complete: `Await(bar, ..., 0)` run by the
    collective that commits the groups (the blocks and loops around the asynchronous reads)."""
    r = q.release
    chain = [holder.body[r.index]]
    for k in r.path[:-1]:
        chain.append(chain[-1].body[k])
    if cta_loop is not None:
        chain.insert(0, cta_loop)
    body = [_release_stmt("Await", r, mem, 0, chain[-1].srcinfo)]
    for t in reversed(chain):
        body = [LoopIR.For(t.iter, t.lo, t.hi, body, t.loop_mode, t.srcinfo)]
    return Alpha_Rename(body).result()[0]


# ---------------------------------------------------------------------------
# Checks on the proc around the loop
# ---------------------------------------------------------------------------


def _barrier_memory(ir, loop, barrier, cta_loops: list) -> tuple:
    """(barrier memory, the existing allocation or None); checks the loop's own use of barriers."""
    inside = list(walk_stmts(loop.body))
    bar_syms = {a.name for a in walk_stmts(ir.body) if is_barrier_alloc(a)}
    trailing = [
        (t, a.name)
        for t in inside
        if isinstance(t, LoopIR.Call) and sync_spec_of(t) is None
        for a in t.args
        if isinstance(a, (LoopIR.Read, LoopIR.WindowExpr)) and a.name in bar_syms
    ]
    if isinstance(barrier, type):
        if trailing:
            t, sym = trailing[0]
            raise SchedulingError(
                f"{_where(t)} completes on barrier {sym}: pass barrier={str(sym)!r} to pipeline on it"
            )
        return barrier, None
    found = [a for a in _allocs_in_scope(ir, loop) if is_barrier_alloc(a) and a.name.name() == barrier]
    if not found:
        raise SchedulingError(f"no barrier named {barrier!r} is allocated before {_where(loop)}, "
                              "in a block around it")
    alloc = found[-1]
    if alloc.type.is_tensor_or_window():
        shape = alloc.type.shape()
        ctas = cta_loops[0].hi.val if cta_loops else None
        iters = {c.iter for c in cta_loops}
        if not (len(shape) == 1 and isinstance(shape[0], LoopIR.Const) and shape[0].val == ctas):
            raise SchedulingError(
                f"barrier {barrier} is an array; pipeline on a scalar barrier, or, in a loop whose body is one "
                "per-CTA loop `for cta in cuda_threads(0, CL, unit=cuda_cta_in_cluster)` (or is made of such "
                "loops), on an array of CL barriers indexed by the CTA (`>> bar[cta]`, or `>> bar[:]` for a "
                "multicast load)"
            )
        for t, sym in trailing:
            (w,) = trailing_barrier(t).idx
            at = w.lo if isinstance(w, LoopIR.Interval) else w.pt
            by_cta = isinstance(at, LoopIR.Read) and at.name in iters
            every = isinstance(w, LoopIR.Interval) and interval_width(w) == ctas and isinstance(at, LoopIR.Const)
            if sym == alloc.name and not (by_cta or every):
                raise SchedulingError(f"{_where(t)} completes on {barrier}[{_expr_text(w)}]: index the barrier "
                                      f"array by the CTA ({barrier}[{cta_loops[0].iter}]), or slice all of it for a "
                                      f"multicast load ({barrier}[:])")
    if not alloc.mem.lives_on_device:
        raise SchedulingError(f"{barrier} @ {alloc.mem.name()} lives in CPU code; pipeline on a "
                              "CudaCommitGroup or CudaMbarrier")
    for t in inside:
        spec = sync_spec_of(t)
        if spec is not None and spec.barrier_mem is not None and t.args[0].name == alloc.name:
            raise SchedulingError(
                f"{_where(t)} already synchronizes on {barrier}; pipeline_loop inserts the Arrive and "
                "Await statements itself: pipeline the loop without them"
            )
    return alloc.mem, alloc


def _expr_text(w) -> str:
    """A window index as the user writes it (`cta`, `0:2`)."""
    if isinstance(w, LoopIR.Interval):
        return f"{w.lo}:{w.hi}"
    return str(w.pt)


def _allocs_in_scope(ir, loop) -> list:
    """The allocations visible at `loop`: those before it in each block that encloses it."""
    out = []

    def visit(stmts) -> bool:
        for t in stmts:
            if t is loop:
                return True
            if isinstance(t, LoopIR.Alloc):
                out.append(t)
            inner = [t.body] if isinstance(t, LoopIR.For) else [t.body, t.orelse] if isinstance(t, LoopIR.If) else []
            for block in inner:
                mark = len(out)
                if visit(block):
                    return True
                del out[mark:]  # a sibling block's allocations are out of scope
        return False

    visit(ir.body)
    return out


def _check_body(stmts: list) -> None:
    """What pipeline_loop does not follow across stages: window names and configuration fields."""
    for st in stmts:
        if isinstance(st.node, LoopIR.WindowStmt):
            raise SchedulingError(
                f"{_where(st.node)} names a window for later statements: inline_window it first"
            )
        config = next((t for t in walk_stmts([st.node]) if isinstance(t, LoopIR.WriteConfig)), None)
        if config is not None:
            raise SchedulingError(
                f"{_where(config)} writes a configuration field, which pipeline_loop does not "
                "track across stages"
            )


def _lift_allocs(proc: Procedure, loop, stages) -> tuple:
    """(proc, loop, stage of each body statement) with every buffer that the loop body allocates and another
    stage uses lifted above the loop (exo's `lift_alloc`): a ring lives across iterations."""
    ir = proc._loopir_proc
    body = loop._impl._node.body
    names = {a.name: a.name.name() for a in walk_stmts(ir.body) if isinstance(a, LoopIR.Alloc)}
    names |= {a.name: a.name.name() for a in ir.args}
    stage_of = _assign_stages(body, stages, names)
    uses = [set().union(*_stmt_effects(b)[:2]) for b in body]
    lift = [
        i for i, b in enumerate(body)
        if isinstance(b, LoopIR.Alloc) and any(b.name in u and stage_of[k] != stage_of[i] for k, u in enumerate(uses))
    ]  # fmt: skip
    kept = [i for i in range(len(body)) if i not in lift]
    if not lift:
        return proc, loop, stage_of, kept
    edit = _Edit(ir)
    for i in lift:
        edit.apply(DoLiftAllocSimple, edit.at(loop._impl.body()[i]), 1)
    lifted = Procedure(edit.ir, _provenance_eq_Procedure=proc, _forward=edit.fwd)
    return lifted, lifted.forward(loop), [stage_of[i] for i in kept], kept


def _reorder(proc: Procedure, loop, stage_of: list, order: list, kept: list, n: int) -> tuple:
    """(proc, loop, stages, sequential position of each statement) with the loop body in the order a time step
    runs it (`order`: numbers in the body the user wrote, `kept`: those `_lift_allocs` left in the body). The
    plan reads the sequential program from the positions: the body is reordered only to be laid out."""
    body = loop._impl._node.body
    if sorted(order) != list(range(n)):
        raise SchedulingError(f"order={order} must list each of the {n} statements of {_where(loop._impl._node)}'s "
                              f"body once (0 to {n - 1})")
    seq = [kept.index(i) for i in order if i in kept]
    for k, a in enumerate(seq):
        later = next((b for b in seq[k + 1 :] if stage_of[b] == stage_of[a] and b < a), None)
        if later is not None:
            raise SchedulingError(
                f"order= runs {_where(body[a])} before {_where(body[later])}, both of stage {stage_of[a]}: "
                "the statements of one stage keep their order"
            )
    if seq == sorted(seq):
        return proc, loop, stage_of, seq
    edit = _Edit(proc._loopir_proc)
    loop_c = loop._impl
    for k, i in enumerate(seq):
        if k or i != len(body) - 1:  # each statement after the ones placed before it
            edit.apply(edit.at(loop_c.body()[i])._move, edit.at(loop_c).body()[-1].after())
    moved = Procedure(edit.ir, _provenance_eq_Procedure=proc, _forward=edit.fwd)
    return moved, moved.forward(loop), [stage_of[i] for i in seq], seq


def _check_escapes(ir, loop, rings: dict) -> None:
    """A ring buffer lives in the loop: code outside would see one slot of it, not the buffer."""
    inside = {id(t) for t in walk_stmts([loop])}
    for t in walk_stmts(ir.body):
        if id(t) in inside or not isinstance(t, (LoopIR.Assign, LoopIR.Reduce, LoopIR.Call, LoopIR.WindowStmt)):
            continue
        reads, writes = set(), set()
        _collect([t], {}, reads, writes)
        for sym in (reads | writes) & set(rings):
            raise SchedulingError(
                f"{sym} escapes the loop: stage {rings[sym].producer} writes it and a later stage reads "
                f"it, so it becomes a ring of {rings[sym].depth} slots, but {_where(t)} uses it outside {_where(loop)}"
            )


def _check_budget(ir, loop, rings: dict, distributed: dict, budget: int) -> None:
    """The device function's shared memory, rings included, must fit in `budget` bytes (each CTA allocates its
    shard: the dimensions after the distributed ones)."""
    dfs = [
        t for t in walk_stmts(ir.body)
        if isinstance(t, LoopIR.For) and isinstance(t.loop_mode, WithBlock)
        and isinstance(t.loop_mode.ctx, CudaDeviceFunction) and any(x is loop for x in walk_stmts(t.body))
    ]  # fmt: skip
    if not dfs:
        return
    total, grown = 0, []
    by_alloc = {id(r.alloc): r for r in rings.values()}
    for a in walk_stmts(dfs[0].body):
        if not (isinstance(a, LoopIR.Alloc) and isinstance(a.mem, type) and issubclass(a.mem, CudaMemory)):
            continue
        shape = a.type.shape() if a.type.is_tensor_or_window() else []
        if not all(isinstance(d, LoopIR.Const) for d in shape):
            continue
        dims = [d.val for d in shape]
        ring = by_alloc.get(id(a))
        if ring is not None:
            dims = dims[: ring.position] + [ring.depth] + dims[ring.position :]
        shard = dims[distributed.get(a.name, 0) :]
        n = a.mem.smem_bytes(elem_bytes(a.type.basetype()), [str(d) for d in shard], a.srcinfo)
        total += n
        if ring is not None and n:
            grown.append(f"{a.name}[{', '.join(map(str, dims))}] ({n} bytes per CTA)")
    if total > budget:
        raise SchedulingError(
            f"the rings {', '.join(grown)} bring the device function's shared memory to {total} bytes, "
            f"over the budget of {budget} bytes (smem_budget=); use fewer stages or smaller tiles"
        )


def _name_barriers(ir, loop, queues: dict, mem: type, bar_alloc, barrier_name: str | None, cta_loops: list,
                   release_mem: type | None) -> None:
    """Give each queue its barrier: the existing one, or a new allocation with a fresh name (in a per-CTA
    loop an array of one barrier per CTA); and each release group its commit group."""
    taken = {a.name.name() for a in walk_stmts(ir.body) if isinstance(a, LoopIR.Alloc)}
    taken |= {a.name.name() for a in ir.args}

    def fresh(stem: str) -> str:
        name, n = stem, 1
        while name in taken:
            n += 1
            name = f"{stem}_{n}"
        taken.add(name)
        return name

    for q in queues.values():
        if q.release is not None:
            q.release.bar = Sym(fresh("cg"))
            q.release.inserted_alloc = LoopIR.Alloc(q.release.bar, BARRIER_CARRIER, release_mem, loop.srcinfo)
    if bar_alloc is not None:
        if len(queues) > 1:
            raise SchedulingError(
                f"the pipeline has {len(queues)} handoffs (producing stages "
                f"{sorted(q.producer for q in queues.values())}) and needs a barrier for each; pass a barrier memory "
                f"instead of the one barrier {bar_alloc.name}"
            )
        for q in queues.values():
            q.bar, q.bar_type = bar_alloc.name, bar_alloc.type
        return
    if barrier_name is not None and barrier_name in taken:
        raise SchedulingError(f"barrier_name {barrier_name!r} is already a name in {ir.name}")
    base = barrier_name or ("bar" if mem.pairs_by_lag else "cg")
    for k, key in enumerate(sorted(queues)):
        q = queues[key]
        q.bar = Sym(fresh(base if len(queues) == 1 else f"{base}{k}"))
        if cta_loops:
            q.bar_type = T.Tensor([cta_loops[0].hi], False, BARRIER_CARRIER)
        q.inserted_alloc = LoopIR.Alloc(q.bar, q.bar_type, mem, loop.srcinfo)


# ---------------------------------------------------------------------------
# Edits
# ---------------------------------------------------------------------------


class _Edit:
    """A chain of exo cursor edits: the current proc and the forwarding from the original one."""

    def __init__(self, ir):
        self.ir = ir
        self.fwd = lambda c: c

    def at(self, c):
        """An original-proc cursor, in the current proc."""
        return self.fwd(c)

    def apply(self, method, *args) -> None:
        """Run an internal cursor edit (`gap._insert`, `node._replace`, ...) of the current proc."""
        self.ir, f = method(*args)
        self.fwd = _compose(f, self.fwd)

    def rewrite(self, helper, c, sym, repl, attrs: bool) -> None:
        """exo's `_replace_reads` / `_replace_writes` of `sym` inside current-proc cursor `c`."""
        self.ir, f = helper(self.ir, lambda x: x, c, sym, repl, only_replace_attrs=attrs)
        self.fwd = _compose(f, self.fwd)


def _path_cursor(ir, node):
    """The internal cursor of a statement of `ir`, found by identity."""
    def find(stmts, path, attr="body"):
        for i, t in enumerate(stmts):
            here = path + [(attr, i)]
            if t is node:
                return here
            hit = None
            if isinstance(t, (LoopIR.For, LoopIR.If)):
                hit = find(t.body, here)
            if hit is None and isinstance(t, LoopIR.If):
                hit = find(t.orelse, here, "orelse")
            if hit is not None:
                return hit
        return None

    return ic.Node(ir, find(ir.body, []))


def _ring_type(ring: _Ring):
    t = ring.alloc.type
    dims = list(t.shape()) if t.is_tensor_or_window() else []
    depth = LoopIR.Const(ring.depth, T.int, ring.alloc.srcinfo)
    return T.Tensor(dims[: ring.position] + [depth] + dims[ring.position :], False, t.basetype())


def _expand_ring(edit: _Edit, loop_c, ring: _Ring, it: Sym) -> None:
    """Index every access of the ring buffer in the loop by `it % depth` (its new leading dimension)."""
    new_type = _ring_type(ring)

    def slot(srcinfo):
        return _binop("%", _read(it, srcinfo), LoopIR.Const(ring.depth, T.int, srcinfo), srcinfo)

    def at(idx: list, index) -> list:
        return idx[: ring.position] + [index] + idx[ring.position :]

    def indexed(c):
        rd = c._node
        if isinstance(rd, LoopIR.WindowExpr):
            idx = at(rd.idx, LoopIR.Point(slot(rd.srcinfo), rd.srcinfo))
            return {"idx": idx, "type": _window_type(new_type, rd.name, idx)}
        if rd.idx:
            return {"idx": at(rd.idx, slot(rd.srcinfo))}
        if isinstance(c.parent()._node, LoopIR.Call):
            if not rd.type.is_tensor_or_window():
                raise SchedulingError(
                    f"the scalar {rd.name} is passed to {c.parent()._node.f.name}; a ring buffer "
                    "must have dimensions: give it one (expand_dim) first"
                )
            return None  # a whole tensor passed to a call: `whole` makes it a window of one slot
        return {"idx": [slot(rd.srcinfo)]}  # a scalar's value

    def whole(c):
        rd = c._node
        if not (isinstance(rd, LoopIR.Read) and not rd.idx and rd.type.is_tensor_or_window()):
            return None
        assert ring.position == 0, "a distributed buffer is used with its distributed indices"
        src = rd.srcinfo
        dims = list(ring.alloc.type.shape())
        idx = [LoopIR.Point(slot(src), src)] + [LoopIR.Interval(LoopIR.Const(0, T.int, src), d, src) for d in dims]
        return LoopIR.WindowExpr(rd.name, idx, _window_type(new_type, rd.name, idx), src)

    edit.rewrite(_replace_reads, edit.at(loop_c), ring.sym, indexed, True)
    edit.rewrite(_replace_reads, edit.at(loop_c), ring.sym, whole, False)
    written = lambda c: {"idx": at(c._node.idx, slot(c._node.srcinfo))}
    edit.rewrite(_replace_writes, edit.at(loop_c), ring.sym, written, True)


def _insert_syncs(edit: _Edit, body_c, entries: list) -> None:
    """Insert the entries' sync statements into the body held by `body_c` (and into the blocks they go inside)."""
    for e in entries:
        groups: dict = {}
        for path, side, node in e.inner:
            groups.setdefault((path, side), []).append(node)
        for (path, side), nodes in groups.items():
            c = body_c.body()[e.index]
            for k in path[:-1]:
                c = c.body()[k]
            c = c.body()[path[-1]]
            edit.apply((edit.at(c).before() if side == "before" else edit.at(c).after())._insert, nodes)
    pending, last = [], None
    for e in entries:
        if e.index is None:
            pending.append(e.node)
            continue
        if pending:
            edit.apply(edit.at(body_c.body()[e.index]).before()._insert, pending)
            pending = []
        last = e.index
    if pending:
        edit.apply(edit.at(body_c.body()[last]).after()._insert, pending)


def _guard(stage: int, skew: int, it: Sym, lo, hi, form: str, src):
    """The condition under which a stage has a tile in a loop of the given form (None: always)."""
    conds = []
    if form in ("prologue", "keep") and stage > 0:  # tile it - stage >= lo
        conds.append(_binop(">=", _read(it, src), _plus(lo, stage, src), src, T.bool))
    if form == "keep" and stage < skew:  # tile it - stage < hi
        conds.append(_binop("<", _read(it, src), _plus(hi, stage, src), src, T.bool))
    if form == "epilogue" and stage < skew:  # tile it + skew - stage < hi
        conds.append(_binop("<", _read(it, src), _plus(hi, stage - skew, src), src, T.bool))
    if not conds:
        return None
    return conds[0] if len(conds) == 1 else _binop("and", conds[0], conds[1], src, T.bool)


def _offset(stage: int, skew: int, form: str) -> int:
    """The loop iterator plus this is the stage's tile (prologue and keep: time steps; else the last stage's tile)."""
    return -stage if form in ("prologue", "keep") else skew - stage


def _skew(edit: _Edit, loop_c, s, entries: list, skew: int, keep_loop: bool) -> None:
    """The original loop becomes the steady state (or, keep_loop, the one guarded loop over every time step)."""
    form = "keep" if keep_loop else "steady"
    it = s.iter
    for k, e in enumerate(entries):
        off = 0 if e.stage is None else _offset(e.stage, skew, form)
        if off:
            tile = lambda c, off=off: _plus(_read(it, c._node.srcinfo), off, c._node.srcinfo)
            edit.rewrite(_replace_reads, edit.at(loop_c).body()[k], it, tile, False)
            _refresh_window_types(edit, lambda k=k: edit.at(loop_c).body()[k])
    if keep_loop:
        for a, b, stage in reversed(_runs(entries, lambda e: e.stage)):
            cond = _guard(stage, skew, it, s.lo, s.hi, form, s.srcinfo)
            if cond is not None:
                wrap = lambda body, c=cond: LoopIR.If(c, body, [], s.srcinfo)
                edit.apply(edit.at(loop_c).body()[a:b]._wrap, wrap, "body")
    new_hi = _plus(s.hi, skew if keep_loop else -skew, s.srcinfo)
    edit.apply(edit.at(loop_c)._child_node("hi")._replace, new_hi)


def _refresh_window_types(edit: _Edit, stmt) -> None:
    """Window expressions keep their indices in their type too: bring those up to date after a substitution
    (exo's `_replace_reads` rewrites the indices only)."""

    def fix(c):
        w = c._node
        if not isinstance(w, LoopIR.WindowExpr):
            return None
        typ = _window_type(w.type.src_type, w.name, w.idx)
        return {"type": typ} if typ != w.type else None

    names = {e.name for e in _window_exprs(stmt()._node)}
    for name in sorted(names, key=str):
        edit.rewrite(_replace_reads, stmt(), name, fix, True)


def _window_type(src_type, name: Sym, idx: list):
    """The type of window `name[idx]` of a buffer of type `src_type`, built as exo's type checker builds it."""
    shape = [
        w.hi if isinstance(w.lo, LoopIR.Const) and w.lo.val == 0 else _binop("-", w.hi, w.lo, w.hi.srcinfo)
        for w in idx
        if isinstance(w, LoopIR.Interval)
    ]
    return T.Window(src_type, T.Tensor(shape, True, src_type.basetype()), name, idx)


def _window_exprs(node) -> list:
    """Every window expression inside a LoopIR node."""
    found = [node] if isinstance(node, LoopIR.WindowExpr) else []
    for f in getattr(type(node), "__attrs_attrs__", ()):
        if f.name in ("type", "srcinfo"):
            continue
        v = getattr(node, f.name)
        for child in v if isinstance(v, list) else [v]:
            if hasattr(type(child), "__attrs_attrs__"):
                found += _window_exprs(child)
    return found


def _runs(entries: list, key) -> list:
    """Maximal runs [a, b) of consecutive entries with the same key (not None): (a, b, key)."""
    runs = []
    for k, e in enumerate(entries):
        v = key(e)
        if v is not None and runs and runs[-1][1] == k and runs[-1][2] == v:
            runs[-1] = (runs[-1][0], k + 1, v)
        elif v is not None:
            runs.append((k, k + 1, v))
    return runs


def _side_loop(s, entries: list, skew: int, form: str):
    """The prologue (time steps before the last stage has a tile) or the epilogue (after stage 0's last)."""
    it, src = s.iter, s.srcinfo
    lo, hi = (s.lo, _plus(s.lo, skew, src)) if form == "prologue" else (_plus(s.hi, -skew, src), s.hi)
    kept = [
        e for e in entries
        if e.stage is None or not ((form == "prologue" and e.stage == skew) or (form == "epilogue" and e.stage == 0))
    ]  # fmt: skip  (a stage with no tile in this loop is left out)
    nodes = []
    for e in kept:
        off = 0 if e.stage is None else _offset(e.stage, skew, form)
        nodes.append(SubstArgs([e.node], {it: _plus(_read(it, src), off, src)}).result()[0] if off else e.node)
    guards = [None if e.stage is None else _guard(e.stage, skew, it, s.lo, s.hi, form, src) for e in kept]
    body, k = [], 0
    for a, b, _ in _runs(kept, lambda e: e.stage) + [(len(kept), len(kept), None)]:
        body += nodes[k:a]  # statements of no stage (commit-group arrives)
        if a < b:
            body += [LoopIR.If(guards[a], nodes[a:b], [], src)] if guards[a] is not None else nodes[a:b]
        k = b
    return Alpha_Rename([LoopIR.For(it, lo, hi, body, s.loop_mode, src)]).result()[0]


def _drain(q: _Queue, entries: list, syncs: _Syncs):
    """After the loops, wait for the commit groups no Await waited for (empty ones made after the last tile, or
    committed after the time step's last Await)."""
    ours = [(k, spec) for k, e in enumerate(entries)
            if (spec := sync_spec_of(e.node)) is not None and spec.kind in ("Arrive", "Await")
            and e.node.args[0].name == q.bar]  # fmt: skip
    awaits = [(k, spec.N) for k, spec in ours if spec.kind == "Await"]
    if not awaits or (max(n for _, n in awaits) == 0 and max(k for k, s in ours if s.kind == "Arrive") < awaits[-1][0]):
        return None
    return syncs.stmt("Await", q, 0, entries[-1].node.srcinfo)
