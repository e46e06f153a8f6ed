"""The compiled engine of `sync_check`: build `_machine.c` and one proc's generated C with gcc, run them.

Nothing is built at install time: the runtime and each proc's checker are
compiled on first use with `gcc -O2 -shared` into a cache directory
(`$SPORK_LAB_CACHE/sync`, default `~/.cache/spork_lab/sync`), named by a hash
of their sources, the compiler's version and the flags, and loaded with
ctypes. In one process each proc is translated once.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import SporkError
from ._emit import Emitter, Program
from .threads import ThreadMap

_HERE = Path(__file__).resolve().parent
_FLAGS = ["-O2", "-shared", "-fPIC", "-std=gnu11"]
SC_OK, SC_UNSUPPORTED, SC_ERROR, SC_FULL = 0, 1, 2, 3
EV = 9  # int64 per logged event (see _machine.c)


def cache_dir() -> Path:
    return Path(os.environ.get("SPORK_LAB_CACHE", Path.home() / ".cache" / "spork_lab")) / "sync"


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
                "interpreter instead"
            )
        version = subprocess.run([cc, "-dumpfullversion", "-dumpversion"], capture_output=True, text=True).stdout
        _compiler = (cc, version.strip())
    return _compiler


def _build(name: str, source: str, link: list) -> Path:
    """The shared library of `source`, compiled once per content into the cache directory."""
    cc, version = _gcc()
    header = (_HERE / "_machine.h").read_text()
    key = hashlib.sha256("\0".join([source, header, version, *_FLAGS, *map(str, link)]).encode()).hexdigest()[:20]
    out = cache_dir() / f"{name}-{key}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        src = Path(tmp) / f"{name}.c"
        src.write_text(source)
        lib = Path(tmp) / f"{name}.so"
        cmd = [cc, *_FLAGS, f"-I{_HERE}", "-o", str(lib), str(src), *map(str, link)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise SporkError(f"compiling the sync checker failed ({' '.join(cmd)}):\n{done.stderr[-4000:]}")
        os.replace(lib, out)  # atomic: concurrent builders of the same key agree
    return out


_runtime: Optional[tuple] = None


def runtime() -> tuple:
    """(path, ctypes library) of _machine.c."""
    global _runtime
    if _runtime is None:
        path = _build("sc_machine", (_HERE / "_machine.c").read_text(), [])
        lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        i64p = ctypes.POINTER(ctypes.c_int64)
        for fn, res in [
            ("sc_status", ctypes.POINTER(ctypes.c_int)),
            ("sc_n_hazards", ctypes.c_int),
            ("sc_hazards", i64p),
            ("sc_truncated", ctypes.c_int),
            ("sc_n_events", ctypes.c_int64),
            ("sc_events_total", ctypes.c_int64),
            ("sc_events", i64p),
            ("sc_n_iters", ctypes.c_int64),
            ("sc_iters", i64p),
        ]:
            getattr(lib, fn).restype = res
            getattr(lib, fn).argtypes = [ctypes.c_void_p]
        lib.sc_delete.argtypes = [ctypes.c_void_p]
        lib.sc_delete.restype = None
        _runtime = (path, lib)
    return _runtime


@dataclass
class Run:
    """What one compiled run found. Hazards: (kind, buffer ordinal, element, statement id)."""

    status: int
    hazards: list
    truncated: bool
    events: list  # rows: site, queue, index, slot, parity, mask, task, iters offset, iters count
    events_total: int
    iters: list


class Engine:
    """One proc's compiled checker."""

    def __init__(self, ir, infos: dict, tmap: ThreadMap):
        self.program: Program = Emitter(ir, infos, tmap).program()
        path, _ = runtime()
        lib = ctypes.CDLL(str(_build("sc_proc", self.program.source, [path])))
        self._run = lib.sc_run
        self._run.restype = ctypes.c_void_p
        self._run.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int, ctypes.c_int]

    def run(self, sizes: dict, max_hazards: int, max_events: int) -> Run:
        _, lib = runtime()
        values = (ctypes.c_int64 * max(1, len(self.program.size_names)))(
            *[int(sizes[n]) for n in self.program.size_names]
        )
        m = self._run(values, max_hazards, max_events)
        try:
            nh, nev, niv = lib.sc_n_hazards(m), lib.sc_n_events(m), lib.sc_n_iters(m)
            flat = lib.sc_hazards(m)[: 4 * nh]
            ev = lib.sc_events(m)[: EV * nev] if nev else []
            return Run(
                status=lib.sc_status(m)[0],
                hazards=[tuple(flat[4 * i : 4 * i + 4]) for i in range(nh)],
                truncated=bool(lib.sc_truncated(m)),
                events=[ev[EV * i : EV * i + EV] for i in range(nev)],
                events_total=lib.sc_events_total(m),
                iters=lib.sc_iters(m)[:niv] if niv else [],
            )
        finally:
            lib.sc_delete(m)


_engines: dict = {}  # id(proc IR) -> (proc IR, Engine or the Unsupported reason)


def engine_for(ir, infos: dict, tmap: ThreadMap):
    """The proc's Engine, or an `Unsupported` exception saying why there is none (cached per proc)."""
    from ._emit import Unsupported

    hit = _engines.get(id(ir))
    if hit is not None and hit[0] is ir:
        return hit[1]
    try:
        result = Engine(ir, infos, tmap)
    except Unsupported as e:
        result = e
    if len(_engines) >= 64:
        _engines.pop(next(iter(_engines)))
    _engines[id(ir)] = (ir, result)
    return result
