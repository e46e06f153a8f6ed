"""Shared-memory bank conflicts at concrete sizes: `sl.bank_conflicts(p, **sizes)`.

The count runs the proc's Program (`lower.lower_for_banks`: every access, as often as the GPU makes it)
and groups the accesses of row-major shared memory into the requests a warp issues:

- a statement run by single threads (plain code, or an instr of one thread such as cp.async), at one
  iteration of the sequential loops around it: one request of each warp, its lanes being the threads that
  run the statement then;
- a warp instr that declares `smem_blocks`: one request per block of its window (ldmatrix: per 8 x 8 matrix
  of 2-byte elements, i.e. 8 rows of 16 bytes).

Shared memory is 32 banks of 4-byte words, word w in bank w % 32 (CUDA C++ Programming Guide, shared memory
of compute capability 5.x and later). A request takes as many wavefronts as the most distinct words it
touches in one bank (lanes that touch the same word share it), and needs at least its distinct words / 32.
Each allocation starts 128-byte aligned (codegen/_device.py), so an element's bank follows from its offset.
Asynchronous-proxy accesses (TMA, wgmma) and warp instrs without `smem_blocks` are listed as not modeled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from exo.API import Procedure
from exo.core.LoopIR import LoopIR

from ..analysis.result import StmtRef
from ..core import timelines as tl
from ..core.cache import ProcCache
from ..core.ir import sizes_text
from ..errors import SporkTypeError, SyncError, user_facing, user_frame
from . import program as P
from .checker import size_values
from .lower import lower_for_banks
from .reference import python_function

BANKS = 32
WORD_BYTES = 4


@dataclass(frozen=True)
class BankAccess:
    """The shared-memory requests of one source statement on one buffer, reads or writes, over the whole run
    (the statements scheduling made of one source line, e.g. by unrolling, count together)."""

    stmt: StmtRef  # the first of them
    statements: int  # how many
    buffer: str
    kind: str  # "read" or "write"
    instr: str  # the instr the statement calls ("" for plain code)
    code: str  # the statement: its source line, or the instr call as printed (scheduling made it)
    requests: int
    wavefronts: int  # what the requests take
    needed: int  # the fewest their bytes need (distinct words / 32, per request)
    worst_ways: int  # the most wavefronts one request takes per wavefront it needs
    worst: str  # that request: who made it and the words that share its busiest bank

    @property
    def conflict_free(self) -> bool:
        return self.wavefronts == self.needed

    @property
    def ratio(self) -> float:
        """Wavefronts taken per wavefront needed (1.0: conflict-free)."""
        return self.wavefronts / self.needed if self.needed else 1.0

    def to_json(self) -> dict:
        return {"stmt": self.stmt.to_json(), "statements": self.statements, "buffer": self.buffer, "kind": self.kind,
                "instr": self.instr, "code": self.code, "requests": self.requests,
                "wavefronts": self.wavefronts, "needed": self.needed, "worst_ways": self.worst_ways,
                "worst": self.worst}

    def __str__(self) -> str:
        many = f" ({self.statements} statements)" if self.statements > 1 else ""
        head = (f"{self.stmt.file}:{self.stmt.line}: {self.code}{many}\n    {self.kind} {self.buffer}: {self.requests} requests, "
                f"{self.wavefronts} wavefronts")
        if self.conflict_free:
            return f"{head}, conflict-free"
        return (f"{head} where {self.needed} would do ({self.ratio:.2f}x; at worst {self.worst_ways}-way)\n"
                f"    worst: {self.worst}")


@dataclass
class BankReport:
    """Bank conflicts of a proc at concrete sizes: `accesses` (worst first) and what the count leaves out."""

    proc: str
    sizes: dict
    accesses: list = field(default_factory=list)  # of BankAccess, most excess wavefronts first
    not_modeled: list = field(default_factory=list)  # of (StmtRef, why)

    @property
    def conflicts(self) -> list:
        """The accesses whose requests take more wavefronts than they need."""
        return [a for a in self.accesses if not a.conflict_free]

    @property
    def ok(self) -> bool:
        return not self.conflicts

    def to_json(self) -> dict:
        return {"proc": self.proc, "sizes": dict(self.sizes), "accesses": [a.to_json() for a in self.accesses],
                "not_modeled": [{"stmt": s.to_json(), "why": why} for s, why in self.not_modeled]}

    def __str__(self) -> str:
        at = sizes_text(self.sizes)
        lines = [f"shared-memory bank conflicts of {self.proc}" + (f" at {at}" if at else "") + ": "
                 + (f"{len(self.conflicts)} of {len(self.accesses)} accesses conflict" if self.accesses
                    else "no shared-memory accesses modeled")]
        lines += [f"  {a}".replace("\n", "\n  ") for a in self.accesses]
        lines += [f"  not modeled: {s} ({why})" for s, why in self.not_modeled]
        return "\n".join(lines)

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))


_layouts = ProcCache()  # proc -> (Program, BankLayout, {id(Access op): (its index, its request loops' vars)})


def _build(proc_ir) -> tuple:
    program, layout = lower_for_banks(proc_ir)
    where: dict = {}
    open_loops: list = []
    for k, op in enumerate(program.ops):
        if isinstance(op, P.For):
            open_loops.append(op.var)
        elif isinstance(op, P.EndFor):
            open_loops.pop()
        elif isinstance(op, P.Access):
            where[id(op)] = (k, tuple(v for v in open_loops if v in layout.request_vars))
    return program, layout, where


@user_facing
def bank_conflicts(p, **sizes) -> BankReport:
    """Count the shared-memory bank conflicts of proc `p` at the given sizes (see the module docstring for
    the model): per statement, its warps' requests and the wavefronts they take against the fewest they
    need. The proc runs at these sizes access by access, in Python: use sizes as small as for sync_check."""
    call = user_frame()
    if not isinstance(p, (Procedure, LoopIR.proc)):
        raise SporkTypeError(f"bank_conflicts takes a proc (made with @proc or a scheduling op), not "
                             f"{type(p).__name__}", call)
    ir = getattr(p, "_loopir_proc", p)
    program, layout, where = _layouts.get(ir, _build)
    values = size_values(ir, sizes, caller="bank_conflicts")
    return _Count(program, layout, where, values).report(sizes)


class _Count:
    """One count: runs the Program at the sizes, gathers each request's elements, then sums per statement."""

    def __init__(self, program: P.Program, layout, where: dict, values: tuple):
        self.p, self.layout, self.where = program, layout, where
        self.V = [0] * program.n_vars
        for (_, var), value in zip(program.sizes, values):
            self.V[var] = value
        self.fns: dict = {}  # id(Expr) -> its Python function (an Expr's hash walks its whole tree)
        self.task = -1
        self.shapes: list = [()] * len(program.slots)  # each slot's shape, as its Alloc made it
        self.masks = program.masks
        self.plans: dict = {}  # id(Access op) -> its `plan`
        self.requests: dict = {}  # (op index, task, warp, loop values, block) -> [op, shown loop values, elements]
        self.not_modeled: dict = {}  # statement index -> why
        # elements per shard of each slot of distributed shared memory (sizes only: evaluated once), else 0
        self.shards = tuple(0 if shard is None else self.ev(shard) for shard in layout.shard_elems)

    def fn(self, e: P.Expr):
        """e as a Python function of V (once per expression)."""
        fn = self.fns.get(id(e))
        if fn is None:
            fn = self.fns[id(e)] = python_function(e, self.p.tables)
        return fn

    def ev(self, e: P.Expr) -> int:
        return self.fn(e)(self.V)

    def report(self, sizes: dict) -> BankReport:
        handlers = {P.Access: self.access, P.Alloc: self.alloc, P.TaskBegin: self.task_begin}
        try:
            P.execute(self.p.ops, self.V, self.ev, handlers)
        except ZeroDivisionError:
            raise SyncError(f"bank_conflicts: {self.p.proc} divides by zero at these sizes; sl.sync_check at them "
                            "names the statement", user_frame()) from None
        groups: dict = {}  # (source line, slot, kind) -> [statements, requests, wavefronts, needed, worst]
        for key, (op, iv, elements) in self.requests.items():
            taken, needed, bank = self.wavefronts(op.slot, elements)
            ways = -(-taken // needed)
            stmt = self.p.sites[op.site].stmt
            ref = self.p.stmts[stmt]
            for kind, bit in (("read", P.READ), ("write", P.WRITE)):
                if op.mode & bit:
                    what = self.layout.callees.get(stmt, (ref.text,))[0]  # unrolled copies of a line count together
                    g = groups.setdefault((ref.file, ref.line, what, op.slot, kind), [{}, 0, 0, 0, None])
                    g[0].setdefault(stmt, ref)
                    g[1] += 1
                    g[2] += taken
                    g[3] += needed
                    if g[4] is None or ways > g[4][0]:
                        g[4] = (ways, self.describe(key, iv, op.slot, elements, bank))
        accesses = []
        for (_, _, text, slot, kind), (stmts, n, taken, needed, worst) in groups.items():
            instr, code = self.layout.callees.get(next(iter(stmts)), ("", text))
            accesses.append(BankAccess(next(iter(stmts.values())), len(stmts), self.p.slots[slot].name, kind, instr,
                                       code, n, taken, needed, *worst))
        accesses.sort(key=lambda a: (a.needed - a.wavefronts, a.stmt.line))
        not_modeled = [(self.p.stmts[stmt], why) for stmt, why in self.not_modeled.items()]
        return BankReport(self.p.proc, dict(sizes), accesses, not_modeled)

    # ---- ops ----

    def task_begin(self, op: P.TaskBegin) -> None:
        self.task += 1

    def alloc(self, op: P.Alloc) -> None:
        self.shapes[op.slot] = tuple(self.ev(d) for d in op.shape)

    def access(self, op: P.Access) -> None:
        plan = self.plans.get(id(op))
        if plan is None:
            plan = self.plans[id(op)] = self.plan(op)
        if plan is False:
            return
        k, element, mask, block, loops, shown = plan
        V = self.V
        threads = self.masks[mask(V)]
        first = threads[0][0]
        key = (k, self.task, first // 32, tuple([V[v] for v in loops]), block(V) if block else 0)
        if block is None and threads != ((first, first + 1),):
            site = self.p.sites[op.site]
            self.not_modeled.setdefault(site.stmt, f"one instruction of {sum(h - lo for lo, h in threads)} threads "
                                                   "whose requests its instr does not declare (smem_blocks)")
            return
        entry = self.requests.get(key)
        if entry is None:
            entry = self.requests[key] = [op, tuple((name, V[v]) for name, v in shown), []]
        entry[2].append(element(V))

    def plan(self, op: P.Access):
        """What `access` does with op each time: (op index, element, mask, block (None: a thread's request),
        request loops' variables, the (name, variable) of those its site shows); False where the count leaves op
        out."""
        site = self.p.sites[op.site]
        if site.instr_tl in tl.ASYNC_PROXY_INSTR_TLS:
            self.not_modeled.setdefault(site.stmt, f"{site.instr_tl.name}: the asynchronous proxy's accesses")
            return False
        k, loops = self.where[id(op)]
        block = self.layout.blocks.get(id(op))
        shown = tuple((name, v) for name, v in site.loops if v in loops)
        return k, self.fn(op.element), self.fn(op.mask), block and self.fn(block), loops, shown

    # ---- requests ----

    def offset(self, slot: int, e: int) -> int:
        """Element e's byte offset in its allocation (a CTA's own shard of distributed shared memory)."""
        shard = self.shards[slot]
        return (e % shard if shard else e) * self.layout.elem_bytes[slot]

    def wavefronts(self, slot: int, elements: list) -> tuple:
        """(wavefronts taken, wavefronts needed, the busiest bank's words) of one request."""
        size = self.layout.elem_bytes[slot]
        by_bank: dict = {}
        for e in elements:
            offset = self.offset(slot, e)
            for word in range(offset // WORD_BYTES, (offset + size - 1) // WORD_BYTES + 1):
                by_bank.setdefault(word % BANKS, set()).add(word)
        bank = max(by_bank.values(), key=len)
        words = sum(len(w) for w in by_bank.values())
        return len(bank), math.ceil(words / BANKS), bank

    def describe(self, key: tuple, iv: tuple, slot: int, elements: list, bank: set) -> str:
        """Who made a request, and which of its elements share its busiest bank."""
        loops = ", ".join(f"{name}={value}" for name, value in iv)
        task, warp = key[1], key[2]
        who = f"task {task}, warp {warp}" + (f", {loops}" if loops else "")
        shown, words = [], set()
        for e in elements:
            word = self.offset(slot, e) // WORD_BYTES
            if word in bank and word not in words:
                words.add(word)
                shown.append(self.index(slot, e))
        bank_no = next(iter(bank)) % BANKS
        more = f", ... ({len(shown)} in all)" if len(shown) > 4 else ""
        return (f"{who}: bank {bank_no} holds {len(bank)} words of the request: "
                f"{', '.join(shown[:4])}{more}")

    def index(self, slot: int, e: int) -> str:
        """Element `e` of a slot as the user indexes it."""
        return f"{self.p.slots[slot].name}[{', '.join(map(str, P.index_of(e, self.shapes[slot])))}]"


__all__ = ["bank_conflicts", "BankReport", "BankAccess"]
