"""`launch_lab`: JupyterLab on the tutorial notebooks (or on copies of them: `copy_tutorials`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"
# Default settings for the JupyterLab that `spork-lab lab` runs (the user's own settings still win): the widget
# manager saves widget state with the notebook, so a notebook reopened later shows its workbench pictures rather
# than "Error displaying widget: model not found" (JupyterLab's default does not save it).
JUPYTER_CONFIG_DIR = Path(__file__).resolve().parent / "jupyter_config"


def lab_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment JupyterLab runs in: `base` (default: this process's) with spork_lab's setting defaults
    first on JUPYTER_CONFIG_PATH."""
    env = dict(os.environ if base is None else base)
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(p for p in (str(JUPYTER_CONFIG_DIR), env.get("JUPYTER_CONFIG_PATH")) if p)
    return env


def copy_tutorials(dest: Path) -> list[Path]:
    """Copy the tutorial notebooks into `dest` (made if missing), each one `dest` lacks: a class works on copies,
    and a student's edits and autosaves leave the repository's tutorials as they are. Returns the copies made."""
    dest.mkdir(parents=True, exist_ok=True)
    made = []
    for notebook in sorted(NOTEBOOKS_DIR.glob("*.ipynb")):
        target = dest / notebook.name
        if not target.exists():
            shutil.copyfile(notebook, target)
            made.append(target)
    return made


def launch_lab(notebook_dir: Path = NOTEBOOKS_DIR, port: int = 8888, open_browser: bool = True) -> int:
    """Run JupyterLab (blocking) on `notebook_dir`; returns its exit code."""
    cmd = [sys.executable, "-m", "jupyterlab", f"--notebook-dir={notebook_dir}", f"--ServerApp.port={port}"]
    if not open_browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # a container's root: Jupyter refuses to start without it
        cmd.append("--allow-root")
    return subprocess.call(cmd, env=lab_env())
