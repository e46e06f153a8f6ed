"""Compiled libraries cached by content: where they live, and how one is built while other processes may be
building the same one (nvcc's kernels, run_cpu's gcc builds and the sync checker's all go through here)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Optional, Sequence


def cache_dir() -> Path:
    """The cache's root: $SPORK_LAB_CACHE, default ~/.cache/spork_lab (read at each call: tests point it elsewhere)."""
    return Path(os.environ.get("SPORK_LAB_CACHE", Path.home() / ".cache" / "spork_lab"))


def content_key(*parts: str, length: int = 24) -> str:
    """A short hash naming what was built from `parts` (sources, flags, the compiler's version)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:length]


def build_once(lib: Path, sources: dict, commands: Sequence[Sequence[str]], keep_sources: bool = False) -> Optional[tuple]:
    """Build the library `lib` unless it exists. `sources` (file name -> text) are written into a fresh folder
    beside it and each command runs there, in order, until one succeeds (it must write `lib.name` in its working
    folder); the library (and with `keep_sources` the sources) is then renamed into place, so a process building
    the same library at the same time never loads a half-written one. Returns None when built, or (the command,
    its stderr, the folder it ran in) of the last failure: the folder is kept for the user to look at."""
    if lib.exists():
        return None
    lib.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=lib.parent))
    for name, text in sources.items():
        (work / name).write_text(text)
    failure = None
    for cmd in commands:
        done = subprocess.run(list(cmd), cwd=work, capture_output=True, text=True)
        if done.returncode == 0:
            break
        failure = (" ".join(map(str, cmd)), done.stderr, work)
    else:
        return failure
    for name in sources:
        if keep_sources:
            os.replace(work / name, lib.parent / name)
        else:
            (work / name).unlink()
    os.replace(work / lib.name, lib)
    if not any(work.iterdir()):  # what a command was asked to keep (nvcc --keep) stays there
        work.rmdir()
    return None
