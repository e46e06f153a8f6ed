"""Translate a scheduled proc into C that drives the compiled abstract machine (`_machine.c`).

The generated function walks the proc in sequential order exactly as
`checker._Machine` interprets it: loops become C loops, index expressions C
expressions, every buffer access, sync statement, allocation and scope end a
call of the runtime. Which threads run a statement comes from the collective
analysis: for each tiling the masks of all its cuda_threads iterator values are
computed here, once, and indexed by the C loop variables. Anything this
translation does not cover raises `Unsupported`, and sync_check falls back to
the Python interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from exo.core.LoopIR import LoopIR

from ..core import timelines as tl
from ..core.blocks import CudaAsync, CudaDeviceFunction, CudaWarps
from ..core.instrs import instr_info
from ..core.ir import numeric_reads
from ..core.loop_modes import CudaThreads, WithBlock
from ..core.sync_stmts import barrier_window_indices, is_barrier_alloc, sync_spec_of
from .access import distributed_shared, is_shared_memory, unordered_access
from .threads import ThreadMap

_C_OPS = {"+": "+", "-": "-", "*": "*", "<": "<", ">": ">", "<=": "<=", ">=": ">=", "==": "==", "and": "&&", "or": "||"}


class Unsupported(Exception):
    """A construct the compiled engine does not translate (sync_check then uses the Python interpreter)."""


@dataclass(frozen=True)
class View:
    """A buffer seen through windows: element = base + sum(i_k * strides[k]), all C expressions."""

    slot: int
    base: str
    strides: tuple
    usage: Optional[tl.UsageTl] = None


@dataclass(frozen=True)
class Ctx:
    """Where a statement runs (as checker._Ctx), plus the C names of the loops around it."""

    dev: Optional[CudaDeviceFunction] = None
    tiling: object = None
    instr_tl: tl.InstrTl = tl.cpu_in_order_instr
    cuda: tuple = ()  # (iterator name, C variable) of the enclosing cuda_threads loops
    in_task: bool = False
    task_threads: int = 0  # threads per task: the thread-id offset of task k is k * task_threads
    loops: tuple = ()  # (iterator name, C variable) of the loops the report names
    in_instr: object = None  # the instr call whose body is being translated


@dataclass(frozen=True)
class Barrier:
    """A barrier allocation: its queues are qbase + 2 * flat position + reverse."""

    qbase: int
    dims: tuple


@dataclass
class EventSite:
    """A compiled Arrive/Await: what the report needs to turn a logged event into a BarrierEvent."""

    ref: object  # StmtRef
    kind: str
    loop_names: tuple
    task_threads: int


@dataclass
class QueueSite:
    """One queue barrier: a barrier position, forward or reverse."""

    info: object
    position: tuple
    reverse: bool


@dataclass
class Program:
    """The generated C source and the tables that interpret its results."""

    source: str
    size_names: list  # the sizes sc_run takes, in order
    masks: list  # mask id -> thread intervals within a task (id 0: no threads, CPU code)
    queues: list  # queue id -> QueueSite
    events: list  # event site id -> EventSite
    stmts: list  # statement id -> statement
    slot_names: list  # buffer slot -> name


class Emitter:
    """One proc's translation; `program()` is the result."""

    def __init__(self, ir, infos: dict, tmap: ThreadMap):
        self.ir, self.infos, self.tmap = ir, infos, tmap
        self.out: list = []
        self.depth = 1
        self.n_vars = 0
        self.mask_ids: dict = {(): 0}
        self.masks: list = [()]
        self.tables: dict = {}  # id(tiling) -> (C table name, ((iter name, stride), ...))
        self.table_text: list = []
        self.slots: list = []  # (name id, is_arg, shared)
        self.slot_mems: list = []  # the memory of each slot
        self.names: dict = {}
        self.queues: list = []
        self.events: list = []
        self.stmt_ids: dict = {}
        self.stmts: list = []
        self.max_threads = 64

    # ---- output ----

    def line(self, text: str) -> None:
        self.out.append("    " * self.depth + text)

    def var(self, hint: str) -> str:
        self.n_vars += 1
        return f"{''.join(c if c.isalnum() else '_' for c in hint)}_{self.n_vars}"

    def stmt_id(self, s) -> int:
        if id(s) not in self.stmt_ids:
            self.stmt_ids[id(s)] = len(self.stmts)
            self.stmts.append(s)
        return self.stmt_ids[id(s)]

    def name_id(self, name: str) -> int:
        return self.names.setdefault(name, len(self.names))

    # ---- the whole proc ----

    def program(self) -> Program:
        env: dict = {}
        size_names = []
        self.out.append("static void run(Machine *M, const int64_t *sz) {")
        self.line("const int *ST = sc_status(M);")
        for a in self.ir.args:
            if not a.type.is_numeric():
                name = self.var(str(a.name))
                self.line(f"const int64_t {name} = sz[{len(size_names)}];")
                size_names.append(str(a.name))
                env[a.name] = name
        for a in self.ir.args:
            if a.type.is_numeric():
                env[a.name] = self.buffer(a, Ctx(), env, is_arg=True)
        self.block(self.ir.body, Ctx(), env)
        self.out.append("}")
        return Program(self.source(), size_names, self.masks, self.queues, self.events, self.stmts,
                       [n for n, _ in sorted(self.names.items(), key=lambda kv: kv[1])])

    def source(self) -> str:
        nw = (self.max_threads + 63) // 64
        words = []
        for ivs in self.masks:
            w = [0] * nw
            for lo, hi in ivs:
                for t in range(lo, hi):
                    w[t // 64] |= 1 << (t % 64)
            words += w
        po = [0 if i.is_async else tl.program_order_mask(i, u) for i, u in tl.ALL_PAIRS]
        qp = [self.queue_params(q) for q in self.queues] or ["{0}"]
        sp = [f"{{{n}, {a}, {s}}}" for n, a, s in self.slots] or ["{0}"]
        return "\n".join(
            [
                '#include "_machine.h"',
                "",
                "static inline int64_t fdiv(Machine *M, int64_t a, int64_t b) {",
                "    if (!b) { sc_fail(M, SC_ERROR); return 0; }",
                "    int64_t q = a / b;",
                "    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;",
                "}",
                "static inline int64_t fmod_(Machine *M, int64_t a, int64_t b) {",
                "    if (!b) { sc_fail(M, SC_ERROR); return 0; }",
                "    int64_t r = a % b;",
                "    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;",
                "}",
                "",
                f"static const uint64_t MASKS[] = {{{', '.join(f'{w}ull' for w in words)}}};",
                f"static const int32_t PO[] = {{{', '.join(map(str, po))}}};",
                f"static const QueueParams QUEUES[] = {{{', '.join(qp)}}};",
                f"static const SlotParams SLOTS[] = {{{', '.join(sp)}}};",
                *self.table_text,
                "",
                *self.out,
                "",
                "Machine *sc_run(const int64_t *sz, int max_hazards, int max_events) {",
                f"    Machine *M = sc_new({nw}, {len(self.masks)}, MASKS, PO, {len(self.slots)}, SLOTS, "
                f"{len(self.queues)}, QUEUES, max_hazards, max_events);",
                "    run(M, sz);",
                "    return M;",
                "}",
                "",
            ]
        )

    @staticmethod
    def queue_params(q: QueueSite) -> str:
        rule = q.info.queue_rule(q.reverse)
        lag = -1 if rule.lag is None else rule.lag
        return f"{{{lag}, {rule.depth}, {rule.max_wait_n}, {rule.scope}, {int(rule.same_threads)}}}"

    # ---- thread masks ----

    def mask_expr(self, ctx: Ctx) -> str:
        """The C expression of the mask id of the collective running a statement in ctx."""
        if ctx.dev is None:
            return "0"
        if not ctx.in_task:
            raise Unsupported("device code outside the cuda_tasks loop")
        tiling = ctx.tiling
        entry = self.tables.get(id(tiling))
        if entry is None:
            entry = self.tables[id(tiling)] = self.mask_table(tiling)
        table, dims = entry
        cvars = dict(ctx.cuda)
        if not dims:
            return f"{table}[0]"
        if any(name not in cvars for name, _ in dims):
            raise Unsupported("a tiling iterator that is not an enclosing cuda_threads loop")
        return f"{table}[{' + '.join(f'{cvars[name]} * {stride}' for name, stride in dims)}]"

    def mask_table(self, tiling) -> tuple:
        """All collectives of a tiling, indexed by its iterator values (row-major)."""
        self.max_threads = max(self.max_threads, tiling.blockDim * tiling.clusterDim)
        counts = [c for _, c in tiling.iters]
        strides, n = [], 1
        for c in reversed(counts):
            strides.append(n)
            n *= c
        strides.reverse()
        ids = []
        for lin in range(n):
            values = {name: lin // s % c for (name, c), s in zip(tiling.iters, strides)}
            ivs = tuple(tuple(r) for r in tiling.threads(values))
            if ivs not in self.mask_ids:
                self.mask_ids[ivs] = len(self.masks)
                self.masks.append(ivs)
            ids.append(self.mask_ids[ivs])
        name = f"TILING_{len(self.tables)}"
        self.table_text.append(f"static const int32_t {name}[] = {{{', '.join(map(str, ids))}}};")
        return name, tuple((nm, s) for (nm, _), s in zip(tiling.iters, strides))

    # ---- expressions ----

    def expr(self, e, env: dict) -> str:
        if isinstance(e, LoopIR.Const):
            if isinstance(e.val, bool):
                return "1" if e.val else "0"
            if not isinstance(e.val, int):
                raise Unsupported("a non-integer constant in an index expression")
            return f"INT64_C({e.val})"
        if isinstance(e, LoopIR.Read):
            v = env.get(e.name)
            if not isinstance(v, str) or e.idx:
                raise Unsupported("a data-dependent index expression")
            return v
        if isinstance(e, LoopIR.USub):
            return f"(-{self.expr(e.arg, env)})"
        if isinstance(e, LoopIR.BinOp):
            a, b = self.expr(e.lhs, env), self.expr(e.rhs, env)
            if e.op == "/":
                return f"fdiv(M, {a}, {b})"
            if e.op == "%":
                return f"fmod_(M, {a}, {b})"
            if e.op not in _C_OPS:
                raise Unsupported(f"the operator {e.op}")
            return f"({a} {_C_OPS[e.op]} {b})"
        if isinstance(e, LoopIR.StrideExpr):
            v = env.get(e.name)
            if not isinstance(v, View):
                raise Unsupported("stride of a non-buffer")
            return v.strides[e.dim]
        raise Unsupported(f"the expression {e}")

    def element(self, view: View, idx, env: dict) -> str:
        terms = [view.base] + [f"({self.expr(i, env)}) * {s}" for i, s in zip(idx, view.strides)]
        return " + ".join(terms)

    # ---- statements ----

    def block(self, stmts, ctx: Ctx, env: dict) -> None:
        env = dict(env)
        ends = []
        for s in stmts:
            self.stmt(s, ctx, env, ends)
        for end in reversed(ends):
            self.line(end)

    def stmt(self, s, ctx: Ctx, env: dict, ends: list) -> None:
        if isinstance(s, (LoopIR.Assign, LoopIR.Reduce)):
            if ctx.dev is not None:
                self.assign(s, ctx, env)
        elif isinstance(s, LoopIR.For):
            self.loop(s, ctx, env)
        elif isinstance(s, LoopIR.If):
            self.line(f"if ({self.expr(s.cond, env)}) {{")
            self.nested(s.body, ctx, env)
            if s.orelse:
                self.line("} else {")
                self.nested(s.orelse, ctx, env)
            self.line("}")
        elif isinstance(s, LoopIR.Alloc):
            if is_barrier_alloc(s):
                ends.append(self.barrier_alloc(s, ctx, env))
            else:
                if distributed_shared(self.tmap.analysis, s.name):
                    raise Unsupported("distributed shared memory (each shard's own owner at the free)")
                view = env[s.name] = self.buffer(s, ctx, env, is_arg=False)
                ends.append(f"sc_release(M, {view.slot}, {self.stmt_id(s)});")
        elif isinstance(s, LoopIR.WindowStmt):
            env[s.name] = self.window(s.rhs, env)
        elif isinstance(s, LoopIR.Call):
            self.call(s, ctx, env)
        elif not isinstance(s, (LoopIR.Pass, LoopIR.Free)):
            raise Unsupported(f"{type(s).__name__} statements")

    def nested(self, stmts, ctx: Ctx, env: dict) -> None:
        self.depth += 1
        self.block(stmts, ctx, env)
        self.depth -= 1

    def buffer(self, decl, ctx: Ctx, env: dict, is_arg: bool) -> View:
        """A new buffer slot (an argument or an Alloc): its strides as C variables, and the runtime call."""
        shape = [self.expr(d, env) for d in decl.type.shape()] if decl.type.is_tensor_or_window() else []
        slot = len(self.slots)
        name = str(decl.name)
        self.slots.append((self.name_id(name), int(is_arg), int(is_shared_memory(decl.mem))))
        self.slot_mems.append(decl.mem)
        strides = []
        size = "INT64_C(1)"
        for k in reversed(range(len(shape))):
            v = self.var(f"st_{name}_{k}")
            self.line(f"const int64_t {v} = {size};")
            strides.append(v)
            size = f"{v} * ({shape[k]})"
        strides.reverse()
        if ctx.dev is not None and not ctx.in_task:
            raise Unsupported("an allocation in device code outside the cuda_tasks loop")
        self.line(f"sc_buffer(M, {slot}, {size}, {self.mask_expr(ctx)}, {int(ctx.dev is not None)});")
        return View(slot, "INT64_C(0)", tuple(strides))

    def window(self, w, env: dict) -> View:
        view = env[w.name]
        base, strides = [view.base], []
        for i, s in zip(w.idx, view.strides):
            if isinstance(i, LoopIR.Interval):
                base.append(f"({self.expr(i.lo, env)}) * {s}")
                strides.append(s)
            else:
                base.append(f"({self.expr(i.pt, env)}) * {s}")
        v = self.var(f"base_{w.name}")
        self.line(f"const int64_t {v} = {' + '.join(base)};")
        return View(view.slot, v, tuple(strides), view.usage)

    def assign(self, s, ctx: Ctx, env: dict) -> None:
        reads: list = []
        numeric_reads(s.rhs, reads)
        accesses = [(r.name, r.idx, 0) for r in reads]
        if isinstance(s, LoopIR.Reduce):
            accesses.append((s.name, s.idx, 0))
        accesses.append((s.name, s.idx, 1))
        mask = self.mask_expr(ctx)
        stmt = self.stmt_id(ctx.in_instr or s)
        threads = ctx.tiling.thread_count if ctx.tiling is not None else 1
        for sym, idx, write in accesses:
            view = env[sym]
            pair = tl.pair_bit(ctx.instr_tl, view.usage)
            instr = str(ctx.in_instr.f.name) if ctx.in_instr is not None else None
            unordered = int(unordered_access(instr, threads, self.slot_mems[view.slot]))
            self.line(
                f"sc_access(M, {view.slot}, {self.element(view, idx, env)}, {mask}, {pair}, {stmt}, {write}, {unordered});"
            )

    def loop(self, s, ctx: Ctx, env: dict) -> None:
        mode = s.loop_mode
        if isinstance(mode, WithBlock):
            block = mode.ctx
            inner = ctx
            if isinstance(block, CudaDeviceFunction):
                inner = Ctx(block, self.tmap.body_tiling(s.body), tl.cuda_in_order_instr, loops=ctx.loops,
                            in_instr=ctx.in_instr)
                self.line("sc_device_boundary(M);")
            elif isinstance(block, CudaAsync):
                inner = replace(ctx, instr_tl=block.instr_tl)
            elif isinstance(block, CudaWarps):
                inner = replace(ctx, tiling=self.tmap.body_tiling(s.body))
            self.line("{")
            self.nested(s.body, inner, env)
            self.line("}")
            if isinstance(block, CudaDeviceFunction):
                self.line("sc_device_boundary(M);")
            return
        name = s.iter.name()
        v = self.var(name)
        lo, hi = self.expr(s.lo, env), self.expr(s.hi, env)
        inner = ctx
        task = False
        if isinstance(mode, CudaThreads):
            count = s.hi.val if isinstance(s.hi, LoopIR.Const) else None
            if not (isinstance(s.lo, LoopIR.Const) and s.lo.val == 0 and count is not None):
                raise Unsupported("a cuda_threads loop with non-constant bounds")
            inner = replace(ctx, tiling=self.tmap.body_tiling(s.body), cuda=ctx.cuda + ((name, v),))
        elif self.tmap.is_task_loop(s):
            task = True
            n = ctx.tiling.thread_count if ctx.tiling is not None else 0
            inner = replace(ctx, in_task=True, task_threads=n, cuda=())
        if ctx.in_instr is None:
            inner = replace(inner, loops=inner.loops + ((name, v),))
        self.line(f"for (int64_t {v} = {lo}, {v}_end = {hi}; {v} < {v}_end; {v}++) {{")
        self.depth += 1
        self.line("if (*ST) return;")
        if task:
            self.line("sc_task_begin(M);")
        self.block(s.body, inner, {**env, s.iter: v})
        if task:
            self.line("sc_task_end(M);")
        self.depth -= 1
        self.line("}")

    def call(self, s, ctx: Ctx, env: dict) -> None:
        spec = sync_spec_of(s)
        if spec is not None:
            self.sync(s, spec, ctx, env)
            return
        info = instr_info(s)
        callee = dict(env)
        self.line("{")
        self.depth += 1
        for a, formal in zip(s.args, s.f.args):
            if formal.type.is_numeric():
                view = self.window(a, env) if isinstance(a, LoopIR.WindowExpr) else env[a.name]
                usage = info.usage_tls.get(str(formal.name)) if info else None
                callee[formal.name] = View(view.slot, view.base, view.strides, usage or view.usage)
            else:
                v = self.var(str(formal.name))
                self.line(f"const int64_t {v} = {self.expr(a, env)};")
                callee[formal.name] = v
        inner = ctx
        if info is not None and ctx.dev is not None:
            inner = replace(ctx, instr_tl=info.instr_tl, in_instr=ctx.in_instr or s)
        self.block(s.f.body, inner, callee)
        self.depth -= 1
        self.line("}")

    # ---- synchronization ----

    def sync(self, s, spec, ctx: Ctx, env: dict) -> None:
        mask = self.mask_expr(ctx)
        if spec.kind == "Fence":
            if ctx.dev is not None:
                m2 = spec.second_tl.mask
                self.line(f"sc_fence(M, {mask}, {spec.first_tl.mask}u, {m2}u, {tl.program_order_closure(m2)}u);")
            return
        bar = env.get(s.args[0].name)
        if not isinstance(bar, Barrier):
            raise Unsupported("a barrier allocated outside the translated code")
        qbase, dims = bar.qbase, bar.dims
        pos = barrier_window_indices(s.args[0])
        flat = "INT64_C(0)"
        for i, d in zip(pos, dims):
            p = self.expr(i, env)
            self.line(f"if ((uint64_t)({p}) >= {d}u) {{ sc_fail(M, SC_ERROR); return; }}")
            flat = f"({flat}) * {d} + ({p})"
        q = f"{qbase} + 2 * ({flat}) + {int(spec.is_reverse)}"
        site = len(self.events)
        self.events.append(EventSite(self.tmap.analysis.ref(s), spec.kind, tuple(n for n, _ in ctx.loops), ctx.task_threads))
        iv = ", ".join(c for _, c in ctx.loops) or "0"
        stmt = self.stmt_id(s)
        self.line("{")
        self.depth += 1
        self.line(f"const int64_t iv[] = {{{iv}}};")
        if spec.is_arrive:
            self.line(f"sc_arrive(M, {q}, {mask}, {spec.first_tl.mask}u, {stmt}, {site}, iv, {len(ctx.loops)});")
        else:
            m2 = spec.second_tl.mask
            self.line(f"sc_await(M, {q}, {mask}, {m2}u, {tl.program_order_closure(m2)}u, {spec.N}, {stmt}, {site}, "
                      f"iv, {len(ctx.loops)});")
        self.depth -= 1
        self.line("}")

    def barrier_alloc(self, s, ctx: Ctx, env: dict) -> str:
        """Queues for every position of a barrier (forward, reverse); their scope ends with the block."""
        info = self.infos.get(s.name)
        if info is None:
            raise Unsupported("a barrier the barrier analysis does not know")
        if ctx.dev is not None and not ctx.in_task:
            raise Unsupported("a barrier in device code outside the cuda_tasks loop")
        qbase = len(self.queues)
        for flat in range(info.positions):
            pos, rest = [], flat
            for d in reversed(info.dims):
                pos.append(rest % d)
                rest //= d
            for reverse in (False, True):
                self.queues.append(QueueSite(info, tuple(reversed(pos)), reverse))
        env[s.name] = Barrier(qbase, info.dims)
        return f"sc_end_barrier(M, {qbase}, {2 * info.positions}, {self.stmt_id(s)});"
