"""Values computed once from an immutable proc, kept exactly as long as the proc lives."""

from __future__ import annotations

import weakref
from typing import Callable


class ProcCache:
    """A cache keyed by the identity of a LoopIR proc.

    Procs are immutable, so an entry never goes stale; each entry is dropped
    when its proc is garbage collected (`weakref.finalize`), so the cache does
    not keep procs alive or grow without bound. Values must not refer to the
    proc itself (its statements are fine), or the proc would never die.
    """

    def __init__(self):
        self._values: dict = {}

    def get(self, proc_ir, compute: Callable):
        """The value for `proc_ir`, computed by `compute(proc_ir)` the first time (an exception is not cached)."""
        key = id(proc_ir)
        if key in self._values:
            return self._values[key]
        value = compute(proc_ir)
        self._values[key] = value
        weakref.finalize(proc_ir, self._values.pop, key, None)
        return value

    def __contains__(self, proc_ir) -> bool:
        return id(proc_ir) in self._values
