"""The plain-data result of `analyze`: one `StmtInfo` per statement, plus the device functions.

Everything here is a value computed once from an immutable proc; `to_json()`
gives what the CLI and the widgets read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional, Union

from exo.core.LoopIR import LoopIR
from exo.core.prelude import Sym

from ..core.blocks import CudaDeviceFunction
from ..core.coll import CollTiling
from ..core.timelines import InstrTl

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
    iters: list  # of IterInfo, outermost first
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


class Analysis:
    """The static analysis of one proc (see the package docstring for the API)."""

    def __init__(self, proc_ir: LoopIR.proc, stmts: list, device_functions: list):
        self.proc_ir = proc_ir  # held so that the id() keys below stay valid
        self.stmts = stmts  # [(LoopIR.stmt, StmtInfo)] in source order
        self.device_functions = device_functions  # [(LoopIR.For of the with block, CudaDeviceFunction)]
        self.barriers: dict = {}  # barrier Sym -> BarrierInfo, set by analyze's last step
        self._by_id = {id(s): info for s, info in stmts}

    def stmt_info(self, stmt: LoopIR.stmt) -> StmtInfo:
        """The StmtInfo of a statement object of the analysed proc."""
        info = self._by_id.get(id(stmt))
        if info is None:
            raise KeyError(f"statement `{stmt}` is not part of the analysed proc {self.proc_ir.name}")
        return info

    def to_json(self) -> dict:
        functions = []
        for s, ctx in self.device_functions:
            info = self.stmt_info(s)
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
                }
            )
        return {
            "proc": str(self.proc_ir.name),
            "statements": [info.to_json() for _, info in self.stmts],
            "device_functions": functions,
        }
