"""Distributed memory deduction: seed 000, "Distributed Memory", rules 1-3 (rule 4 is the code generator's).

Vocabulary (seed 000):

* The *tile thread count* of a scope is the thread count of its collective
  unit, ignoring warp specialization: the cluster at the top of a device
  function, the `unit` of the innermost enclosing cuda_threads loop below it
  (a CudaWarps block keeps its parent's count).
* The *tiling operator* of a cuda_threads iterator maps the tile thread count
  t0 of its loop's parent scope to the count t1 of the loop's body
  (`Link`, printed `m: 512 -> 32`).
* Rule 1: a memory's *native unit* (`CudaMemory.native_unit`) physically
  allocates it; every shard is allocated by one collective of that unit.
* Rule 2: at each use, indices are consumed from the left, each a plain read
  of a cuda_threads iterator, until their operators, in some order, chain the
  allocation scope's tile thread count t_a down to the native unit's t_n.
  The consumed indices are distributed, the rest are not; an allocation made
  at its native unit's size (t_a == t_n) has no distributed dimension.
* Rule 3: every use deduces the same owner collective for each shard it
  touches, and the same number of distributed dimensions; and no collective
  owns two shards (lowered, each owner holds one shard, in one place).

A shard's owner is a set of natural thread indices, computed from the
tiling of the innermost consumed loop's body with the consumed iterators set
to the shard's index and every other iterator to 0 (the allocation's first
collective; other collectives of the allocation scope own translated copies).
Comparing thread sets, not iterator names, makes `acc[tx, ty]` after
`acc[ty, tx]` an error, and so is a second loop nest that tiles the same
threads differently, or the same loops under another CudaWarps range.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Iterator, Mapping, Optional

from exo.core.LoopIR import LoopIR
from exo.core.prelude import Sym

from ..core.coll import CollTiling
from ..core.instrs import multicast_dst
from ..core.loop_modes import CudaThreads
from ..core.memories import CudaMemory
from ..core.sync_stmts import is_barrier_alloc
from ..errors import DistributedMemoryError

# `info` arguments below are the scopes pass' StmtInfo (spork_lab.analysis.result). This module does not import
# it: the analysis package runs this pass, and importing any part of it from here would close an import cycle.
Threads = tuple  # sorted half-open intervals ((start, stop), ...)


@dataclass(frozen=True)
class Link:
    """The tiling operator of one cuda_threads iterator: tile thread count t0 -> t1 (seed 000, rule 2)."""

    iter: str
    sym: Sym
    t0: int
    t1: int
    count: int  # the loop's iteration count
    line: Optional[int]  # the loop's line

    def __str__(self) -> str:
        return f"{self.iter}: {self.t0} -> {self.t1}"

    def to_json(self) -> dict:
        return {"iter": self.iter, "from": self.t0, "to": self.t1, "count": self.count, "line": self.line}


@dataclass(frozen=True)
class Use:
    """One use's deduction: its distributed iterators, in index order, and the tiling of their owners."""

    line: Optional[int]
    text: str  # the access as written, e.g. `acc[m, n, i, j]`
    links: tuple  # of Link, one per distributed dimension
    owner_tiling: CollTiling  # the body tiling of the innermost consumed loop
    owner_unit: str  # its collective unit as users write it, e.g. `cuda_warp`
    srcinfo: object = field(default=None, compare=False, repr=False)  # where errors about this use point

    def owner(self, shard: tuple, outer: dict) -> Threads:
        """The threads owning `shard`, in the allocating collective chosen by `outer` (iterator name -> value)."""
        values = {name: 0 for name, _ in self.owner_tiling.iters}
        values.update(outer)
        values.update((link.iter, c) for link, c in zip(self.links, shard))
        return tuple(self.owner_tiling.threads(values))

    def to_json(self) -> dict:
        return {"line": self.line, "text": self.text, "iters": [link.iter for link in self.links]}


@dataclass(frozen=True)
class DistAlloc:
    """The deduction for one device allocation whose memory has a native unit (immutable, like the Analysis).

    `dims` is the number of leading distributed dimensions (0 when the
    allocation is made at its native unit's size, or has no use).
    `owners[shard]` is the owner threads of each shard some use touches, in
    the allocation's first collective, and `owner_use[shard]` the use that
    first deduced it.
    """

    sym: Sym
    mem: type
    line: Optional[int]
    shape: tuple  # ints where constant, else the printed expression
    alloc_tiling: CollTiling
    alloc_unit: str  # the allocating collective's unit as users write it
    alloc_threads: int  # t_a
    native_threads: int  # t_n
    uses: tuple = ()  # of Use, in source order
    owners: Mapping = field(default_factory=lambda: MappingProxyType({}))  # shard index tuple -> Threads
    owner_use: Mapping = field(default_factory=lambda: MappingProxyType({}))  # shard index tuple -> Use

    @property
    def name(self) -> str:
        return str(self.sym)

    @property
    def dims(self) -> int:
        return len(self.uses[0].links) if self.uses else 0

    @property
    def shard_shape(self) -> list:
        return list(self.shape[self.dims :])

    @property
    def is_distributed(self) -> bool:
        return self.dims > 0

    def owner_threads(self, shard: tuple, outer: dict) -> Optional[Threads]:
        """The threads owning `shard` in the allocating collective chosen by `outer`; None if no use touches it."""
        use = self.owner_use.get(shard)
        return None if use is None else use.owner(shard, outer)

    def to_json(self) -> dict:
        """Plain data for the workbench: dimensions, shard shape, the chain (CTA side first) and each shard's owner."""
        links = self.uses[0].links if self.uses else ()
        chain = sorted(zip(range(self.dims), links), key=lambda d: (-d[1].t0, -d[1].t1))
        owner_unit = self.uses[0].owner_unit if self.uses else self.alloc_unit
        return {
            "name": self.name,
            "line": self.line,
            "memory": self.mem.name(),
            "shape": list(self.shape),
            "distributed_dims": list(range(self.dims)),
            "non_distributed_dims": list(range(self.dims, len(self.shape))),
            "shard_shape": list(self.shard_shape),
            "alloc_unit": self.alloc_unit,
            "alloc_threads": self.alloc_threads,
            "native_unit": str(self.mem.native_unit),
            "native_threads": self.native_threads,
            "owner_unit": owner_unit,
            "chain": [{"dim": k, **link.to_json()} for k, link in chain],
            "shards": [{"index": list(c), "threads": [list(r) for r in t]} for c, t in sorted(self.owners.items())],
            "uses": [u.to_json() for u in self.uses],
        }


def deduce(stmts: list) -> dict:
    """The `dist` pass: Sym -> DistAlloc for every device allocation with a native unit.

    `stmts` is the scope pass' [(stmt, StmtInfo)] in source order. Raises
    DistributedMemoryError at the offending allocation or use.
    """
    return _Deducer(stmts).run()


class _Deducer:
    def __init__(self, stmts: list):
        self.stmts = stmts
        self.infos = {id(s): info for s, info in stmts}
        self.links: dict = {}  # cuda_threads iterator Sym -> Link
        self.bodies: dict = {}  # cuda_threads iterator Sym -> the StmtInfo of its loop's body
        self.allocs: dict = {}  # Sym -> DistAlloc without its uses (filled in by `run`)
        self.uses: dict = {}  # Sym -> [Use]
        self.owners: dict = {}  # Sym -> {shard: Threads}
        self.owner_use: dict = {}  # Sym -> {shard: Use}
        self.shard_of_owner: dict = {}  # Sym -> {owner Threads: shard}
        self.alloc_iters: dict = {}  # allocation Sym -> the cuda_threads iterators around it
        self.owner_tables: dict = {}  # (owner tiling, iterator names, counts) -> {shard: Threads}

    def run(self) -> dict:
        multicast: list = []  # multicast writes: checked once the other uses have deduced the shards
        for s, info in self.stmts:  # source order: a loop comes before its body, an allocation before its uses
            if isinstance(s, LoopIR.For) and isinstance(s.loop_mode, CudaThreads):
                self.add_link(s, info)
            elif isinstance(s, LoopIR.Alloc) and not is_barrier_alloc(s) and info.tiling is not None:
                mem = s.mem
                if isinstance(mem, type) and issubclass(mem, CudaMemory) and mem.native_unit is not None:
                    self.add_alloc(s, info)
            for name, idx, node in _accesses(s):
                a = self.allocs.get(name)
                if a is not None and a.alloc_threads > a.native_threads:
                    if _is_multicast_write(s, node):
                        multicast.append((a, idx, node, s))
                        continue
                    self.check_consistent(a, self.deduce_use(a, idx, node, s, info))
        for a, idx, node, s in multicast:
            self.check_multicast(a, idx, node, s)
        return {
            sym: replace(a, uses=tuple(self.uses[sym]), owners=MappingProxyType(self.owners[sym]),
                         owner_use=MappingProxyType(self.owner_use[sym]))
            for sym, a in self.allocs.items()
        }

    def check_multicast(self, a: DistAlloc, idx: list, node, s: LoopIR.stmt) -> None:
        """A multicast write (TMA to every CTA of a cluster) spans whole distributed dimensions: `dst[:, ...]`.

        It writes every shard of its slice, so it deduces no owner; the other uses decide the shards.
        """
        uses = self.uses[a.sym]
        text = _access_text(a.name, idx)
        if not uses:
            raise DistributedMemoryError(
                f"`{text}`: a multicast copy writes every shard of {a.name}, so it cannot say which collective owns "
                f"each; use {a.name} elsewhere with its distributed indices (e.g. the reads of its shards)",
                _srcinfo(node, s),
            )
        d = len(uses[0].links)
        for k, w in enumerate(idx[:d]):
            full = isinstance(w, LoopIR.Interval) and isinstance(w.lo, LoopIR.Const) and w.lo.val == 0 \
                and isinstance(w.hi, LoopIR.Const) and w.hi.val == a.shape[k]
            if not full:
                raise DistributedMemoryError(
                    f"`{text}`: a multicast copy writes every shard: its distributed dimension {k} must be the whole "
                    f"slice `:` (0:{a.shape[k]}), not `{_index_text(w)}`",
                    _srcinfo(node, s),
                )

    # -- tile thread counts ------------------------------------------------------

    def tile_threads(self, info) -> int:
        """The tile thread count of a statement's scope (warp specialization ignored)."""
        inner = _threads_iters(info)
        if inner:
            return self.links[inner[-1]].t1
        return info.tiling.blockDim * info.tiling.clusterDim

    def add_link(self, s: LoopIR.For, info) -> None:
        body = self.infos[id(s.body[0])]
        unit = s.loop_mode.unit.substitute(body.tiling.blockDim, body.tiling.clusterDim).thread_count
        t1 = unit if unit is not None else body.tiling.thread_count
        line = getattr(s.srcinfo, "lineno", None)
        self.links[s.iter] = Link(s.iter.name(), s.iter, self.tile_threads(info), t1, s.hi.val, line)
        self.bodies[s.iter] = body

    # -- rule 1 --------------------------------------------------------------------

    def add_alloc(self, s: LoopIR.Alloc, info) -> None:
        mem, tiling = s.mem, info.tiling
        t_a = self.tile_threads(info)
        t_n = mem.native_unit.substitute(tiling.blockDim, tiling.clusterDim).thread_count
        if t_a < t_n:
            raise DistributedMemoryError(
                f"distributed memory rule 1 (native unit): {s.name} @ {mem.name()} is allocated by a tile of "
                f"{_threads(t_a)} ({info.coll_unit_text}), smaller than its native unit {mem.native_unit} "
                f"({_threads(t_n)}), which allocates it physically; allocate it where a whole {mem.native_unit} "
                f"runs, outside the cuda_threads loop that splits it",
                s.srcinfo,
            )
        shape = tuple(d.val if isinstance(d, LoopIR.Const) else str(d) for d in s.type.shape()) if s.type.is_tensor_or_window() else ()
        line = getattr(s.srcinfo, "lineno", None)
        self.allocs[s.name] = DistAlloc(s.name, mem, line, shape, tiling, info.coll_unit_text, t_a, t_n)
        self.uses[s.name], self.owners[s.name], self.owner_use[s.name], self.shard_of_owner[s.name] = [], {}, {}, {}
        self.alloc_iters[s.name] = set(_threads_iters(info))

    # -- rule 2 --------------------------------------------------------------------

    def deduce_use(self, a: DistAlloc, idx: list, node, s: LoopIR.stmt, info) -> Use:
        text = _access_text(a.name, idx)
        use_iters = _threads_iters(info)
        consumed: list = []

        def fail(reason: str):
            got = ", ".join(str(link) for link in consumed) or "none"
            raise DistributedMemoryError(
                f"distributed memory rule 2 (tiling chain): `{text}`: {reason}. {a.name} @ {a.mem.name()} is "
                f"allocated (line {a.line}) by a tile of {_threads(a.alloc_threads)} and its native unit "
                f"{a.mem.native_unit} has {_threads(a.native_threads)}: its leading indices must be plain "
                f"cuda_threads iterators whose loops, in some order, tile {a.alloc_threads} threads down to "
                f"{a.native_threads} (consumed here: {got})",
                _srcinfo(node, s),
            )

        for k, i in enumerate(idx):
            if _is_chain(consumed, a.alloc_threads, a.native_threads):
                break
            sym = _iter_of(i)
            if sym is None or sym not in self.links:
                fail(f"index {k} (`{_index_text(i)}`) is not a plain cuda_threads iterator")
            if sym not in use_iters or sym in self.alloc_iters[a.sym]:
                fail(f"`{sym}` iterates a loop around the allocation, not one inside it")
            if any(link.sym == sym for link in consumed):
                fail(f"`{sym}` is used twice")
            consumed.append(self.links[sym])
        if not _is_chain(consumed, a.alloc_threads, a.native_threads):
            fail(f"the indices run out, and {_chain_gap(consumed, a.alloc_threads, a.native_threads)}")
        for k in range(len(consumed)):
            if not isinstance(a.shape[k], int):
                fail(f"distributed dimension {k} has the extent {a.shape[k]}, not a constant")
        innermost = max(consumed, key=lambda link: use_iters.index(link.sym))
        srcinfo, body = _srcinfo(node, s), self.bodies[innermost.sym]
        return Use(getattr(srcinfo, "lineno", None), text, tuple(consumed), body.tiling, body.coll_unit_text, srcinfo)

    # -- rule 3 --------------------------------------------------------------------

    def check_consistent(self, a: DistAlloc, use: Use) -> None:
        srcinfo = use.srcinfo
        uses, owners, owner_use = self.uses[a.sym], self.owners[a.sym], self.owner_use[a.sym]
        if uses and len(uses[0].links) != len(use.links):
            first = uses[0]
            raise DistributedMemoryError(
                f"distributed memory rule 3 (consistent deductions): `{use.text}` deduces "
                f"{len(use.links)} distributed dimension(s) ({_iters_text(use)}), but line {first.line} "
                f"(`{first.text}`) deduced {len(first.links)} ({_iters_text(first)}): every use of {a.name} "
                f"must split it into the same shards",
                srcinfo,
            )
        table = self.owner_table(use)
        for shard, threads in table.items():  # first: a shard someone else owns (the likelier mistake)
            known = owners.get(shard)
            if known is not None and known != threads:
                first = owner_use[shard]
                raise DistributedMemoryError(
                    f"distributed memory rule 3 (consistent deductions): `{use.text}` makes threads "
                    f"{_runs_text(threads)} the owner of shard {list(shard)} of {a.name}, but line {first.line} "
                    f"(`{first.text}`) deduced threads {_runs_text(known)}: a shard lives in its owner's "
                    f"{a.mem.name()}, so every use must be by the collective that owns it (here {_iters_text(use)}; "
                    f"there {_iters_text(first)})",
                    srcinfo,
                )
        shard_of = self.shard_of_owner[a.sym]
        for shard, threads in table.items():  # then: an owner of two shards
            if shard in owners:
                continue
            other = shard_of.get(threads)
            if other is not None:
                first = owner_use[other]
                raise DistributedMemoryError(
                    f"distributed memory rule 3 (consistent deductions): `{use.text}` makes threads "
                    f"{_runs_text(threads)} the owner of shard {list(shard)} of {a.name}, but line {first.line} "
                    f"(`{first.text}`) made them the owner of shard {list(other)}: each owner holds one shard "
                    f"of {a.name}, in one place, so two shards with one owner would overwrite each other "
                    f"(here {_iters_text(use)}; there {_iters_text(first)})",
                    srcinfo,
                )
            owners[shard], owner_use[shard], shard_of[threads] = threads, use, shard
        uses.append(use)

    def owner_table(self, use: Use) -> dict:
        """Shard index -> owner threads for every shard the use's loops reach (cached: uses share loops)."""
        key = (use.owner_tiling, tuple(link.iter for link in use.links), tuple(link.count for link in use.links))
        table = self.owner_tables.get(key)
        if table is None:
            shards = itertools.product(*(range(link.count) for link in use.links))
            table = self.owner_tables[key] = {c: use.owner(c, {}) for c in shards}
        return table


def _threads_iters(info) -> list:
    return [it.sym for it in info.iters if it.kind == "cuda_threads"]


def _threads(n: int) -> str:
    return "1 thread" if n == 1 else f"{n} threads"


def _is_chain(consumed: list, t_a: int, t_n: int) -> bool:
    """Do the consumed operators, in some order, chain t_a down to t_n? (No-op operators t -> t fit anywhere.)"""
    t = t_a
    for link in sorted(consumed, key=lambda link: (-link.t0, -link.t1)):
        if link.t0 != t:
            return False
        t = link.t1
    return t == t_n


def _chain_gap(consumed: list, t_a: int, t_n: int) -> str:
    """Where the consumed operators fail to chain t_a down to t_n, in words."""
    t = t_a
    for link in sorted(consumed, key=lambda link: (-link.t0, -link.t1)):
        if link.t0 != t:
            break
        t = link.t1
    else:
        link = None
    return f"no iterator's loop tiles {t} threads down to {t_n if link is None else link.t0}"


def _is_multicast_write(s: LoopIR.stmt, node) -> bool:
    """Whether `node` is the written operand of a multicast instr (its first dimension spans the cluster's CTAs)."""
    return node is multicast_dst(s)


def _iter_of(i) -> Optional[Sym]:
    """The iterator an index is a plain read of, or None."""
    if isinstance(i, LoopIR.Point):
        i = i.pt
    if isinstance(i, LoopIR.Read) and not i.idx:
        return i.name
    return None


# -- accesses --------------------------------------------------------------------


def _accesses(s: LoopIR.stmt) -> Iterator[tuple]:
    """Every buffer access of a statement: (buffer Sym, indices, node); indices are index expressions, or
    LoopIR.Point / LoopIR.Interval for windows. A bare tensor argument has no indices."""
    if isinstance(s, (LoopIR.Assign, LoopIR.Reduce)):
        yield s.name, list(s.idx), s
        exprs = [*s.idx, s.rhs]
    elif isinstance(s, LoopIR.Call):
        exprs = list(s.args)
    elif isinstance(s, LoopIR.WindowStmt):
        exprs = [s.rhs]
    elif isinstance(s, LoopIR.If):
        exprs = [s.cond]
    elif isinstance(s, LoopIR.For):
        exprs = [s.lo, s.hi]
    else:
        exprs = []
    for e in exprs:
        yield from _expr_accesses(e)


def _expr_accesses(e) -> Iterator[tuple]:
    if isinstance(e, LoopIR.Read):
        if e.type.is_numeric():
            yield e.name, list(e.idx), e
        children = list(e.idx)
    elif isinstance(e, LoopIR.WindowExpr):
        yield e.name, list(e.idx), e
        children = [x for w in e.idx for x in ((w.lo, w.hi) if isinstance(w, LoopIR.Interval) else (w.pt,))]
    elif isinstance(e, LoopIR.BinOp):
        children = [e.lhs, e.rhs]
    elif isinstance(e, LoopIR.USub):
        children = [e.arg]
    elif isinstance(e, LoopIR.Extern):
        children = list(e.args)
    else:
        children = []
    for c in children:
        yield from _expr_accesses(c)


def _srcinfo(node, s: LoopIR.stmt):
    """The access' own source location (an expression's), else its statement's."""
    return getattr(node, "srcinfo", None) or s.srcinfo


def _index_text(i) -> str:
    if isinstance(i, LoopIR.Point):
        return _expr_text(i.pt)
    if isinstance(i, LoopIR.Interval):
        return f"{_expr_text(i.lo)}:{_expr_text(i.hi)}"
    return _expr_text(i)


_PREC = {"or": 0, "and": 1, "==": 2, "<": 2, ">": 2, "<=": 2, ">=": 2, "+": 3, "-": 3, "*": 4, "/": 4, "%": 4}


def _expr_text(e, prec: int = 0) -> str:
    """An index expression as written (exo's own printer formats with yapf: too slow for every access)."""
    if isinstance(e, LoopIR.Read):
        return _access_text(e.name, list(e.idx))
    if isinstance(e, LoopIR.Const):
        return str(e.val)
    if isinstance(e, LoopIR.USub):
        return f"-{_expr_text(e.arg, 5)}"
    if isinstance(e, LoopIR.BinOp):
        p = _PREC[e.op]
        text = f"{_expr_text(e.lhs, p)} {e.op} {_expr_text(e.rhs, p + 1)}"
        return f"({text})" if p < prec else text
    return str(e)


def _access_text(name, idx: list) -> str:
    return f"{name}[{', '.join(_index_text(i) for i in idx)}]" if idx else str(name)


def _iters_text(use: Use) -> str:
    return ", ".join(str(link) for link in use.links)


def _runs_text(threads: Threads) -> str:
    return " ".join(f"[{lo}, {hi})" for lo, hi in threads)
