"""Every notebook under notebooks/ runs top to bottom headless (no GPU needed) and keeps static pictures."""

from __future__ import annotations

import re
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
        NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
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


def _outputs(nb) -> list[tuple[str, str]]:
    """(cell source, all its outputs' text/html and text/plain joined) per code cell."""
    out = []
    for c in nb.cells:
        if c.cell_type == "code":
            texts = [o.get("text", "") for o in c.outputs] + [
                o.get("data", {}).get(k, "") for o in c.outputs for k in ("text/html", "text/plain")]
            out.append((c.source, "\n".join(texts)))
    return out


def test_generated_tutorials_are_up_to_date_with_their_sources():
    """02's steps are examples/stepwise_gemm.py's; the stored notebooks are what make_tutorials.py writes."""
    import sys

    sys.path.insert(0, str(NOTEBOOKS[0].parent))
    import make_tutorials

    for name, make in make_tutorials.NOTEBOOKS.items():
        stored = nbformat.read(NOTEBOOKS[0].parent / name, as_version=4)
        assert [(c.cell_type, c.source) for c in stored.cells] == [(c.cell_type, c.source) for c in make().cells], name
    _, _, steps, _ = make_tutorials.example_steps()
    assert len(steps) == 8 and steps[5][2][-1] == 'wb.apply(set_loop_mode, "cy", cuda_threads)'


def test_stepwise_gemm_shows_each_step_the_hazards_and_the_failed_step():
    nb = executed(next(p for p in NOTEBOOKS if p.name == "02_stepwise_gemm.ipynb"))
    cells = _outputs(nb)
    step = {src.splitlines()[-1]: html for src, html in cells if src.startswith("wb.apply(")}
    threads = step['wb.apply(set_loop_mode, "tj", cuda_threads)']
    assert "no hazards found at M=64, N=64, K=32" in threads and "rows: ti; columns: tj" in threads
    broken = step['wb.apply(set_loop_mode, "cy", cuda_threads)']
    assert "4 hazard(s) at M=64" in broken and broken.count("RAW hazard on") == 2 and broken.count("FREE hazard on") == 2
    assert "wb.apply(insert_fence, wb.proc.find_loop(&#x27;ti&#x27;).before(), cuda_in_order, cuda_in_order)" in broken
    fenced = step['wb.apply(insert_fence, wb.proc.find_loop("ti").after(), cuda_in_order, cuda_in_order)']
    assert "no hazards found" in fenced and 'class="sl-hazard"' not in fenced
    failed = step['wb.apply(reorder_loops, "ko mt")']
    assert "sl-step-error" in failed and "no loop &#x27;mt&#x27; directly inside a loop &#x27;ko&#x27;" in failed
    script = next(html for src, html in cells if src.startswith("print(wb.script())"))
    assert "p = stage_mem(p, p.find_loop('ti'), " in script and "body()" not in script
    for src, html in cells:
        if src.startswith("%spork_bench"):  # a GPU run's recorded chart, or (here) a plain "no GPU" note
            assert "TFLOP/s" in html or "no GPU is present" in html or "build failed" in html


def test_stepwise_gemm_replays_the_sm80_and_sm90_steps():
    """Part 2: one cell per function of examples/sm80_gemm.py's STEPS; sequential code is not checked until the
    last step makes it a kernel, which the checker passes at the notebook's sizes. Part 3: the same for
    examples/sm90_gemm.py's STEPS; the kernel without its ring fails the analysis, and once step 10 derives the
    ring the checker (TMA modelled) passes it, and the persistent kernel of step 11, B multicast to the cluster
    (the benchmarked kernel on 1 x 2 clusters)."""
    import make_tutorials
    from make_tutorials import schedule_steps

    cells = _outputs(executed(next(p for p in NOTEBOOKS if p.name == "02_stepwise_gemm.ipynb")))
    step = {src: html for src, html in cells if src.startswith("wb80.apply(")}
    names = [name for name, _ in schedule_steps()]
    assert list(step) == [f"wb80.apply({name}, cfg)" for name in names] and len(names) == 10
    assert all("not checked: fix the analysis error first" in step[f"wb80.apply({n}, cfg)"] for n in names[:-1])
    last = step["wb80.apply(map_to_gpu, cfg)"]
    assert "no hazards found at M=256, N=256, K=320" in last and "step 10 of 10" in last
    assert "map_to_gpu(p, Config())" in last  # the tuned f16 tiles are Config's defaults
    mma = next(html for src, html in cells if src.startswith("wb80.select("))
    assert "Sm80_mma_f16(D[wm, wn, fi, fj" in mma and "collective unit <b>cuda_warp</b>" in mma
    # the shard grids name the allocations as Code does: two A_r (one per fragment loop) were both "A_r"
    assert re.findall(r'sl-shards-head"[^>]*><code>([^<]+)</code>', mma) == ["D", "A_r", "A_r_1", "B_r", "B_r_1"]
    sm90 = {src: html for src, html in cells if src.startswith("wb90.apply(")}
    names90 = [name for name, _ in schedule_steps(make_tutorials.SM90)]
    assert list(sm90) == [f"wb90.apply(sm90.{name}, cfg90)" for name in names90] and len(names90) == 11
    assert all("not checked: fix the analysis error first" in sm90[f"wb90.apply(sm90.{n}, cfg90)"] for n in names90[:-2])
    assert "no Arrive on ring follows it" in sm90["wb90.apply(sm90.map_to_gpu, cfg90)"]
    piped = sm90["wb90.apply(sm90.software_pipeline, cfg90)"]
    assert "step 10 of 10" in piped and "ReverseAwait(ring[cta]" in piped and "no hazards found at M=512" in piped
    last90 = sm90["wb90.apply(sm90.make_persistent, cfg90)"]
    assert "step 11 of 11" in last90 and "for nq in seq(" in last90
    assert "Sm90_multicast_copy_tensor_to_smem_swizzled_2f16(" in last90 and "&gt;&gt; ring[:]" in last90
    assert "no hazards found at M=512, N=512, K=256" in last90 and "ring" in last90
    wgmma = next(html for src, html in cells if src.startswith("wb90.select("))
    assert "collective unit <b>cuda_warpgroup</b>" in wgmma and "Sm90_mma_async_f16(D[cta, wg" in wgmma
    assert 'class="sl-hazard"' not in last90


def test_race_debugging_finds_each_bug_and_its_fix_clears_it():
    nb = executed(next(p for p in NOTEBOOKS if p.name == "03_race_debugging.ipynb"))
    pictures = [html for src, html in _outputs(nb) if "Workbench" in html or "sl-wb" in html]
    kinds = [re.findall(r'class="sl-hazard-kind"[^>]*>(\w+) hazard', html) for html in pictures]
    assert kinds[0] == ["RAW"] and kinds[1] == [] and kinds[2] == ["FREE"] and kinds[3] == []
    assert "RAW" in kinds[4] and kinds[5] == []  # wrong Await lag, then the example ring
    assert "DEADLOCK" in kinds[6] and 'class="sl-tl-bad"' in pictures[6] and "waits for arrive #3" in pictures[6]
    assert kinds[7] == [] and 'class="sl-tl-bad"' not in pictures[7] and "no hazards found at n=256" in pictures[7]
    assert kinds[8] == ["RAW"] and "warp-scope" not in pictures[8] and "a CTA-scope Fence" in pictures[8]
    assert kinds[9] == []
    assert kinds[10] == ["RAW", "FREE"] and "does not include Sm80_cp_async_instr" in pictures[10] and kinds[11] == []
    assert "a CTA-scope Fence(Sm80_cp_async, cuda_in_order) between line" in pictures[10]


@pytest.mark.parametrize("name", ["02_stepwise_gemm.ipynb", "03_race_debugging.ipynb"])
def test_static_html_of_a_stored_tutorial_shows_tilings_hazards_and_timelines(name):
    """nbconvert's HTML of the stored notebook (what nbviewer and GitHub show, no kernel): the workbench
    pictures' tilings, hazard cards and "Barrier timeline" sections are there."""
    from nbconvert import HTMLExporter

    html, _ = HTMLExporter().from_filename(str(next(p for p in NOTEBOOKS if p.name == name)))
    assert html.count("Barrier timeline") >= 6
    assert 'class="sl-hazard"' in html and "to fix:" in html
    assert "sl-cg-cell" in html  # a tiling grid
    if name.startswith("03"):
        assert "sl-tl-bad" in html and "data:image/svg+xml" in html  # the deadlock's timeline, drawn as an image
