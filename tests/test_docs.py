"""The README's first kernel and docs/language.md's imports run as written (a reader copies them first)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _python_blocks(doc: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / doc).read_text(), re.S)


def _run(tmp_path: Path, source: str) -> str:
    """Run `source` as a file (exo reads a proc's source through its file) and return what it prints."""
    path = tmp_path / "snippet.py"
    path.write_text(source)
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_readme_first_kernel_prints_the_proc_it_shows(tmp_path):
    """Block 0 schedules `add`; block 1 is what its `print(p)` shows; block 2's analysis lines run on it (its
    build and launch lines need a GPU: tests/test_gpu_examples.py builds and runs the same kernel)."""
    schedule, printed, checks = _python_blocks("README.md")[:3]
    no_gpu = "\n".join(line for line in checks.splitlines() if "sl.build" not in line and "k.add" not in line)
    out = _run(tmp_path, schedule + no_gpu + "\n")
    shown = [line.strip() for line in printed.splitlines() if line.strip()]
    lines = [line.strip() for line in out.splitlines()]
    start = lines.index(shown[0])
    assert lines[start : start + len(shown)] == shown
    assert lines[-2:] == ["[1. 2. 3. 4.]", "sync_check(add, {'n': 1024}): ok"]


def test_the_language_reference_imports_run():
    """docs/language.md's first block is the import preamble every program starts with."""
    preamble = _python_blocks("docs/language.md")[0]
    done = subprocess.run([sys.executable, "-c", preamble + "\nprint(proc, instr, CudaDeviceFunction, Sm80_mma_tf32, "
                           "divide_loop, sl.sync_check)"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
