"""Real browser: Jupyter in Debian's chromium (Playwright), in JupyterLab 4 and in Notebook 7.

One Jupyter server on 127.0.0.1 serves both front ends (JupyterLab at /lab, Notebook 7 at /notebooks). In each:
a small notebook written here is run cell by cell and every workbench view is checked (Code, Tiling with a
colour level clicked, Barrier timeline, Hazards, Steps, CUDA, Banks), a failing barrier check opens the timeline at the
right event, a failed scheduling step is shown in the widget, and exo's bounds error is one line naming the cell; the first tutorial runs cell by cell in
JupyterLab; the stored tutorials show their pictures before anything runs; in JupyterLab Dark the code and a failed
step's error stay readable, and a failed step in a cell that shows no picture is printed; in a narrow window a code
line keeps its width. No "Error displaying widget"
anywhere. Screenshots go to a temporary folder (named in the log), or, with SPORK_UPDATE_SCREENSHOTS=1, to the
kept ones in tests/browser/screenshots/ (so an ordinary run does not dirty the tree).
"""

from __future__ import annotations

import json
import re
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "notebooks"))
from make_tutorials import REVERSE_MISSING_FENCE, RING_MISSING_RELEASE  # noqa: E402 -- the tutorials' bugs

import procs_sync  # noqa: E402 -- tests/ is on the path (its conftest)

from spork_lab.lab._launch import lab_env  # noqa: E402 -- the server runs with `spork-lab lab`'s settings

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
KEPT_SHOTS = Path(__file__).resolve().parent / "screenshots"
CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
TOKEN = "spork-browser-test"
FRONT_ENDS = {"lab": "/lab/tree/{}", "notebook": "/notebooks/{}"}

SETUP = """\
from __future__ import annotations
%load_ext spork_lab
import spork_lab as sl
from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.scheduling import *
warps = [CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 1)]"""

BROKEN = REVERSE_MISSING_FENCE + """
wb = sl.Workbench(reverse_missing_fence, sizes={"n": 512})
wb"""

FAILED_STEP = 'wb.apply(divide_loop, "tidd", 4, ["a", "b"])'

DEADLOCK = RING_MISSING_RELEASE + """
sl.Workbench(ring_missing_release, sizes={"n": 256})"""

MISTAKE = """\
@proc
def one_past_the_end(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 32):
                x[t + 1] = 0.0"""

QUIET_FAILED_STEP = FAILED_STEP + ";"  # a cell that shows no picture

HALF_LOADED = f"@proc\n{procs_sync.half_loaded_tile}\nsl.Workbench(half_loaded_tile)"  # a tile loaded in part

# WCAG contrast ratio of an element's text with the first opaque background behind it
CONTRAST = """el => {
  const rgba = e => getComputedStyle(e).backgroundColor.match(/[\\d.]+/g).map(Number);
  const lum = ([r, g, b]) => [r, g, b].map(c => (c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4)
    .reduce((sum, c, i) => sum + c * [0.2126, 0.7152, 0.0722][i], 0);
  let back = el;
  while (back.parentElement && (rgba(back).length === 4 && rgba(back)[3] < 1)) back = back.parentElement;
  const [a, b] = [lum(getComputedStyle(el).color.match(/[\\d.]+/g).map(Number)), lum(rgba(back))];
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""

BAD_EVENT = 22  # bar[0]'s reverse queue: the producer's ReverseAwait at it = 6 waits for a release that never comes


NEVER_RUN = re.compile(r"^\[\s*\]:?\s*$")  # an input prompt before its cell has been queued
RUN_HERE = ["01_first_kernel.ipynb"]  # tutorials the tests run cell by cell


def _cleared(nb):
    """The notebook as never run: no outputs, no execution counts."""
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    return nb


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A Jupyter server (JupyterLab 4 and Notebook 7) on a copy of notebooks/ plus the views notebook, news off."""
    if not Path(CHROMIUM).exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)")
    pytest.importorskip("playwright")
    pytest.importorskip("notebook")
    tmp = tmp_path_factory.mktemp("jupyter")
    shutil.copytree(ROOT / "notebooks", tmp / "notebooks")
    nb = new_notebook(cells=[new_code_cell(c) for c in (SETUP, BROKEN, FAILED_STEP, DEADLOCK, MISTAKE)],
                      metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}})
    nbformat.write(nb, tmp / "notebooks" / "views.ipynb")
    nbformat.write(new_notebook(cells=[new_code_cell(SETUP), new_code_cell(BROKEN)], metadata=nb.metadata),
                   tmp / "notebooks" / "saved.ipynb")
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in (SETUP, BROKEN, QUIET_FAILED_STEP, "wb", FAILED_STEP)],
                                metadata=nb.metadata), tmp / "notebooks" / "dark.ipynb")
    nbformat.write(new_notebook(cells=[new_code_cell(SETUP), new_code_cell(BROKEN)], metadata=nb.metadata),
                   tmp / "notebooks" / "narrow.ipynb")
    nbformat.write(new_notebook(cells=[new_code_cell(SETUP), new_code_cell(HALF_LOADED)], metadata=nb.metadata),
                   tmp / "notebooks" / "uninit.ipynb")
    for name in RUN_HERE:  # stored executed: a copy without outputs and execution counts, to run cell by cell
        nbformat.write(_cleared(nbformat.read(ROOT / "notebooks" / name, as_version=4)), tmp / "notebooks" / f"run_{name}")
    settings = tmp / "settings" / "@jupyterlab"
    (settings / "apputils-extension").mkdir(parents=True)
    (settings / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    (settings / "notebook-extension").mkdir(parents=True)
    # Every cell in the DOM (no virtual scrolling), so the test can find each cell's output.
    (settings / "notebook-extension" / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    env = {**lab_env(), "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "ws"),
           "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"), "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    port = _free_port()
    log = open(tmp / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={tmp / 'notebooks'}"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2)
            break
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"Jupyter did not start; log in {tmp / 'server.log'}")
            time.sleep(0.5)
    yield url
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    """Where screenshots go: the kept ones only when asked for (SPORK_UPDATE_SCREENSHOTS=1), else a temporary folder."""
    if os.environ.get("SPORK_UPDATE_SCREENSHOTS") == "1":
        KEPT_SHOTS.mkdir(exist_ok=True)
        return KEPT_SHOTS
    folder = tmp_path_factory.mktemp("screenshots")
    print(f"screenshots in {folder}")
    return folder


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


def _open(browser, server: str, front_end: str, name: str, n_cells: int = 0, workspace: str = ""):
    """A page on notebook `name`, once its cells (`n_cells`, default: as stored or as written here) are shown; in
    JupyterLab, in `workspace` (default: the default one, which reopens the notebooks other tests left open)."""
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    path = f"/lab/workspaces/{workspace}/tree/{name}" if workspace else FRONT_ENDS[front_end].format(name)
    page.goto(server + path + f"?token={TOKEN}")
    cells = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell")
    stored = ROOT / "notebooks" / name.removeprefix("run_")
    n = n_cells or (len(nbformat.read(stored, as_version=4).cells) if stored.exists() else 5)  # views.ipynb: 5
    expect(cells).to_have_count(n, timeout=90_000)
    return page, cells


def _run(page, cell, timeout: int = 300_000) -> None:
    """Run one cell from command mode and wait until it has finished: its prompt goes from "[ ]:" (never run:
    the notebooks run here have no execution counts) to "[n]:", so a queued or running cell is never taken for
    a finished one. A cell queued or running shows "[*]:" at once; one still at "[ ]:" after a while never got
    the keystroke (a loaded CI machine once lost it while JupyterLab was still settling), so it is sent again."""
    from playwright.sync_api import expect

    prompt = cell.locator(".jp-InputPrompt")
    expect(prompt).not_to_have_text(re.compile(r"\[\d+\]"))
    for _ in range(3):
        prompt.click()  # select the cell in command mode (clicks in widgets take focus)
        page.keyboard.press("Shift+Enter")
        try:
            expect(prompt).not_to_have_text(NEVER_RUN, timeout=20_000)
            break
        except AssertionError:
            continue
    expect(prompt).to_have_text(re.compile(r"\[\d+\]"), timeout=timeout)


def _tab(widget, name: str):
    widget.locator(f'.sl-tab[data-view="{name}"]').click()
    return widget.locator(f".sl-view-{name}")


def _wait_for_kernel(page) -> None:
    """Give the kernel time to start: the first cell waits for it anyway, with a long timeout."""
    page.wait_for_timeout(2000)


@pytest.mark.parametrize("front_end", ["lab", "notebook"])
def test_every_view_in_the_front_end(server, browser, shots, front_end):
    from playwright.sync_api import expect

    page, cells = _open(browser, server, front_end, "views.ipynb")
    _wait_for_kernel(page)
    _run(page, cells.nth(0))

    # A workbench with a hazard opens on the Hazards view.
    _run(page, cells.nth(1))
    widget = cells.nth(1).locator(".sl-wb.sl-live")
    expect(widget.locator(".sl-tab")).to_have_count(7, timeout=30_000)
    hazards = widget.locator(".sl-view-hazards")
    expect(hazards.locator(".sl-hazard").first).to_contain_text("RAW hazard on tile", timeout=60_000)
    expect(hazards.locator(".sl-hint").first).to_contain_text("wb.apply(insert_fence, wb.proc.find_loop('tid #1').before()")
    expect(widget.locator(".sl-tab-active")).to_contain_text("Hazards (1)")
    cells.nth(1).screenshot(path=str(shots / f"{front_end}_01_hazards.png"))
    code = _tab(widget, "code")
    expect(code.locator(".sl-mark-hazard")).to_have_count(2)
    code.locator(".sl-stmt", has_text="y[task * 256 + tid]").click()
    expect(widget.locator(".sl-view-code .sl-selected")).to_contain_text("y[task * 256 + tid]")
    cells.nth(1).screenshot(path=str(shots / f"{front_end}_02_code.png"))
    tiling = _tab(widget, "tiling")
    expect(tiling.locator(".sl-cg-cell")).to_have_count(256)
    tiling.locator('.sl-btn[data-set="level:warp"]').click()
    expect(widget.locator('.sl-view-tiling .sl-btn-on')).to_have_text("warp")
    expect(widget.locator(".sl-view-tiling .sl-legend-row").first).to_contain_text("warp 0: threads [0, 31]")
    cells.nth(1).screenshot(path=str(shots / f"{front_end}_03_tiling.png"))
    _tab(widget, "timeline")
    expect(widget.locator(".sl-view-timeline")).to_contain_text("no barriers")
    steps = _tab(widget, "steps")
    expect(steps.locator(".sl-step")).to_have_count(1)
    cuda = _tab(widget, "cuda")
    expect(cuda.locator("pre.sl-cuda").last).to_contain_text("__global__", timeout=120_000)
    expect(cuda.locator("details summary")).to_contain_text("runtime prelude")
    cells.nth(1).screenshot(path=str(shots / f"{front_end}_04_cuda.png"))
    banks = _tab(widget, "banks")
    expect(banks.locator(".sl-banks-summary")).to_contain_text("shared-memory accesses conflict", timeout=60_000)
    expect(banks.locator(".sl-banks tr")).to_have_count(3)  # the header, the tile's write and its read
    cells.nth(1).screenshot(path=str(shots / f"{front_end}_04b_banks.png"))
    banks.locator("tr[data-set]", has_text="y[task * 256 + tid]").click()  # a row shows its statement in Code
    expect(widget.locator(".sl-view-code .sl-selected")).to_contain_text("y[task * 256 + tid]")

    # A failed scheduling step: the error in the widget, the session at the previous step.
    _run(page, cells.nth(2))
    failed = cells.nth(2).locator(".sl-wb.sl-live")
    expect(failed.locator(".sl-step-error")).to_contain_text("no loop matches 'tidd'", timeout=30_000)
    expect(failed.locator(".sl-step-error")).to_contain_text("did you mean 'tid'")
    expect(failed.locator(".sl-step-error")).to_contain_text("stays at step 0")
    cells.nth(2).screenshot(path=str(shots / f"{front_end}_05_failed_step.png"))

    # A failing barrier check opens the timeline at the event where the pairing fails; clicking it selects it.
    _run(page, cells.nth(3))
    ring = cells.nth(3).locator(".sl-wb.sl-live")
    timeline = ring.locator(".sl-view-timeline")
    expect(timeline.locator(".sl-ev-bad").first).to_be_visible(timeout=60_000)
    expect(timeline.locator(".sl-ev-bad").first).to_have_attribute("data-event", str(BAD_EVENT))
    expect(timeline.locator(".sl-tl-bad")).to_contain_text("ReverseAwait bar[0] (reverse)")
    expect(timeline.locator(".sl-tl-bad")).to_contain_text("it=6")
    expect(timeline.locator(".sl-ev-after").first).to_be_visible()  # past the hang: greyed
    cells.nth(3).screenshot(path=str(shots / f"{front_end}_06_timeline_deadlock.png"))
    # what the hung threads would do next: folded under the deadlock's card, opened by a click
    after = _tab(ring, "hazards").locator("details.sl-after-hang")
    expect(after.locator("summary")).to_contain_text("3 more after the deadlock")
    expect(after.locator(".sl-hazard").first).to_be_hidden()
    after.locator("summary").click()
    expect(after.locator(".sl-hazard").first).to_be_visible()
    cells.nth(3).screenshot(path=str(shots / f"{front_end}_06b_after_the_deadlock.png"))
    _tab(ring, "timeline")
    timeline.locator(f'.sl-ev[data-event="{BAD_EVENT}"]').click()
    expect(ring.locator(".sl-view-code .sl-selected")).to_contain_text("ReverseAwait(bar[it % 2], cuda_in_order, ~1)")
    # step browsing: the first picture can still show any step (here the only one)
    expect(widget.locator(".sl-stepno")).to_contain_text("step 0 of 0")

    # A mistake in a proc that exo's bounds check finds: one line naming the cell and line, no traceback.
    _run(page, cells.nth(4))
    error = cells.nth(4).locator(".jp-OutputArea-output")
    expect(error).to_contain_text("SporkTypeError", timeout=30_000)
    expect(error).to_contain_text(re.compile(r"Cell In\[\d+\]:6:\d+: x is written out-of-bounds when:\s+n = \d+"))
    expect(error).not_to_contain_text("Traceback")
    cells.nth(4).screenshot(path=str(shots / f"{front_end}_07_error.png"))
    expect(page.get_by_text("Error displaying widget")).to_have_count(0)
    page.close()


def test_first_tutorial_cell_by_cell_in_jupyterlab(server, browser, shots):
    from playwright.sync_api import expect

    page, cells = _open(browser, server, "lab", "run_01_first_kernel.ipynb")
    expect(page.locator(".jp-StatusBar-TextItem", has_text="Idle").first).to_be_visible(timeout=60_000)
    broken_checked = fixed_checked = False
    for i in range(cells.count()):
        cell = cells.nth(i)
        if "jp-CodeCell" not in (cell.get_attribute("class") or ""):
            continue
        _run(page, cell)
        source = cell.locator(".jp-InputArea-editor").inner_text()
        if "set_memory" in source:
            widget = cell.locator(".sl-wb.sl-live")
            expect(widget.locator(".sl-hazard")).to_have_count(2, timeout=60_000)
            tiling = _tab(widget, "tiling")
            expect(tiling.locator(".sl-cg-cell")).to_have_count(256)
            cell.screenshot(path=str(shots / "tutorial01_broken_step_tiling.png"))
            broken_checked = True
        if "insert_fence" in source:
            widget = cell.locator(".sl-wb.sl-live")
            expect(widget.locator(".sl-head")).to_contain_text("no hazards found at n=512", timeout=60_000)
            expect(_tab(widget, "hazards").locator(".sl-hazard")).to_have_count(0)
            fixed_checked = True
    assert broken_checked and fixed_checked
    # the broken step's picture still shows its own step after the fix
    def code_cell(source: str):  # by its source: a picture's hint may name the same call
        return cells.filter(has=page.locator(".jp-InputArea-editor", has_text=source)).first

    broken = code_cell("set_memory").locator(".sl-wb.sl-live")
    expect(broken.locator(".sl-stepno")).to_contain_text("step 5 of 7")
    expect(broken.locator('.sl-tab[data-view="steps"]')).to_have_text("Steps (7)")  # later steps: label, then list
    expect(_tab(broken, "steps").locator(".sl-step")).to_have_count(8)
    # running that cell again replaces the Fence steps: the Fence cell's picture keeps its step and says so (it
    # used to turn into a picture of step 4, with that step's analysis error, and say nothing)
    prompt = code_cell("set_memory").locator(".jp-InputPrompt")
    ran = prompt.inner_text()
    prompt.click()
    page.keyboard.press("Shift+Enter")
    expect(prompt).not_to_have_text(ran, timeout=60_000)
    expect(prompt).to_have_text(re.compile(r"\[\d+\]"), timeout=120_000)
    fence_cell = code_cell("wb.apply(insert_fence")
    fenced = fence_cell.locator(".sl-wb.sl-live")
    expect(fenced.locator(".sl-step-notice")).to_contain_text("no longer has", timeout=60_000)
    expect(fenced.locator(".sl-stepno")).to_contain_text("step 7 of 7")
    expect(fenced.locator(".sl-head")).to_contain_text("no hazards found at n=512")
    fence_cell.screenshot(path=str(shots / "tutorial01_replaced_step.png"))
    expect(page.get_by_text("Error displaying widget")).to_have_count(0)
    page.close()


def test_a_saved_notebook_shows_its_workbench_when_reopened(server, browser, shots):
    """Run, save, stop the kernel, reopen: `spork-lab lab` saves widget state, so the workbench is drawn again
    from the notebook (not "Error displaying widget: model not found")."""
    from playwright.sync_api import expect

    page, cells = _open(browser, server, "lab", "saved.ipynb", n_cells=2, workspace="reopen")  # not reopened elsewhere
    _wait_for_kernel(page)
    _run(page, cells.nth(0))
    _run(page, cells.nth(1))
    expect(cells.nth(1).locator(".sl-wb.sl-live .sl-hazard").first).to_contain_text("RAW hazard", timeout=60_000)
    contents = f"{server}/api/contents/saved.ipynb?token={TOKEN}"
    deadline, pressed = time.time() + 120, 0.0  # a loaded CI machine once took longer than 30 s to save
    while "widgets" not in json.load(urllib.request.urlopen(contents))["content"]["metadata"]:
        assert time.time() < deadline, "the notebook was saved without widget state"
        if time.time() - pressed > 15:  # save again: a key pressed while the page was busy may be lost
            page.keyboard.press("Control+s")
            pressed = time.time()
        time.sleep(0.5)
    page.close()
    for session in json.load(urllib.request.urlopen(f"{server}/api/sessions?token={TOKEN}")):
        if session["path"].endswith("saved.ipynb"):  # the kernel goes: its widget models with it
            urllib.request.urlopen(urllib.request.Request(f"{server}/api/sessions/{session['id']}?token={TOKEN}",
                                                          method="DELETE"))
    page, cells = _open(browser, server, "lab", "saved.ipynb", n_cells=3, workspace="reopen")  # the run added a cell
    expect(cells.nth(1).locator(".sl-wb .sl-hazard").first).to_contain_text("RAW hazard", timeout=60_000)
    cells.nth(1).screenshot(path=str(shots / "lab_reopened_saved_notebook.png"))
    expect(page.get_by_text("Error displaying widget")).to_have_count(0)
    page.close()


@pytest.mark.parametrize("front_end", ["lab", "notebook"])
@pytest.mark.parametrize("name", ["02_stepwise_gemm.ipynb", "03_race_debugging.ipynb"])
def test_stored_tutorials_show_their_pictures_before_anything_runs(server, browser, shots, front_end, name):
    """The tutorials are stored executed: opened fresh, untrusted, nothing run, their workbench outputs show the
    code, the hazards and the barrier timelines of each state, styled."""
    from playwright.sync_api import expect

    page, _ = _open(browser, server, front_end, name)
    pictures = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .sl-wb.sl-static")
    expect(pictures.first).to_be_visible(timeout=60_000)
    assert pictures.count() >= 6
    expect(pictures.first.locator(".sl-section-title", has_text="Barrier timeline")).to_have_count(1)
    assert pictures.first.locator(".sl-line").first.evaluate("e => getComputedStyle(e).whiteSpace") == "pre"
    broken = pictures.filter(has=page.locator(".sl-hazard")).first
    broken.locator(".sl-hazard").first.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / f"{front_end}_stored_{name[:2]}_hazard.png"))
    if name.startswith("02"):  # idle threads (the Sm90 producer warp's 31, the unused warps) stay marked
        idle = pictures.last.locator(".sl-strip .sl-idle").first
        idle.scroll_into_view_if_needed()
        assert idle.evaluate("e => getComputedStyle(e).outlineStyle") == "dashed"
        page.screenshot(path=str(shots / f"{front_end}_stored_02_idle_threads.png"))
    if name.startswith("03"):  # the timeline drawing survives the sanitizer as an image
        deadlock = pictures.filter(has=page.locator(".sl-tl-bad")).first
        image = deadlock.locator(".sl-tl img").first
        image.scroll_into_view_if_needed()
        assert image.evaluate("e => e.complete && e.naturalWidth > 0")
        page.screenshot(path=str(shots / f"{front_end}_stored_03_timeline.png"))
    expect(page.get_by_text("Error displaying widget")).to_have_count(0)
    page.close()


def _theme(page, name: str) -> None:
    page.get_by_role("menuitem", name="Settings").first.click()
    page.locator(".lm-Menu-item", has_text="Theme").first.hover()
    page.locator(".lm-Menu-item", has_text=name).first.click()
    page.wait_for_function(f"document.body.dataset.jpThemeName === {json.dumps(name)}")


def test_failed_steps_in_the_dark_theme(server, browser, shots):
    """JupyterLab Dark: the code's numbers were dark blue on black, a failed step's error light grey on pink. A
    failed step in a cell that shows no picture was silent, and `wb` in a later cell showed it as that cell's."""
    from playwright.sync_api import expect

    page, cells = _open(browser, server, "lab", "dark.ipynb", n_cells=5, workspace="dark")
    _theme(page, "JupyterLab Dark")
    try:
        for i in range(5):
            _run(page, cells.nth(i))
        number = cells.nth(1).locator('.sl-wb.sl-live .sl-line[data-line="2"] .sl-tok-number').first
        _tab(cells.nth(1).locator(".sl-wb.sl-live"), "code")
        expect(number).to_have_text("256")
        assert number.evaluate(CONTRAST) >= 4.5
        quiet = cells.nth(2).locator(".jp-OutputArea-output")
        expect(quiet).to_contain_text(re.compile(r"SporkSchedulingError: Cell In\[\d+\]:1: divide_loop: no loop matches 'tidd'"))
        expect(quiet).to_contain_text("The workbench stays at step 0.")
        expect(cells.nth(3).locator(".sl-wb.sl-live .sl-head")).to_be_visible(timeout=30_000)
        expect(cells.nth(3).locator(".sl-step-error")).to_have_count(0)  # the later picture: no error of cell 2
        error = cells.nth(4).locator(".sl-wb.sl-live .sl-step-error")
        expect(error).to_contain_text("no loop matches 'tidd'", timeout=30_000)
        assert error.evaluate(CONTRAST) >= 4.5
        cells.nth(4).screenshot(path=str(shots / "lab_dark_failed_step.png"))
        cells.nth(2).screenshot(path=str(shots / "lab_dark_quiet_failed_step.png"))
    finally:
        _theme(page, "JupyterLab Light")
    page.close()


def test_the_code_view_in_a_narrow_window(server, browser, shots):
    """800 pixels wide, the file browser open: a deeply indented line wrapped every few characters (a line of the
    GEMM tutorial one character per row), behind its hanging indent; it keeps 40 characters a row and scrolls."""
    from playwright.sync_api import expect

    page, cells = _open(browser, server, "lab", "narrow.ipynb", n_cells=2, workspace="narrow")
    page.set_viewport_size({"width": 800, "height": 900})
    _wait_for_kernel(page)
    _run(page, cells.nth(0))
    _run(page, cells.nth(1))
    code = _tab(cells.nth(1).locator(".sl-wb.sl-live"), "code")
    line = code.locator('.sl-line[data-line="9"] .sl-src')  # y[task * 256 + tid] = tile[255 - tid], 16 deep
    expect(line).to_contain_text("y[task * 256 + tid] = tile[255 - tid]")
    assert line.evaluate("e => e.getBoundingClientRect().height < 1.5 * parseFloat(getComputedStyle(e).lineHeight)")
    cells.nth(1).screenshot(path=str(shots / "lab_narrow_code.png"))
    page.close()


def test_a_read_of_what_nothing_wrote_in_jupyterlab(server, browser, shots):
    """A tile loaded in part: the UNINIT card names the read and says what to do, with no barrier advice."""
    from playwright.sync_api import expect

    page, cells = _open(browser, server, "lab", "uninit.ipynb", n_cells=2, workspace="uninit")
    _wait_for_kernel(page)
    _run(page, cells.nth(0))
    _run(page, cells.nth(1))
    widget = cells.nth(1).locator(".sl-wb.sl-live")
    card = widget.locator(".sl-view-hazards .sl-hazard").first
    expect(card).to_contain_text("UNINIT hazard on tile", timeout=60_000)
    expect(card).to_contain_text("nothing has written since tile was allocated")
    expect(card.locator(".sl-hint")).to_contain_text("no statement before line 10 writes this element of tile")
    cells.nth(1).screenshot(path=str(shots / "lab_uninit.png"))
    page.close()
