"""What `sync_check` returns: a SyncReport built from an engine's RawRun, the same way for both engines.

The engines find hazards and barrier events as numbers (sites, masks, tasks,
loop values); this module turns them into statements, thread intervals,
iterator values and messages, and words the errors that stop a run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from ..analysis.result import StmtRef
from ..core import timelines as tl
from ..errors import SyncError
from . import program as P
from . import sigsets as ss

HAZARD_KINDS = P.HAZARD_KINDS


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
    after_hang: Optional[int] = None  # its threads already hang at this DEADLOCK (index into hazards; see _hangs)
    fence: Optional[tuple] = None  # data hazards: the sync-tls (first, second) of a Fence that orders the two
    fix: str = ""  # data hazards: what would order them, in words (see _fix)

    def __str__(self) -> str:
        where = f"{self.buffer}[{', '.join(map(str, self.index))}]" if self.buffer is not None else ""
        s = f"{self.kind} {where}: {self.message}\n  at {self.access.stmt} threads {ss.thread_text(self.access.threads)} {self.access.iters}"
        if self.other is not None:
            s += f"\n  after {self.other.stmt} threads {ss.thread_text(self.other.threads)} {self.other.iters}"
        if self.fix:
            s += f"\n  to fix: {self.fix}"
        return s

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "buffer": self.buffer,
            "index": list(self.index) if self.index is not None else None,
            "access": self.access.to_json(),
            "other": self.other.to_json() if self.other else None,
            "message": self.message,
            "after_hang": self.after_hang,
            "fence": list(self.fence) if self.fence else None,
            "fix": self.fix,
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
    owner: int = -1  # a queue of its own per CTA of a multicast or per group of threads (a commit group): whose
    hang: Optional[str] = None  # "here": its threads hang at this await; "after": they hung before (see _hangs)
    later: Optional[int] = None  # an await whose arrive the run makes only after it: that arrive's event number

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
            "owner": self.owner,
            "hang": self.hang,
            "later": self.later,
        }


@dataclass
class SyncReport:
    """Result of `sync_check`: hazards (empty when the program is correctly synchronized) and barrier events.

    `engine` says which engine ran ("compiled" or "python"); `engine_note` why the
    Python reference ran when the compiled engine was asked for (empty otherwise).
    """

    proc: str
    sizes: dict
    hazards: list
    barrier_timeline: list
    barriers: dict  # barrier name -> BarrierInfo.to_json()
    truncated: bool = False  # hazards past `max_hazards` were dropped
    timeline_truncated: bool = False  # barrier events past `max_events` were dropped
    engine: str = "compiled"
    engine_note: str = ""

    @property
    def ok(self) -> bool:
        return not self.hazards

    def __str__(self) -> str:
        note = f" [{self.engine} engine: {self.engine_note}]" if self.engine_note else ""
        if self.ok:
            return f"sync_check({self.proc}, {self.sizes}): ok{note}"
        real = [h for h in self.hazards if h.after_hang is None]
        after = [h for h in self.hazards if h.after_hang is not None]
        text = f"sync_check({self.proc}, {self.sizes}): {len(self.hazards)} hazard(s)"
        if after:
            text += f", {len(after)} of them after a deadlock"
        text += f"{note}\n" + "\n".join(str(h) for h in real)
        if after:
            text += ("\nafter the deadlock (what the threads it hangs would do next: on the GPU they never get there; "
                     "fix the deadlock first):\n" + "\n".join(str(h) for h in after))
        return text

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
            "engine": self.engine,
            "engine_note": self.engine_note,
        }


def build_report(program: P.Program, sizes: dict, barriers: dict, run: P.RawRun, engine: str, note: str) -> SyncReport:
    """The SyncReport of a run (raises the SyncError of a run that stopped on an error)."""
    if run.error is not None:
        raise run_error(program, *run.error)
    events = _events(program, run.events)
    _mark_later_arrives(program, run, events)
    hazards = [_hazard(program, h, _later_arrive(run, events, h)) for h in run.hazards]
    _hangs(program, run, hazards, events)
    return SyncReport(
        proc=program.proc,
        sizes=dict(sizes),
        hazards=hazards,
        barrier_timeline=events,
        barriers={i.name: i.to_json() for i in barriers.values()},
        truncated=run.truncated,
        timeline_truncated=run.events_total > len(run.events),
        engine=engine,
        engine_note=note,
    )


def _access(program: P.Program, acc: P.RawAccess) -> Access:
    site = program.sites[acc.site]
    return Access(program.stmt_of(acc.site), program.threads(acc.mask, acc.task, acc.site),
                  dict(zip((name for name, _ in site.loops), acc.iv)))


def _queue_text(q: P.Queue) -> str:
    if q.group:
        source = f" (the queue of threads {q.source * q.group}..{(q.source + 1) * q.group - 1} of each task)"
    else:
        source = f" (the arrives of CTA {q.source} of the slice)" if q.source >= 0 else ""
    return f"{q.barrier}{list(q.position) if q.position else ''}{source}"


def _hazard(program: P.Program, h: P.RawHazard, later: Optional[P.RawEvent] = None) -> Hazard:
    """`later`: for an Await that waits for a future arrive, that arrive where the run makes it later."""
    kind = HAZARD_KINDS[h.kind]
    acc = _access(program, h.access)
    other = None if h.other is None else _access(program, h.other)
    if h.queue < 0:
        name = program.slots[h.slot].name
        if h.kind == P.FREE:
            message = (f"{name} (allocated at line {acc.stmt.line}) is freed at the end of its scope while an access "
                       "to this element is not visible to every owning thread: fence before the scope ends")
            if program.slots[h.slot].remote:
                message += (f" (other CTAs of its cluster write {name} (multicast): a CTA that exits or reuses it must "
                            "first sync with them, e.g. a cluster-wide Fence)")
        elif h.kind == P.UNINIT:
            message = (f"reads an element of {name} that nothing has written since {name} was allocated: its value "
                       "is undefined, on the GPU as in run_cpu; write (e.g. zero) it first")
        else:
            verb = {"RAW": "read after write", "WAR": "write after read", "WAW": "write after write"}[kind]
            instr_tl = program.sites[h.access.site].instr_tl
            message = f"{verb} without synchronization: the earlier access is not visible to these threads on {instr_tl}"
            if program.slots[h.slot].global_memory:  # set only in programs with remote arrives (lower.py)
                message += (f" ({name} is global memory: a remote `Arrive(...) >> bar[:]` does not order it for the "
                            "other CTAs of the cluster, a Fence by the whole cluster does)")
        return Hazard(kind, name, h.index, acc, other, message, None, *_fix(program, h, acc, other, name))
    q = program.queues[h.queue]
    if h.kind == P.COUNT and len(h.params) == 3:
        arrived, awaits, lag = h.params
        message = (f"the scope of {_queue_text(q)} ends after {arrived} {q.kind_prefix}Arrive(s) but only {awaits} "
                   f"{q.kind_prefix}Await(s) (the first arrive not awaited is line {acc.stmt.line}): its end waits "
                   f"for the phases its Awaits skipped (lag {lag}), not for arrives no Await counted, so the awaiting "
                   f"threads' next {q.kind_prefix}Awaits (in the barrier's next scope) would pair with these older phases and pass "
                   f"before their data lands: await every arrive (as many {q.kind_prefix}Awaits as "
                   f"{q.kind_prefix}Arrives in each scope)")
    elif h.kind == P.COUNT:
        unawaited, slack = h.params
        message = (f"{unawaited} {q.kind_prefix}Arrive(s) on {_queue_text(q)} never awaited (allowed: {slack}); "
                   f"the first is line {acc.stmt.line}")
        index = f"[{', '.join(map(str, q.position))}]" if q.position else ""
        fix = (f"`{q.kind_prefix}Await({q.barrier}{index}, cuda_in_order, {'~0' if q.rule.lag is not None else 0})` "
               f"after line {acc.stmt.line}, before the barrier's scope ends: every {q.kind_prefix}Arrive pairs with "
               f"an Await (a Fence that completes the work, such as Fence(Sm80_generic, ...), does not pair with it)")
        return Hazard(kind, None, None, acc, other, message, fix=fix)
    elif h.kind == P.TX:
        n, expected, delivered = h.params
        message = (f"phase #{n} of {_queue_text(q)} expects {expected} bytes of TMA loads (the expect-tx of its Arrive), "
                   f"but the loads completing on it deliver {delivered} bytes by this point: a wrong tx count, so the "
                   "phase never completes (the GPU waits forever) or completes before the data lands")
    elif h.params[0] == 0:
        _, n, slot, depth, reuse = h.params
        message = (f"arrive #{n} on {q.barrier} reuses ring slot {slot} (depth {depth}) before arrive #{reuse} "
                   f"was awaited: more {q.kind_prefix}Await lag than the ring allows{_slot_free_hint(q)}")
    elif h.params[0] == 2:
        _, n, slot, depth, reuse = h.params
        message = (f"{q.kind_prefix}Arrive #{n} on {_queue_text(q)} reuses ring slot {slot} (depth {depth}), but its "
                   f"threads are not ordered after the {q.kind_prefix}Await of arrive #{reuse} (line {other.stmt.line}) "
                   "by any chain of program order, Fences and arrive -> await pairs: it can complete a phase before "
                   f"that {q.kind_prefix}Await waited on it (on the GPU the parity wait then hangs or pairs with a later "
                   f"phase){_slot_free_hint(q)}")
    elif h.params[0] == 4:
        _, n, slot, depth, _ = h.params
        message = (f"{q.kind_prefix}Arrive #{n} on {_queue_text(q)} reuses ring slot {slot} (depth {depth}) from the "
                   "barrier's previous scope (an earlier task: a CTA runs the tasks a grid's width apart; or the previous "
                   "iteration of the loop around the barrier: its mbarriers and phase counts carry on), but its threads "
                   "are not ordered after the "
                   f"{q.kind_prefix}Await of that slot's last arrive (line {other.stmt.line}): it can complete a phase "
                   "before that Await waited on it (on the GPU the parity wait then hangs or pairs with a later phase). "
                   "Order them, e.g. with a Fence by the threads of both at the end of the barrier's scope")
    elif h.params[0] == 5:
        _, n, slot, depth, reuse = h.params
        if other is None:
            before = f"arrive #{reuse}"
        else:
            before = (f"the {q.kind_prefix}Await of arrive #{reuse} (line {other.stmt.line})" if reuse >= 1 else
                      f"the {q.kind_prefix}Await of the slot's last arrive in the barrier's previous scope (line "
                      f"{other.stmt.line})")
        message = (f"this TMA load completes on phase #{n} of {_queue_text(q)}, ring slot {slot} (depth {depth}), and "
                   f"signals that slot when it lands, but its issuing threads are not ordered after {before}, the "
                   "slot's previous phase: its bytes can count toward that phase while it is still open, which then "
                   "never completes or completes before its data lands. Issue the load after that Await (with "
                   "multicast: after every CTA's consumers released the slot, e.g. `ReverseArrive(...) >> bar[:]`)")
    elif h.params[0] == 3:
        _, awaits, arrived, lag = h.params
        message = (f"the scope of {_queue_text(q)} ends after {awaits} {q.kind_prefix}Await(s) but only {arrived} "
                   f"{q.kind_prefix}Arrive(s): its end waits for the phases its first {lag} {q.kind_prefix}Await(s) "
                   f"skipped (so that the next task starts even), and arrive #{arrived + 1} never comes: the GPU "
                   "would wait forever")
    elif later is not None:
        _, k, arrived = h.params
        arrive = _access(program, later.access)
        where = ", ".join(f"{name}={v}" for name, v in arrive.iters.items())
        message = (f"{q.kind_prefix}Await on {_queue_text(q)} pairs with arrive #{k}, which the program makes only "
                   f"after it (line {arrive.stmt.line}, {where}): sync_check runs the program in its own order, where "
                   "this Await would wait forever (on the GPU, where warps run at once, it may not); put the code that "
                   "arrives before the code that awaits, e.g. the producer's block first")
    else:
        _, k, arrived = h.params
        message = (f"{q.kind_prefix}Await on {_queue_text(q)} pairs with arrive #{k}, but only {arrived} arrive(s) "
                   f"happened before it: the GPU would wait forever")
    return Hazard(kind, None, None, acc, other, message)


def _fix(program: P.Program, h: P.RawHazard, acc: Access, other: Optional[Access], name: str) -> tuple:
    """(the sync-tls of a Fence that orders a data hazard's two accesses, where it goes, in words); (None, why no
    Fence can, and what to do) for accesses by different tasks, or by different iterations of a cuda_threads
    loop (other threads at once: a Fence in its body is each collective's own)."""
    if other is None:  # not named (the second run watched other elements)
        return None, ""
    site, other_site = program.sites[h.access.site], program.sites[h.other.site]
    size = site.task_threads
    tasks = [{t // size for lo, hi in side.threads for t in range(lo // size * size, hi, size)} for side in (acc, other)]
    if h.kind != P.FREE and tasks[0].isdisjoint(tasks[1]):
        return None, (f"different tasks touch the same element of {name}: tasks are ordered only by the end of the "
                      "device function; give each task its own elements, or split the work into two device functions")
    first, second = other_site.instr_tl, site.instr_tl
    if first == tl.cuda_in_order_instr and second == tl.wgmma_async_instr and not program.slots[h.slot].shared:
        fence = ("wgmma_fence_1", "wgmma_fence_2")  # registers before a wgmma: only wgmma.fence orders them
    elif first == tl.tma_to_smem_async_instr:  # no Fence completes a TMA load: its mbarrier's Await makes it
        fence = ("cuda_in_order", second.sync_tl_name)  # in-order for the awaiting threads, a Fence from there
    else:
        fence = (first.sync_tl_name, second.sync_tl_name)
    carried = next(((loop, v) for loop, v in site.loops if (loop, v) in other_site.loops  # the outermost loop
                    and acc.iters.get(loop) != other.iters.get(loop)), None)  # around both whose iterations differ
    if h.kind == P.FREE:
        where = f"before the end of {name}'s scope (it is allocated at line {acc.stmt.line})"
    elif carried is not None and carried[1] in site.thread_loops:  # other threads at once: a Fence in its body
        text_order = sorted((other.stmt, acc.stmt), key=lambda ref: ref.line)  # is each collective's own
        return None, (f"the accesses are in different iterations of `for {carried[0]} in cuda_threads(...)`, which "
                      f"run at once, so no Fence inside that loop orders them: split the loop between "
                      f"{_named(text_order[0], text_order[1])} and {_named(text_order[1], text_order[0])} (exo's "
                      "`fission`), and order the two loops with a Fence run by the threads of both (sync_check then "
                      "names its sync-tls)")
    elif _in_order(other.stmt, acc.stmt):
        where = f"between {_named(other.stmt, acc.stmt)} and {_named(acc.stmt, other.stmt)}"
    else:
        where = (f"after {_named(other.stmt, acc.stmt)}, at the end of the loop body around both (before its next "
                 f"iteration reaches {_named(acc.stmt, other.stmt)})")
    return fence, f"a Fence({fence[0]}, {fence[1]}) run by the threads of both accesses, {where}"


def _named(ref: StmtRef, beside: StmtRef) -> str:
    """A statement in a fix's words: its line, and which statement of the line where `beside` shares it (the
    statements scheduling made of one line)."""
    if ref.line != beside.line:
        return f"line {ref.line}"
    call = re.match(r"(\w+)\(.*\)$", ref.text)
    return f"`{call.group(1) + '(...)' if call else ref.text}` (line {ref.line})"


def _in_order(first: Optional[StmtRef], second: Optional[StmtRef]) -> bool:
    """Whether statement `first` comes before `second` in the proc (else they meet across loop iterations)."""
    if first is None or second is None or first.path is None or second.path is None:
        return first is not None and second is not None and first.line < second.line
    key = lambda path: tuple(float("inf") if step == "else" else step for step in path)  # noqa: E731
    return key(first.path) < key(second.path)


def _slot_free_hint(q: P.Queue) -> str:
    """How a forward ring stops refilling a slot its consumers still use."""
    if q.reverse:
        return ""
    return ("; give the ring more slots, or make the arriving threads wait until the slot is free (a reverse queue: "
            "the awaiting threads ReverseArrive when done with the slot, the arriving ones ReverseAwait before they "
            "refill it)")


def _events(program: P.Program, events: list) -> list:
    """The barrier timeline (the same sites, masks and tasks come back often: their parts are shared)."""
    out, threads, sites = [], {}, {}
    for e in events:
        q, acc = program.queues[e.queue], e.access
        site = sites.get(acc.site)
        if site is None:
            s = program.sites[acc.site]
            site = sites[acc.site] = (s.sync_kind, program.stmt_of(acc.site), tuple(name for name, _ in s.loops))
        key = (acc.mask, acc.task, acc.site)
        who = threads.get(key)
        if who is None:
            who = threads[key] = program.threads(acc.mask, acc.task, acc.site)
        out.append(
            BarrierEvent(q.barrier, q.position, "reverse" if q.reverse else "forward", site[0], site[1], who,
                         dict(zip(site[2], acc.iv)), e.index, None if e.slot < 0 else e.slot,
                         None if e.parity < 0 else e.parity, q.source)
        )
    return out


def _waits_forever(h: P.RawHazard) -> bool:
    return h.kind == P.DEADLOCK and h.params[0] == 1


def _at_scope_end(h: P.RawHazard) -> bool:
    """Found at the end of a barrier's scope, which every thread of the task passes."""
    return h.kind == P.COUNT or (h.kind == P.DEADLOCK and h.params[0] == 3)


def _mark_later_arrives(program: P.Program, run: P.RawRun, events: list) -> None:
    """Give each Await whose arrive the run makes only after it, in the same task and scope of its barrier,
    that arrive's event number (`later`): the program's order is wrong there, and on the GPU it need not hang."""
    made: dict = {}  # (queue, task) -> arrives made in the barrier's current scope
    waiting: dict = {}  # (queue, task, arrive number) -> the Awaits made before that arrive
    for j, (raw, event) in enumerate(zip(run.events, events)):
        queue = (raw.queue, raw.access.task)
        if program.sites[raw.access.site].sync_kind.endswith("Arrive"):
            if raw.index <= made.get(queue, 0):  # the scope started again: its numbering too
                waiting = {k: v for k, v in waiting.items() if k[:2] != queue}
            made[queue] = raw.index
            for early in waiting.pop((*queue, raw.index), ()):
                early.later = j
        elif raw.index > made.get(queue, 0):
            waiting.setdefault((*queue, raw.index), []).append(event)


def _later_arrive(run: P.RawRun, events: list, h: P.RawHazard) -> Optional[P.RawEvent]:
    """The arrive that an Await which waits forever pairs with, where the run makes it later (else None)."""
    at = h.access.seq  # the Await's own event
    if not _waits_forever(h) or at >= len(events) or events[at].later is None:
        return None
    return run.events[events[at].later]


def _hangs(program: P.Program, run: P.RawRun, hazards: list, events: list) -> None:
    """Mark what the run did past the point where the GPU would hang (the check runs on as if it had not).

    An Await that pairs with an arrive the run never makes (a DEADLOCK: it waits forever; one whose arrive the
    run makes later, `BarrierEvent.later`, is a wrong order) hangs its threads there; an arrive by hung threads
    never happens, so an Await that pairs with it hangs its threads too. A hazard whose access its threads make
    after they hung (or found at a scope end of their task) gets `after_hang`: the DEADLOCK at the start of the
    chain. Each barrier event gets `hang`: "here" at the Await where its threads hang, "after" past it. Times
    are counts of barrier events (RawAccess.seq); a task's threads are numbered apart from every other task's."""
    roots = {i for i, h in enumerate(run.hazards) if _waits_forever(h) and _later_arrive(run, events, h) is None}
    if not roots:
        return
    hung: list = []  # (threads, the index of the event where they hang, the DEADLOCK's index in hazards)
    gone: dict = {}  # (queue, arrive number) -> the DEADLOCK: arrives that hung threads never make
    settled = 0  # hazards done (the run found them in order: their events_before never decrease)

    def root_of(threads: tuple, seq: int) -> Optional[int]:
        """The DEADLOCK that hangs one of `threads` before barrier event `seq`, if any."""
        return next((r for ts, at, r in hung if at < seq and ss.intersect_threads(ts, threads)), None)

    def settle(upto: int) -> None:
        """The hazards found before barrier event `upto`."""
        nonlocal settled
        while settled < len(hazards) and run.hazards[settled].events_before <= upto:
            i, raw = settled, run.hazards[settled]
            settled += 1
            if _at_scope_end(raw):  # every thread of the task passes the end of the scope, when it is found
                last = raw.events_before - 1
                task = run.events[last].access.task if 0 <= last < len(run.events) else -1
                size = program.sites[raw.access.site].task_threads
                root = root_of(((task * size, (task + 1) * size),), raw.events_before) if task >= 0 else None
            else:
                a = raw.access  # made past its threads' hang, it never happens
                root = root_of(program.threads(a.mask, a.task, a.site), a.seq)
            if root is not None:
                hazards[i].after_hang = root
            elif i in roots:
                a = raw.access  # the Await, whose event is number a.seq
                hung.append((program.threads(a.mask, a.task, a.site), a.seq, i))
                if a.seq < len(events):
                    events[a.seq].hang = "here"

    for j, (raw, event) in enumerate(zip(run.events, events)):
        settle(j)
        root = root_of(event.threads, j)
        kind = program.sites[raw.access.site].sync_kind
        if root is not None:
            event.hang = "after"
            if kind.endswith("Arrive"):
                gone[raw.queue, raw.index] = root
        elif kind.endswith("Await") and (raw.queue, raw.index) in gone:
            event.hang = "here"
            hung.append((event.threads, j, gone[raw.queue, raw.index]))
    settle(run.events_total + 1)


_ERRORS = {
    P.ERR_INDEX: "sync_check: an access outside its buffer (index out of bounds)",
    P.ERR_BARRIER_INDEX: "sync_check: a barrier index outside the barrier's dimensions",
    P.ERR_DIVISION: "sync_check: an index expression divides by zero",
    P.ERR_SHAPE: "sync_check: a buffer with a negative dimension",
    P.ERR_ALIGN: "sync_check: a window this instr needs aligned is misaligned at these sizes (each row of a "
                 "cp.async's window starts at a multiple of its size, of an ldmatrix's at 16 bytes, a TMA copy's "
                 "shared-memory box at 128 bytes, a wgmma's shared-memory operand at 16 bytes); the GPU would fault "
                 "on the address (wgmma: read from the 16-byte unit's start, as its descriptor holds no more)",
    P.ERR_BOX: "sync_check: a TMA copy's shared-memory window does not have its rows one after another at these "
               "sizes (TMA moves its box as adjacent rows from the window's first element, not the rows the program "
               "names): give it whole rows of a buffer as wide as the box",
    P.ERR_CTA: "sync_check: a multicast arrive or TMA load on a slice of barriers must be issued by threads of one CTA "
               "of that slice (the barrier it counts on is its own CTA's)",
}


def run_error(program: P.Program, code: int, acc: Optional[P.RawAccess], queue: int) -> SyncError:
    """The SyncError of a run that stopped, at the statement where it stopped."""
    where = program.stmt_of(acc.site) if acc is not None and acc.site >= 0 else None
    if code in (P.ERR_ARRIVE_THREADS, P.ERR_AWAIT_THREADS):
        what = "arrive" if code == P.ERR_ARRIVE_THREADS else "await"
        q = program.queues[queue]
        if q.rule.scope:  # commit groups
            why = ("each thread counts its own commit groups: `Await(..., N)` waits for all but the N newest groups of "
                   "the awaiting threads, and another thread's arrive is not one of them")
            return SyncError(f"every {what} on commit group {q.barrier} must be executed by the same threads ({why}); "
                             f"this one has other threads than the first", where)
        return SyncError(
            f"every {what} on mbarrier {q.barrier} must be executed by the same threads, in every scope of it (each "
            f"thread counts the phases it sees, and the CTA's next task reuses the mbarriers and the counts); this one "
            f"has other threads than the first",
            where,
        )
    return SyncError(_ERRORS[code], where)
