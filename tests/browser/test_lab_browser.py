"""Real browser: JupyterLab on 127.0.0.1 in Debian's chromium runs the tutorial cell by cell.

Checks that every workbench widget renders (tabs and views), the tiling grid has one cell per CTA
thread, the hazard card is there at the broken step and gone after the Fence, and that no
"Error displaying widget" appears. Screenshots go to tests/browser/screenshots/.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SHOTS = Path(__file__).resolve().parent / "screenshots"
CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
TOKEN = "spork-browser-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a copy of notebooks/ (so autosave never touches the repo), with news popups off."""
    if not Path(CHROMIUM).exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)")
    pytest.importorskip("playwright")
    tmp = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", tmp / "notebooks")
    settings = tmp / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    notebook_settings = tmp / "settings" / "@jupyterlab" / "notebook-extension"
    notebook_settings.mkdir(parents=True)
    # Every cell in the DOM (no virtual scrolling), so the test can find each cell's output.
    (notebook_settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "ws"),
           "JUPYTER_RUNTIME_DIR": str(tmp / "runtime")}
    port = _free_port()
    log = open(tmp / "lab.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={tmp / 'notebooks'}"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2)
            break
        except OSError:
            if time.time() > deadline or server.poll() is not None:
                server.kill()
                pytest.fail(f"JupyterLab did not start; log in {tmp / 'lab.log'}")
            time.sleep(0.5)
    yield url
    server.terminate()
    server.wait(timeout=30)
    log.close()


def _widget_in(cell):
    return cell.locator(".sl-wb.sl-live")


def _open_tab(widget, name: str):
    widget.locator(f'.sl-tab[data-view="{name}"]').click()
    return widget.locator(f".sl-view-{name}")


def test_tutorial_in_jupyterlab(lab):
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{lab}/lab/tree/01_first_kernel.ipynb?token={TOKEN}")
        cells = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell")
        n = len(json.loads((ROOT / "notebooks" / "01_first_kernel.ipynb").read_text())["cells"])
        expect(cells).to_have_count(n, timeout=60_000)
        expect(page.locator(".jp-StatusBar-TextItem", has_text="Idle").first).to_be_visible(timeout=60_000)
        broken_checked = fixed_checked = False
        for i in range(n):
            cell = cells.nth(i)
            cell.locator(".jp-InputPrompt").click()  # select the cell in command mode (clicks in widgets take focus)
            page.keyboard.press("Shift+Enter")
            if "jp-CodeCell" not in (cell.get_attribute("class") or ""):
                continue
            expect(cell.locator(".jp-InputPrompt")).not_to_contain_text("*", timeout=120_000)
            expect(cell.locator(".jp-InputPrompt")).to_contain_text("[", timeout=120_000)
            source = cell.locator(".jp-InputArea-editor").inner_text()
            if "sl.Workbench(" in source:
                widget = _widget_in(cell)
                expect(widget.locator(".sl-tab")).to_have_count(4, timeout=30_000)
                expect(widget.locator(".sl-view-code .sl-line").first).to_be_visible()
                cell.screenshot(path=str(SHOTS / "01_workbench_initial.png"))
            if "set_memory" in source:
                widget = _widget_in(cell)
                tiling = _open_tab(widget, "tiling")
                expect(tiling.locator(".sl-cell")).to_have_count(256)
                expect(tiling.locator(".sl-cell.sl-idle")).to_have_count(0)
                cell.screenshot(path=str(SHOTS / "02_tiling_256_threads.png"))
                hazards = _open_tab(widget, "hazards")
                expect(hazards.locator(".sl-hazard").first).to_be_visible()
                expect(hazards.locator(".sl-hazard-kind").first).to_contain_text("RAW")
                cell.screenshot(path=str(SHOTS / "03_hazard_at_broken_step.png"))
                code = _open_tab(widget, "code")
                expect(code.locator(".sl-mark-hazard").first).to_be_visible()
                code.locator(".sl-stmt", has_text="y[task * 256 + tid]").click()
                expect(widget.locator(".sl-view-code .sl-selected")).to_contain_text("y[task * 256 + tid]")
                cell.screenshot(path=str(SHOTS / "04_code_marks_and_selection.png"))
                broken_checked = True
            if "insert_fence" in source:
                widget = _widget_in(cell)

                hazards = _open_tab(widget, "hazards")
                expect(hazards.locator(".sl-hazard")).to_have_count(0)
                expect(widget.locator(".sl-head")).to_contain_text("no hazards found at n=512")
                _open_tab(widget, "steps")
                cell.screenshot(path=str(SHOTS / "05_fixed_steps.png"))
                fixed_checked = True
        assert broken_checked and fixed_checked
        expect(page.get_by_text("Error displaying widget")).to_have_count(0)
        page.screenshot(path=str(SHOTS / "06_notebook_end.png"), full_page=False)
        browser.close()


def test_saved_tutorial_shows_its_pictures_before_anything_runs(lab):
    """The tutorial is stored executed: opened fresh, untrusted, nothing run, its workbench outputs
    still show the code and the hazards of each state, styled."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{lab}/lab/tree/01_first_kernel.ipynb?token={TOKEN}")
        pictures = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .sl-wb.sl-static")
        expect(pictures.first).to_be_visible(timeout=60_000)
        assert pictures.count() >= 3
        broken = pictures.filter(has_text="hazard(s) at n=512").first
        expect(broken.locator(".sl-hazard").first).to_contain_text("RAW hazard")
        line = broken.locator(".sl-line").first
        assert line.evaluate("e => getComputedStyle(e).whiteSpace") == "pre"  # the inline styles survived
        broken.locator(".sl-hazard").first.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "07_saved_notebook_unexecuted.png"))
        expect(page.get_by_text("Error displaying widget")).to_have_count(0)
        browser.close()
