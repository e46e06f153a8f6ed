"""The plain-data result of `analyze`: one `StmtInfo` per statement, the device functions, and each pass's value.

Everything here is a value computed once from an immutable proc; `to_json()`
gives what the CLI and the widgets read.
"""

from __future__ import annotations

import linecache
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, NamedTuple, Optional, Union

from exo.core.LoopIR import LoopIR
from exo.core.prelude import Sym

from ..core.blocks import CudaDeviceFunction
from ..core.coll import CollTiling
from ..core.ir import numeric_reads
from ..core.loop_modes import WithBlock
from ..core.sync_stmts import written_name
from ..core.timelines import InstrTl
from ..errors import SporkSchedulingError, place_of
from ..lang.printer import head_text

Path = tuple  # child indices from the proc body; "else" marks a step into an If's orelse


class IterInfo(NamedTuple):
    """An enclosing loop of a statement. Bounds are ints when constant, else the LoopIR expressions."""

    name: str
    sym: Sym
    lo: Union[int, LoopIR.expr]
    hi: Union[int, LoopIR.expr]
    kind: str  # "seq", "par", "cuda_tasks" or "cuda_threads"

    def to_json(self) -> dict:
        return {"name": self.name, "lo": _bound_json(self.lo), "hi": _bound_json(self.hi), "kind": self.kind}


def _bound_json(bound: Union[int, LoopIR.expr]) -> Union[int, str]:
    return bound if isinstance(bound, int) else str(bound)


@dataclass(frozen=True)
class StmtRef:
    """A statement as reports name it: its path in the scheduled proc, and the user's file, line and source text.

    Scheduling keeps a statement's source line, so several statements of one
    proc can share file and line; the path tells them apart. `path` is None for
    a statement that is not in the proc the report is about (a callee's).
    """

    file: str
    line: int
    text: str
    path: Optional[Path] = None

    @staticmethod
    def of(stmt: LoopIR.stmt, path: Optional[Path]) -> StmtRef:
        """The statement at its source line, with that line's text where the statement was written there, else
        its printed first line: scheduling keeps the line of what it rewrites, so an instr call that `replace` made
        of a loop nest names the nest's first line (a report quoting that line would name a loop)."""
        info = stmt.srcinfo
        line = linecache.getline(info.filename, info.lineno).strip() if info.filename else ""
        return StmtRef(info.filename, info.lineno, line if _written_on(stmt, line) else head_text(stmt), path)

    def __str__(self) -> str:
        text = self.text
        if text.count("(") + text.count("[") > text.count(")") + text.count("]"):
            text += " ..."  # its first line of several: what follows in a report is not part of it
        return f"{place_of(self) or self.line}: {text}"  # a notebook's statement names its cell, not IPython's file

    @property
    def filename(self) -> str:
        """As a srcinfo: errors at this statement (SporkError reads filename and lineno)."""
        return self.file

    @property
    def lineno(self) -> int:
        return self.line

    def to_json(self) -> dict:
        return {
            "file": self.file,
            "line": self.line,
            "text": self.text,
            "path": None if self.path is None else list(self.path),
        }


@dataclass(frozen=True)
class StmtInfo:
    """Where and by whom one statement runs.

    `tiling` and `coll_unit_text` are None for CPU statements. A `with` or loop
    statement is described by the scope it appears in, not by its body's scope.
    """

    path: Path
    line: Optional[int]
    text: str  # the statement's first printed line
    device_scope: str  # "cpu" or "cuda"
    instr_tl: InstrTl
    tiling: Optional[CollTiling]
    coll_unit_text: Optional[str]
    iters: tuple  # of IterInfo, outermost first
    device_function: Optional[CudaDeviceFunction]
    warp_name: Optional[str]

    def threads(self, iter_values: dict[str, int]) -> list[tuple[int, int]]:
        """Natural thread indices running this statement for these cuda_threads iterator values,
        as sorted half-open intervals [start, stop)."""
        return self._cuda_tiling().threads(iter_values)

    def iter_values_of(self, thread: int) -> Optional[dict[str, int]]:
        """The cuda_threads iterator values for which `thread` runs this statement; None if it never does."""
        return self._cuda_tiling().iter_values_of(thread)

    def _cuda_tiling(self) -> CollTiling:
        if self.tiling is None:
            raise ValueError(f"line {self.line}: `{self.text}` runs on the CPU; it has no thread collective")
        return self.tiling

    def to_json(self) -> dict:
        return {
            "path": list(self.path),
            "line": self.line,
            "text": self.text,
            "device_scope": self.device_scope,
            "instr_tl": self.instr_tl.name,
            "coll_unit": self.coll_unit_text,
            "tiling": None if self.tiling is None else self.tiling.to_json(),
            "iters": [it.to_json() for it in self.iters],
            "warp_name": self.warp_name,
        }


@dataclass(frozen=True)
class DeviceFunctionInfo:
    """A `with CudaDeviceFunction` block and its cuda_tasks nest (derived here, once, for every consumer)."""

    block: LoopIR.For  # the `with` statement (CPU code)
    ctx: CudaDeviceFunction
    tasks: tuple  # the cuda_tasks loops, outermost first; the last one's body is the task body

    @property
    def body(self) -> list:
        """The statements one task runs: the body of the innermost cuda_tasks loop."""
        return self.tasks[-1].body


@dataclass(frozen=True)
class Scopes:
    """The value of the `scopes` pass: every statement's StmtInfo, in source order, and the device functions."""

    stmts: tuple  # ((LoopIR.stmt, StmtInfo), ...)
    device_functions: tuple  # (DeviceFunctionInfo, ...)

    def __post_init__(self):
        by_id: dict = {}
        for s, info in self.stmts:
            first = by_id.setdefault(id(s), info)
            if first is not info and first != info:
                raise SporkSchedulingError(
                    f"`{head_text(s)}` is one statement object at two places of the proc, run by other threads at "
                    "each: exo keeps a statement it copies unchanged as one object, and what the analysis knows of "
                    "a statement is known per object. Schedule with spork_lab.scheduling's ops, which give each "
                    "place its own", s.srcinfo)
        object.__setattr__(self, "_by_id", by_id)

    def info(self, stmt: LoopIR.stmt) -> Optional[StmtInfo]:
        return self._by_id.get(id(stmt))


def _written_on(stmt: LoopIR.stmt, line: str) -> bool:
    """Whether source `line` is where `stmt` was written: it names the statement's callee, loop variable or
    buffer, and the buffers an assignment reads (`stage_mem` keeps the line of `y[j, i] = x[i, j]` for what
    becomes `y[...] = tile[...]`)."""
    if isinstance(stmt, LoopIR.For):
        if isinstance(stmt.loop_mode, WithBlock):
            return line.startswith("with ")
        return re.match(rf"for\s+{re.escape(str(stmt.iter))}\b", line) is not None
    if isinstance(stmt, LoopIR.Call):
        words = [written_name(stmt)]
    elif isinstance(stmt, (LoopIR.Assign, LoopIR.Reduce)):
        reads: list = []
        numeric_reads(stmt.rhs, reads)
        words = [str(stmt.name), *(str(r.name) for r in reads)]
    elif isinstance(stmt, (LoopIR.Alloc, LoopIR.WindowStmt)):
        words = [str(stmt.name)]
    else:
        return True
    return all(re.search(rf"\b{re.escape(word)}\b", line) is not None for word in words)


class Analysis:
    """The static analysis of one proc: the value of each named pass (see the package docstring).

    Immutable. Statement lookups are by object identity, which stays valid
    because the analysis holds the statements.
    """

    __slots__ = ("_name", "_results", "_scopes")

    def __init__(self, proc_name: str, results: Mapping[str, object]):
        self._name = proc_name
        self._results = MappingProxyType(dict(results))
        self._scopes: Scopes = self._results["scopes"]

    @property
    def proc_name(self) -> str:
        return self._name

    def result(self, name: str) -> object:
        """The value of the pass named `name` (see `spork_lab.analysis.PASSES`)."""
        return self._results[name]

    @property
    def pass_names(self) -> tuple:
        return tuple(self._results)

    @property
    def stmts(self) -> tuple:
        """((stmt, StmtInfo), ...) in source order."""
        return self._scopes.stmts

    @property
    def device_functions(self) -> tuple:
        """(DeviceFunctionInfo, ...) in source order."""
        return self._scopes.device_functions

    @property
    def barriers(self) -> Mapping:
        """Barrier Sym -> BarrierInfo (the `barriers` pass)."""
        return self._results["barriers"]

    @property
    def dist(self) -> Mapping:
        """Allocation Sym -> spork_lab.dist.DistAlloc (the `dist` pass): distributed memory deductions."""
        return self._results["dist"]

    def stmt_info(self, stmt: LoopIR.stmt) -> StmtInfo:
        """The StmtInfo of a statement object of the analysed proc."""
        info = self._scopes.info(stmt)
        if info is None:
            raise KeyError(f"statement `{stmt}` is not part of the analysed proc {self.proc_name}")
        return info

    def ref(self, stmt: LoopIR.stmt) -> StmtRef:
        """How reports name a statement: with its path when it is a statement of this proc."""
        info = self._scopes.info(stmt)
        return StmtRef.of(stmt, None if info is None else info.path)

    def to_json(self) -> dict:
        functions = []
        for fn in self.device_functions:
            ctx = fn.ctx
            info = self.stmt_info(fn.block)
            warps = []
            for w in ctx.warp_config or ():
                lo, hi = ctx.warp_range(w.name)
                warps.append({"name": w.name, "count": w.count, "setmaxnreg": w.setmaxnreg, "warps": [lo, hi]})
            functions.append(
                {
                    "path": list(info.path),
                    "line": info.line,
                    "blockDim": ctx.threads_per_cta,
                    "clusterDim": ctx.clusterDim,
                    "blocks_per_sm": ctx.blocks_per_sm,
                    "warp_names": [w["name"] for w in warps],
                    "warps": warps,
                    "tasks": [list(self.stmt_info(t).path) for t in fn.tasks],
                }
            )
        return {
            "proc": self.proc_name,
            "passes": list(self._results),
            "statements": [info.to_json() for _, info in self.stmts],
            "device_functions": functions,
            "barriers": [b.to_json() for b in self.barriers.values()],
            "distributed": [a.to_json() for a in self.dist.values() if a.is_distributed],
        }
