"""Barriers and synchronization statements (Fence, Arrive, Await, ReverseArrive, ReverseAwait).

Sequentially a sync statement does nothing, so it is encoded as a call to a
generated `@instr`-like proc with an empty C body, one proc per distinct
statement (cached: exo rejects two procs with one name). Arrive/Await take the
barrier as an argument and their body writes it, so exo's effect analysis will
not reorder two syncs on the same barrier past each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from exo.API import Procedure
from exo.API_cursors import StmtCursor
from exo.core.LoopIR import UAST, LoopIR, T
from exo.core.memory import MemGenError, Memory
from exo.core.prelude import SrcInfo, Sym

from .instrs import instr_info_by_name, register_instr, user_name
from .ir import interval_width, stmt_cursors
from .timelines import SyncTl


@dataclass(frozen=True)
class QueueFacts:
    """What a barrier mechanism's rules derive from the uses of one queue (see `BarrierMemory.check_queue`)."""

    lag: int = 0  # pairing by lag: the ~N of the awaits
    arrivals: int = 0  # threads that arrive per phase (mbarrier arrival count)
    max_wait_n: int = 0  # pairing by count: the largest N of the awaits
    flavour: Optional[str] = None  # commit groups: the hardware queue ("cp.async", "wgmma", ...)
    scope_threads: int = 0  # threads sharing one hardware queue (0: the queue is not per thread group)


class BarrierMemory(Memory):
    """Memory of `barrier` variables. Each subclass is one CUDA mechanism, and its hooks say how it works.

    The analyses, both sync engines and the code generator ask these hooks
    instead of naming the mechanism:

    - where it lives: `lives_on_device` (allocated inside a device function,
      within its cuda_tasks loops) or in CPU code; `in_shared_memory`: one
      barrier per CTA, so a whole CTA allocates it (not a loop over its warps or threads);
    - its pairing rule: `pairs_by_lag` (an Await's N = ~lag picks the arrive
      `lag` phases back; phases form a ring of `lag + 1` slots, and each thread
      counts the phases it sees, so every arrive (await) of one queue is made by
      the same threads) or by count (N >= 0: the N-th most recent arrive);
      `allows_reverse` (ReverseArrive/ReverseAwait); `check_queue` enforces the
      mechanism's own rules on a queue's uses; `await_n_error` and `lag_error`
      say why an Await's N breaks the pairing rule (for `check_queue` and, at
      the user's call, `insert_await`);
    - `takes_trailing_loads`: instrs complete on it (`copy(...) >> bar[...]`);
    - how it lowers: `lowering` names its CUDA text in spork_lab.codegen.barrier_text.
    """

    lives_on_device = True
    in_shared_memory = False
    pairs_by_lag = False
    allows_reverse = False
    takes_trailing_loads = False  # instrs may complete on it (`copy(...) >> bar[...]`, TMA loads on mbarriers)
    lowering = ""

    @classmethod
    def check_queue(cls, name: str, positions: int, arrives: list, awaits: list, reverse: bool) -> QueueFacts:
        """Raise SyncError at the first use of one queue (forward or reverse) of barrier `name` (of
        `positions` positions) that this mechanism cannot implement; else what lowering needs. `arrives`/`awaits` hold uses with `.stmt`, `.spec` and
        `.thread_count` (threads of the executing collective; None on the CPU)."""
        raise NotImplementedError(f"{cls.name()} does not say how its barriers pair")

    @classmethod
    def await_n_error(cls, name: str, kind: str, n: int) -> str | None:
        """Why `n` cannot be the N of an Await (ReverseAwait) on barrier `name` of this memory, else None: its
        pairing rule, asked by `check_queue` and by `insert_await` (which so refuses at the user's call)."""
        return None

    @classmethod
    def lag_error(cls, name: str, kind: str, lag_n: int, n: int) -> str | None:
        """Why an Await (ReverseAwait) with N = `n` cannot join those on barrier `name` that wait with N = `lag_n`,
        else None: where pairing is by lag, a queue has one lag. Asked by `check_queue` and by `insert_await`."""
        if not cls.pairs_by_lag or n == lag_n:
            return None
        return (f"the {kind}s on {name} wait with N = ~{~lag_n}, and every {kind} on one barrier uses the same N "
                f"(~lag): not ~{~n}")

    @classmethod
    def alloc(cls, new_name, prim_type, shape, srcinfo):
        raise MemGenError(f"{srcinfo}: barrier {new_name} @ {cls.name()} is lowered by the CUDA backend")

    @classmethod
    def free(cls, new_name, prim_type, shape, srcinfo):
        return ""

    @classmethod
    def can_read(cls):
        return False


# The element type that carries a barrier allocation through exo.
BARRIER_CARRIER = T.ui8

SYNC_KINDS = ("Fence", "Arrive", "Await", "ReverseArrive", "ReverseAwait")

# The count N of `Arrive(first_tl, N)` (and of ReverseArrive): every barrier memory counts one arrival per arrive.
ARRIVE_COUNT = 1


@dataclass(frozen=True)
class SyncSpec:
    """Everything a sync statement says besides its barrier indices."""

    kind: str
    first_tl: Optional[SyncTl] = None  # Fence, Arrive, ReverseArrive
    second_tl: Optional[SyncTl] = None  # Fence, Await, ReverseAwait
    N: Optional[int] = None  # arrive count, or await pairing (>= 0: N-th prior; ~lag)
    barrier_mem: Optional[type] = None
    barrier_ndim: int = 0
    window_shape: tuple = ()  # arrives on slices `bar[:]` (multicast): the window's shape; () for point indices

    @property
    def is_arrive(self) -> bool:
        return self.kind in ("Arrive", "ReverseArrive")

    @property
    def is_await(self) -> bool:
        return self.kind in ("Await", "ReverseAwait")

    @property
    def is_reverse(self) -> bool:
        return self.kind.startswith("Reverse")

    def proc_name(self) -> str:
        n = "" if self.N is None else (f"_{self.N}" if self.N >= 0 else f"_lag{~self.N}")
        mem = f"_{self.barrier_mem.name()}_d{self.barrier_ndim}" if self.barrier_mem else ""
        if self.window_shape:
            mem += "_mc" + "x".join(map(str, self.window_shape))
        tls = "_".join(tl.name for tl in (self.first_tl, self.second_tl) if tl is not None)
        return f"spork_{self.kind}{mem}_{tls}{n}"

    def source(self, barrier: str = "") -> str:
        """The statement as the user writes it, given the barrier expression's text."""
        if self.kind == "Fence":
            return f"Fence({self.first_tl}, {self.second_tl})"
        if self.is_arrive:
            return f"{self.kind}({self.first_tl}, {self.N}) >> {barrier}"
        n = f"~{~self.N}" if self.N < 0 else str(self.N)
        return f"{self.kind}({barrier}, {self.second_tl}, {n})"


_SPECS_BY_PROC_NAME: dict[str, SyncSpec] = {}
_PROCS_BY_SPEC: dict[SyncSpec, Procedure] = {}


def sync_proc(spec: SyncSpec) -> Procedure:
    """The (cached) generated proc that a sync statement with this spec calls."""
    if spec in _PROCS_BY_SPEC:
        return _PROCS_BY_SPEC[spec]
    srcinfo = SrcInfo("<spork_lab sync statement>", 0)
    args, body = [], []
    if spec.barrier_mem is not None:
        bar = Sym("bar")
        one = LoopIR.Const(1, T.int, srcinfo)
        zero = LoopIR.Const(0, T.index, srcinfo)
        dims = [LoopIR.Const(d, T.int, srcinfo) for d in spec.window_shape] or [one] * spec.barrier_ndim
        typ = T.Tensor(dims, True, BARRIER_CARRIER) if spec.barrier_ndim else BARRIER_CARRIER
        args.append(LoopIR.fnarg(bar, typ, spec.barrier_mem, srcinfo))
        rhs = LoopIR.Const(0, BARRIER_CARRIER, srcinfo)
        body.append(LoopIR.Assign(bar, BARRIER_CARRIER, [zero] * spec.barrier_ndim, rhs, srcinfo))
    else:
        body.append(LoopIR.Pass(srcinfo))
    ir = LoopIR.proc(spec.proc_name(), args, [], body, LoopIR.instr("", ""), srcinfo)
    proc = Procedure(ir)
    _PROCS_BY_SPEC[spec] = proc
    _SPECS_BY_PROC_NAME[ir.name] = spec
    return proc


def sync_spec_of(stmt) -> Optional[SyncSpec]:
    """The SyncSpec of a LoopIR statement, or None if it is not a sync statement."""
    if isinstance(stmt, LoopIR.Call):
        return _SPECS_BY_PROC_NAME.get(stmt.f.name)
    return None


def sync_cursors(p: Procedure) -> list[StmtCursor]:
    """Cursors of every sync statement of p, in program order."""
    return [c for c in stmt_cursors(p) if sync_spec_of(c._impl._node) is not None]


def is_barrier_alloc(stmt) -> bool:
    return isinstance(stmt, LoopIR.Alloc) and isinstance(stmt.mem, type) and issubclass(stmt.mem, BarrierMemory)


def barrier_window_indices(arg) -> list:
    """The point indices of a barrier argument `bar[i:i+1, ...]` (empty for a scalar barrier)."""
    if isinstance(arg, LoopIR.WindowExpr):
        return [w.lo for w in arg.idx]
    return []


def is_point_interval(w) -> bool:
    """Whether a window index is a point: `bar[i]`, or the `i:i+1` the front end makes of it."""
    return isinstance(w, LoopIR.Point) or interval_width(w) == 1


# ---- `instr(...) >> bar[...]`: an instruction that completes on a barrier (TMA on an mbarrier) ----

_TRAILING: dict[str, tuple] = {}  # generated proc name -> (instr proc name, number of instr arguments)


def trailing_proc(instr_proc: Procedure, mem: type, shape: tuple) -> Procedure:
    """The proc that `instr(args) >> bar[...]` calls: the instr's arguments, then the barrier window.

    Its body is the instr's body plus a write of the barrier (so exo never
    reorders it with the Arrive/Await on that barrier), and its InstrInfo is
    the instr's (the caller registers it). `shape` is the window's shape: 1 for
    a point index `bar[i]`, the extent of a slice `bar[:]` (multicast).
    """
    ir = instr_proc._loopir_proc
    name = f"{ir.name}__trail_{mem.name()}_{'x'.join(map(str, shape)) or 's'}"
    if name in _PROCS_BY_NAME:
        return _PROCS_BY_NAME[name]
    srcinfo = ir.srcinfo
    bar = Sym("bar")
    dims = [LoopIR.Const(d, T.int, srcinfo) for d in shape]
    typ = T.Tensor(dims, True, BARRIER_CARRIER) if shape else BARRIER_CARRIER
    zero = LoopIR.Const(0, T.index, srcinfo)
    write = LoopIR.Assign(bar, BARRIER_CARRIER, [zero] * len(shape), LoopIR.Const(0, BARRIER_CARRIER, srcinfo), srcinfo)
    new = LoopIR.proc(name, [*ir.args, LoopIR.fnarg(bar, typ, mem, srcinfo)], ir.preds, [*ir.body, write], ir.instr, srcinfo)
    proc = Procedure(new)
    _PROCS_BY_NAME[name] = proc
    _TRAILING[name] = (str(ir.name), len(ir.args))
    register_instr(name, instr_info_by_name(str(ir.name)))
    return proc


_PROCS_BY_NAME: dict[str, Procedure] = {}


def trailing_of(stmt) -> Optional[tuple]:
    """(instr proc name, index of the barrier argument) of an `instr(...) >> bar[...]` call (typed, or as parsed),
    else None."""
    if isinstance(stmt, (LoopIR.Call, UAST.Call)):
        return _TRAILING.get(stmt.f.name)
    return None


def trailing_barrier(stmt):
    """The barrier window an `instr(...) >> bar[...]` call completes on, else None."""
    trailing = trailing_of(stmt)
    return stmt.args[trailing[1]] if trailing else None


def written_name(call: LoopIR.Call) -> str:
    """The instr a call names as the user wrote it: `Sm80_cp_async_f32`, not its generated `Sm80_cp_async_f32_16`,
    nor a trailing barrier's wrapper."""
    trailing = trailing_of(call)
    return user_name(call.f.name if trailing is None else trailing[0])


class SyncSyntax:
    """The names `Fence`, `Arrive`, `Await`, `ReverseArrive`, `ReverseAwait` users write in procs."""

    def __init__(self, kind: str, params: str):
        self.kind = kind
        self.params = params  # how to call it, for error messages

    def __call__(self, *args, **kwargs):
        raise TypeError(
            f"{self.kind}{self.params} is a statement of an Exo-GPU proc: write it inside an @proc, "
            "or insert it with spork_lab.scheduling (insert_fence, insert_arrive, insert_await)"
        )

    def __repr__(self) -> str:
        return self.kind


Fence = SyncSyntax("Fence", "(first_sync_tl, second_sync_tl)")
Arrive = SyncSyntax("Arrive", "(first_sync_tl, N) >> bar[...]")
Await = SyncSyntax("Await", "(bar[...], second_sync_tl, N)")
ReverseArrive = SyncSyntax("ReverseArrive", "(first_sync_tl, N) >> bar[...]")
ReverseAwait = SyncSyntax("ReverseAwait", "(bar[...], second_sync_tl, N)")
