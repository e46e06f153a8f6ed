"""Error families of spork_lab.

Every error a user can cause is a `SporkError` carrying the user's source
location, so messages read `file.py:12: what went wrong; what to write instead`.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import re
import sys
import sysconfig
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Optional

import exo
from exo.frontend.pyparser import ParseError as _ExoParseError
from exo.rewrite.LoopIR_scheduling import SchedulingError as _ExoSchedulingError


class SporkError(Exception):
    """Base of every user-facing spork_lab error."""

    def __init__(self, message: str, srcinfo: Optional[object] = None):
        self.message = message
        self.filename = getattr(srcinfo, "filename", None)
        self.lineno = getattr(srcinfo, "lineno", None)
        self.place = place_of(srcinfo)
        # Exception's own __init__, not super(): SporkSchedulingError is exo's SchedulingError too, whose
        # __init__ would prefix the message with the scheduling op it finds on the stack.
        Exception.__init__(self, f"{self.place}: {message}" if self.place else message)

    def to_json(self) -> dict:
        return {
            "kind": type(self).__name__,
            "message": self.message,
            "file": self.filename,
            "line": self.lineno,
        }


def place_of(srcinfo: Optional[object]) -> Optional[str]:
    """Where a statement is, as messages name it: `file.py:12`, or `Cell In[3]:2` in a notebook."""
    filename = getattr(srcinfo, "filename", None)
    return f"{_place(filename)}:{srcinfo.lineno}" if filename else None


def _place(filename: str) -> str:
    """The file as the user knows it: `Cell In[3]` for a notebook or IPython cell."""
    try:
        shell = get_ipython()  # noqa: F821 -- defined only inside IPython
    except NameError:
        return filename
    cell = getattr(shell.compile, "_filename_map", {}).get(filename)
    return f"Cell In[{cell}]" if cell is not None else filename


class SporkSyntaxError(SporkError):
    """Misused Exo-GPU syntax, caught by the front end."""


class SporkSchedulingError(SporkError, _ExoSchedulingError):
    """A scheduling operation failed (ours or exo's, as `spork_lab.scheduling` reports it); it is also
    exo's SchedulingError, so `except SchedulingError` catches it."""


class SporkParseError(SporkError, _ExoParseError):
    """exo's parser rejected the user's proc (its message names the line); it is also exo's ParseError."""


class SporkTypeError(SporkError, TypeError):
    """exo's type, effect or bounds checks rejected the user's proc (its message names the line); it is also a
    TypeError, as exo raises it."""


class SporkIndexError(SporkError, IndexError):
    """An index the user gave is out of range (e.g. a workbench step); it is also an IndexError."""


# What to write instead of a Python statement exo does not parse ("unsupported type of statement").
_STATEMENT_HINTS = {
    "return": "a proc returns nothing: it writes its results into its tensor arguments",
    "while": "a proc's loops have bounds: for i in seq(lo, hi)",
    "try": "a proc has no exceptions: state what must hold with assert",
    "def": "define procs at the top level with @proc, and call them",
    "class": "define classes outside the proc",
    "break": "a proc's loops run their whole range: guard the body with if",
    "continue": "a proc's loops run their whole range: guard the body with if",
    "import": "import at the top of the file",
}


# exo prints expressions of its effects IR as their reprs: each form below, innermost first, becomes its text
_EFFECTS = [
    (re.compile(r"Effects\.Const\(val=(-?[\w.]+), type=\w+\.\w+\(\), srcinfo=<[^>]*>\)"), r"\1"),
    (re.compile(r"Effects\.Var\(name=(\w+?)_\d+, type=\w+\.\w+\(\), srcinfo=<[^>]*>\)"), r"\1"),  # a Sym: name_id
    # innermost first: operands already text (no `Effects.` left in them), such as `(m / 2)`
    (re.compile(r"Effects\.BinOp\(op='([^']+)', lhs=((?:(?!Effects\.).)+?), rhs=((?:(?!Effects\.).)+?), "
                r"type=\w+\.\w+\(\), srcinfo=<[^>]*>\)"), r"(\2 \1 \3)"),
]


def _effects_text(message: str) -> str:
    """exo's message with its effects IR's reprs (`Effects.BinOp(op='-', lhs=Effects.Var(name=K_34, ...`) as text
    (`(K - 32)`)."""
    before = None
    while before != message:
        before = message
        for form, text in _EFFECTS:
            message = form.sub(text, message)
    return message


def _statement_hint(message: str, filename: str, lineno: int) -> str:
    """exo's "unsupported type of statement" with what to write instead, from the statement's first word."""
    if "unsupported type of statement" not in message:
        return message
    words = linecache.getline(filename, lineno).split()
    hint = _STATEMENT_HINTS.get(words[0].rstrip(":") if words else "")
    return f"{message}: {hint}" if hint else message


def from_exo(error: Exception, filename: str) -> SporkError:
    """exo's ParseError or TypeError about the user's file `filename` as the SporkError of the same exo type, the
    file named as the user knows it (`Cell In[3]` in a notebook): a notebook shows it without a traceback, like
    every SporkError, and `except sl.SporkError` catches it."""
    kind = SporkParseError if isinstance(error, _ExoParseError) else SporkTypeError
    first = re.search(rf"{re.escape(filename)}:(\d+)", str(error))
    message = _statement_hint(str(error), filename, int(first.group(1))) if first else str(error)
    message = _effects_text(message)
    converted = kind(message.replace(filename, _place(filename)))  # the message names the place already
    if first:  # for to_json and the workbench, as every SporkError has them
        converted.filename, converted.lineno = filename, int(first.group(1))
    return converted


class DeviceScopeError(SporkError):
    """A construct is used in the wrong device scope (CPU vs CUDA)."""


class CollectiveError(SporkError):
    """A statement is executed by the wrong thread collective, or a tiling does not fit."""


class TimelineError(SporkError):
    """An instruction or memory access is on the wrong instruction timeline."""


class DataTypeError(SporkError):
    """Element types that do not fit: an instr argument's differs from its parameter's (instrs reinterpret bits),
    or an operation or extern call mixes precisions (exo's rules, which exo checks only in its C generator)."""


class DistributedMemoryError(SporkError):
    """The uses of a distributed allocation do not deduce one owner collective per shard (seed 000, rules 1-3)."""


class MemoryMismatchError(SporkError):
    """A call passes a buffer in a memory (or a layout) other than the one its parameter declares."""


class SyncError(SporkError):
    """Misuse of barriers and synchronization statements."""


class SizesError(SyncError):
    """Sizes `sync_check` cannot run at (one missing, not positive, against an assertion, too many elements): the
    call is wrong, not the program, so the workbench says "not checked" rather than "failed"."""


class CodegenError(SporkError):
    """A proc that passes the analyses cannot be lowered to CUDA."""


class OutputPathError(SporkError):
    """compile_procs cannot write its files where it was asked: the directory is a file, or a file there is not one
    spork_lab generated (it is left as it is), or the system refused."""


class BuildError(SporkError):
    """nvcc or gcc failed, or no toolchain was found."""


class ArgumentError(SporkError, TypeError, ValueError):
    """A built proc was called with arguments its signature refuses (their number, a type, dtype, shape, layout or
    device, or sizes its assertions rule out). Also a TypeError and a ValueError, as these checks raised before."""


def user_facing(fn: Callable) -> Callable:
    """Mark a public entry point: a SporkError leaves it with the user's frames only.

    The message already names the user's file and line; our internal frames
    would only bury it. `__tracebackhide__` hides the entry point's own frame
    from IPython's (and pytest's) tracebacks too.
    """

    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def entry_point(*args, **kwargs):
        __tracebackhide__ = True
        try:
            signature.bind(*args, **kwargs)
        except TypeError as e:  # a missing or unknown argument: at the user's call, with what the function takes
            params = ", ".join(str(p.replace(annotation=p.empty)) for p in signature.parameters.values())
            raise SporkTypeError(f"{fn.__name__}: {e}; it takes ({params})", user_frame()).with_traceback(None) from None
        try:
            return fn(*args, **kwargs)
        except SporkError as e:
            raise e.with_traceback(None) from None

    return entry_point


# spork_lab's and exo's own code: frames there are never the user's
LIBRARIES = (str(Path(__file__).resolve().parent), str(Path(exo.__file__).resolve().parent))
_LIBRARY_MODULES = ("spork_lab.", "exo.")


_STDLIB = sysconfig.get_paths()["stdlib"]
_SHELLS = ("IPython.", "ipykernel.")  # a notebook's machinery between a cell and a magic that raised


def user_frame(frame=None) -> Optional[SimpleNamespace]:
    """File and line of the innermost caller outside spork_lab and exo (the user's own line), or None: also
    where there is none, as in a worker thread (the workbench's sync check), whose outer frames are Python's own.
    IPython's frames are skipped too: from a magic, the user's line is the cell's."""
    f = frame or sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        python_itself = name.startswith("<frozen") or (name.startswith(_STDLIB) and "site-packages" not in name)
        if not _library(f) and not python_itself and not f.f_globals.get("__name__", "").startswith(_SHELLS):
            return SimpleNamespace(filename=name, lineno=f.f_lineno)
        f = f.f_back
    return None


def _library(frame) -> bool:
    """A frame of spork_lab's or exo's code, or of code they generate as they run: it has no file, but runs in their
    modules (a dataclass's `__init__`, file `<string>`)."""
    return (frame.f_code.co_filename.startswith(LIBRARIES)
            or frame.f_globals.get("__name__", "").startswith(_LIBRARY_MODULES))


def install_excepthook() -> None:
    """A script stopped by a SporkError prints its user's frames only: the message names their line, and the
    frame of the entry point that raised it (which Python always prints) would only bury it. Other exceptions
    go to the hook that was there before."""
    previous = sys.excepthook
    if getattr(previous, "spork_lab", False):
        return

    def hook(exc_type, exc, tb):
        if not isinstance(exc, SporkError):
            return previous(exc_type, exc, tb)
        shown = traceback.TracebackException(exc_type, exc, tb)
        frames = [f for f, _ in traceback.walk_tb(tb)]  # one to each line of shown.stack
        shown.stack = traceback.StackSummary.from_list([s for s, f in zip(shown.stack, frames) if not _library(f)])
        sys.stderr.write("".join(shown.format()))

    hook.spork_lab = True
    sys.excepthook = hook
