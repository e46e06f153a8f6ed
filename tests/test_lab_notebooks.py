"""Every notebook under notebooks/ runs top to bottom headless (no GPU needed) and keeps static pictures."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


_executed: dict = {}


def executed(path: Path):
    """The notebook after running it once in a fresh kernel (shared by the tests of this file)."""
    if path not in _executed:
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
        _executed[path] = nb
    return _executed[path]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path: Path):
    nb = executed(path)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors


def test_tutorial_shows_the_hazard_at_the_broken_step_and_none_after_the_fence():
    path = next(p for p in NOTEBOOKS if p.name == "01_first_kernel.ipynb")
    nb = executed(path)
    pictures = [
        (c.source, o["data"]["text/html"])
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    broken = next(html for src, html in pictures if "set_memory" in src)
    fixed = next(html for src, html in pictures if "insert_fence" in src)
    assert 'class="sl-hazard"' in broken and "RAW hazard" in broken
    assert 'class="sl-hazard"' not in fixed and "no hazards found at n=512" in fixed
