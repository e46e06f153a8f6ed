"""Shared test helpers: GPU detection for the `gpu` marker, IR equality up to renaming."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from exo.core.prelude import Sym

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
NOTEBOOKS_DIR = EXAMPLES_DIR.parent / "notebooks"
for _dir in (EXAMPLES_DIR, NOTEBOOKS_DIR):  # tests import the examples, and the tutorials' programs, by name
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))


def runnable_examples() -> list:
    """The example modules that define PROCS (with NumPy references), importable by name."""
    return [f.stem for f in sorted(EXAMPLES_DIR.glob("*.py")) if "\nPROCS = " in f.read_text()]


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
    attrs_fields = getattr(type(a), "__attrs_attrs__", None)
    if attrs_fields is not None and type(a).__module__ == "abc":  # exo's ADT node classes
        if type(a) is not type(b):
            return False
        return all(
            ir_equal(getattr(a, f.name), getattr(b, f.name), syms) for f in attrs_fields if f.name != "srcinfo"
        )
    return a == b
