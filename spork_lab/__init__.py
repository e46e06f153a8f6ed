"""spork_lab: Exo-GPU (exo-lang 1.0.0 + CUDA constructs) and its Jupyter workbench."""

from .errors import (
    ArgumentError,
    BuildError,
    CodegenError,
    CollectiveError,
    DeviceScopeError,
    DistributedMemoryError,
    SporkError,
    SporkParseError,
    SporkSchedulingError,
    SporkSyntaxError,
    SporkTypeError,
    MemoryMismatchError,
    OutputPathError,
    SizesError,
    SyncError,
    TimelineError,
    DataTypeError,
)
from . import errors as _errors
from .core import dtypes as _dtypes
from .lang import pipeline as _pipeline
from .lang import printer as _printer
from .lang import sched_errors as _sched_errors
from .lang.decorators import instr, proc
from .lang.frontend import parse_source
from .platforms import cuda as _cuda  # noqa: F401  (registers the names printed procs use)

_printer.install()
_errors.install_excepthook()
_sched_errors.install()
_dtypes.install()

# Heavier parts load on first use, so `import spork_lab` stays fast and needs no GPU stack.
_LAZY = {
    "analyze": "spork_lab.analysis",
    "sync_check": "spork_lab.sync.checker",
    "bank_conflicts": "spork_lab.sync.banks",
    "compile_procs_to_strings": "spork_lab.codegen",
    "compile_procs": "spork_lab.codegen",
    "build": "spork_lab.runtime",
    "benchmark": "spork_lab.runtime",
    "run_cpu": "spork_lab.runtime.cpu",
    "sequential": "spork_lab.runtime.cpu",
    "Workbench": "spork_lab.lab",
    "doctor": "spork_lab.lab",
}


def load_ipython_extension(ipython) -> None:
    """`%load_ext spork_lab`: the workbench's magics and rich display of procs."""
    from .lab import load_ipython_extension as load

    load(ipython)


def _distributed_dims(proc_ir) -> dict:
    """pipeline_loop (spork_lab.lang, a layer below the analysis) asks the dist analysis, loaded on first use."""
    from .analysis import distributed_dims

    return distributed_dims(proc_ir)


def _scope_error(proc_ir):
    """Scheduling ops that move loops (spork_lab.lang, a layer below the analysis) ask the scopes pass, loaded on
    first use."""
    from .analysis import scope_error

    return scope_error(proc_ir)


_pipeline.register_distributed_dims(_distributed_dims)
_sched_errors.register_scope_error(_scope_error)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    import difflib

    close = difflib.get_close_matches(name, [*_LAZY, *globals()], n=1)
    raise AttributeError(f"module 'spork_lab' has no attribute {name!r}" + (f"; did you mean {close[0]!r}?" if close else ""))

__all__ = [
    *_LAZY,
    "proc",
    "instr",
    "load_ipython_extension",
    "parse_source",
    "SporkError",
    "SporkSyntaxError",
    "SporkSchedulingError",
    "SporkParseError",
    "SporkTypeError",
    "DeviceScopeError",
    "CollectiveError",
    "TimelineError",
    "DataTypeError",
    "DistributedMemoryError",
    "MemoryMismatchError",
    "SyncError",
    "SizesError",
    "CodegenError",
    "BuildError",
    "OutputPathError",
    "ArgumentError",
]
