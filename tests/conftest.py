"""Shared test helpers: GPU detection for the `gpu` marker, IR equality up to renaming."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from exo.core.LoopIR import LoopIR, T
from exo.core.prelude import Sym

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
NOTEBOOKS_DIR = EXAMPLES_DIR.parent / "notebooks"
for _dir in (EXAMPLES_DIR, NOTEBOOKS_DIR):  # tests import the examples, and the tutorials' programs, by name
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))


def runnable_examples() -> list:
    """The example modules that define PROCS (with NumPy references), importable by name: assigned, or declared
    `PROCS: list` and made on first use (examples/sm80_gemm.py)."""
    return [f.stem for f in sorted(EXAMPLES_DIR.glob("*.py")) if re.search(r"^PROCS( =|: list)", f.read_text(), re.M)]


_SIZE_CANDIDATES = (16, 32, 64, 128, 256, 512, 768, 1024)  # 768: three 256-column tiles (a persistent GEMM's Q = 3)


def _sizes_allowed(p, sizes: dict) -> bool:
    from spork_lab.errors import SyncError
    from spork_lab.sync.checker import size_values

    try:
        size_values(p._loopir_proc, sizes)
    except SyncError:
        return False
    return True


def _smallest(p, names: list, name: str, flags: dict) -> int:
    """The smallest candidate for size `name` with the others large: 1024, or 1536 where a size must be a multiple
    of 768 (the persistent GEMM with Q = 3)."""
    for big in (1024, 1536):
        found = next((v for v in _SIZE_CANDIDATES
                      if _sizes_allowed(p, {**flags, **dict.fromkeys(names, big), name: v})), None)
        if found is not None:
            return found
    raise AssertionError(f"no size {name} for {p.name()}")


def check_sizes(p) -> dict:
    """Small sizes for sync_check: the smallest each assertion allows (found with the other sizes large),
    the last one doubled when allowed, so that there are two tasks or two iterations of the inner loop."""
    args = [a for a in p._loopir_proc.args if not a.type.is_numeric()]
    flags = {str(a.name): True for a in args if a.type == T.bool}  # bool arguments
    names = [str(a.name) for a in args if a.type != T.bool]
    sizes = {**flags, **{n: _smallest(p, names, n, flags) for n in names}}
    assert _sizes_allowed(p, sizes), f"no sizes for {p.name()}"
    if names and _sizes_allowed(p, {**sizes, names[-1]: 2 * sizes[names[-1]]}):
        sizes[names[-1]] *= 2
    return sizes


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


_INT_TYPES = (T.Int, T.Index, T.Size)


def ir_equal(a, b, syms: dict | None = None) -> bool:
    """Structural equality of LoopIR values, with Syms matched up to consistent renaming
    and source locations ignored."""
    syms = {} if syms is None else syms
    if isinstance(a, Sym) or isinstance(b, Sym):
        if not (isinstance(a, Sym) and isinstance(b, Sym)):
            return False
        return syms.setdefault(a, b) is b
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(ir_equal(x, y, syms) for x, y in zip(a, b))
    if isinstance(a, _INT_TYPES) and isinstance(b, _INT_TYPES):
        return True  # integer expression types: exo's scheduling ops and its parser infer them differently
    attrs_fields = getattr(type(a), "__attrs_attrs__", None)
    if attrs_fields is not None and type(a).__module__ == "abc":  # exo's ADT node classes
        if type(a) is not type(b):
            return False
        binder = "iter" if isinstance(a, LoopIR.For) else "name" if isinstance(a, LoopIR.Alloc) else None
        if binder:  # a binding: exo's ops (cut_loop, fission) bind one Sym in several places, the parser fresh ones
            syms[getattr(a, binder)] = getattr(b, binder)
        # a window expression's type is derived from its buffer and indices, which are compared; exo's scheduling
        # ops keep it as it was when the window was made (before expand_dim/resize_dim of the buffer) or unsimplified
        skip = ("srcinfo", "type") if isinstance(a, LoopIR.WindowExpr) else ("srcinfo",)
        return all(ir_equal(getattr(a, f.name), getattr(b, f.name), syms) for f in attrs_fields if f.name not in skip)
    return a == b
