"""`launch_lab`: JupyterLab on the tutorial notebooks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"


def launch_lab(notebook_dir: Path = NOTEBOOKS_DIR, port: int = 8888, open_browser: bool = True) -> int:
    """Run JupyterLab (blocking) on `notebook_dir`; returns its exit code."""
    cmd = [sys.executable, "-m", "jupyterlab", f"--notebook-dir={notebook_dir}", f"--ServerApp.port={port}"]
    if not open_browser:
        cmd.append("--no-browser")
    return subprocess.call(cmd)
