"""The one lowering of a checked proc for the sync engines: LoopIR + Analysis -> `Program` (program.py).

A walk of the proc in sequential order: loops become For/EndFor, index
expressions `Expr`s, every buffer access, sync statement, allocation, scope
end, task and device-function boundary an op. What the walk needs to know
about threads comes from the analysis (the one home of "which threads run a
statement"): for each tiling, the masks of all its cuda_threads iterator
values are listed here, once, and each access looks its collective up with
the enclosing cuda_threads iterators. Instr bodies are inlined: their
accesses carry the instr's instr-tl and operand usage-tls and are reported at
the call. Anything a program cannot be checked with is a SyncError here, for
both engines alike.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, fields, replace
from typing import Optional

from exo.core.LoopIR import LoopIR

from ..analysis import Analysis, analyze
from ..core import timelines as tl
from ..core.blocks import CudaAsync, CudaDeviceFunction, CudaWarps
from ..core.instrs import instr_info, multicast_dst, user_name
from ..core.ir import (constant_remainder, constant_value, expr_key, expr_vars, interval_width, numeric_reads,
                       walk_stmts, whole_interval)
from ..core.loop_modes import CudaThreads, WithBlock
from ..core.memories import elem_bytes
from ..core.sync_stmts import BarrierMemory, is_barrier_alloc, is_point_interval, sync_spec_of, trailing_of
from ..errors import SyncError
from ..lang.printer import head_text
from . import program as P
from .access import distributed_shared, is_global_memory, is_shared_memory, unordered_access


@dataclass(frozen=True)
class _View:
    """A buffer seen through windows: element = base + sum(i_k * strides[k])."""

    slot: int
    base: P.Expr
    strides: tuple
    usage: Optional[tl.UsageTl] = None
    unordered: bool = False  # accessed by an instr whose lanes act independently (sync/access.py)


@dataclass(frozen=True)
class _Barrier:
    """A barrier allocation. Every position (CTA dimensions included: each CTA keeps its own barriers) has
    `subs[0]` forward then `subs[1]` reverse queues, from q0 + flat position * (subs[0] + subs[1]). A
    direction whose arrives are multicast (`>> bar[lo:lo + W]`, W > 1) has W queues per position, one per
    arriving CTA (queue `source`): a phase completes once every CTA of the slice arrived, so an await
    awaits all W. A commit-group barrier (a hardware queue per thread for cp.async, per warpgroup for wgmma)
    used by collectives that each lie within one aligned group of `groups[d]` threads (that scope, or a warp or
    warpgroup) has one queue per group: wait_group N counts the awaiting threads' own commits, not their
    neighbours' (`queue_group`)."""

    q0: int
    dims: tuple
    subs: tuple  # (forward, reverse) queues per position
    groups: tuple  # (forward, reverse): threads per group of a per-group queue, 0 if none
    tx: dict  # id(Arrive statement) -> the TMA bytes its phase expects (analysis.barriers.BarrierUse.tx_bytes)

    def queue(self, flat: P.Expr, reverse: bool, sub: P.Expr) -> P.Expr:
        off = self.subs[0] if reverse else 0
        return P.add(P.add(P.Const(self.q0 + off), P.mul(flat, P.Const(self.subs[0] + self.subs[1]))), sub)


@dataclass(frozen=True)
class _Ctx:
    """Where a statement runs."""

    analysis: Analysis  # tilings of the statements being lowered (a callee launching kernels has its own)
    dev: Optional[CudaDeviceFunction] = None
    tiling: object = None
    instr_tl: tl.InstrTl = tl.cpu_in_order_instr
    cuda: tuple = ()  # (iterator name, var) of the enclosing cuda_threads loops of the task
    task_threads: int = 0
    loops: tuple = ()  # (iterator name, var) of the loops reports show
    in_instr: object = None  # the outermost instr call whose body is being lowered


REGISTER_PAIR = tl.pair_bit(tl.cuda_in_order_instr, tl.register_usage)
WGMMA_REGISTER_PAIR = tl.pair_bit(*tl.WGMMA_REGISTER_OPERAND)
WGMMA_REGISTER_BIT = 1 << WGMMA_REGISTER_PAIR

# TMA loads complete only through the mbarriers they trail (`copy(...) >> bar[...]`, a `Trail` op): no Arrive
# or Fence orders them, so their pair is dropped from every first sync-tl (program.Trail).
TMA_LOAD_BIT = 1 << tl.pair_bit(tl.tma_to_smem_async_instr)


def lower(proc_ir: LoopIR.proc) -> P.Program:
    """The proc as a Program (computed from its cached analysis); SyncError for what cannot be checked."""
    return _Lowering(proc_ir).program()


@dataclass(frozen=True)
class BankLayout:
    """What the bank-conflict count (sync/banks.py) needs beyond a Program: see `lower_for_banks`."""

    request_vars: frozenset  # variables of the loops whose iterations are separate shared-memory requests
    blocks: dict  # id(Access op) -> its element's block (an Expr) in a warp instr that declares `smem_blocks`
    elem_bytes: tuple  # per slot: bytes per element
    banked: tuple  # per slot: row-major shared memory of one CTA (`CudaMemory.linear_smem`)
    shard_elems: tuple  # per slot: elements per shard of distributed shared memory (an Expr), else None
    callees: dict  # statement index -> (the name of the instr a call statement calls, the call as printed)


def lower_for_banks(proc_ir: LoopIR.proc) -> tuple:
    """(Program, BankLayout) for counting shared-memory bank conflicts: every access in execution order, as
    often as it runs (none of the reductions that keep the sync check's reports but change how often a
    read runs), whole tiles element by element."""
    lowering = _Lowering(proc_ir, for_banks=True)
    return lowering.program(), lowering.bank_layout()


def index_expr(e, env: dict) -> P.Expr:
    """An integer LoopIR expression as an `Expr`; env maps symbols to their `Expr`s (a window to its `_View`).
    The one translation of index arithmetic that both engines evaluate (a SyncError for anything else)."""
    if isinstance(e, LoopIR.Const):
        if not isinstance(e.val, (bool, int)):
            raise SyncError(f"sync_check cannot evaluate {e} (only integer index expressions)", e.srcinfo)
        return P.Const(int(e.val))
    if isinstance(e, LoopIR.Read):
        v = env.get(e.name)
        if e.idx or not isinstance(v, (P.Var, P.Const)):
            raise SyncError(f"sync_check cannot evaluate {e} (only integer index expressions)", e.srcinfo)
        return v
    if isinstance(e, LoopIR.USub):
        arg = index_expr(e.arg, env)
        return P.Const(-arg.value) if isinstance(arg, P.Const) else P.Neg(arg)
    if isinstance(e, LoopIR.BinOp):
        lhs, rhs = index_expr(e.lhs, env), index_expr(e.rhs, env)
        if e.op == "+":
            return P.add(lhs, rhs)
        if e.op == "*":
            return P.mul(lhs, rhs)
        return P.Bin(e.op, lhs, rhs)
    if isinstance(e, LoopIR.StrideExpr):
        view = env.get(e.name)
        if not isinstance(view, _View):
            raise SyncError(f"sync_check cannot evaluate {e} (only integer index expressions)", e.srcinfo)
        return view.strides[e.dim]
    raise SyncError(f"sync_check cannot evaluate {e} (only integer index expressions)", e.srcinfo)


class _Lowering:
    def __init__(self, proc_ir: LoopIR.proc, for_banks: bool = False):
        self.ir = proc_ir
        self.for_banks = for_banks
        self.analysis = analyze(proc_ir)
        self.ops: list = []
        self.n_vars = 0
        self.masks: list = [()]
        self.mask_ids: dict = {(): 0}
        self.tables: list = []
        self.table_ids: dict = {}  # table contents -> table id
        self.tiling_masks: dict = {}  # tiling -> the mask of each of its collectives (equal tilings: one entry)
        self.slots: list = []
        self.mems: list = []  # the memory of each slot
        self.names: dict = {}
        self.queues: list = []
        self.sites: list = []
        self.site_ids: dict = {}
        self.stmts: list = []
        self.stmt_ids: dict = {}
        self.max_threads = 1
        self.by_owner: set = set()  # indices of Access ops made by the collective that owns the buffer (registers)
        self.rank_tables: dict = {}  # group size -> id of the table giving each mask's group (-1: several groups)
        self.multicast_dst = {dst.name for s in walk_stmts(proc_ir.body)
                              if trailing_of(s) is not None and (dst := multicast_dst(s)) is not None}
        # Records of global memory are kept apart only where a remote arrive must leave them out (program.Arrive):
        # elsewhere records shared by global and shared memory elements keep syncs cheap.
        self.remote_arrives = any((spec := sync_spec_of(s)) is not None and spec.is_arrive and spec.window_shape
                                  for s in walk_stmts(proc_ir.body))
        self.whole_tiles = {} if for_banks else self.tiles_accessed_whole(proc_ir)
        self.slot_syms: list = []  # the Sym of each slot
        self.shard_elems: list = []  # per slot: elements of one shard of distributed shared memory (an Expr), else None
        self.wgmma_shapes: dict = {}  # index of an Access of wgmma's register operands -> (shape, registers named)
        self.wgmma_windows: dict = {}  # (id of a wgmma call, slot) -> the registers its window names
        self.request_vars: set = set()  # for_banks: see BankLayout
        self.blocks: dict = {}
        self.elem_bytes: list = []
        self.callees: dict = {}  # for_banks: see BankLayout

    def program(self) -> P.Program:
        env: dict = {}
        sizes = []
        for a in self.ir.args:
            if not a.type.is_numeric():
                v = self.var()
                sizes.append((str(a.name), v))
                env[a.name] = P.Var(v)
        ctx = _Ctx(self.analysis)
        for a in self.ir.args:
            if a.type.is_numeric():
                env[a.name] = self.buffer(a, ctx, env)
        self.block(self.ir.body, ctx, env)
        for size, table in self.rank_tables.items():
            self.tables[table] = tuple(_rank(m, size) for m in self.masks)
        self.unorder_mixed_wgmma_shapes()
        if self.for_banks:
            ops = self.bank_ops()
        else:
            private = self.private_accesses()
            ops = _without([replace(op, first_only=True) if k in private else op for k, op in enumerate(self.ops)],
                           self.dead_lets(set()))
        return P.Program(
            proc=str(self.ir.name),
            ops=ops,
            n_vars=self.n_vars,
            sizes=tuple(sizes),
            masks=tuple(self.masks),
            tables=tuple(self.tables),
            slots=tuple(self.slots),
            queues=tuple(self.queues),
            sites=tuple(self.sites),
            stmts=tuple(self.stmts),
            max_threads=self.max_threads,
        )

    def bank_ops(self) -> tuple:
        """The ops the bank count runs: control flow, tasks, and the allocations and accesses of banked memory."""
        banked = self.banked()
        drop = {k for k, op in enumerate(self.ops)
                if not isinstance(op, (P.For, P.EndFor, P.If, P.Else, P.EndIf, P.Let, P.TaskBegin, P.Access, P.Alloc))
                or (isinstance(op, (P.Access, P.Alloc)) and not banked[op.slot])}
        used = set().union(*map(_variables, self.blocks.values()))
        return _without(self.ops, drop | self.dead_lets(drop, used))

    def banked(self) -> tuple:
        """Per slot: is it memory whose banks the count models (`CudaMemory.linear_smem`)?"""
        return tuple(getattr(mem, "linear_smem", False) for mem in self.mems)

    def bank_layout(self) -> BankLayout:
        return BankLayout(frozenset(self.request_vars), self.blocks, tuple(self.elem_bytes), self.banked(),
                          tuple(self.shard_elems), dict(self.callees))

    # ---- tables ----

    def var(self) -> int:
        self.n_vars += 1
        return self.n_vars - 1

    def emit(self, op) -> int:
        self.ops.append(op)
        return len(self.ops) - 1

    def site(self, s, ctx: _Ctx) -> int:
        stmt = self.stmt_ids.get(id(s))
        if stmt is None:
            stmt = self.stmt_ids[id(s)] = len(self.stmts)
            self.stmts.append(self.analysis.ref(s))
            if self.for_banks and isinstance(s, LoopIR.Call):
                self.callees[stmt] = (user_name(s.f.name), head_text(s))
        key = (stmt, ctx.loops, ctx.instr_tl, ctx.task_threads)
        site = self.site_ids.get(key)
        if site is None:
            site = self.site_ids[key] = len(self.sites)
            spec = sync_spec_of(s)
            self.sites.append(P.Site(stmt, ctx.loops, ctx.instr_tl, ctx.task_threads, spec.kind if spec else "",
                                     frozenset(v for _, v in ctx.cuda)))
        return site

    def mask(self, ctx: _Ctx) -> P.Expr:
        """The mask of the collective running a statement in ctx (a lookup by its cuda_threads iterators)."""
        if ctx.dev is None:
            return P.Const(0)
        return self.lookup(self.collectives(ctx.tiling), ctx.tiling.iters, ctx)

    def collectives(self, tiling) -> list:
        """The mask of every collective of a tiling, by its iterator values (row-major); once per tiling."""
        masks = self.tiling_masks.get(tiling)
        if masks is None:
            masks = self.tiling_masks[tiling] = self.tiling_collectives(tiling)
        return masks

    def tiling_collectives(self, tiling) -> list:
        self.max_threads = max(self.max_threads, tiling.blockDim * tiling.clusterDim)
        names = [name for name, _ in tiling.iters]
        return [
            P.mask_of_intervals(self.masks, self.mask_ids, tuple(tuple(r) for r in tiling.threads(dict(zip(names, values)))))
            for values in itertools.product(*(range(c) for _, c in tiling.iters))
        ]

    def lookup(self, ids: list, iters: tuple, ctx: _Ctx) -> P.Expr:
        """Entry (row-major) of a table over the values of cuda_threads iterators `iters`, at their values."""
        if len(set(ids)) == 1:
            return P.Const(ids[0])
        key = tuple(ids)
        table = self.table_ids.get(key)
        if table is None:
            table = self.table_ids[key] = len(self.tables)
            self.tables.append(key)
        cvars, index, stride = dict(ctx.cuda), P.Const(0), 1
        for name, count in reversed(iters):
            index = P.add(P.mul(P.Var(cvars[name]), P.Const(stride)), index)
            stride *= count
        return P.Table(table, index)

    # ---- expressions ----

    def element(self, view: _View, idx, env: dict) -> P.Expr:
        e = view.base
        for i, stride in zip(idx, view.strides):
            e = P.add(e, P.mul(index_expr(i, env), stride))
        return e

    def let(self, value: P.Expr) -> P.Expr:
        """A variable holding `value` (evaluated here, once), or the value itself when it is constant."""
        if isinstance(value, (P.Const, P.Var)):
            return value
        v = self.var()
        self.emit(P.Let(v, value))
        return P.Var(v)

    # ---- statements ----

    def block(self, stmts, ctx: _Ctx, env: dict) -> None:
        env = dict(env)
        ends = []
        for s in stmts:
            self.stmt(s, ctx, env, ends)
        for end in reversed(ends):
            self.emit(end)

    def stmt(self, s, ctx: _Ctx, env: dict, ends: list) -> None:
        if isinstance(s, (LoopIR.Assign, LoopIR.Reduce)):
            if ctx.dev is not None:
                self.assign(s, ctx, env)
        elif isinstance(s, LoopIR.For):
            self.loop(s, ctx, env)
        elif isinstance(s, LoopIR.If):
            at = self.emit(None)
            self.block(s.body, ctx, env)
            if s.orelse:
                other = self.emit(None)
                self.ops[at] = P.If(index_expr(s.cond, env), other)
                self.block(s.orelse, ctx, env)
                end = self.emit(P.EndIf())
                self.ops[other] = P.Else(end)
            else:
                self.ops[at] = P.If(index_expr(s.cond, env), self.emit(P.EndIf()))
        elif isinstance(s, LoopIR.Alloc):
            if is_barrier_alloc(s):
                ends.append(self.barrier_alloc(s, ctx, env))
            else:
                view = env[s.name] = self.buffer(s, ctx, env)
                ends.append(P.Free(view.slot, self.site(s, ctx)))
        elif isinstance(s, LoopIR.WindowStmt):
            env[s.name] = self.window(s.rhs, env)
        elif isinstance(s, LoopIR.Call):
            self.call(s, ctx, env)
        elif not isinstance(s, (LoopIR.Pass, LoopIR.Free)):
            raise SyncError(f"sync_check does not interpret {type(s).__name__} statements", s.srcinfo)

    def buffer(self, decl, ctx: _Ctx, env: dict) -> _View:
        """A new buffer slot (an argument or an Alloc) with row-major strides, and its Alloc op."""
        shape = [index_expr(d, env) for d in decl.type.shape()] if decl.type.is_tensor_or_window() else []
        name = str(decl.name)
        slot = len(self.slots)
        self.slots.append(P.Slot(name, self.names.setdefault(name, len(self.names)), is_shared_memory(decl.mem),
                                 remote=decl.name in self.multicast_dst,
                                 global_memory=self.remote_arrives and is_global_memory(decl.mem),
                                 undefined=isinstance(decl, LoopIR.Alloc)))
        self.slot_syms.append(decl.name)
        self.mems.append(decl.mem)
        self.elem_bytes.append(elem_bytes(decl.type.basetype()) if getattr(decl.mem, "linear_smem", False) else 0)
        strides, size = [], P.Const(1)
        for d in reversed(shape):
            strides.append(size)
            size = self.let(P.mul(size, d))
        shard_size, owners = self.shards(decl, shape, ctx)
        dist = ctx.analysis.dist.get(decl.name) if ctx.dev is not None else None
        shard = None
        if dist is not None and dist.is_distributed and is_shared_memory(decl.mem):
            shard = P.Const(1)
            for d in shape[dist.dims :]:
                shard = P.mul(shard, d)
        self.shard_elems.append(shard)
        self.emit(P.Alloc(slot, tuple(shape), self.mask(ctx), ctx.dev is not None, shard_size, owners))
        return _View(slot, P.Const(0), tuple(reversed(strides)))

    def shards(self, decl, shape: list, ctx: _Ctx) -> tuple:
        """(elements per shard, each shard's owner mask) of distributed shared memory, else (0, ())."""
        if ctx.dev is None or not distributed_shared(ctx.analysis, decl.name) or decl.name in self.multicast_dst:
            return 0, ()  # a multicast destination is written by every CTA of the slice: reused after all of them
        dist = ctx.analysis.dist[decl.name]
        counts = [d.value for d in shape[: dist.dims]]
        size = 1
        for d in shape[dist.dims :]:
            size *= d.value
        outer = ctx.tiling.iters  # the enclosing cuda_threads iterators choose the allocating collective
        owners = []
        for shard in itertools.product(*(range(n) for n in counts)):
            ids = []
            for values in itertools.product(*(range(c) for _, c in outer)):
                runs = dist.owner_threads(shard, dict(zip((name for name, _ in outer), values)))
                ids.append(-1 if runs is None else P.mask_of_intervals(self.masks, self.mask_ids,
                                                                      tuple(tuple(r) for r in runs)))
            owners.append(self.lookup(ids, outer, ctx))
        return size, tuple(owners)


    def window(self, w, env: dict) -> _View:
        view = env[w.name]
        base, strides = view.base, []
        for i, stride in zip(w.idx, view.strides):
            if isinstance(i, LoopIR.Interval):
                base = P.add(base, P.mul(index_expr(i.lo, env), stride))
                strides.append(stride)
            else:
                base = P.add(base, P.mul(index_expr(i.pt, env), stride))
        return _View(view.slot, self.let(base), tuple(strides), view.usage, view.unordered)

    def assign(self, s, ctx: _Ctx, env: dict) -> None:
        mask, site = self.mask(ctx), self.site(ctx.in_instr or s, ctx)
        for sym, idx, mode in statement_accesses(s):
            view = env[sym]
            pair = self.pair(ctx, view)
            self.access(P.Access(view.slot, self.element(view, idx, env), mask, pair, mode, view.unordered, site), ctx)

    def pair(self, ctx: _Ctx, view: _View) -> int:
        """The (instr-tl, usage-tl) pair bit of an access: in-order accesses to registers have their own
        (core/timelines.py: wgmma.fence orders them, and nothing in shared memory), and so do wgmma's
        accesses to registers, whichever operand (timelines.WGMMA_REGISTER_OPERAND)."""
        if ctx.instr_tl is tl.cuda_in_order_instr and view.usage is None and not self.slots[view.slot].shared:
            return REGISTER_PAIR
        if ctx.instr_tl is tl.wgmma_async_instr and not self.slots[view.slot].shared:
            return WGMMA_REGISTER_PAIR  # the accumulator, or A in registers (see second_masks)
        return tl.pair_bit(ctx.instr_tl, view.usage)

    def access(self, op: P.Access, ctx: _Ctx) -> None:
        unit = getattr(self.mems[op.slot], "native_unit", None)
        if unit is not None and ctx.tiling is not None and ctx.tiling.matches(unit):
            self.by_owner.add(len(self.ops))
        if op.pair == WGMMA_REGISTER_PAIR:
            call = ctx.in_instr
            info = instr_info(call) if call is not None else None  # a user's wgmma instr without a shape: its own
            shape = (info.wgmma_shape if info else ()) or (call and str(call.f.name))
            self.wgmma_shapes[len(self.ops)] = (shape, self.wgmma_windows.get((id(call), op.slot), _VARYING))
        self.emit(op)

    def unorder_mixed_wgmma_shapes(self) -> None:
        """PTX orders accumulator accesses across wgmma of the same shape on the same registers only (PTX ISA,
        wgmma.fence), and the machine's program order for wgmma's register pair orders every wgmma after the
        earlier ones. On registers that wgmma of two shapes or more access, or windows of one shape that overlap
        without being the same registers (`_registers_named`), the accesses of every wgmma are made unordered:
        each then needs the earlier ones' wait and a wgmma.fence. Conservative (two of one shape in a row on
        the same registers are ordered in PTX), and free for the usual one shape per accumulator."""
        shapes: dict = {}
        windows: dict = {}
        for k, (shape, window) in self.wgmma_shapes.items():
            shapes.setdefault(self.ops[k].slot, set()).add(shape)
            windows.setdefault(self.ops[k].slot, set()).add(window)
        for k in self.wgmma_shapes:
            slot = self.ops[k].slot
            if len(shapes[slot]) > 1 or not _same_or_apart(windows[slot]):
                self.ops[k] = replace(self.ops[k], unordered=True)

    def private_accesses(self) -> set:
        """The accesses of register buffers that only their owners access, in program order.

        Registers (a memory whose native unit is a thread, warp or warpgroup) accessed only by the
        collective that owns them (the dist pass makes every use of a distributed register allocation its
        shard's owner's), and only by in-order instructions, can never be part of a hazard: each such
        access finds the owner's own in-order record, visible to it in program order, and leaves one; a
        sync only widens that; the free of registers asks only that the owners' asynchronous accesses
        completed. So the machine has nothing to record for them: both engines make only each element's first
        one, which is UNINIT if it reads (`Access.first_only`). (wgmma's accumulator is ordered after the same
        warpgroup's earlier wgmma, but asynchronous: kept.)
        """
        by_slot: dict = {}
        for k, op in enumerate(self.ops):
            if isinstance(op, P.Access):
                by_slot.setdefault(op.slot, []).append(k)
        private = set()
        for slot, indices in by_slot.items():
            if self.slots[slot].shared:
                continue
            if all(k in self.by_owner and not self.ops[k].unordered and self.ops[k].pair == REGISTER_PAIR
                   for k in indices):
                private.update(indices)
        return private

    def dead_lets(self, dropped: set, used: frozenset = frozenset()) -> set:
        """The Lets (window offsets, index parts) whose variable no op but the `dropped` ones reads (nor
        `used` names), directly or through other Lets: gcc would compile them and both engines run them for
        nothing (a Let that may stop the run stays: `_may_fail`)."""
        reads: dict = {}  # var -> the vars its Let reads
        live: set = set(used)
        for k, op in enumerate(self.ops):
            if k in dropped:
                continue
            if isinstance(op, P.Let) and not _may_fail(op.value):
                reads[op.var] = _variables(op.value)
                continue
            live |= _op_reads(op, self.sites)
        todo = list(live)
        while todo:
            for v in reads.pop(todo.pop(), ()):
                if v not in live:
                    live.add(v)
                    todo.append(v)
        return {k for k, op in enumerate(self.ops) if isinstance(op, P.Let) and op.var in reads}

    def loop(self, s, ctx: _Ctx, env: dict) -> None:
        mode = s.loop_mode
        if isinstance(mode, WithBlock):
            self.with_block(s, mode.ctx, ctx, env)
            return
        name = s.iter.name()
        v = self.var()
        inner = ctx
        task = False
        if isinstance(mode, CudaThreads):
            inner = replace(ctx, tiling=self.body_tiling(s, ctx), cuda=ctx.cuda + ((name, v),))
        elif any(s is fn.tasks[-1] for fn in ctx.analysis.device_functions):
            task = True  # the innermost cuda_tasks loop: each iteration is a task, its own top-level collective
            inner = replace(ctx, cuda=(), task_threads=ctx.tiling.thread_count)
        if ctx.in_instr is None:
            inner = replace(inner, loops=inner.loops + ((name, v),))
            if not isinstance(mode, CudaThreads):
                self.request_vars.add(v)
        start = self.emit(None)
        if task:
            self.emit(P.TaskBegin(ctx.tiling.thread_count))
        self.block(s.body, inner, {**env, s.iter: P.Var(v)})
        if task:
            self.emit(P.TaskEnd())
        end = self.emit(P.EndFor(start))
        self.ops[start] = P.For(v, index_expr(s.lo, env), index_expr(s.hi, env), end)
        if not self.for_banks:
            self.hoist_reads(start, name, v)

    def hoist_reads(self, start: int, name: str, v: int) -> None:
        """Move the loop's leading reads that do not change with its iterations in front of it.

        Reading an element again, by the same collective on the same pair, with no sync statement in
        between and no write to its buffer, changes nothing and reports nothing new (SYNC_MODEL: reads
        only add the reader's record, which is there already). So a read whose element and collective
        do not depend on the loop happens once, where its first iteration made it; its report then shows
        no value for this loop's iterator. Only for loops that run at least once (constant bounds).
        """
        loop = self.ops[start]
        if not (isinstance(loop.lo, P.Const) and isinstance(loop.hi, P.Const) and loop.lo.value < loop.hi.value):
            return
        body = self.ops[start + 1 : loop.end]
        if not all(isinstance(op, (P.Access, P.For, P.EndFor, P.Let, P.If, P.Else, P.EndIf)) for op in body):
            return
        defined = {v} | {op.var for op in body if isinstance(op, (P.For, P.Let))}
        written = {op.slot for op in body if isinstance(op, P.Access) and op.mode & P.WRITE}
        at = start
        while True:
            op = self.ops[at + 1]
            if not (isinstance(op, P.Access) and op.mode == P.READ and op.slot not in written
                    and not (_variables(op.element) | _variables(op.mask)) & defined):
                break
            site = self.sites[op.site]
            loops = tuple(lp for lp in site.loops if lp != (name, v))
            self.ops[at] = replace(op, site=self.resite(op.site, loops))
            at += 1
        if at != start:
            self.ops[at] = loop
            self.ops[loop.end] = P.EndFor(at)

    def resite(self, site: int, loops: tuple) -> int:
        """The site of the same statement showing other loops."""
        old = self.sites[site]
        key = (old.stmt, loops, old.instr_tl, old.task_threads)
        found = self.site_ids.get(key)
        if found is None:
            found = self.site_ids[key] = len(self.sites)
            self.sites.append(replace(old, loops=loops))
        return found

    def body_tiling(self, s, ctx: _Ctx):
        return ctx.analysis.stmt_info(s.body[0]).tiling

    def with_block(self, s, block, ctx: _Ctx, env: dict) -> None:
        if isinstance(block, CudaDeviceFunction):
            inner = _Ctx(ctx.analysis, block, self.body_tiling(s, ctx), tl.cuda_in_order_instr, loops=ctx.loops,
                         in_instr=ctx.in_instr)
            self.emit(P.DeviceBoundary())
            self.block(s.body, inner, env)
            self.emit(P.DeviceBoundary())
            return
        if isinstance(block, CudaAsync):
            inner = replace(ctx, instr_tl=block.instr_tl)
        elif isinstance(block, CudaWarps):
            inner = replace(ctx, tiling=self.body_tiling(s, ctx))
        else:
            inner = ctx
        self.block(s.body, inner, env)

    def call(self, s, ctx: _Ctx, env: dict) -> None:
        spec = sync_spec_of(s)
        if spec is not None:
            self.sync(s, spec, ctx, env)
            return
        info = instr_info(s)
        if s.f.instr is not None and ctx.dev is None:
            return  # a CPU instr: nothing the abstract machine records
        trailing = trailing_of(s)
        n_args = trailing[1] if trailing else len(s.args)
        callee = dict(env)
        aligned = dict(info.aligned) if info is not None and ctx.dev is not None else {}
        boxes = dict(info.smem_box) if info is not None and ctx.dev is not None else {}
        descs = dict(info.smem_desc) if info is not None and ctx.dev is not None else {}
        for a, formal in zip(s.args[:n_args], s.f.args[:n_args]):
            if not formal.type.is_numeric():
                callee[formal.name] = self.let(index_expr(a, env))
                continue
            if isinstance(formal.mem, type) and issubclass(formal.mem, BarrierMemory):
                raise SyncError(f"sync_check: barrier {a.name} is passed to {s.f.name}; use barriers in the proc "
                                "that allocates them", s.srcinfo)
            view = self.window(a, env) if isinstance(a, LoopIR.WindowExpr) else env[a.name]
            self.check_aligned(s, a, view, aligned.get(str(formal.name)), ctx)
            self.check_smem_box(s, formal, view, boxes.get(str(formal.name)), ctx)
            self.check_smem_start(s, formal, view, descs.get(str(formal.name)), ctx)
            usage = info.usage_tls.get(str(formal.name)) if info else None
            unordered = view.unordered or (
                info is not None
                and ctx.tiling is not None
                and unordered_access(str(s.f.name), ctx.tiling.thread_count, self.slot_mem(a, env))
            )
            callee[formal.name] = _View(view.slot, view.base, view.strides, usage or view.usage, unordered)
            if (info.instr_tl if info else ctx.instr_tl) is tl.wgmma_async_instr and not self.slots[view.slot].shared:
                self.wgmma_windows[(id(s), view.slot)] = _registers_named(a, env[a.name], formal)
        if trailing:
            self.trailing_call(s, info, replace(ctx, instr_tl=info.instr_tl, in_instr=ctx.in_instr or s), env, callee)
            return
        if s.f.instr is not None and ctx.dev is not None:
            inner = replace(ctx, instr_tl=info.instr_tl if info else ctx.instr_tl, in_instr=ctx.in_instr or s)
            accesses = instr_accesses(s.f.body)
            if accesses is not None:
                self.instr_call(accesses, inner, callee)
                return
        elif s.f.instr is None and ctx.dev is None:
            inner = replace(ctx, analysis=analyze(s.f))  # a CPU callee: its device functions are its own
        else:
            inner = ctx
        self.block(s.f.body, inner, callee)

    def check_aligned(self, s, arg, view: _View, nbytes: Optional[int], ctx: _Ctx) -> None:
        """Each row of the window `view` of `arg` starts at a multiple of `nbytes` (None: no such need) in its
        buffer (a shard's, for distributed shared memory) at these sizes. The analysis proves it where it can
        without them (`checks._check_alignment`); an offset that depends on an iterator or a size is decided
        here, run by run (the GPU faults on a misaligned address)."""
        if nbytes is None or not isinstance(arg, LoopIR.WindowExpr):
            return
        size = elem_bytes(arg.type.basetype())
        rows = [view.strides[k] for k, w in enumerate(i for i in arg.idx if isinstance(i, LoopIR.Interval))
                if k < len(view.strides) - 1 and interval_width(w) != 1]
        for offset in (self.shard_offset(view), *rows):
            self.check_multiple(offset, size, nbytes, self.site(ctx.in_instr or s, ctx))

    def check_smem_box(self, s, formal, view: _View, nbytes: Optional[int], ctx: _Ctx) -> None:
        """The window `view` passed for `formal` (a TMA box in shared memory, `InstrInfo.smem_box`) has adjacent
        rows and starts at a multiple of `nbytes` in its buffer (a shard's, for distributed shared memory) at
        these sizes. The analysis decides it where the window's own bounds do (`checks._check_smem_box`); a
        window of a window, or a start that depends on an iterator, is decided here."""
        if nbytes is None:
            return
        rows, cols = (d.val for d in formal.type.shape()[-2:])
        pitch = view.strides[-2]
        if rows != 1 and not (isinstance(pitch, P.Const) and pitch.value == cols):
            self.emit(P.Check(P.Bin("==", pitch, P.Const(cols)), P.ERR_BOX, self.site(ctx.in_instr or s, ctx)))
        self.check_smem_start(s, formal, view, nbytes, ctx)

    def check_smem_start(self, s, formal, view: _View, nbytes: Optional[int], ctx: _Ctx) -> None:
        """The window `view` passed for `formal` starts at a multiple of `nbytes` (None: no such need) in its buffer
        (a shard's, for distributed shared memory) at these sizes: a TMA box's (128), a wgmma descriptor's operand
        (16: `InstrInfo.smem_desc`; the analysis decides its rows' pitch, a swizzled buffer's shape being constant,
        and its start where an iterator does not: `checks._check_smem_desc`)."""
        if nbytes is not None:
            site = self.site(ctx.in_instr or s, ctx)
            self.check_multiple(self.shard_offset(view), elem_bytes(formal.type.basetype()), nbytes, site)

    def shard_offset(self, view: _View) -> P.Expr:
        """Where `view` starts in its buffer's memory: for distributed shared memory, in its own shard (each
        CTA's shard is an allocation of its own, and the window's CTA index selects the shard)."""
        shard = self.shard_elems[view.slot]
        return view.base if shard is None else P.Bin("%", view.base, shard)

    def check_multiple(self, offset: P.Expr, size: int, nbytes: int, site) -> None:
        """A Check (ERR_ALIGN) that `offset` elements of `size` bytes are a multiple of `nbytes` bytes at these
        sizes; none where the offset is a constant that is."""
        if isinstance(offset, P.Const) and offset.value * size % nbytes == 0:
            return
        cond = P.Bin("==", P.Bin("%", P.mul(offset, P.Const(size)), P.Const(nbytes)), P.Const(0))
        self.emit(P.Check(cond, P.ERR_ALIGN, site))

    def instr_call(self, accesses: list, ctx: _Ctx, env: dict) -> None:
        """An instr is one instruction of its collective: each element it touches is read once and written
        once, all reads before all writes (see `instr_accesses`)."""
        for access in accesses:
            self.instr_access(access, ctx, env)

    def instr_access(self, access: tuple, ctx: _Ctx, env: dict, after=None) -> None:
        """One access of an instr (see `instr_accesses`): a nest of its body loops around an Access op.
        `after(loop var)`, if given, emits ops at the end of each iteration of the outermost loop."""
        sym, idx, mode, loops, guard = access
        mask, site = self.mask(ctx), self.site(ctx.in_instr, ctx)
        inner = dict(env)
        starts = []
        rank = self.whole_tiles.get(self.slot_syms[env[sym].slot])
        if rank is not None:  # one element stands for each tile of the last `rank` dimensions, guard or not
            tile = {i.name for i in idx[len(idx) - rank:]}
            inner.update({loop.iter: P.Const(0) for loop in loops if loop.iter in tile})
            loops, guard = [loop for loop in loops if loop.iter not in tile], ()
        for loop in loops:
            v = self.var()
            starts.append((self.emit(None), v, loop))
            inner[loop.iter] = P.Var(v)
        view = env[sym]
        pair = self.pair(ctx, view)
        at = self.emit(None) if guard else None
        op = P.Access(view.slot, self.element(view, idx, inner), mask, pair, mode, view.unordered, site)
        block = self.block_of(sym, idx, ctx, inner) if self.for_banks else None
        if block is not None:
            self.blocks[id(op)] = block
        self.access(op, ctx)
        if guard:
            self.ops[at] = P.If(_guard_expr(guard, inner), self.emit(P.EndIf()))
        for k, (start, v, loop) in reversed(list(enumerate(starts))):
            if k == 0 and after is not None:
                after(P.Var(v))
            end = self.emit(P.EndFor(start))
            self.ops[start] = P.For(v, index_expr(loop.lo, env), index_expr(loop.hi, env), end)

    def block_of(self, sym, idx, ctx: _Ctx, env: dict) -> Optional[P.Expr]:
        """For an access at `idx` of parameter `sym` of the instr being lowered: the block of the window its
        element falls in, where the instr declares its shared-memory requests (`smem_blocks`), else None."""
        info = instr_info(ctx.in_instr)
        blocks = dict(info.smem_blocks) if info is not None else {}
        formal = next((a for a in ctx.in_instr.f.args if a.name == sym), None)
        if formal is None or str(sym) not in blocks:
            return None
        block, radix = P.Const(0), 1
        for i, size, dim in reversed(list(zip(idx, blocks[str(sym)], formal.type.shape()))):
            block = P.add(P.mul(P.Bin("/", index_expr(i, env), P.Const(size)), P.Const(radix)), block)
            radix *= dim.val
        return block

    def tiles_accessed_whole(self, proc_ir) -> dict:
        """{allocation: tile rank} of the allocations every access of which is an instr touching whole
        trailing tiles (e.g. wgmma accumulators: zeroed, accumulated into and stored [64, N] at a time); a
        tile is the last `rank` dimensions, the fewest any of its statements spans (a pair of mma operand
        tiles loaded at once, then used one at a time: a tile is one operand).

        Each statement that touches such a buffer touches every element of a tile, by the same threads
        on the same pair, so the elements of a tile always have the same records: the lowering accesses
        only a tile's first element (which is also the element a report names first) and the machine does
        1 / (tile size) of the work. Only an instr call whose argument is the whole buffer or a window
        `x[i, .., 0:d, ..]` (points, then full trailing dimensions) qualifies, and only if its body reads or
        writes each element of that parameter once, through a nest of full-range loops."""
        ranks: dict = {}  # Sym -> the tile rank so far (None: a use that does not qualify)
        allocs = {s.name: s for s in walk_stmts(proc_ir.body) if isinstance(s, LoopIR.Alloc) and not is_barrier_alloc(s)}
        for s in walk_stmts(proc_ir.body):
            for name, rank in _buffer_uses(s, allocs):
                known = ranks.get(name, rank)
                ranks[name] = None if rank is None or known is None else min(rank, known)
        return {name: rank for name, rank in ranks.items() if rank is not None and name in allocs}

    def trailing_call(self, s, info, ctx: _Ctx, env: dict, callee: dict) -> None:
        """`copy(...) >> bar[...]`: a TMA load whose completion only its mbarriers signal (program.Trail).

        Its accesses (asynchronous, on its instr-tl) are followed by a Trail: pending on the barrier's
        phase closed by the issuing threads' next Arrive on their own barrier, with the load's bytes. A
        multicast load (`dst[lo:lo + W, ...]`, `>> bar[lo:lo + W]`) writes the shard of each CTA of the
        slice and signals that CTA's barrier: its global reads complete with any of them (they are pending
        on all), and the writes of shard q complete with barrier q only.
        """
        n_args = trailing_of(s)[1]
        accesses = instr_accesses(s.f.body[:-1])  # the trailing proc's body: the instr's, then a barrier write
        if accesses is None:
            raise SyncError(f"sync_check cannot interpret the body of {s.f.name}", s.srcinfo)
        arg = s.args[n_args]
        bar = env[arg.name]
        site = self.site(s, ctx)
        mask = self.mask(ctx)
        point, sliced = self.barrier_indices(arg, bar, env, site)
        width = 1 if sliced is None else sliced[1]
        dests = [self.flat(bar, point, sliced, P.Const(j)) for j in range(width)]
        if sliced is None:
            own = dests[0]
        else:
            rank = self.cta_rank(mask, ctx, site)
            offset = P.add(rank, P.Neg(sliced[0]))
            self.emit(P.Check(P.Bin("and", P.Bin("<=", P.Const(0), offset), P.Bin("<", offset, P.Const(width))),
                              P.ERR_CTA, site))
            own = self.flat(bar, point, sliced, offset)
        assert bar.subs[0] == 1, "the analysis refuses multicast Arrives on a barrier TMA loads complete on"
        pair = tl.pair_bit(info.instr_tl)
        zero = P.Const(0)
        queues = tuple(self.let(bar.queue(d, False, zero)) for d in dests)
        own_q = self.let(bar.queue(own, False, zero))
        if not info.multicast:
            for access in accesses:
                self.instr_access(access, ctx, callee)
            self.emit(P.Trail(mask, pair, queues, own_q, info.tx_bytes, site))
            return
        reads = [a for a in accesses if a[2] == P.READ]
        writes = [a for a in accesses if a[2] != P.READ]
        if len(writes) != 1 or not writes[0][3] or writes[0][3][0].hi.val != width:
            raise SyncError(f"sync_check: the multicast {s.f.name} must write one slice over the {width} CTAs of "
                            f"its barrier slice {arg.name}[...]", s.srcinfo)
        for access in reads:
            self.instr_access(access, ctx, callee)
        self.emit(P.Trail(mask, pair, queues, own_q, 0, site))

        def signal(q: P.Expr) -> None:  # the end of shard q's writes
            self.emit(P.Trail(mask, pair, (bar.queue(self.flat(bar, point, sliced, q), False, zero),), own_q,
                              info.tx_bytes, site))

        self.instr_access(writes[0], ctx, callee, after=signal)

    def slot_mem(self, arg, env: dict):
        return self.mems[env[arg.name].slot]

    # ---- synchronization ----

    @staticmethod
    def second_masks(spec) -> tuple:
        """(m2a, m2s) of a Fence or Await: its second sync-tl's pairs, less wgmma's register operands unless
        its CUDA text has wgmma.fence, the only instruction that orders register writes before a wgmma
        (timelines.WGMMA_REGISTER_OPERAND): a CTA fence into `wgmma_async` is bar.sync + fence.proxy.async."""
        m2 = spec.second_tl.mask
        if not tl.emits_wgmma_fence(spec.kind, spec.second_tl):
            m2 &= ~WGMMA_REGISTER_BIT
        return m2, tl.program_order_closure(m2)

    def sync(self, s, spec, ctx: _Ctx, env: dict) -> None:
        mask = self.mask(ctx)
        if spec.kind == "Fence":
            if ctx.dev is not None:
                self.emit(P.Fence(mask, spec.first_tl.mask & ~TMA_LOAD_BIT, *self.second_masks(spec),
                                  not tl.is_bare_wgmma_fence(spec.first_tl, spec.second_tl)))
            return
        arg = s.args[0]
        bar = env[arg.name]
        site = self.site(s, ctx)
        point, sliced = self.barrier_indices(arg, bar, env, site)
        reverse = spec.is_reverse
        subs, group = bar.subs[int(reverse)], bar.groups[int(reverse)]
        if group:  # one queue per group of threads (see _Barrier)
            queue = self.let(bar.queue(self.flat(bar, point, None, P.Const(0)), reverse, self.group_of(mask, group)))
            if spec.is_arrive:
                self.emit(P.Arrive(queue, mask, spec.first_tl.mask & ~TMA_LOAD_BIT, site, bar.tx.get(id(s), 0)))
            else:
                self.emit(P.Await(queue, mask, *self.second_masks(spec), spec.N, site))
            return
        if spec.is_arrive:
            if sliced is None:
                targets, sub = [self.flat(bar, point, None, P.Const(0))], P.Const(0)
            else:
                width = sliced[1]
                targets = [self.flat(bar, point, sliced, P.Const(j)) for j in range(width)]
                sub = self.let(P.add(self.cta_rank(mask, ctx, site), P.Neg(sliced[0])))
                self.emit(P.Check(P.Bin("and", P.Bin("<=", P.Const(0), sub), P.Bin("<", sub, P.Const(width))),
                                  P.ERR_CTA, site))
            m1 = spec.first_tl.mask & ~TMA_LOAD_BIT
            tx = bar.tx.get(id(s), 0)
            for j, flat in enumerate(targets):  # target j is another CTA's barrier unless j is this CTA's `sub`
                own = P.Const(1) if sliced is None else self.let(P.Bin("==", sub, P.Const(j)))
                self.emit(P.Arrive(self.let(bar.queue(flat, reverse, sub)), mask, m1, site, tx, own))
            return
        if sliced is not None:
            raise SyncError(f"{spec.kind} on a slice of {arg.name}: await one barrier", s.srcinfo)
        m2a, m2s = self.second_masks(spec)
        flat = self.let(self.flat(bar, point, None, P.Const(0)))
        for sub in range(subs):
            self.emit(P.Await(bar.queue(flat, reverse, P.Const(sub)), mask, m2a, m2s, spec.N, site))

    def barrier_indices(self, arg, bar: _Barrier, env: dict, site: int) -> tuple:
        """(index Expr per dimension (None for the sliced one), (slice start Expr, width) or None) of a barrier
        argument `bar[i, ...]` / `bar[lo:hi, ...]`; point indices are checked against the dimensions."""
        point, sliced = [], None
        idx = arg.idx if isinstance(arg, LoopIR.WindowExpr) else []
        for w, d in zip(idx, bar.dims):
            if is_point_interval(w):
                p = index_expr(w.lo if isinstance(w, LoopIR.Interval) else w.pt, env)
                inside = P.Bin("and", P.Bin("<=", P.Const(0), p), P.Bin("<", p, P.Const(d)))
                if not (isinstance(p, P.Const) and 0 <= p.value < d):
                    self.emit(P.Check(inside, P.ERR_BARRIER_INDEX, site))
                point.append(p)
                continue
            width = interval_width(w)
            if sliced is not None or width is None:
                raise SyncError(f"sync_check models slices of one barrier dimension, of constant width: {arg}",
                                arg.srcinfo)
            sliced = (index_expr(w.lo, env), width)
            point.append(None)
        return point, sliced

    @staticmethod
    def flat(bar: _Barrier, point: list, sliced, offset: P.Expr) -> P.Expr:
        """The flat position of a barrier index, the sliced dimension at slice start + offset."""
        flat: P.Expr = P.Const(0)
        for p, d in zip(point, bar.dims):
            flat = P.add(P.mul(flat, P.Const(d)), p if p is not None else P.add(sliced[0], offset))
        return flat

    def cta_rank(self, mask: P.Expr, ctx: _Ctx, site: int) -> P.Expr:
        """The rank in the cluster of the CTA whose threads `mask` holds (-1 for threads of several CTAs,
        which the checks that use it reject with ERR_CTA)."""
        return self.group_of(mask, ctx.tiling.blockDim)

    def group_of(self, mask: P.Expr, size: int) -> P.Expr:
        """The index of the aligned group of `size` threads that holds the threads of `mask` (-1 if several)."""
        table = self.rank_tables.get(size)
        if table is None:
            table = self.rank_tables[size] = len(self.tables)
            self.tables.append(())  # filled once every mask is known (`program`)
        return self.let(P.Table(table, mask))

    def barrier_alloc(self, s, ctx: _Ctx, env: dict) -> P.EndBarrier:
        """Queues for every position of a barrier (see `_Barrier`); their scope ends with the block."""
        info = ctx.analysis.barriers[s.name]
        subs, groups = [], []
        threads = ctx.tiling.blockDim * ctx.tiling.clusterDim if ctx.tiling is not None else 0
        for reverse in (False, True):
            uses = info.queue_uses(reverse)
            widths = {math.prod(u.spec.window_shape) for u in uses if u.spec.is_arrive}
            if len(widths) > 1:
                raise SyncError(f"sync_check: the {'reverse ' if reverse else ''}arrives on {info.name} reach "
                                "slices of different widths (multicast); it models one width per barrier", s.srcinfo)
            group = self.queue_group(uses, info.queue_rule(reverse).scope, threads, ctx)
            if group:
                subs.append(-(-threads // group))
            else:
                subs.append(max(widths | {1}))
            groups.append(group)
        q0 = len(self.queues)
        positions = math.prod(info.dims)
        for flat in range(positions):
            pos, rest = [], flat
            for d in reversed(info.dims):
                pos.append(rest % d)
                rest //= d
            for reverse in (False, True):
                prefix = "Reverse" if reverse else ""
                n = subs[int(reverse)]
                rule = info.queue_rule(reverse)
                if rule.scope and groups[int(reverse)] != rule.scope:
                    # one queue for the commit groups of several threads (or warpgroups), each of which has its
                    # own: it counts for every one only if the same threads make every arrive and every await
                    rule = replace(rule, same_threads=True)
                for sub in range(n):
                    self.queues.append(P.Queue(info.name, tuple(reversed(pos)), reverse, rule, prefix,
                                               sub if n > 1 else -1, groups[int(reverse)]))
        tx = {id(u.stmt): u.tx_bytes for u in info.uses if u.tx_bytes}
        env[s.name] = _Barrier(q0, info.dims, tuple(subs), tuple(groups), tx)
        return P.EndBarrier(q0, positions * (subs[0] + subs[1]), self.site(s, ctx))

    def queue_group(self, uses: list, scope: int, threads: int, ctx: _Ctx) -> int:
        """The threads per queue of a commit-group barrier, whose hardware queue is each `scope` threads' own:
        the smallest aligned group (the scope, or a power of two of warps: a warp, two, a warpgroup, ...) within
        which every collective using it lies, so that the commit groups of apart threads (a barrier of per-warp
        stages) are counted apart; 0 for one queue of the barrier, where no such group is smaller than the
        cluster's `threads` (or for other barriers)."""
        sizes = [scope, *(32 << k for k in range(threads.bit_length()) if 32 << k > scope)] if scope and uses else []
        for size in sizes:
            if size % scope == 0 and size < threads and all(self.within_groups(u.stmt, size, ctx) for u in uses):
                return size
        return 0

    def within_groups(self, stmt, size: int, ctx: _Ctx) -> bool:
        """Does every collective that runs `stmt` lie within one aligned group of `size` threads?"""
        tiling = ctx.analysis.stmt_info(stmt).tiling
        if tiling is None:
            return False
        return all(_rank(self.masks[m], size) >= 0 for m in self.collectives(tiling))


def _buffer_uses(s, allocs: dict) -> list:
    """(buffer Sym, the number of trailing dimensions this use touches whole, or None) for each buffer statement s
    names (see `_Lowering.tiles_accessed_whole`)."""
    out = []
    if isinstance(s, LoopIR.Call) and sync_spec_of(s) is None:
        info = instr_info(s)
        n_args = trailing_of(s)[1] if trailing_of(s) else len(s.args)
        body = s.f.body[:-1] if trailing_of(s) else s.f.body
        accesses = instr_accesses(body) if s.f.instr is not None and info is not None else None
        for a, formal in zip(s.args[:n_args], s.f.args[:n_args]):
            if isinstance(a, (LoopIR.Read, LoopIR.WindowExpr)) and formal.type.is_numeric() and a.name in allocs:
                rank = None
                if accesses is not None and _whole_tile(a, formal, accesses):
                    rank = len(formal.type.shape()) if formal.type.is_tensor_or_window() else 0
                out.append((a.name, rank))
        return out
    names: list = []
    if isinstance(s, (LoopIR.Assign, LoopIR.Reduce)):
        names.append(s.name)
        reads: list = []
        numeric_reads(s.rhs, reads)
        names += [r.name for r in reads]
    elif isinstance(s, LoopIR.WindowStmt):
        names.append(s.rhs.name)
    elif isinstance(s, LoopIR.Call):
        names += [a.name for a in s.args if isinstance(a, (LoopIR.Read, LoopIR.WindowExpr))]
    return [(n, None) for n in names]


_VARYING = ("varying",)


def _registers_named(arg, parent: _View, formal) -> tuple:
    """Which registers a wgmma's register operand `arg` (a window of a buffer seen as `parent`) names, for
    `unorder_mixed_wgmma_shapes`, as a pattern that any two windows of one shape matching it name the same
    registers or none in common, at every run of their statements: the buffer's place, and per dimension, "point" (two
    points at different places are apart) or the interval's width and its start modulo the width, when that
    is the same whatever the loop variables (`D[:, NW * j:NW * j + NW]`: width NW, start 0 mod NW, so two
    such intervals coincide or are apart). _VARYING otherwise (it may overlap another without being the same)."""
    if not isinstance(parent.base, P.Const):
        return _VARYING  # a window of a window: the places below are relative to a moving origin
    key = (parent.base.value, parent.strides)
    if isinstance(arg, LoopIR.Read):
        return _VARYING if arg.idx else (key, *((constant_value(d), 0) for d in arg.type.shape()))
    widths = iter(formal.type.shape())
    pattern = []
    for w in arg.idx:
        if not isinstance(w, LoopIR.Interval):
            pattern.append("point")
            continue
        width = constant_value(next(widths))
        start = constant_remainder(w.lo, width) if width and interval_width(w) == width else None
        if start is None:
            return _VARYING
        pattern.append((width, start))
    return (key, *pattern)


def _same_or_apart(windows: set) -> bool:
    """Do the windows of one shape on a buffer name the same registers or none in common, each pair?"""
    return len(windows) == 1 and _VARYING not in windows


def _whole_window(arg, typ) -> bool:
    """Is `arg` its buffer whole, or points then full trailing ranges of it?"""
    if isinstance(arg, LoopIR.Read):
        return not arg.idx and not typ.is_win()
    seen_interval = False
    for w, d in zip(arg.idx, typ.src_type.shape()):
        if isinstance(w, LoopIR.Interval):
            if not whole_interval(w, d):
                return False
            seen_interval = True
        elif seen_interval:
            return False
    return not typ.src_type.is_win()


def _whole_tile(arg, formal, accesses: list) -> bool:
    """Is `arg` the whole buffer or points then full trailing dimensions, and does the instr touch every
    element of `formal` once, through full-range loops?"""
    if not _whole_window(arg, arg.type):
        return False
    mine = [a for a in accesses if a[0] == formal.name]
    if len(mine) != 1:
        return False
    _, idx, _, loops, _ = mine[0]
    dims = formal.type.shape() if formal.type.is_tensor_or_window() else []
    if len(idx) != len(dims) or len(loops) != len(dims):
        return False
    by_iter = {lp.iter: lp for lp in loops}
    for i, d in zip(idx, dims):
        lp = by_iter.pop(i.name, None) if isinstance(i, LoopIR.Read) and not i.idx else None
        if lp is None or not (isinstance(lp.lo, LoopIR.Const) and lp.lo.val == 0 and isinstance(lp.hi, LoopIR.Const)
                              and isinstance(d, LoopIR.Const) and lp.hi.val == d.val):
            return False
    return True


def _rank(intervals: tuple, block_dim: int) -> int:
    """The CTA rank of a thread set within its cluster, -1 if it is empty or spans several CTAs."""
    ranks = {t // block_dim for lo, hi in intervals for t in (lo, hi - 1)}
    return ranks.pop() if len(ranks) == 1 else -1


def statement_accesses(s) -> list:
    """The accesses of an Assign/Reduce in execution order, (buffer Sym, index, mode): the reads of the
    right-hand side, then the target's write (Assign) or update (Reduce: its read, then its write)."""
    reads: list = []
    numeric_reads(s.rhs, reads)
    target = P.UPDATE if isinstance(s, LoopIR.Reduce) else P.WRITE
    return [(r.name, r.idx, P.READ) for r in reads] + [(s.name, s.idx, target)]


def instr_accesses(body: list) -> Optional[list]:
    """The accesses an instr's body states, one per distinct (buffer, index): (sym, idx, mode, loops, guard),
    the elements it only reads in order of first appearance, then those it writes (or reads and writes:
    updates); `loops` are the body loops the index depends on, `guard` the conditions of the `if`s around the
    access ((LoopIR expr, holds) pairs; empty when unconditional). An access stated in both branches of an
    `if` (a TMA load writes a loaded element or a zero) is unconditional.

    An instr is a single instruction of its collective (SYNC_MODEL.md: a collective access), so its body's
    loops say which elements it touches, not an order: an mma's accumulator element is read and written
    once, not once per k. None if the body is more than a nest of loops with constant bounds and `if`s
    around assignments (then it is lowered statement by statement).
    """
    found: dict = {}  # (sym, index key) -> [sym, idx, mode, loops, the distinct guards]

    def walk(stmts, loops, guard) -> bool:
        for s in stmts:
            if isinstance(s, LoopIR.For):
                if not (isinstance(s.lo, LoopIR.Const) and isinstance(s.hi, LoopIR.Const)):
                    return False
                if not walk(s.body, loops + (s,), guard):
                    return False
            elif isinstance(s, LoopIR.If):
                if not (walk(s.body, loops, guard + ((s.cond, True),))
                        and walk(s.orelse, loops, guard + ((s.cond, False),))):
                    return False
            elif isinstance(s, (LoopIR.Assign, LoopIR.Reduce)):
                for sym, idx, mode in statement_accesses(s):
                    key = (sym, tuple(map(expr_key, idx)))
                    if key in found:
                        found[key][2] |= mode
                        if not any(_same_guard(g, guard) for g in found[key][4]):
                            found[key][4].append(guard)
                    else:
                        used = set().union(*map(expr_vars, idx))
                        found[key] = [sym, idx, mode, tuple(lp for lp in loops if lp.iter in used), [guard]]
            elif not isinstance(s, LoopIR.Pass):
                return False
        return True

    if not walk(body, (), ()):
        return None
    values = []
    for sym, idx, mode, loops, guards in found.values():
        guard = _merged_guard(guards)
        if guard is None:
            return None
        values.append((sym, idx, mode, loops, guard))
    return [a for a in values if a[2] == P.READ] + [a for a in values if a[2] != P.READ]


def _guard_expr(guard: tuple, env: dict) -> P.Expr:
    """The conjunction of an instr access's guard (see `instr_accesses`)."""
    terms = [index_expr(c, env) if holds else P.Bin("==", index_expr(c, env), P.Const(0)) for c, holds in guard]
    expr = terms[0]
    for t in terms[1:]:
        expr = P.Bin("and", expr, t)
    return expr


def _same_guard(a: tuple, b: tuple) -> bool:
    """The same `if` conditions (the same LoopIR nodes), each holding the same way."""
    return len(a) == len(b) and all(c is d and x == y for (c, x), (d, y) in zip(a, b))


def _merged_guard(guards: list) -> Optional[tuple]:
    """The one guard under which an element is accessed: its only guard, or the common part of the two
    branches of one `if`; None for anything else."""
    if len(guards) == 1:
        return guards[0]
    a, b = guards if len(guards) == 2 else ((), ())
    if a and len(a) == len(b) and _same_guard(a[:-1], b[:-1]) and a[-1][0] is b[-1][0] and a[-1][1] != b[-1][1]:
        return a[:-1]
    return None


def _variables(e: P.Expr) -> set:
    """The variables an expression reads."""
    if isinstance(e, P.Var):
        return {e.var}
    if isinstance(e, P.Bin):
        return _variables(e.lhs) | _variables(e.rhs)
    if isinstance(e, P.Neg):
        return _variables(e.arg)
    if isinstance(e, P.Table):
        return _variables(e.index)
    return set()


def _op_reads(op, sites: list) -> set:
    """The variables an op reads: its expressions, and the loop values its site's reports show."""
    out = set()
    for f in fields(op):
        value = getattr(op, f.name)
        for e in value if isinstance(value, tuple) else (value,):
            if isinstance(e, (P.Var, P.Bin, P.Neg, P.Table)):
                out |= _variables(e)
    if isinstance(getattr(op, "site", None), int) and op.site >= 0:
        out |= {v for _, v in sites[op.site].loops}
    return out


def _may_fail(e: P.Expr) -> bool:
    """Whether evaluating e can stop a run: a division or remainder by anything but a nonzero constant."""
    if isinstance(e, P.Bin):
        by_nonzero = isinstance(e.rhs, P.Const) and e.rhs.value != 0
        return (e.op in ("/", "%") and not by_nonzero) or _may_fail(e.lhs) or _may_fail(e.rhs)
    if isinstance(e, P.Neg):
        return _may_fail(e.arg)
    return isinstance(e, P.Table) and _may_fail(e.index)


def _without(ops: list, drop: set) -> tuple:
    """The ops without those at `drop`, and without the loops and branches left empty; jumps renumbered."""
    keep = [k for k in range(len(ops)) if k not in drop]
    while True:
        empty = set()
        for a, b in zip(keep, keep[1:]):
            if isinstance(ops[a], P.For) and isinstance(ops[b], P.EndFor):
                empty |= {a, b}
            elif isinstance(ops[a], P.If) and isinstance(ops[b], P.EndIf):
                empty |= {a, b}
        if not empty:
            break
        keep = [k for k in keep if k not in empty]
    new = {k: n for n, k in enumerate(keep)}
    out = []
    for k in keep:
        op = ops[k]
        if isinstance(op, P.For):
            op = replace(op, end=new[op.end])
        elif isinstance(op, P.EndFor):
            op = replace(op, start=new[op.start])
        elif isinstance(op, P.If):
            op = replace(op, orelse=new[op.orelse])
        elif isinstance(op, P.Else):
            op = replace(op, end=new[op.end])
        out.append(op)
    return tuple(out)
