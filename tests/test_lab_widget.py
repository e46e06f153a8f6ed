"""Widget data and display without a browser: code lines, tiling cells, mimebundle, IPython extension, doctor."""

from __future__ import annotations

import re

import pytest
from IPython.core.interactiveshell import InteractiveShell

import spork_lab
from spork_lab import proc
from spork_lab.core.coll import CollTiling, cuda_thread
from spork_lab.lab import Workbench, _doctor
from spork_lab.lab._codeview import code_view, highlight
from spork_lab.lab._render import STATIC_DIR
from spork_lab.lab._tiling import tiling_cells
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *


@proc
def long_lines(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 32 == 0
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n / 32):
            buf: f32[32] @ CudaSmemLinear
            for t in cuda_threads(0, 32):
                with CudaAsync(Sm80_cp_async_instr):
                    Sm80_cp_async_f32(buf[t:t + 1], src[task * 32 + t:task * 32 + t + 1], size=4)
            Fence(Sm80_generic, cuda_in_order)
            for t in cuda_threads(0, 32):
                dst[task * 32 + t] = buf[t]


def test_code_lines_are_str_of_proc_with_wrapped_statements_mapped():
    view = code_view(long_lines)
    assert [line.text for line in view.lines] == str(long_lines).split("\n")
    (cp_call,) = [i for i, s in enumerate(view.stmts) if str(s).startswith("Sm80_cp_async_f32")]
    cp_lines = view.lines_of_stmt(cp_call)
    assert len(cp_lines) == 2  # the printer wraps the call over two lines; both belong to it
    assert view.lines[0].stmt is None and view.stmt_at_path((0, 0, 1, 0, 0)) is not None


def test_highlight_marks_keywords_loops_and_gpu_names():
    out = highlight("for t in cuda_threads(0, 32): Fence(cuda_in_order, x) @ CudaSmemLinear <b>")
    assert '<span class="sl-tok-kw">for</span>' in out
    assert '<span class="sl-tok-loop">cuda_threads</span>' in out
    assert '<span class="sl-tok-sync">Fence</span>' in out
    assert '<span class="sl-tok-gpu">CudaSmemLinear</span>' in out
    assert "&lt;b&gt;" in out


def test_tiling_cells_follow_the_user_guide_figure():
    # for m in cuda_threads(0, 8, unit=16 * cuda_thread): for n in cuda_threads(0, 16): m=2 -> threads [32, 47]
    tiling = CollTiling.top(128).tile("m", 8, 16 * cuda_thread).tile("n", 16, cuda_thread)
    grid = tiling_cells(tiling)
    assert grid["threads"] == 128 and grid["active"] == 128 and grid["collectives"] == 128
    assert grid["cells"][33]["values"] == {"m": 2, "n": 1}
    outer = tiling_cells(CollTiling.top(128).tile("m", 6, 16 * cuda_thread))
    assert outer["collectives"] == 6 and outer["active"] == 96
    assert outer["cells"][100]["values"] is None and outer["cells"][100]["title"] == "thread 100: idle"
    assert {c["colour"] for c in outer["cells"][32:48]} == {outer["cells"][32]["colour"]}


def test_widget_loads_its_front_end_from_extension_dir():
    wb = Workbench(long_lines)
    assert (STATIC_DIR / "workbench.js").is_file()
    assert "export default" in str(wb.widget._esm) and ".sl-cell" in str(wb.widget._css)
    assert [key for key, _ in wb.state["tabs"]] == ["code", "tiling", "steps", "hazards"]


def test_mimebundle_has_widget_and_static_picture():
    wb = Workbench(long_lines, sizes={"n": 64})
    data, _ = wb._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    html = data["text/html"]
    assert "<style>" in html and 'class="sl-wb sl-static"' in html
    for title in ("Code", "Tiling", "Steps (0)", "Hazards ("):
        assert re.search(r'<div class="sl-section-title"[^>]*>' + re.escape(title), html)
    assert html.count('class="sl-cell') == 32


def test_load_ext_registers_magics_and_proc_html():
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "spork_lab")
        assert {"spork_doctor", "spork_workbench"} <= set(shell.magics_manager.magics["line"])
        data, _ = shell.display_formatter.format(long_lines)
        assert re.search(r"sl-tok-loop\"[^>]*>cuda_threads", data["text/html"]) and "def long_lines" in data["text/plain"]
        shell.user_ns["long_lines"] = long_lines
        wb = shell.run_line_magic("spork_workbench", "long_lines n=64")
        assert isinstance(wb, Workbench) and wb.sizes == {"n": 64}
        with pytest.raises(ValueError, match="name=INT"):
            shell.run_line_magic("spork_workbench", "long_lines n=big")
    finally:
        InteractiveShell.clear_instance()


def test_package_level_extension_hook_delegates():
    assert callable(spork_lab.load_ipython_extension)


GOOD = {
    "packages": {"jupyterlab": "4.2.0", "notebook": None, "ipywidgets": "8.1.5", "jupyterlab_widgets": "3.0.13",
                 "widgetsnbextension": "4.0.13", "anywidget": "0.9.13", "plotly": "5.24.0", "ipykernel": "6.29.0"},
    "cupy": {"cupy-cuda12x": "13.3.0"},
    "nvcc": "12.4",
    "gpus": ["NVIDIA H100, 550.54, 9.0"],
}


def _with(**packages) -> dict:
    return {**GOOD, "packages": {**GOOD["packages"], **packages}}


def test_doctor_finds_known_mismatches():
    assert _doctor.diagnose(GOOD) == (True, [])
    ok, problems = _doctor.diagnose(_with(jupyterlab_widgets="1.1.0"))
    assert not ok and "Error displaying widget" in problems[0][0] and "jupyterlab_widgets>=3" in problems[0][1]
    ok, problems = _doctor.diagnose(_with(ipywidgets="7.8.1"))
    assert not ok and 'ipywidgets>=8' in problems[0][1]
    ok, problems = _doctor.diagnose(_with(anywidget=None))
    assert not ok and "anywidget" in problems[0][1]
    ok, problems = _doctor.diagnose({**GOOD, "cupy": {"cupy-cuda11x": "13.3.0"}})
    assert ok and problems == [("cupy-cuda11x is built for another CUDA major version than nvcc 12.4",
                                "pip install cupy-cuda12x (and uninstall cupy-cuda11x)")]
    ok, problems = _doctor.diagnose({**GOOD, "gpus": [], "nvcc": None, "cupy": {}})
    assert ok and [p.split(":")[0] for p, _ in problems] == ["nvcc not found", "no NVIDIA GPU visible (nvidia-smi)"]


def test_doctor_prints_versions(capsys):
    report = spork_lab.doctor()
    out = capsys.readouterr().out
    for name in ("jupyterlab", "ipywidgets", "anywidget", "plotly", "CuPy", "nvcc", "GPU", "widgets can render"):
        assert name in out
    assert isinstance(report["widgets_can_render"], bool)


def test_spork_errors_show_as_one_message_in_ipython(capfd):
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "spork_lab")
        cell = (
            "from __future__ import annotations\n"
            "from spork_lab import proc\n"
            "from spork_lab.platforms.cuda import *\n"
            "@proc\n"
            "def bad(x: f32[32] @ CudaGmemLinear):\n"
            "    Fence(cuda_in_order)\n"
        )
        result = shell.run_cell(cell)
        err = capfd.readouterr().err
        assert not result.success
        assert "SporkSyntaxError: " in err and ":6: Fence takes 2 arguments, got 1" in err
        assert "Traceback" not in err
    finally:
        InteractiveShell.clear_instance()


def test_static_picture_carries_its_styles_inline():
    """Untrusted notebooks and GitHub drop <style> blocks; the inline copies keep the picture readable."""
    from spork_lab.lab._render import CSS_PATH, inline_styles

    css = CSS_PATH.read_text()
    html = inline_styles('<div class="sl-line sl-stmt"><span class="sl-gutter">1</span></div>'
                         '<div class="sl-hazard"><dl><dt>a</dt></dl></div>', css)
    assert '<div class="sl-line sl-stmt" style="display: flex; white-space: pre;' in html
    assert "cursor: pointer" in html and "var(" not in html
    assert '<dt style="color: #57606a">a</dt>' in html
    assert "outline: 2px" not in html  # hover rules of the live widget stay out
