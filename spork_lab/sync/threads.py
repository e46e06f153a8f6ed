"""Which threads execute a statement: the sync code asks `spork_lab.analysis`, the one home of collective tilings.

The analysis gives every statement of a device function its `CollTiling`; the
checker only evaluates it for concrete cuda_threads iterator values.
"""

from __future__ import annotations

from ..analysis import analyze
from ..core.coll import CollTiling

Threads = tuple  # sorted half-open intervals ((lo, hi), ...)


class ThreadMap:
    """The collective tilings of one proc's statements, with a cache of their concrete thread sets."""

    def __init__(self, proc_ir):
        self.analysis = analyze(proc_ir)
        self._cache: dict = {}
        self._task_loops = {id(fn.tasks[-1]) for fn in self.analysis.device_functions}

    def is_task_loop(self, s) -> bool:
        """Whether `s` is the innermost cuda_tasks loop of a device function: each iteration is one task."""
        return id(s) in self._task_loops

    def body_tiling(self, stmts) -> CollTiling:
        """The tiling of a block's statements (a cuda_threads/CudaWarps/device-function body)."""
        return self.analysis.stmt_info(stmts[0]).tiling

    def collective(self, tiling: CollTiling, names: tuple, values: tuple, base: int) -> Threads:
        """The threads (natural index + `base`, the task's offset) executing for these iterator values."""
        key = (id(tiling), values, base)
        t = self._cache.get(key)
        if t is None:
            runs = tiling.threads(dict(zip(names, values)))
            t = self._cache[key] = tuple((lo + base, hi + base) for lo, hi in runs)
        return t
