"""Scheduling operations of Exo-GPU, built the way exo builds its own.

Each is an exo `sched_op`, so cursors and pattern strings work as arguments,
each returns a new Procedure whose provenance and cursor forwarding are
exo's, and each can be recorded and replayed by the workbench.
"""

from __future__ import annotations

import re
from typing import Optional, Union

from exo.API import Procedure
from exo.API_scheduling import (
    ArgumentProcessor,
    BlockCursorA,
    CallCursorA,
    ForCursorA,
    GapCursorA,
    MemoryA,
    IntA,
    NameA,
    sched_op,
)
from exo.core.LoopIR import LoopIR, T
from exo.core import internal_cursors as ic
from exo.core.prelude import Sym
from exo.frontend.parse_fragment import parse_fragment
from exo.rewrite.LoopIR_scheduling import SchedulingError, _compose, _replace_reads

from ..core.blocks import BlockContext
from ..core.coll import cuda_thread
from ..core.instrs import instr_info
from ..core.ir import walk_stmts
from ..core.loop_modes import CudaThreads, WithBlock, to_loop_mode
from ..core.sync_stmts import (
    ARRIVE_COUNT,
    BARRIER_CARRIER,
    BarrierMemory,
    SyncSpec,
    is_barrier_alloc,
    sync_proc,
    sync_spec_of,
    trailing_of,
    trailing_proc,
)
from ..core.tensor_maps import Sm90_tensorMap, register_tensor_map
from ..core.timelines import InstrTl, SyncTl
from ..errors import SporkSchedulingError
from .sched_errors import user_frame


class _LoopModeA(ArgumentProcessor):
    def __call__(self, mode, all_args):
        try:
            return to_loop_mode(mode)
        except TypeError as e:
            self.err(getattr(e, "message", str(e)))


class _ContextA(ArgumentProcessor):
    def __call__(self, ctx, all_args):
        if not isinstance(ctx, BlockContext):
            self.err("expected a block context: CudaDeviceFunction(...), CudaAsync(...) or CudaWarps(...)")
        return ctx


class _SyncTlA(ArgumentProcessor):
    def __call__(self, tl, all_args):
        if isinstance(tl, InstrTl):
            self.err(f"{tl.name} is an instr-tl; pass the sync-tl {tl.sync_tl_name}")
        if not isinstance(tl, SyncTl):
            self.err(f"expected a sync-tl such as cuda_in_order, got {tl!r}")
        return tl


class _IntA(ArgumentProcessor):
    def __call__(self, n, all_args):
        if not isinstance(n, int) or isinstance(n, bool):
            self.err(f"expected an int (e.g. 0, 1 or ~1), got {n!r}")
        return n


class _ArriveCountA(ArgumentProcessor):
    def __call__(self, n, all_args):
        if type(n) is not int or n != ARRIVE_COUNT:  # here, not by the next analysis at the line of the gap's anchor
            self.err(f"an Arrive's count N must be {ARRIVE_COUNT}, got {n!r}")
        return n


class _ShapeA(ArgumentProcessor):
    def __call__(self, shape, all_args):
        shape = [] if shape is None else list(shape) if isinstance(shape, (list, tuple)) else [shape]
        if not all(isinstance(d, int) and d > 0 for d in shape):
            self.err(f"expected a list of positive ints (or [] for one barrier), got {shape!r}")
        return shape


class _BarrierMemoryA(MemoryA):
    def __call__(self, mem, all_args):
        mem = super().__call__(mem, all_args)
        if not issubclass(mem, BarrierMemory):
            self.err("expected a barrier memory: CudaMbarrier, CudaCommitGroup or CudaEvent")
        return mem


class _BarrierExprA(ArgumentProcessor):
    """A barrier `bar`, `bar[i, j]` or `bar[:]` (every CTA's: a multicast), its indices parsed where the op puts
    it (the gap's statement, or the call's); a whole dimension is None."""

    def __call__(self, text, all_args):
        m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*(?:\[(.*)\])?\s*", text) if isinstance(text, str) else None
        if not m:
            self.err(f"expected a barrier 'bar', 'bar[i, ...]' or 'bar[:]', got {text!r}")
        proc = all_args["proc"]
        ctx_stmt = all_args["gap"].anchor()._impl._node if "gap" in all_args else all_args["call"]._impl._node
        alloc = _barrier_alloc(proc, m.group(1))
        if alloc is None:
            self.err(f"'{m.group(1)}' is not a barrier of this proc")
        parts = [x.strip() for x in m.group(2).split(",")] if m.group(2) else []
        ndim = len(alloc.type.shape()) if isinstance(alloc.type, T.Tensor) else 0
        if len(parts) != ndim:
            self.err(f"barrier '{m.group(1)}' has {ndim} indices, got {len(parts)}")
        return alloc, [None if x == ":" else parse_fragment(proc._loopir_proc, x, ctx_stmt) for x in parts]


def _barrier_alloc(proc: Procedure, name: str):
    """The (last) barrier allocation called `name`, or None."""
    found = [s for s in walk_stmts(proc._loopir_proc.body) if is_barrier_alloc(s) and s.name.name() == name]
    return found[-1] if found else None


def _barrier_arg(alloc, idx: list, srcinfo):
    """The barrier `bar`, or its window `bar[i:i+1, ...]` (a None index: the whole dimension, `bar[:]`), built as
    exo's type checker builds a parsed one."""
    if not idx:
        return LoopIR.Read(alloc.name, [], alloc.type, srcinfo)

    def binop(op, lhs, rhs):
        return LoopIR.BinOp(op, lhs, rhs, T.index, srcinfo)

    dims = alloc.type.shape()
    w_idx = [LoopIR.Interval(LoopIR.Const(0, T.int, srcinfo), d, srcinfo) if i is None else
             LoopIR.Interval(i, binop("+", i, LoopIR.Const(1, T.int, srcinfo)), srcinfo) for i, d in zip(idx, dims)]
    as_tensor = T.Tensor([w.hi if i is None else binop("-", w.hi, w.lo) for i, w in zip(idx, w_idx)], True,
                         BARRIER_CARRIER)
    win_type = T.Window(alloc.type, as_tensor, alloc.name, w_idx)
    return LoopIR.WindowExpr(alloc.name, w_idx, win_type, srcinfo)


def _slice_shape(alloc, idx: list) -> tuple:
    """The shape of a barrier window's whole dimensions (`bar[:]` of a barrier[2]: (2,)); () for a point."""
    return tuple(d.val for i, d in zip(idx, alloc.type.shape()) if i is None)


def _insert(proc: Procedure, gap, stmts: list) -> Procedure:
    ir, fwd = gap._impl._insert(stmts)
    return Procedure(ir, _provenance_eq_Procedure=proc, _forward=fwd)


def _insert_sync(proc: Procedure, gap, spec: SyncSpec, args: list) -> Procedure:
    callee = sync_proc(spec)._loopir_proc
    srcinfo = gap.anchor()._impl._node.srcinfo
    return _insert(proc, gap, [LoopIR.Call(callee, args, srcinfo)])


@sched_op([ForCursorA, _LoopModeA])
def set_loop_mode(proc: Procedure, loop, mode) -> Procedure:
    """Give a loop a mode: "seq", "par", cuda_tasks, cuda_threads or cuda_threads(unit=...)."""
    if isinstance(loop._impl._node.loop_mode, WithBlock):
        raise SchedulingError("that loop is a `with` block; it has no loop mode to change")
    ir, fwd = loop._impl._child_node("loop_mode")._replace(mode)
    return Procedure(ir, _provenance_eq_Procedure=proc, _forward=fwd)


@sched_op([BlockCursorA, _ContextA])
def wrap_with_context(proc: Procedure, block, ctx: BlockContext) -> Procedure:
    """Wrap a block of statements in `with ctx:`."""
    srcinfo = block[0]._impl._node.srcinfo
    zero, one = (LoopIR.Const(v, T.index, srcinfo) for v in (0, 1))

    def make(body):
        return LoopIR.For(Sym("_with"), zero, one, body, WithBlock(ctx), srcinfo)

    ir, fwd = block._impl._wrap(make, "body")
    return Procedure(ir, _provenance_eq_Procedure=proc, _forward=fwd)


@sched_op([GapCursorA, _SyncTlA, _SyncTlA])
def insert_fence(proc: Procedure, gap, first_tl: SyncTl, second_tl: SyncTl) -> Procedure:
    """Insert `Fence(first_tl, second_tl)` at a gap."""
    return _insert_sync(proc, gap, SyncSpec("Fence", first_tl=first_tl, second_tl=second_tl), [])


def _names(ir) -> set:
    """The names of a proc's arguments and of the buffers, barriers, windows and loop iterators it declares."""
    declared = {s.iter if isinstance(s, LoopIR.For) else getattr(s, "name", None) for s in walk_stmts(ir.body)}
    return {a.name.name() for a in ir.args} | {sym.name() for sym in declared if isinstance(sym, Sym)}


@sched_op([GapCursorA, NameA, _ShapeA, _BarrierMemoryA])
def insert_barrier_alloc(proc: Procedure, gap, name: str, shape, memory) -> Procedure:
    """Insert `name: barrier[shape] @ memory` at a gap (shape [] for a single barrier)."""
    if name in _names(proc._loopir_proc):  # a second `x` would print as `x_1`, and 'x' would name the other one
        raise SchedulingError(f"{name!r} is already a name in {proc.name()}: give the barrier another")
    srcinfo = gap.anchor()._impl._node.srcinfo
    typ = BARRIER_CARRIER
    if shape:
        typ = T.Tensor([LoopIR.Const(d, T.int, srcinfo) for d in shape], False, BARRIER_CARRIER)
    return _insert(proc, gap, [LoopIR.Alloc(Sym(name), typ, memory, srcinfo)])


@sched_op([GapCursorA, _SyncTlA, _BarrierExprA, _ArriveCountA])
def insert_arrive(proc: Procedure, gap, first_tl: SyncTl, barrier, N: int = 1) -> Procedure:
    """Insert `Arrive(first_tl, N) >> barrier` at a gap; barrier is text like 'bar[i]', or 'bar[:]' (every CTA's)."""
    return _insert_barrier_sync(proc, gap, barrier, "Arrive", first_tl=first_tl, N=N)


@sched_op([GapCursorA, _BarrierExprA, _SyncTlA, _IntA])
def insert_await(proc: Procedure, gap, barrier, second_tl: SyncTl, N: int) -> Procedure:
    """Insert `Await(barrier, second_tl, N)` at a gap; barrier is text like 'bar[i]'."""
    return _insert_barrier_sync(proc, gap, barrier, "Await", second_tl=second_tl, N=N)


def _check_barrier_index(alloc, idx: list) -> None:
    """Constant indices (None: a whole dimension, `bar[:]`) within the barrier array; the rest exo checks at @proc."""
    for i, (e, dim) in enumerate(zip(idx, alloc.type.shape())):
        if isinstance(e, LoopIR.Const) and isinstance(dim, LoopIR.Const) and not 0 <= e.val < dim.val:
            written = ", ".join(":" if j is None else str(j) for j in idx)
            raise SchedulingError(f"index {i} of {alloc.name}[{written}] is {e.val}, outside "
                                  f"{alloc.name}: barrier[{', '.join(map(str, alloc.type.shape()))}] (each index "
                                  f"runs from 0 to its dimension - 1)")


def _insert_barrier_sync(proc, gap, barrier, kind: str, **spec_fields) -> Procedure:
    alloc, idx = barrier
    _check_barrier_index(alloc, idx)
    if kind == "Await":
        _check_await_n(proc, alloc, spec_fields["N"])
    spec = SyncSpec(kind, barrier_mem=alloc.mem, barrier_ndim=len(idx), window_shape=_slice_shape(alloc, idx),
                    **spec_fields)
    srcinfo = gap.anchor()._impl._node.srcinfo
    return _insert_sync(proc, gap, spec, [_barrier_arg(alloc, idx, srcinfo)])


def _check_await_n(proc: Procedure, alloc, n: int) -> None:
    """The barrier memory's rule for N, and for memories that pair by lag the lag of the barrier's other Awaits:
    refused here, at the user's call, rather than by the next analysis at the inserted statement."""
    problem = alloc.mem.await_n_error(alloc.name, "Await", n)
    if problem:
        raise SchedulingError(problem)
    lag_n = min((spec.N for s in walk_stmts(proc._loopir_proc.body)
                 if (spec := sync_spec_of(s)) and spec.kind == "Await" and s.args[0].name == alloc.name), default=None)
    problem = alloc.mem.lag_error(alloc.name, "Await", lag_n, n) if lag_n is not None else None
    if problem:
        raise SchedulingError(problem)


@sched_op([BlockCursorA, NameA])
def single_thread(proc: Procedure, block, name: str) -> Procedure:
    """Wrap a block in `for name in cuda_threads(0, 1)`: one thread of the collective runs it (a TMA load's
    issuing thread). One iteration: the program computes what it did."""
    if name in _names(proc._loopir_proc):  # printed `name_1`; analysed as `name`
        raise SchedulingError(f"{name!r} is already a name in {proc.name()} (an argument, a buffer or a loop's "
                              "iterator): give the loop another")
    srcinfo = block[0]._impl._node.srcinfo
    zero, one = (LoopIR.Const(v, T.index, srcinfo) for v in (0, 1))

    def make(body):
        return LoopIR.For(Sym(name), zero, one, body, CudaThreads(cuda_thread), srcinfo)

    ir, fwd = block._impl._wrap(make, "body")
    return Procedure(ir, _provenance_eq_Procedure=proc, _forward=fwd)


class _TensorA(ArgumentProcessor):
    def __call__(self, name, all_args):
        proc = all_args["proc"]
        found = [a for a in proc._loopir_proc.args if a.name.name() == name and a.type.is_tensor_or_window()]
        if not found:
            tensors = [a.name.name() for a in proc._loopir_proc.args if a.type.is_tensor_or_window()]
            self.err(f"no tensor argument named {name!r}; the proc's tensors are {', '.join(tensors)}")
        return found[0]


class _BoxA(ArgumentProcessor):
    def __call__(self, box, all_args):
        if not isinstance(box, (list, tuple)) or not all(isinstance(b, int) and not isinstance(b, bool) for b in box):
            self.err(f"expected the box of one copy as a tuple of ints, e.g. (128, 64), got {box!r}")
        return tuple(box)


@sched_op([_TensorA, NameA, IntA, _BoxA])
def make_tensor_map(proc: Procedure, tensor, name: str, swizzle: int, box: tuple) -> Procedure:
    """`name = tensor[:, ...] @ Sm90_tensorMap(swizzle, *box)` at the top of the proc, and every read of
    `tensor` becomes a read of `name` (the same elements): TMA copies read tensor maps."""
    try:
        spec = Sm90_tensorMap(swizzle, *box)
    except ValueError as e:
        raise SchedulingError(str(e)) from None
    ir = proc._loopir_proc
    if name in _names(ir):
        raise SchedulingError(f"{name!r} is already a name in {ir.name}")
    dims = tensor.type.shape()
    if len(box) != len(dims):
        raise SchedulingError(f"{tensor.name} has {len(dims)} dimensions, the box {list(box)} has {len(box)}")
    srcinfo = ir.body[0].srcinfo
    sym = Sym(name)
    idx = [LoopIR.Interval(LoopIR.Const(0, T.int, srcinfo), d, srcinfo) for d in dims]
    win_type = T.Window(tensor.type, T.Tensor(list(dims), True, tensor.type.basetype()), tensor.name, idx)
    window = LoopIR.WindowStmt(sym, LoopIR.WindowExpr(tensor.name, idx, win_type, srcinfo), srcinfo)
    register_tensor_map(sym, spec)
    ir, fwd = proc.body()[0]._impl.before()._insert([window])

    def renamed(c):
        e = c._node
        if isinstance(e, LoopIR.WindowExpr):
            typ = T.Window(win_type.as_tensor, e.type.as_tensor, sym, e.idx)
            return {"name": sym, "type": typ}
        return {"name": sym}

    for k in range(1, len(ir.body)):
        ir, f = _replace_reads(ir, lambda c: c, ic.Node(ir, [("body", k)]), tensor.name, renamed, only_replace_attrs=True)
        fwd = _compose(f, fwd)
    return Procedure(ir, _provenance_eq_Procedure=proc, _forward=fwd)


@sched_op([CallCursorA, _BarrierExprA])
def complete_on(proc: Procedure, call, barrier) -> Procedure:
    """`instr(...)` becomes `instr(...) >> barrier`: a TMA load completes on an mbarrier (its bytes are
    expected by the next Arrive on it); `bar[:]` for a multicast load, which lands in every CTA."""
    alloc, idx = barrier
    node = call._impl._node
    info = instr_info(node)
    if info is None or not info.trailing_barrier or trailing_of(node) is not None:
        raise SchedulingError(f"{node.f.name} does not complete on a barrier (or already does); only TMA loads "
                              "(Sm90_copy_tensor_to_smem_*, Sm90_multicast_copy_tensor_to_smem_*) take `>> bar`")
    if not alloc.mem.takes_trailing_loads:
        raise SchedulingError(f"{node.f.name} completes on a barrier @ CudaMbarrier, not @ {alloc.mem.name()}")
    _check_barrier_index(alloc, idx)
    srcinfo = node.srcinfo
    shape = _slice_shape(alloc, idx) or (1,) * len(idx)
    bar = _barrier_arg(alloc, idx, srcinfo)
    trailing = trailing_proc(Procedure(node.f), alloc.mem, shape)._loopir_proc
    ir, fwd = call._impl._replace([LoopIR.Call(trailing, [*node.args, bar], srcinfo)])
    return Procedure(ir, _provenance_eq_Procedure=proc, _forward=fwd)


def find_blocks(proc: Procedure, ctx_type: Optional[Union[type, tuple]] = None) -> list:
    """Cursors of the `with` blocks of a proc (in program order), optionally only those whose
    context is an instance of ctx_type, e.g. `find_blocks(p, CudaAsync)`."""
    if not isinstance(proc, Procedure):
        raise SporkSchedulingError(f"find_blocks takes a proc (made with @proc), not {type(proc).__name__}",
                                   user_frame())
    kinds = ctx_type if isinstance(ctx_type, tuple) else (ctx_type,)
    if ctx_type is not None and not all(isinstance(k, type) and issubclass(k, BlockContext) for k in kinds):
        raise SporkSchedulingError(f"find_blocks: ctx_type is a block class such as CudaAsync, CudaWarps or "
                                   f"CudaDeviceFunction (or a tuple of them), not {ctx_type!r}", user_frame())
    found = []

    def walk(cursors):
        for c in cursors:
            node = c._impl._node
            if isinstance(node, LoopIR.For):
                if isinstance(node.loop_mode, WithBlock) and (ctx_type is None or isinstance(node.loop_mode.ctx, ctx_type)):
                    found.append(c)
                walk(c.body())
            elif isinstance(node, LoopIR.If):
                walk(c.body())
                if node.orelse:
                    walk(c.orelse())

    walk(proc.body())
    return found
