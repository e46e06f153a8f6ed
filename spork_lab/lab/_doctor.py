"""`doctor()`: what the workbench needs from the notebook and GPU stack, and how to fix what is off."""

from __future__ import annotations

import re
import shutil
import subprocess
from importlib import metadata
from typing import Optional

PACKAGES = ("jupyterlab", "notebook", "ipywidgets", "jupyterlab_widgets", "widgetsnbextension", "anywidget", "plotly", "ipykernel")


def _version(dist: str) -> Optional[str]:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _major_minor(v: Optional[str]) -> tuple[int, int]:
    """(major, minor) of a version string; (0, 0) when absent or unreadable."""
    m = re.match(r"(\d+)(?:\.(\d+))?", v or "")
    return (int(m.group(1)), int(m.group(2) or 0)) if m else (0, 0)


def run_tool(cmd: list[str]) -> Optional[str]:
    """stdout of a command that succeeded, else None (missing, failing or too slow)."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def collect() -> dict:
    """Versions of the notebook stack, CuPy distributions, nvcc's CUDA release and the GPUs."""
    versions = {name: _version(name) for name in PACKAGES}
    cupy = {d.metadata["Name"]: d.version for d in metadata.distributions() if (d.metadata["Name"] or "").lower().startswith("cupy")}
    nvcc_out = run_tool(["nvcc", "--version"])
    release = re.search(r"release (\d+\.\d+)", nvcc_out or "")
    gpus = run_tool(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"])
    return {
        "packages": versions,
        "cupy": cupy,
        "nvcc": release.group(1) if release else None,
        "gpus": [g.strip() for g in gpus.splitlines() if g.strip()] if gpus else [],
    }


def diagnose(info: dict) -> tuple[bool, list[tuple[str, str]]]:
    """(widgets can render, [(problem, fix)]) for the versions in `info` (as `collect` returns them)."""
    pkg = info["packages"]
    problems: list[tuple[str, str]] = []
    lab, nb = _major_minor(pkg.get("jupyterlab")), _major_minor(pkg.get("notebook"))
    if lab < (4, 0) and nb < (7, 0):
        problems.append(("no JupyterLab 4 (or Notebook 7) front end", 'pip install -U "jupyterlab>=4"'))
    if pkg.get("ipywidgets") is None:
        problems.append(("ipywidgets is not installed", 'pip install "ipywidgets>=8"'))
    elif _major_minor(pkg["ipywidgets"]) < (8, 0):
        problems.append((f"ipywidgets {pkg['ipywidgets']} is too old for JupyterLab 4", 'pip install -U "ipywidgets>=8"'))
    elif _major_minor(pkg.get("jupyterlab_widgets")) < (3, 0):
        problems.append(
            (
                f"jupyterlab_widgets {pkg.get('jupyterlab_widgets')} does not match ipywidgets {pkg['ipywidgets']}: "
                'widgets show "Error displaying widget"',
                'pip install -U "jupyterlab_widgets>=3" and restart JupyterLab',
            )
        )
    if (7, 0) > nb > (0, 0) and lab < (4, 0) and _major_minor(pkg.get("widgetsnbextension")) < (4, 0):
        problems.append(("classic Notebook 6 without widgetsnbextension 4", 'pip install -U "widgetsnbextension>=4"'))
    if pkg.get("anywidget") is None:
        problems.append(("anywidget is not installed: the workbench widget cannot load", 'pip install "anywidget>=0.9"'))
    widgets_ok = not problems  # everything above stops widgets from rendering
    if pkg.get("plotly") is not None and _major_minor(pkg["plotly"]) < (5, 0):
        problems.append((f"plotly {pkg['plotly']} is too old for JupyterLab 4", 'pip install -U "plotly>=5"'))

    cupy = info["cupy"]
    if len(cupy) > 1:
        problems.append((f"several CuPy builds are installed ({', '.join(sorted(cupy))}); imports will clash",
                         "pip uninstall all of them, then install the one matching nvcc, e.g. pip install cupy-cuda12x"))
    nvcc_major = _major_minor(info["nvcc"])[0]
    for name in cupy:
        m = re.match(r"cupy-cuda(\d+)", name.lower())
        if m and nvcc_major and not m.group(1).startswith(str(nvcc_major)):
            problems.append((f"{name} is built for another CUDA major version than nvcc {info['nvcc']}",
                             f"pip install cupy-cuda{nvcc_major}x (and uninstall {name})"))
    if info["nvcc"] is None:
        problems.append(("nvcc not found: kernels cannot be built (analysis and sync checks still work)",
                         "install the CUDA toolkit and put its bin/ on PATH"))
    if not info["gpus"]:
        problems.append(("no NVIDIA GPU visible (nvidia-smi): kernels cannot run (analysis and sync checks still work)",
                         "run on a machine with an NVIDIA GPU and driver"))
    elif not cupy:
        problems.append(("CuPy is not installed: built kernels cannot be called", "pip install cupy-cuda12x"))
    return widgets_ok, problems


def doctor() -> dict:
    """Print the versions the workbench depends on, whether widgets can render, and a fix per known problem."""
    info = collect()
    widgets_ok, problems = diagnose(info)
    print("spork_lab doctor")
    for name, v in info["packages"].items():
        print(f"  {name:20} {v or 'not installed'}")
    cupy = ", ".join(f"{k} {v}" for k, v in info["cupy"].items()) or "not installed"
    print(f"  {'CuPy':20} {cupy}")
    print(f"  {'nvcc':20} {info['nvcc'] or 'not found'}")
    print(f"  {'GPU':20} {'; '.join(info['gpus']) or 'none'}")
    print(f"widgets can render: {'yes' if widgets_ok else 'no'}")
    for problem, fix in problems:
        print(f"  problem: {problem}\n      fix: {fix}")
    if not problems:
        print("no known problems")
    return {**info, "widgets_can_render": widgets_ok, "problems": problems}
