"""`pip install .` (not editable) gives a working package: the workbench tests pass against the installed copy.

A fresh venv that sees this Python's site-packages (for exo and the notebook
stack) gets spork_lab installed from a wheel pip builds from the checkout
(`--no-deps`; the build backend, setuptools and wheel, comes from the package
index as in any `pip install .`). The workbench tests then run from outside
the checkout, so `import spork_lab` finds the installed copy, whose widget
files, sync-checker C sources (the widget tests check a proc), JupyterLab setting defaults and platforms
must all be inside the package.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_a_non_editable_install_runs_the_workbench(tmp_path):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)])
    python = venv / "bin" / "python"
    _run([python, "-m", "pip", "install", "-q", "--no-deps", str(ROOT)], cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["SPORK_LAB_CACHE"] = str(tmp_path / "cache")  # the sync checker builds from the installed sources
    where = _run([python, "-c", "import spork_lab; print(spork_lab.__file__)"], cwd=tmp_path, env=env).stdout.strip()
    assert Path(where).is_relative_to(venv), f"spork_lab came from {where}, not from the venv"
    saves_state = ("import json; from spork_lab.lab._launch import JUPYTER_CONFIG_DIR as d; "
                   "print(json.loads((d / 'labconfig/default_setting_overrides.json').read_text()))")
    assert "'saveState': True" in _run([python, "-c", saves_state], cwd=tmp_path, env=env).stdout  # `spork-lab lab`'s
    _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
          str(ROOT / "tests" / "test_lab_widget.py")], cwd=tmp_path, env=env)
