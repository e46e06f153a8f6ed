"""exo's scheduling operations plus the Exo-GPU ones: `from spork_lab.scheduling import *`."""

import types as _types

import exo.stdlib.scheduling as _exo_scheduling
from exo.stdlib.scheduling import *  # noqa: F401,F403 -- the re-export is the point of this module

from .lang.gpu_ops import (
    find_blocks,
    insert_arrive,
    insert_await,
    insert_barrier_alloc,
    insert_fence,
    set_loop_mode,
    wrap_with_context,
)
from .lang.pipeline import pipeline_loop

__all__ = [
    name
    for name in dir(_exo_scheduling)
    if not name.startswith("_") and not isinstance(getattr(_exo_scheduling, name), _types.ModuleType)
] + [
    "set_loop_mode",
    "wrap_with_context",
    "insert_fence",
    "insert_barrier_alloc",
    "insert_arrive",
    "insert_await",
    "find_blocks",
    "pipeline_loop",
]
