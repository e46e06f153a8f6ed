"""The fast engine's printer: a `Program` (program.py) as C code driving the compiled machine (`_machine.c`).

One C statement per op, in order: For/EndFor become C loops (the bounds
evaluated once, the run's status checked at every iteration), expressions C
expressions (floor division and modulo through helpers that stop the run on a
division by zero), every other op a call of the runtime (`_machine.h`). An
access first asks its cache (`sc_done`): when the element is in the
state its last run left it in and nothing it depends on has changed since,
running it again would change nothing, and the call is skipped. The
static tables (thread masks as bitsets, tilings, queue rules, buffer slots,
sites) are C arrays. The printer knows no LoopIR: what the lowering produces,
it prints.
"""

from __future__ import annotations

from . import program as P

# Expressions as C: floor division and modulo through helpers that stop the run on a division by zero.
_C = {
    "const": "INT64_C({})", "var": "v{}", "neg": "(-{})", "table": "TABLE_{}[{}]",
    "/": "fdiv(M, {}, {})", "%": "fmod_(M, {}, {})", "and": "({} && {})", "or": "({} || {})",
    **{op: f"({{}} {op} {{}})" for op in ("+", "-", "*", "<", ">", "<=", ">=", "==")},
}  # fmt: skip


def c_expr(e: P.Expr) -> str:
    return P.render(e, _C)


class _Printer:
    def __init__(self, program: P.Program):
        self.p = program
        self.out: list = []
        self.depth = 1
        self.access_ops: list = []  # the access ops so far: each has its AccessCache

    def line(self, text: str) -> None:
        self.out.append("    " * self.depth + text)

    def iv(self, site: int) -> str:
        """The loop values a report shows at `site`, as a C array (NULL when there are none)."""
        loops = self.p.sites[site].loops
        if not loops:
            return "NULL"
        return f"(const int64_t[]){{{', '.join(f'v{v}' for _, v in loops)}}}"

    def body(self) -> None:
        for op in self.p.ops:
            self.PRINT[type(op)](self, op)

    # ---- one method per op type ----

    def let(self, op: P.Let) -> None:
        self.line(f"v{op.var} = {c_expr(op.value)};")

    def for_(self, op: P.For) -> None:
        self.line(f"for (int64_t end_{op.var} = (v{op.var} = {c_expr(op.lo)}, {c_expr(op.hi)}); v{op.var} < end_{op.var}; "
                  f"v{op.var}++) {{")
        self.depth += 1
        self.line("if (*ST) return;")

    def end_for(self, op: P.EndFor) -> None:
        self.depth -= 1
        self.line("}")

    def if_(self, op: P.If) -> None:
        self.line(f"if ({c_expr(op.cond)}) {{")
        self.depth += 1

    def else_(self, op: P.Else) -> None:
        self.depth -= 1
        self.line("} else {")
        self.depth += 1

    def end_if(self, op: P.EndIf) -> None:
        self.depth -= 1
        self.line("}")

    def task_begin(self, op: P.TaskBegin) -> None:
        self.line("sc_task_begin(M);")

    def task_end(self, op: P.TaskEnd) -> None:
        self.line("sc_task_end(M);")

    def device_boundary(self, op: P.DeviceBoundary) -> None:
        self.line("sc_device_boundary(M);")

    def alloc(self, op: P.Alloc) -> None:
        dims = f"(const int64_t[]){{{', '.join(c_expr(d) for d in op.shape)}}}" if op.shape else "NULL"
        owners = f"(const int32_t[]){{{', '.join(c_expr(o) for o in op.shard_owners)}}}" if op.shard_owners else "NULL"
        self.line(f"sc_alloc(M, {op.slot}, {len(op.shape)}, {dims}, {c_expr(op.owner)}, {int(op.device)}, "
                  f"{op.shard_size}, {len(op.shard_owners)}, {owners});")

    def free(self, op: P.Free) -> None:
        self.line(f"sc_free(M, {op.slot}, {op.site}, {self.iv(op.site)});")

    def access(self, op: P.Access) -> None:
        k = len(self.access_ops)
        self.access_ops.append(op)
        self.line(f"{{ const int64_t e = {c_expr(op.element)}; const int m = {c_expr(op.mask)};")
        done = f"!sc_first(S, {op.slot}, e)" if op.first_only else f"sc_done(S, {k}, {op.slot}, e, m)"
        self.line(f"  if (!{done}) sc_access(M, {k}, e, m, {self.iv(op.site)}); }}")

    def fence(self, op: P.Fence) -> None:
        self.line(f"sc_fence(M, {c_expr(op.mask)}, {op.m1}u, {op.m2a}u, {op.m2s}u, {int(op.barrier)});")

    def arrive(self, op: P.Arrive) -> None:
        self.line(f"sc_arrive(M, {c_expr(op.queue)}, {c_expr(op.mask)}, {op.m1}u, {op.site}, {self.iv(op.site)}, "
                  f"INT64_C({op.tx}), {c_expr(op.own)});")

    def trail(self, op: P.Trail) -> None:
        queues = ", ".join(c_expr(q) for q in op.queues)
        self.line(f"sc_trail(M, {c_expr(op.mask)}, {op.pair}, {c_expr(op.own)}, {len(op.queues)}, "
                  f"(const int64_t[]){{{queues}}}, INT64_C({op.tx}), {op.site}, {self.iv(op.site)});")

    def await_(self, op: P.Await) -> None:
        self.line(f"sc_await(M, {c_expr(op.queue)}, {c_expr(op.mask)}, {op.m2a}u, {op.m2s}u, INT64_C({op.n}), "
                  f"{op.site}, {self.iv(op.site)});")

    def end_barrier(self, op: P.EndBarrier) -> None:
        self.line(f"sc_end_barrier(M, {op.q0}, {op.count}, {op.site}, {self.iv(op.site)});")

    def check(self, op: P.Check) -> None:
        self.line(f"if (!({c_expr(op.cond)})) {{ sc_fail(M, {op.error}, {op.site}, {self.iv(op.site)}); return; }}")

    PRINT = {
        P.Let: let,
        P.For: for_,
        P.EndFor: end_for,
        P.If: if_,
        P.Else: else_,
        P.EndIf: end_if,
        P.TaskBegin: task_begin,
        P.TaskEnd: task_end,
        P.DeviceBoundary: device_boundary,
        P.Alloc: alloc,
        P.Free: free,
        P.Access: access,
        P.Fence: fence,
        P.Arrive: arrive,
        P.Trail: trail,
        P.Await: await_,
        P.EndBarrier: end_barrier,
        P.Check: check,
    }


def words_per_mask(program: P.Program) -> int:
    return max(1, (program.max_threads + 63) // 64)


def c_source(program: P.Program) -> str:
    """The C translation unit of a Program: its tables, `run`, and the entry point `sc_run`."""
    printer = _Printer(program)
    printer.body()
    nw = words_per_mask(program)
    words = []
    for intervals in program.masks:
        w = [0] * nw
        for lo, hi in intervals:
            for t in range(lo, hi):
                w[t // 64] |= 1 << (t % 64)
        words += w
    queues = []
    for q in program.queues:
        r = q.rule
        queues.append(f"{{{-1 if r.lag is None else r.lag}, {r.depth}, {r.max_wait_n}, {r.scope}, {int(r.same_threads)}}}")
    slots = [f"{{{s.name_id}, {int(s.shared)}, {int(s.global_memory)}, {int(s.undefined)}}}" for s in program.slots]
    sites = [f"{{{s.stmt}, {len(s.loops)}}}" for s in program.sites]
    access = [f"{{{a.slot}, {a.pair}, {a.mode}, {int(a.unordered)}, {a.site}}}" for a in printer.access_ops]
    tables = [f"static const int32_t TABLE_{k}[] = {{{', '.join(map(str, t))}}};" for k, t in enumerate(program.tables)]
    variables = [f"    int64_t {', '.join(f'v{k} = 0' for k in range(program.n_vars))};"] if program.n_vars else []
    return "\n".join(
        [
            '#include "_machine.h"',
            "#include <stddef.h>",
            "",
            "static inline int64_t fdiv(Machine *M, int64_t a, int64_t b) {",
            f"    if (!b) {{ sc_fail(M, {P.ERR_DIVISION}, -1, NULL); return 0; }}",
            "    int64_t q = a / b;",
            "    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;",
            "}",
            "static inline int64_t fmod_(Machine *M, int64_t a, int64_t b) {",
            f"    if (!b) {{ sc_fail(M, {P.ERR_DIVISION}, -1, NULL); return 0; }}",
            "    int64_t r = a % b;",
            "    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;",
            "}",
            "",
            f"static const uint64_t MASKS[] = {{{', '.join(f'{w}ull' for w in words)}}};",
            f"static const int32_t PO[] = {{{', '.join(map(str, P.PROGRAM_ORDER))}}};",
            f"static const int32_t COMPLETION[] = {{{', '.join(map(str, P.COMPLETION))}}};",
            f"static const QueueParams QUEUES[] = {{{', '.join(queues) or '{0}'}}};",
            f"static const SlotParams SLOTS[] = {{{', '.join(slots) or '{0}'}}};",
            f"static const SiteParams SITES[] = {{{', '.join(sites) or '{0}'}}};",
            f"static const AccessParams ACCESS[] = {{{', '.join(access) or '{0}'}}};",
            *tables,
            f"static const Tables TABLES = {{{nw}, {len(program.masks)}, MASKS, PO, COMPLETION, {len(program.slots)}, SLOTS, "
            f"{len(program.queues)}, QUEUES, {len(program.sites)}, SITES, {len(access)}, ACCESS}};",
            "",
            "static void run(Machine *M, const int64_t *sz) {",
            "    const int *ST = sc_status(M);",
            "    SC_State *const S = (SC_State *)M;",
            *variables,
            *(f"    v{var} = sz[{k}];" for k, (_, var) in enumerate(program.sizes)),
            *printer.out,
            "}",
            "",
            "Machine *sc_run(const int64_t *sz, int max_hazards, int max_events, int nwatch, const int64_t *watch) {",
            "    Machine *M = sc_new(&TABLES, max_hazards, max_events, nwatch, watch);",
            "    run(M, sz);",
            "    return M;",
            "}",
            "",
        ]
    )
