"""Loop modes: exo `For` loops annotated with the Exo-GPU meaning of the loop.

Exo sees every one of them as a sequential loop (its analyses stay valid); our
analyses and backends read the annotation. `with` blocks are 1-iteration loops
whose mode is `WithBlock(ctx)`.
"""

from __future__ import annotations

from typing import Union

import attrs
from exo.core.LoopIR import LoopIR

from .blocks import BlockContext
from .coll import CollUnit, cuda_thread
from ..errors import SporkTypeError, user_frame


@attrs.frozen
class CudaTasks(LoopIR.loop_mode):
    """Task loop of a device function: iterations go round-robin to top-level collectives."""

    def source(self, lo: str, hi: str) -> str:
        return f"cuda_tasks({lo}, {hi})"


@attrs.frozen
class CudaThreads(LoopIR.loop_mode):
    """Parallel-for: each iteration is run by one thread collective of `unit`."""

    unit: CollUnit = cuda_thread

    def source(self, lo: str, hi: str) -> str:
        unit = "" if self.unit == cuda_thread else f", unit={self.unit}"
        return f"cuda_threads({lo}, {hi}{unit})"


@attrs.frozen
class WithBlock(LoopIR.loop_mode):
    """A `with ctx:` block, encoded as `for _ in seq(0, 1)`."""

    ctx: BlockContext


class LoopModeSyntax:
    """The names users write in `for i in NAME(lo, hi, **kwargs)` (and pass to set_loop_mode)."""

    def __init__(self, name: str, mode_type: type, keywords: tuple):
        self.name = name
        self.mode_type = mode_type
        self.keywords = keywords

    def __call__(self, *bounds, **kwargs) -> LoopIR.loop_mode:
        """The loop mode with these keyword arguments (lo and hi stay in the proc)."""
        allowed = ", ".join(f"{k}=..." for k in self.keywords) or "no arguments"
        if bounds:
            raise SporkTypeError(f"{self.name} as a loop mode takes {allowed}, not bounds: the loop keeps its own "
                                 f"(set_loop_mode(p, loop, {self.name}{'(unit=cuda_warp)' if self.keywords else ''}))",
                                 user_frame())
        unknown = sorted(set(kwargs) - set(self.keywords))
        if unknown:
            raise SporkTypeError(f"{self.name}() got unknown keyword {unknown[0]!r}; it takes {allowed}", user_frame())
        if "unit" in kwargs and not isinstance(kwargs["unit"], CollUnit):
            raise SporkTypeError(f"{self.name}(unit=...) needs a collective unit such as cuda_warp or 4 * cuda_thread, "
                                 f"got {kwargs['unit']!r}", user_frame())
        return self.mode_type(**kwargs)

    def __repr__(self) -> str:
        return self.name


cuda_tasks = LoopModeSyntax("cuda_tasks", CudaTasks, ())
cuda_threads = LoopModeSyntax("cuda_threads", CudaThreads, ("unit",))

LoopModeLike = Union[str, LoopModeSyntax, LoopIR.loop_mode]


def to_loop_mode(mode: LoopModeLike) -> LoopIR.loop_mode:
    """Normalise what a user may pass as a loop mode ("seq", cuda_tasks, cuda_threads(unit=...))."""
    if isinstance(mode, str):
        named = {"seq": LoopIR.Seq(), "par": LoopIR.Par(), "cuda_tasks": CudaTasks(), "cuda_threads": CudaThreads()}
        if mode not in named:
            raise TypeError(f"unknown loop mode {mode!r}; use one of {', '.join(named)}")
        return named[mode]
    if isinstance(mode, LoopModeSyntax):
        return mode()
    if isinstance(mode, LoopIR.loop_mode) and not isinstance(mode, WithBlock):
        return mode
    raise TypeError(f"expected a loop mode (seq, par, cuda_tasks, cuda_threads(unit=...)), got {mode!r}")


def mode_source(mode: LoopIR.loop_mode, lo: str, hi: str) -> str:
    """How a loop with this mode is written, e.g. `cuda_threads(0, 32, unit=cuda_warp)`."""
    if isinstance(mode, (CudaTasks, CudaThreads)):
        return mode.source(lo, hi)
    return f"{'par' if isinstance(mode, LoopIR.Par) else 'seq'}({lo}, {hi})"
